"""Each public module's `__all__` is sorted and names everything public it defines."""

from __future__ import annotations

import importlib
import inspect

import pytest

MODULES = [
    "ctxkeep.errors",
    "ctxkeep.messages",
    "ctxkeep.formats",
    "ctxkeep.formats.chat",
    "ctxkeep.formats.native",
    "ctxkeep.codec",
    "ctxkeep.formats.openai",
    "ctxkeep.formats.anthropic",
    "ctxkeep.formats.agentscope",
    "ctxkeep.formats.source",
    "ctxkeep.report",
    "ctxkeep.tokens",
    "ctxkeep.settings",
    "ctxkeep.folder",
    "ctxkeep.archive",
    "ctxkeep.offload",
    "ctxkeep.split",
    "ctxkeep.summarize",
    "ctxkeep.summarize.identifiers",
    "ctxkeep.summarize.sections",
    "ctxkeep.summarize.runs",
    "ctxkeep.summarize.facts",
    "ctxkeep.summarize.extractive",
    "ctxkeep.summarize.prompts",
    "ctxkeep.summarize.model",
    "ctxkeep.summarize.augment",
    "ctxkeep.summarize.audit",
    "ctxkeep.summarize.chunks",
    "ctxkeep.summarize.structured",
    "ctxkeep.engine",
    "ctxkeep.session",
    "ctxkeep.replay",
    "ctxkeep.providers",
    "ctxkeep.providers.anthropic",
    "ctxkeep.providers.config",
    "ctxkeep.providers.deterministic",
    "ctxkeep.providers.failures",
    "ctxkeep.providers.openai",
    "ctxkeep.providers.retry",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n[:1].islower(), n))
    for item in exported:
        assert hasattr(module, item), f"{name}.__all__ names {item}, which does not exist"
    defined_here = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and (inspect.isfunction(v) or inspect.isclass(v))
        and getattr(v, "__module__", None) == name
    }
    assert defined_here <= set(exported), f"{name} leaves out {sorted(defined_here - set(exported))}"
