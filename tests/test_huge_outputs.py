"""A single huge tool output (what a runaway agent loop makes: a search that reads its own workspace) cannot
take the process down: the texts of a message are cut to `OffloadSettings.max_message_chars` as they come in,
their middle dropped with a note, so memory and disk are bounded by the cap, not by the output; and a big
output is cut and its original saved before it is held, so it is written once and held about once."""

from __future__ import annotations

import logging
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ctxkeep import EngineSettings, LocalFolder, Message, MessageError, Session, ToolResult, bigoutput
from ctxkeep import offload as offload_mod
from ctxkeep.host import inputs
from ctxkeep.offload import SAVE_AT_ONCE_BYTES
from ctxkeep.settings import OffloadSettings

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


def capped_at(cap: int, window: int = 16_000) -> EngineSettings:
    settings = EngineSettings.for_window(window)
    return replace(settings, offload=replace(settings.offload, max_message_chars=cap))


def written_bytes() -> int:
    """What this process passed to write() so far (a file rewritten counts each time)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def test_a_50_mb_output_is_cut_to_the_cap_in_bounded_memory_and_disk(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cap = 2 * MB
    history = turn(output(50 * MB))  # built before tracing: the host holds it either way
    tracemalloc.start()
    try:
        with (
            caplog.at_level(logging.WARNING, logger="ctxkeep"),
            Session.open(tmp_path / "ws", settings=capped_at(cap)) as s,
        ):
            s.sync(history)
            step = s.prepare("be brief")
            _, peak = tracemalloc.get_traced_memory()
            assert s.sync(history) == []  # the same history again: recognised, nothing added
    finally:
        tracemalloc.stop()
    assert peak < 15 * cap < 50 * MB  # the cap's size some times over (588 MB uncapped), not the output's
    assert folder_bytes(tmp_path / "ws") < 3 * cap
    assert any("their middle was dropped" in r.getMessage() for r in caplog.records)
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
def test_every_way_in_is_capped(tmp_path: Path, way: str) -> None:
    body = output(5_000)
    with Session.open(tmp_path, settings=capped_at(1_000)) as s:
        if way == "dict":
            s.add([{"role": "user", "content": body}])
        elif way == "message":
            s.add([Message.of("user", body, id="u")])
        else:
            s.add(Message.of("user", body, id="u"))
        assert len(s.messages[0].text) == 1_000 and "dropped here" in s.messages[0].text


def test_the_cap_is_per_message_not_per_text() -> None:
    """A hundred texts each under the cap made a message a hundred times the cap."""
    parts = [{"type": "text", "text": output(3_000)} for _ in range(100)]
    (entry,) = inputs.convert(
        [{"role": "user", "content": [*parts, {"type": "text", "text": "the ask"}]}], max_chars=30_000
    )
    texts = [b.text for b in entry.message.content]
    assert sum(len(t) for t in texts) <= 30_000 and texts[-1] == "the ask"  # a small text is kept whole
    assert all("dropped here" in t for t in texts[:-1])


def test_the_cap_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="max_message_chars"):
        capped_at(0)


@pytest.mark.parametrize("size", [3 * MB, 12 * MB])
def test_a_big_output_is_written_once_held_once_and_the_live_log_keeps_its_cut_form(tmp_path: Path, size: int) -> None:
    """The live log held each original whole and tool_result/ held it again (2.8 GB of workspace for the
    README's loop); several copies were held in memory while it was added."""
    assert size > SAVE_AT_ONCE_BYTES
    body = output(size)
    history = turn(body)
    with Session.open(tmp_path / "ws", settings=capped_at(64 * MB)) as s:
        s.add(history[:2])
        before = written_bytes()
        tracemalloc.start()
        try:
            s.sync(history)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        held = s.messages[2].tool_result
        s.prepare("be brief")
        written = written_bytes() - before
    assert held is not None and len(held.text) < 100_000 and "tool_result/" in held.text  # held cut, with the pointer
    ws = tmp_path / "ws"
    live_log = sum(p.stat().st_size for p in (ws / "live").iterdir())
    assert live_log < 200_000, live_log  # the cut form and the pointer, not the original
    (original,) = (ws / "tool_result").iterdir()
    assert original.read_text() == body  # whole, and once
    assert written <= 1.2 * size, written / size
    assert peak <= 4 * MB, peak / size  # beyond the host's own copy: a few pieces, never a whole encoded copy
    with Session.open(ws) as s:  # and reopened, the cut form with its pointer
        again = s.messages[2].tool_result
        assert again is not None and again.text == held.text


def test_a_refused_batch_saves_no_original(tmp_path: Path) -> None:
    """A result answering no call is refused before its big output is cut and saved."""
    with Session.open(tmp_path / "ws") as s:
        with pytest.raises(MessageError):
            s.add({"role": "tool", "tool_call_id": "nowhere", "content": output(2 * MB)})
        assert not s.messages
    assert not (tmp_path / "ws" / "tool_result").exists() or not any((tmp_path / "ws" / "tool_result").iterdir())


def test_a_text_saved_in_pieces_is_measured_cut_and_saved_as_one_encoded_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pieces of characters, never of bytes: a piece boundary inside a CJK character, an emoji or a lone
    surrogate changes nothing in the record, the kept head or the saved bytes."""
    body = ("日志第一行 ok\n" + "错误🙂\ud800 ✓ line\n" * 40_000) * 3  # well over a piece of 1 MiB characters
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    batch = [Message.of("user", "go", id="u"), *inputs.to_messages([{"role": "assistant", "tool_calls": [call]}])]
    batch.append(Message(role="tool", content=(ToolResult(call_id="c1", content=body),), id="r"))
    streamed = offload_mod.offload(batch, OffloadSettings(), LocalFolder(tmp_path / "a"))[-1]
    monkeypatch.setattr(bigoutput, "PIECE", 10 * len(body))  # the same text encoded whole
    whole = offload_mod.offload(batch, OffloadSettings(), LocalFolder(tmp_path / "b"))[-1]
    record = offload_mod.record_in(whole)
    assert record is not None and offload_mod.record_in(streamed) == record
    texts = [m.tool_result.text if m.tool_result else "" for m in (streamed, whole)]
    assert texts[0].replace("/a/", "/b/") == texts[1] and texts[1].startswith("日志第一行 ok\n")
    saved = [(tmp_path / f / record.file).read_bytes() for f in "ab"]
    assert saved[0] == saved[1] == body.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("size", [5 * MB, 12 * MB])
def test_a_result_over_the_cap_is_saved_capped_and_cut_without_a_capped_copy(tmp_path: Path, size: int) -> None:
    """Cutting a result to the cap built the capped text beside its two slices: 2.6 times a result 1.25 times
    the cap (`bench/bench_big_input.py --mb 40`). Its capped form is now saved in pieces and cut in one go."""
    cap = 4 * MB
    body = output(size)
    history = turn(body)
    with Session.open(tmp_path / "ws", settings=capped_at(cap)) as s:
        s.add(history[:2])
        tracemalloc.start()
        try:
            s.add(history[2])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        held = s.messages[2].tool_result
    assert peak <= 4 * MB, peak / size  # a few pieces beyond the host's own copy: never the capped text
    assert held is not None and len(held.text) < 100_000
    record = offload_mod.record_of(held)
    assert record is not None
    saved = (tmp_path / "ws" / record.file).read_bytes()
    assert saved == bigoutput.cut_middle(body, cap).encode()  # what the cap keeps, as it kept it before
    assert record.original_bytes == len(saved) and record.original_lines == saved.count(b"\n") + 1


@pytest.mark.parametrize(("tool", "cap"), [("grep", 3_000), ("read", 3_000), ("read", 20_000)])
def test_a_result_over_the_cap_is_capped_whole_when_it_fits_the_recent_limit(
    tmp_path: Path, tool: str, cap: int
) -> None:
    """Capped to less than the recent limit, a result stays whole (capped) in the context; a file read, kept
    whole when new, is cut with its pointer once over the cap: no window holds what the cap lets through."""
    settings = capped_at(cap)
    cut = cap > settings.offload.recent_max_bytes
    call = {"id": "c1", "type": "function", "function": {"name": tool, "arguments": "{}"}}
    with Session.open(tmp_path / "ws", settings=settings) as s:
        s.add([{"role": "user", "content": "look"}, {"role": "assistant", "content": None, "tool_calls": [call]}])
        s.add({"role": "tool", "tool_call_id": "c1", "content": output(2 * MB)})
        held = s.messages[2].tool_result
    assert held is not None
    record = offload_mod.record_of(held)
    if cut:
        assert record is not None and "tool_result/" in held.text
        assert (tmp_path / "ws" / record.file).read_text() == bigoutput.cut_middle(output(2 * MB), cap)
    else:
        assert record is None and len(held.text) == cap and "dropped here" in held.text


def test_a_result_taken_under_a_bigger_cap_is_saved_whole_at_its_cut(tmp_path: Path) -> None:
    """The cap applies as a result comes in: one taken whole, then cut at a step of a session reopened with a
    smaller cap, has its whole text saved, not the smaller cap's."""
    body = output(40_000)
    with Session.open(tmp_path / "ws", settings=capped_at(64 * MB)) as s:
        s.add(turn(body))
    with Session.open(tmp_path / "ws", settings=capped_at(10_000)) as s:
        s.prepare("be brief")
        held = s.messages[2].tool_result
    record = offload_mod.record_of(held) if held is not None else None
    assert record is not None and (tmp_path / "ws" / record.file).read_text() == body
