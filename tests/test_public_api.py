"""The package root is the contract: `__all__` is sorted, complete and documented; the rest is internal."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types

import pytest

import ctxkeep


def test_all_is_sorted() -> None:
    assert ctxkeep.__all__ == sorted(ctxkeep.__all__)
    assert len(set(ctxkeep.__all__)) == len(ctxkeep.__all__)


def test_every_public_name_is_exported_and_every_export_exists() -> None:
    # The root imports its names on first access: load them all, then nothing else may be public.
    loaded = {name: getattr(ctxkeep, name) for name in ctxkeep.__all__}
    public = {
        name
        for name, value in vars(ctxkeep).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(loaded)
    assert {name for name in dir(ctxkeep) if not name.startswith("_")} >= public


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert not hasattr(ctxkeep, "NoSuchName")
    with pytest.raises(ImportError, match="NoSuchName"):
        exec("from ctxkeep import NoSuchName", {})


def test_every_export_says_what_it_is() -> None:
    for name in ctxkeep.__all__:
        value = getattr(ctxkeep, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"ctxkeep.{name} has no docstring"


def test_what_a_user_needs_is_at_the_root() -> None:
    from ctxkeep import EngineSettings, Message, Session, get_model, load, to_openai  # noqa: F401

    assert ctxkeep.Session.open is not None
    assert issubclass(ctxkeep.StorageError, ctxkeep.WorkspaceError)
    assert issubclass(ctxkeep.WorkspaceError, ctxkeep.CtxkeepError)


def test_the_root_does_not_import_a_model_sdk() -> None:
    # `import ctxkeep` is what every command pays for: the SDKs load only when a model is built.
    code = "import sys, ctxkeep; print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_help_imports_no_importer_summarizer_or_tokenizer() -> None:
    # `ctxkeep --help` and `import ctxkeep` pay only for argparse: each command imports what it needs.
    code = (
        "import sys\n"
        "import ctxkeep.cli\n"
        "heavy = ('ctxkeep.formats', 'ctxkeep.summarize', 'ctxkeep.tokens', 'ctxkeep.engine', 'ctxkeep.session')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_version_on_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ctxkeep.cli", "--version"], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == f"ctxkeep {ctxkeep.__version__}"
