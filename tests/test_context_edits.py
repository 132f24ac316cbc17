"""Context edits beyond results: old tool-call arguments are cut like results (the original saved and pointed at),
old reasoning is not sent, and a cold prompt cache makes every pending cut at once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from ctxkeep import arguments
from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.offload import offload, saved_texts
from ctxkeep.reasoning import without_thinking
from ctxkeep.retention import referenced_files
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.tokens import get_counter

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
COUNTER = get_counter("o200k_base")


def write_turn(i: int, body: str, result: str = "ok") -> list[Message]:
    """Turn `i`: the user asks, the assistant writes `body` to a file (a whole file in the call's arguments)."""
    arguments = json.dumps({"path": f"src/mod{i}.py", "content": body})
    return [
        Message.of("user", f"write module {i}", id=f"u{i}"),
        Message(
            role="assistant",
            content=(TextBlock(text="writing"), ToolCall(id=f"c{i}", name="write", arguments=arguments)),
            id=f"a{i}",
        ),
        Message(role="tool", content=(ToolResult(call_id=f"c{i}", content=result),), id=f"r{i}"),
    ]


def test_an_old_64_kb_write_no_longer_holds_a_small_window() -> None:
    # Before: the write's arguments were never cut, so a 6,000-token window held 17,575 tokens after compaction.
    window = 6_000
    body = "\n".join(f"def f{k}(x):\n    return x * {k}  # line {k}" for k in range(1_600))
    assert len(body) > 64_000
    settings = EngineSettings.for_window(window)
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        session.add(write_turn(0, body))
        step = session.prepare("sys", now=NOW)
        # Too big for the window even alone: the compaction's last resort (every result and call aged) cuts it.
        assert step.compaction is not None and step.context.tokens <= window, step.context.tokens
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


def test_a_cut_call_keeps_its_keys_and_small_values_and_fits_the_limit() -> None:
    args = json.dumps({"path": "a.py", "old": "x" * 5_000, "new": "line\n" * 3_000, "replace_all": True})
    cut = json.loads(arguments.cut(args, 1_000, "tool_result/f.txt"))
    assert cut["path"] == "a.py" and cut["replace_all"] is True
    assert all("tool_result/f.txt" in cut[k] for k in ("old", "new"))
    assert cut["new"].startswith("line\nline\n")  # whole lines of the head kept
    assert len(json.dumps(cut).encode()) <= 1_100
    # Arguments that are not a JSON object still give the object providers require.
    broken = json.loads(arguments.cut('{"content": "' + "y" * 4_000, 1_000, "tool_result/f.txt"))
    assert list(broken) == ["arguments"] and "tool_result/f.txt" in broken["arguments"]


def test_a_recent_call_is_never_cut_and_an_old_one_waits_then_ages_with_the_results() -> None:
    offload = OffloadSettings(
        recent_n=2, recent_max_bytes=4_000, old_max_bytes=600, age_tail_tokens=0, age_batch_bytes=3_000
    )
    settings = EngineSettings(compact=CompactSettings(max_input_length=1_000_000), offload=offload)
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        turns = [
            ("z" * 10_000, "ok"),
            ("small", "ok"),
            ("small", "ok"),
            ("small", "o" * 9_000),
            ("s", "ok"),
            ("s", "ok"),
        ]
        for i, (body, result) in enumerate(turns):
            session.add(write_turn(i, body, result))
            session.prepare("sys", now=NOW)
            calls = {m.id: m.tool_calls[0] for m in session.live.messages if m.role == "assistant"}
            if 2 <= i < 5:
                # Past recent_n, but no cut is cheap and the batch is not full (a call alone never fills it):
                # it waits, and the prompt cache keeps it.
                assert len(calls["a0"].arguments) > 10_000 and session.live.waiting == 1
        # The big result passed recent_n and filled the batch: the call ages with it.
        assert session.live.waiting == 0
        assert len(calls["a0"].arguments.encode()) <= 700
        assert json.loads(calls["a4"].arguments)["content"] == "s"  # recent: never cut


def test_a_cut_calls_file_is_kept_while_live_and_rewritten_after_a_power_loss() -> None:
    messages = write_turn(0, "q" * 8_000) + [m for i in (1, 2, 3, 4) for m in write_turn(i, "r")]
    store = MemoryFolder()
    out = offload(messages, OffloadSettings(recent_n=2), store)
    call = out[1].tool_calls[0]
    assert out[1] is not messages[1] and out[4] is messages[4]  # old call cut, the others left as they are
    (file,) = referenced_files([out[1]])
    assert store.read(file) == messages[1].tool_calls[0].arguments.encode()
    assert saved_texts([(messages[1], out[1])]) == {file: messages[1].tool_calls[0].arguments.encode()}
    assert len(call.arguments) <= 3_000


def thinking_turn(i: int, at: datetime) -> list[Message]:
    call = ToolCall(id=f"c{i}", name="bash", arguments="{}")
    return [
        Message.of("user", f"ask {i}", id=f"u{i}", timestamp=at),
        Message(
            role="assistant",
            content=(ThinkingBlock(text=f"plan {i} " * 200, signature="sig"), call),
            id=f"a{i}",
            timestamp=at,
        ),
        Message(role="tool", content=(ToolResult(call_id=f"c{i}", content="done"),), id=f"r{i}", timestamp=at),
        Message(
            role="assistant",
            content=(ThinkingBlock(text=f"wrap {i} " * 200, signature="sig"), TextBlock(text=f"answer {i}")),
            id=f"d{i}",
            timestamp=at,
        ),
    ]


def _thinking(messages: list[Message] | tuple[Message, ...]) -> set[str]:
    return {m.id for m in messages if any(isinstance(b, ThinkingBlock) for b in m.content)}


def test_reasoning_of_finished_turns_is_not_sent_again_inside_the_loop_it_stays() -> None:
    with Session(MemoryFolder(), counter=COUNTER) as session:
        turn = thinking_turn(0, NOW)
        session.add(turn[:3])  # inside the tool loop: its signed thinking stays with its call
        step = session.prepare("sys", now=NOW)
        assert _thinking(list(step.context.messages)) == {"a0"}
        session.add(turn[3:] + thinking_turn(1, NOW)[:1])
        before = step.context.tokens
        step = session.prepare("sys", now=NOW)
        # The answer that ended turn 0 was never cached: its reasoning is dropped before it is ever sent. The
        # call of turn 0 was sent already: its reasoning waits for a rewrite there (or a cold cache).
        assert _thinking(list(step.context.messages)) == {"a0"}
        dropped = next(m for m in session.live.messages if m.id == "d0")
        assert dropped.text == "answer 0" and step.context.tokens < before + 300
        saved = dropped.extra["ctxkeep_thinking"]["file"]
        assert session.store.read(saved) == ("wrap 0 " * 200).encode()


def test_after_a_pause_over_the_cache_lifetime_every_pending_cut_is_made() -> None:
    offload = OffloadSettings(recent_n=1, recent_max_bytes=8_000, old_max_bytes=600, age_tail_tokens=0)
    settings = EngineSettings(compact=CompactSettings(max_input_length=1_000_000), offload=offload)
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        at = NOW
        for i in range(3):
            turn = thinking_turn(i, at)
            turn[2] = Message(
                role="tool", content=(ToolResult(call_id=f"c{i}", content="o" * 5_000),), id=f"r{i}", timestamp=at
            )
            session.add(turn)
            session.prepare("sys", now=at)
            at += timedelta(seconds=30)
        assert session.live.waiting == 2  # warm cache: nothing cheap, the batch not full
        assert _thinking(list(session.live.messages)) >= {"a0", "a1"}
        session.add([Message.of("user", "back after lunch", id="u9", timestamp=at + timedelta(minutes=6))])
        step = session.prepare("sys", now=at + timedelta(minutes=6))
        assert session.live.waiting == 0
        assert all(len(m.text) <= 600 for m in step.context.messages if m.role == "tool" and m.id != "r2")
        assert _thinking(list(step.context.messages)) == set()  # a new user message: no loop is running


def test_dropped_reasoning_is_saved_and_can_be_written_again_from_the_earlier_copy() -> None:
    store = MemoryFolder()
    before = thinking_turn(0, NOW)[3]
    (after,) = without_thinking([before], store).values()
    file = after.extra["ctxkeep_thinking"]["file"]
    assert store.read(file) == ("wrap 0 " * 200).encode() and file in referenced_files([after])
    assert saved_texts([(before, after)]) == {file: ("wrap 0 " * 200).encode()}
    # A message with nothing but reasoning stays as it is: an empty assistant message would be refused.
    alone = Message(role="assistant", content=(ThinkingBlock(text="hmm"),), id="t")
    assert without_thinking([alone], store) == {}


def test_a_pasted_message_too_big_for_the_window_keeps_its_head_and_tail() -> None:
    window = 6_000
    settings = EngineSettings.for_window(window)
    paste = "\n".join(f"log line {k}: all fine" for k in range(3_000)) + "\nERROR: the disk is full"
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        session.add([Message.of("user", "hello", id="u0"), Message.of("assistant", "hi", id="a0")])
        session.prepare("sys", now=NOW)
        session.add([Message.of("user", f"why does this fail?\n{paste}", id="u1")])
        step = session.prepare("sys", now=NOW)
        assert step.context.tokens <= window, step.context.tokens
        (sent,) = [m for m in step.context.messages if m.id == "u1"]
        assert sent.text.startswith("why does this fail?") and sent.text.endswith("ERROR: the disk is full")
        saved = sent.extra["ctxkeep_cut"]["file"]
        assert saved in sent.text and session.store.read(saved) == f"why does this fail?\n{paste}".encode()
