"""Shared helpers, the hypothesis profiles, the optional parts (tests/extras.py), the session's llama-server
and PostgreSQL server, and a guard against tests collected twice.

Real transcripts are read from ../shared/data/transcripts/ (never copied here).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from scripts import postgres_server
from scripts.llama_server import serving
from tests import extras

# No test depends on how fast the machine is: no deadline per example, and no health check that
# fails when drawing examples is slow (a busy machine is not a bug). CI runs the same examples every
# time (HYPOTHESIS_PROFILE=ci in .ci/run), so a landing never hangs on luck; local runs explore new
# examples on each run.
settings.register_profile("local", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", settings.get_profile("local"), derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "local"))

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT.parent / "shared" / "data" / "transcripts"
RAW = TRANSCRIPTS / "raw"


def raw_files(fmt: str | None = None) -> list[Path]:
    """Raw transcript files of `fmt` (a provenance.json format name), or all of them."""
    prov = TRANSCRIPTS / "provenance.json"
    if not prov.exists():
        return []
    entries = json.loads(prov.read_text())
    return sorted(RAW / e["raw_file"] for e in entries if fmt is None or e["format"] == fmt)


def raw_params(fmt: str | None = None) -> list[object]:
    """pytest params for the raw files of `fmt`; one skipped param when shared/ is absent."""
    files = raw_files(fmt)
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no transcripts in {TRANSCRIPTS}"))]
    return [pytest.param(p, id=p.name) for p in files]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a test that a module imported from another test module: pytest would collect it twice.
    Shared helpers belong here or in a plain module (tests/scripted.py), never in a test module."""
    strays = [
        f"{item.nodeid} (defined in {item.function.__module__})"
        for item in items
        if isinstance(item, pytest.Function) and item.function.__module__ != item.module.__name__
    ]
    if strays:
        raise pytest.UsageError("tests imported from another test module run twice:\n  " + "\n  ".join(strays))


def pytest_configure(config: pytest.Config) -> None:
    """A CTXKEEP_REQUIRE_EXTRAS that names no part stops the run before it starts."""
    extras.required()


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures start what the part would run
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test whose optional part (``@pytest.mark.extra("memory")``) is missing, naming it; fail where
    CTXKEEP_REQUIRE_EXTRAS requires the part."""
    for mark in item.iter_markers("extra"):
        extras.need(*mark.args)


class _Module(pytest.Module):
    """A test module whose imports fail for want of an optional part's package is skipped, or failed where
    the part is required, by the rule of the extra marker: what `pytest.importorskip` at its top would do."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        try:
            return super().collect()
        except self.CollectError as error:
            cause = error.__cause__
            extra = extras.owner(cause.name) if isinstance(cause, ModuleNotFoundError) and cause.name else None
            if extra is None or not extra.missing():
                raise
            extras.need(extra.name, module_level=True)
            raise


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module:
    """Every test module is collected as a `_Module`."""
    return _Module.from_parent(parent, path=module_path)


LLAMA_CONTEXT = 8_192  # the window of the server most tests use, and of their summarizer


@pytest.fixture(scope="session")
def llama_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[int], str]]:
    """The base URL of a llama-server (SmolLM2-135M, scripts/llama_server.py) with a `context`-token window,
    started the first time a test asks for that window (its log in a temporary folder); all of them
    stopped when the session ends. Skips without the llama part."""
    extras.need("llama")
    urls: dict[int, str] = {}
    with ExitStack() as running:

        def url(context: int = LLAMA_CONTEXT) -> str:
            if context not in urls:
                log = tmp_path_factory.mktemp("llama") / "server.log"
                try:
                    urls[context] = running.enter_context(serving(context=context, log=log))
                except RuntimeError as exc:
                    pytest.fail(str(exc))
            return urls[context]

        yield url


@pytest.fixture(scope="session")
def llama_url(llama_servers: Callable[[int], str]) -> str:
    """The base URL of the session's llama-server with a `LLAMA_CONTEXT`-token window."""
    return llama_servers(LLAMA_CONTEXT)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a throwaway PostgreSQL server (scripts/postgres_server.py: initdb in a temporary folder, a unix
    socket there), started once for the session and removed at its end. Skips without the postgres part."""
    extras.need("postgres")
    with ExitStack() as running:
        try:
            url = running.enter_context(postgres_server.serving())
        except RuntimeError as exc:
            pytest.fail(str(exc))
        yield url
