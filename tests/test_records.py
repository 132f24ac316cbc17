"""The record of each compaction in compactions.jsonl: why, tokens, cost, the archived lines, the offloaded results."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.validating_server import JSONHandler

from ctxkeep import DeterministicModel, ModelSummarizer, ModelSummarySettings
from ctxkeep.errors import StorageError
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.providers import Completion, Turn
from ctxkeep.providers.openai import OpenAIModel
from ctxkeep.providers.retry import RetryPolicy
from ctxkeep.providers.sdk import Connection
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.summarize.testing import fixed_summary, fixed_summary_model
from ctxkeep.workspace.records import offloaded, read
from ctxkeep.writer import usage_of

NOW = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
SETTINGS = EngineSettings(
    compact=CompactSettings(max_input_length=3_000, compact_ratio=0.7, reserve_ratio=0.2),
    # each result ages as it passes the 2 newest (no waiting for a cheap moment): what is archived was offloaded
    offload=OffloadSettings(recent_n=2, recent_max_bytes=1_500, old_max_bytes=300, age_batch_bytes=0),
)


def turn(i: int, out_lines: int = 40) -> list[Message]:
    """A user ask, a shell call with a result of `out_lines` lines, and the answer."""
    call = ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": f"cat /srv/app/log-{i}.txt"}))
    return [
        Message.of("user", f"request {i}: look at the log of /srv/app/log-{i}.txt " + "please " * 20, id=f"u{i}"),
        Message(role="assistant", content=(TextBlock(text=f"reading log {i}"), call), id=f"a{i}"),
        Message(
            role="tool",
            content=(ToolResult(call_id=f"c{i}", content="".join(f"line {k} of log {i}\n" for k in range(out_lines))),),
            id=f"r{i}",
        ),
        Message.of("assistant", f"log {i} read", id=f"d{i}"),
    ]


def play(session: Session, turns: range, **kw: Any) -> list[int]:
    """Run the turns as an agent would (prepare before each assistant turn); the tokens sent at each step."""
    sent = []
    for i in turns:
        t = turn(i, **kw)
        session.add(t[:1])
        sent.append(session.prepare("be brief", now=NOW).context.tokens)
        session.add(t[1:])
    return sent


def records_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / "compactions.jsonl").read_text().splitlines()]


def test_each_compaction_is_recorded_with_its_tokens_cost_archived_lines_and_offloaded_results(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        play(s, range(30))
        summary_body = s.live.summary_body
    compactions = [r for r in records_of(tmp_path) if r["kind"] == "compaction"]
    assert len(compactions) >= 2
    previous_last: dict[str, int] = {}
    for rec in compactions:
        assert rec["reason"] == "threshold" and rec["tokens_before"] > SETTINGS.compact.compact_threshold
        assert rec["tokens_after"] < rec["tokens_before"] and rec["seconds"] >= rec["usage"]["seconds"] >= 0
        assert rec["usage"]["summarizer"] == "ExtractiveSummarizer" and rec["usage"]["calls"] == 0
        # The archived line range holds exactly the messages compacted, in order, right after the previous range.
        lines = rec["archive_lines"]
        assert lines["file"] == rec["archive_file"] == "dialog/2026-12-03.jsonl"
        assert lines["first"] == previous_last.get(lines["file"], 0) + 1
        assert lines["last"] - lines["first"] + 1 == rec["compacted"]
        previous_last[lines["file"]] = lines["last"]
        dialog = (tmp_path / lines["file"]).read_text().splitlines()[lines["first"] - 1 : lines["last"]]
        ids = [json.loads(x)["id"] for x in dialog]
        assert len(ids) == rec["compacted"]
        # The results it archived that had been offloaded (40 lines > 300 bytes once aged; the newest may not
        # have aged yet): each named, its original on disk.
        results = [json.loads(x)["id"] for x in dialog if "ctxkeep_offload" in x]
        off = rec["offloaded"]
        assert off["results"] == len(results) == len(off["listed"]) >= sum(i.startswith("r") for i in ids) - 2
        assert [r["id"] for r in off["listed"]] == results
        for item in off["listed"]:
            assert item["tool"] == "bash" and item["original_bytes"] > item["kept_bytes"]
            assert (tmp_path / item["file"]).read_text().startswith("line 0 of log")
        assert off["original_bytes"] == sum(r["original_bytes"] for r in off["listed"])
    assert sum(r["offloaded"]["results"] for r in compactions) > 0
    assert previous_last == {
        "dialog/2026-12-03.jsonl": len((tmp_path / "dialog/2026-12-03.jsonl").read_bytes().splitlines())
    }
    assert compactions[-1]["summary"] == summary_body  # the summary each compaction wrote, for the diffs


def test_the_tokens_sent_at_every_step_are_noted_at_each_compaction_and_at_close(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        sent = play(s, range(30))
        for i in range(2):  # the second of two small steps never compacts: it is noted at close
            s.add(Message.of("user", "ok", id=f"ok{i}"))
            sent.append(s.prepare("be brief", now=NOW).context.tokens)
    recs = records_of(tmp_path)
    noted = [n for r in recs if r["kind"] == "steps" for n in r["tokens"]]
    assert noted == sent
    # A steps note comes right before the compaction it ends with: that step's tokens are the context after it.
    for before, rec in itertools.pairwise(recs):
        if rec["kind"] == "compaction":
            assert before["kind"] == "steps" and before["tokens"][-1] >= rec["tokens_after"]
    assert recs[-1]["kind"] == "steps" and recs[-1]["tokens"][-1] == sent[-1]


def test_a_context_over_the_window_is_compacted_as_an_overflow_and_by_hand_as_manual(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        for i in range(20):  # no step in between: the context grows past the whole window
            s.add(Message.of("user", f"note {i}: " + "the build log says nothing new " * 30, id=f"n{i}"))
        assert s.live.tokens > SETTINGS.compact.max_input_length
        assert s.prepare("be brief", now=NOW).compaction is not None
        play(s, range(6, 8), out_lines=5)
        step = s.compact("keep the log names", now=NOW)
        assert step.compaction is not None
    reasons = [(r["reason"], r["focus"]) for r in records_of(tmp_path) if r["kind"] == "compaction"]
    assert reasons == [("overflow", None), ("manual", "keep the log names")]


def test_a_model_summarizer_records_its_calls_and_tokens(tmp_path: Path) -> None:
    model = fixed_summary_model()
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=16_000, audit=False))
    with Session.open(tmp_path, settings=SETTINGS, summarizer=summarizer) as s:
        play(s, range(12))
    compactions = [r for r in records_of(tmp_path) if r["kind"] == "compaction"]
    assert compactions and sum(r["usage"]["calls"] for r in compactions) == len(model.requests)
    usage = compactions[0]["usage"]
    assert usage["summarizer"] == "ModelSummarizer" and usage["model"] == "deterministic" and usage["calls"] >= 1
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0 and usage["attempts"] >= 1
    assert usage["audit"] == []


def test_a_refused_summary_is_recorded_with_what_it_cost(tmp_path: Path) -> None:
    model = DeterministicModel(lambda c: "no sections here")
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=16_000, retries=1))
    with Session.open(tmp_path, settings=SETTINGS, summarizer=summarizer) as s:
        play(s, range(12))
    failed = [r for r in records_of(tmp_path) if r["kind"] == "failed"]
    assert failed and failed[0]["usage"]["calls"] == len(model.requests) // len(failed) >= 2
    assert failed[0]["usage"]["output_tokens"] > 0


def test_usage_of_a_summarizer_that_says_nothing_is_unknown_not_zero() -> None:
    class Mine:
        def summarize(self, request: object) -> str:
            return fixed_summary(Completion(system="", turns=(Turn(role="user", text="hello"),)))

    usage = usage_of(Mine(), seconds=0.5)
    assert usage.summarizer == "Mine" and usage.calls is None and usage.input_tokens is None and usage.seconds == 0.5


def test_offloaded_lists_only_results_with_a_valid_offload_record() -> None:
    plain = turn(0, out_lines=2)
    damaged = Message(role="tool", content=(ToolResult(call_id="c9", extra={"ctxkeep_offload": {"file": 3}}),), id="x")
    assert offloaded([*plain, damaged]) == []


def test_reading_records_skips_lines_it_cannot_read() -> None:
    raw = b'{"kind":"steps","tokens":[1]}\n{torn\n[1,2]\n\n{"kind":"compaction","generation":1}\n'
    recs, bad = read(raw)
    assert [r["kind"] for r in recs] == ["steps", "compaction"] and bad == 2


def test_a_disk_that_refuses_the_steps_note_loses_only_the_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Session.open(tmp_path, settings=SETTINGS)
    play(s, range(2))
    refused: list[bytes] = []

    def refuse(data: bytes) -> None:
        refused.append(data)
        raise StorageError("disk full", path=str(tmp_path / "compactions.jsonl"))

    s.store.append_record = refuse  # type: ignore[method-assign]
    s.close()
    assert refused and b'"kind":"steps"' in refused[0] and "were not noted" in caplog.text
    with Session.open(tmp_path, settings=SETTINGS) as again:  # the lock was released all the same
        assert len(again.messages) == 8


class Flaky(JSONHandler):
    """An OpenAI-compatible chat endpoint: every other request gets a 503, the rest a valid summary with usage."""

    calls = 0
    summary = fixed_summary(
        Completion(system="", turns=(Turn(role="user", text="hello"),))
    )  # all the sections, no identifier

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls += 1
        if type(self).calls % 2 == 1:
            self.send_json(503, {"error": {"message": "busy, try again"}})
            return
        self.send_json(
            200,
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "flaky",
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": self.summary}}
                ],
                "usage": {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290},
            },
        )


@pytest.fixture
def flaky_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_real_server_s_usage_and_the_provider_s_retries_are_recorded(tmp_path: Path, flaky_server: str) -> None:
    Flaky.calls = 0
    model = OpenAIModel(
        "flaky", Connection(base_url=flaky_server, timeout=30), retry=RetryPolicy(), sleep=lambda s: None
    )
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=16_000, audit=False))
    with Session.open(tmp_path, settings=SETTINGS, summarizer=summarizer) as s:
        play(s, range(12))
    compactions = [r for r in records_of(tmp_path) if r["kind"] == "compaction"]
    assert compactions
    for rec in compactions:
        usage = rec["usage"]
        assert usage["model"] == "openai:flaky" and usage["calls"] == 1 and usage["retries"] == 1
        assert usage["input_tokens"] == 1234 and usage["output_tokens"] == 56  # as the server reported them
        # The reply named no identifier: every one the summary was checked for was appended by ctxkeep.
        assert usage["identifiers_checked"] == usage["identifiers_restored"] > 0
    assert Flaky.calls == 2 * len(compactions) and "/srv/app/log-0.txt" in compactions[0]["summary"]
