"""Context edits beyond results: old tool-call arguments are cut like results (the original saved and pointed at),
old reasoning is not sent, and a cold prompt cache makes every pending cut at once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.session import Session
from ctxkeep.settings import EngineSettings
from ctxkeep.tokens import get_counter

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
COUNTER = get_counter("o200k_base")


def write_turn(i: int, body: str) -> list[Message]:
    """Turn `i`: the user asks, the assistant writes `body` to a file (a whole file in the call's arguments)."""
    arguments = json.dumps({"path": f"src/mod{i}.py", "content": body})
    return [
        Message.of("user", f"write module {i}", id=f"u{i}"),
        Message(
            role="assistant",
            content=(TextBlock(text="writing"), ToolCall(id=f"c{i}", name="write", arguments=arguments)),
            id=f"a{i}",
        ),
        Message(role="tool", content=(ToolResult(call_id=f"c{i}", content="ok"),), id=f"r{i}"),
    ]


def test_an_old_64_kb_write_no_longer_holds_a_small_window() -> None:
    # Before: the write's arguments were never cut, so a 6,000-token window held 17,575 tokens after compaction.
    window = 6_000
    body = "\n".join(f"def f{k}(x):\n    return x * {k}  # line {k}" for k in range(1_600))
    assert len(body) > 64_000
    settings = EngineSettings.for_window(window)
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        session.add(write_turn(0, body))
        session.prepare("sys", now=NOW)
        for i in range(1, 6):
            session.add(write_turn(i, f"x = {i}\n"))
            step = session.prepare("sys", now=NOW + timedelta(seconds=i))
        assert step.context.tokens <= window, step.context.tokens
        call = next(c for m in session.live.messages if m.id == "a0" for c in m.tool_calls)
        cut = json.loads(call.arguments)  # still valid JSON, keys kept
        assert set(cut) == {"path", "content"} and cut["path"] == "src/mod0.py"
        assert "tool_result/" in cut["content"] and len(call.arguments) <= settings.offload.old_max_bytes
        saved = next(n for n in session.store.originals() if n.name in cut["content"])
        assert json.loads(session.store.read(saved.name) or b"")["content"] == body
