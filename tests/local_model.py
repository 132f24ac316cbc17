"""The real llama-server (SmolLM2-135M, which scripts/test installs) as the summarizer of the adapters' short runs.

SmolLM2 is far too small to summarize: held to the JSON schema it often loops inside a string until its
reply is cut, and the summary is refused. So the runs do what a host with a model this small would do:
the model's summary when ctxkeep accepts it, else the extractive one (`ModelOrExtractive`). What they
check is that a real model summarizer runs inside an adapter (in a worker thread on the async path),
with every request inside the window and no message lost; never the prose. Short tool results in its
prompt keep each compaction to one part, so one call. No limit here depends on the machine's speed:
the timeout only stops a hung server.

The server is the session's (`llama_url` in tests/conftest.py): without the packages the runs skip, or fail
where CTXKEEP_REQUIRE_EXTRAS requires the llama part.
"""

from __future__ import annotations

import pytest
from tests.conftest import LLAMA_CONTEXT

from ctxkeep import (
    ExtractiveSummarizer,
    ModelSummarizer,
    ModelSummarySettings,
    SummaryError,
    SummaryRequest,
    get_model,
)

CONTEXT = LLAMA_CONTEXT  # the session server's window, and the summarizer's
WINDOW = 8_000  # the agent's: small enough that a few tasks compact more than once
# Two compactions or more, each one call. At this window a compaction comes once in 6 or more requests, and
# the cost model puts it off further for a model summarizer (its call costs too): 6 tasks compacted none, 12
# once, 20 twice or more in every adapter; 24 leaves a margin for a summary the model makes longer or shorter.
TASKS = 24
SECONDS = 1_800  # per call: 10-20 s on 2 idle cores, minutes on a busy machine; this only stops a hung server
SUMMARIES = ModelSummarySettings(
    window=CONTEXT, max_tokens=384, retries=0, audit=False, reply_format="json", result_chars=400
)


class ModelOrExtractive:
    """The model's summary when it gives one, else the extractive summarizer's; counts both."""

    def __init__(self, model: ModelSummarizer) -> None:
        self.model = model
        self.extractive = ExtractiveSummarizer()
        self.asked = 0  # compactions the model was asked for
        self.accepted = 0  # of which its summary was used

    def summarize(self, request: SummaryRequest) -> str:
        self.asked += 1
        try:
            summary = self.model.summarize(request)
        except SummaryError:
            return self.extractive.summarize(request)
        self.accepted += 1
        return summary


def summarizer(url: str, request: pytest.FixtureRequest) -> ModelOrExtractive:
    """A model summarizer on the server at `url` (its client closed when the test ends), the extractive one
    behind it."""
    model = get_model("openai:smollm2", base_url=url, timeout=SECONDS)
    request.addfinalizer(model.close)  # type: ignore[attr-defined]
    return ModelOrExtractive(ModelSummarizer(model, settings=SUMMARIES))
