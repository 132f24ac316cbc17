"""A single huge tool output (what a runaway agent loop makes: a search that reads its own workspace) cannot
take the process down: each text is cut to `inputs.MAX_TEXT_CHARS` as it comes in, its middle dropped with a
note, so memory and disk are bounded by the cap, not by the output."""

from __future__ import annotations

import logging
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from ctxkeep import Message, Session, ToolResult
from ctxkeep.host import inputs

MB = 1_000_000
LINE = './workspace/live-1.jsonl:1: {"content": "RETRY_LIMIT = 5 \\\\\\" nested"}\n'


def output(size: int) -> str:
    return (LINE * (size // len(LINE) + 1))[:size]


def turn(body: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "x"}'}}
    return [
        {"role": "user", "content": "where is the retry limit?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": body},
    ]


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_a_50_mb_output_is_cut_to_the_cap_in_bounded_memory_and_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cap = 2 * MB
    monkeypatch.setattr(inputs, "MAX_TEXT_CHARS", cap)
    history = turn(output(50 * MB))  # built before tracing: the host holds it either way
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING, logger="ctxkeep"), Session.open(tmp_path / "ws", window=16_000) as s:
            s.sync(history)
            step = s.prepare("be brief")
            _, peak = tracemalloc.get_traced_memory()
            assert s.sync(history) == []  # the same history again: recognised, nothing added
    finally:
        tracemalloc.stop()
    assert peak < 15 * cap < 50 * MB  # the cap's size some times over (588 MB uncapped), not the output's
    assert folder_bytes(tmp_path / "ws") < 3 * cap
    assert any("its middle was dropped" in r.getMessage() for r in caplog.records)
    assert step.context.tokens < 16_000
    with Session.open(tmp_path / "ws") as s:
        result = s.messages[2].tool_result
    assert result is not None and len(result.text) <= cap  # what is kept (offloaded or not) is within the cap


def test_the_cut_keeps_the_head_and_the_end_and_says_how_much_went() -> None:
    body = "first line\n" + "x" * 100_000 + "\nlast line: error"
    msg = inputs.capped(Message(role="tool", content=(ToolResult(call_id="c", content=body),)), 10_000)
    text = msg.tool_result.text if msg.tool_result else ""
    assert len(text) == 10_000 and text.startswith("first line\n") and text.endswith("last line: error")
    assert f"{len(body) - 10_000:,} characters of {len(body):,} dropped" in text
    small = Message.of("user", "short")
    assert inputs.capped(small, 10_000) is small


@pytest.mark.parametrize("way", ["dict", "message", "one message"])
def test_every_way_in_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str) -> None:
    monkeypatch.setattr(inputs, "MAX_TEXT_CHARS", 1_000)
    body = output(5_000)
    with Session.open(tmp_path) as s:
        if way == "dict":
            s.add([{"role": "user", "content": body}])
        elif way == "message":
            s.add([Message.of("user", body, id="u")])
        else:
            s.add(Message.of("user", body, id="u"))
        assert len(s.messages[0].text) == 1_000 and "dropped here" in s.messages[0].text
