"""Offloading tool results: cuts, saved originals, aging, policies, idempotency, cleanup."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import raw_params

from ctxkeep.codec import dumps, message_from_dict
from ctxkeep.errors import StorageError
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.formats import load
from ctxkeep.messages import ImageBlock, Message, TextBlock, ToolCall, ToolResult, make_id
from ctxkeep.offload import (
    OFFLOAD_KEY,
    TOOL_RESULT_DIR,
    OffloadRecord,
    is_original,
    offload,
    original_file,
    original_name,
    record_of,
)
from ctxkeep.retention import cleanup, referenced_files
from ctxkeep.settings import OffloadSettings, ToolPolicy
from ctxkeep.store import Folder

DAY = 86_400.0
NOTICE = re.compile(r"\[ctxkeep: .*\]\Z", re.DOTALL)


def turn(
    call_id: str,
    content: str | tuple[TextBlock | ImageBlock, ...],
    tool: str = "bash",
    *,
    is_error: bool = False,
    exit_code: int | None = None,
) -> list[Message]:
    """An assistant call and its result."""
    res = ToolResult(call_id=call_id, content=content, is_error=is_error, exit_code=exit_code)
    return [
        Message(role="assistant", id=f"a-{call_id}", content=(ToolCall(id=call_id, name=tool),)),
        Message(role="tool", id=f"t-{call_id}", content=(res,)),
    ]


def lines(n: int, width: int = 10) -> str:
    """`n` lines of exactly `width` bytes each (newline included)."""
    return "".join(f"{i:0{width - 1}d}\n" for i in range(1, n + 1))


def result(msg: Message) -> ToolResult:
    res = msg.tool_result
    assert res is not None
    return res


def record(msg: Message) -> OffloadRecord:
    rec = record_of(result(msg))
    assert rec is not None, "the message was not offloaded"
    return rec


def head_of(msg: Message) -> str:
    """The kept head of a cut result's text (what precedes the newline and the notice)."""
    rec = record(msg)
    data = result(msg).text.encode("utf-8", "surrogatepass")
    return data[: rec.kept_bytes].decode("utf-8", "surrogatepass")


def saved(folder: Folder, msg: Message) -> str:
    data = folder.read(record(msg).file)
    assert data is not None, "the original file is missing"
    return data.decode("utf-8", "surrogatepass")


def check_cut(folder: Folder, before: Message, after: Message, limit: int) -> None:
    """The invariants of every cut: original saved exactly, head a prefix, notice last, within the limit."""
    original = result(before).text
    visible = result(after).text
    rec = record(after)
    assert saved(folder, after) == original
    head = head_of(after)
    assert original.startswith(head)
    assert rec.original_bytes == len(original.encode("utf-8", "surrogatepass"))
    assert rec.kept_bytes == len(head.encode("utf-8", "surrogatepass"))
    notice = visible[len(head) + 1 :] if head else visible
    assert visible == (f"{head}\n{notice}" if head else notice)
    assert NOTICE.match(notice), notice
    assert folder.location(rec.file) in notice
    if head:
        assert len(visible.encode("utf-8", "surrogatepass")) <= limit
        assert f"read from line {rec.next_line:,}" in notice or rec.kept_bytes == rec.original_bytes


# --- cutting ----------------------------------------------------------------------------


def test_small_results_come_back_as_the_same_objects() -> None:
    messages = [Message.of("user", "go"), *turn("c1", "ok"), *turn("c2", "x" * 2000)]
    out = offload(messages, OffloadSettings(recent_n=1, recent_max_bytes=5000, old_max_bytes=3000), MemoryFolder())
    assert len(out) == len(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_cut_on_a_line_boundary_with_notice_and_file() -> None:
    folder = MemoryFolder()
    text = lines(1000)  # 10,000 bytes
    messages = turn("c1", text)
    out = offload(messages, OffloadSettings(recent_max_bytes=3000, old_max_bytes=1000), folder)
    assert out[0] is messages[0]
    check_cut(folder, messages[1], out[1], 3000)
    head = head_of(out[1])
    assert head.endswith("\n")
    kept = head.count("\n")
    assert 3000 - 10 - 400 < len(head) <= 3000  # nearly the whole budget, less the notice
    rec = record(out[1])
    assert (rec.stage, rec.policy, rec.original_lines, rec.next_line) == ("recent", "default", 1000, kept + 1)
    assert f"lines 1-{kept:,} of 1,000" in result(out[1]).text
    assert rec.file == f"{TOOL_RESULT_DIR}/{make_id('t-c1', 'c1')}.txt"
    assert original_file(result(out[1])) == rec.file
    assert "cut short" not in result(out[1]).text


def test_exactly_at_the_limit_is_not_cut_one_byte_more_is() -> None:
    s = OffloadSettings(recent_max_bytes=3000, old_max_bytes=3000)
    at = turn("c1", "中" * 1000)  # 3,000 bytes
    assert offload(at, s, MemoryFolder())[1] is at[1]
    over = turn("c1", "中" * 1000 + "x")
    folder = MemoryFolder()
    check_cut(folder, over[1], offload(over, s, folder)[1], 3000)


@pytest.mark.parametrize(
    "text",
    [
        "第一行中文内容，测试多字节字符\n" * 400,
        "没有换行的中文" * 1000,
        "🙂🚀👩‍👩‍👧" * 2000,
        "a" + "🙂" * 3000,
        "ab" + "é" * 5000,
        "a\ud83d" * 1000,  # lone surrogates from a broken source: kept, not an error
    ],
    ids=["chinese-lines", "chinese-one-line", "emoji", "emoji-offset-1", "accents-offset-2", "lone-surrogates"],
)
def test_multibyte_characters_are_never_split(text: str) -> None:
    folder = MemoryFolder()
    messages = turn("c1", text)
    for limit in (997, 998, 999, 1000, 1001):
        out = offload(messages, OffloadSettings(recent_max_bytes=limit, old_max_bytes=limit), folder)
        check_cut(folder, messages[1], out[1], limit)
        head = head_of(out[1]).encode("utf-8", "surrogatepass")
        assert text.encode("utf-8", "surrogatepass").startswith(head)
        assert limit - 4 - 400 < len(head)  # the head uses the budget, less at most one character


def test_one_giant_line_is_cut_mid_line_and_says_so() -> None:
    folder = MemoryFolder()
    text = "x" * 100_000
    messages = turn("c1", text)
    out = offload(messages, OffloadSettings(recent_max_bytes=5000, old_max_bytes=1000), folder)
    check_cut(folder, messages[1], out[1], 5000)
    visible = result(out[1]).text
    assert len(head_of(out[1])) > 4000
    assert "line 1 cut short" in visible
    assert "read from line 1" in visible
    assert record(out[1]).next_line == 1


def test_whole_lines_unless_they_keep_less_than_half() -> None:
    folder = MemoryFolder()
    text = "header\n" + "{" + '"k": 1, ' * 20_000 + "}\n" + "tail\n"
    messages = turn("c1", text)
    out = offload(messages, OffloadSettings(recent_max_bytes=5000, old_max_bytes=1000), folder)
    check_cut(folder, messages[1], out[1], 5000)
    head = head_of(out[1])
    assert head.startswith("header\n{") and len(head) > 4000, "a short first line does not waste the budget"
    assert "line 2 cut short" in result(out[1]).text
    assert record(out[1]).next_line == 2


def test_local_folder_writes_the_file_and_prints_its_absolute_path(tmp_path: Path) -> None:
    folder = LocalFolder(tmp_path)
    text = lines(2000)
    messages = turn("c1", text)
    out = offload(messages, OffloadSettings(recent_max_bytes=4000, old_max_bytes=1000), folder)
    check_cut(folder, messages[1], out[1], 4000)
    path = tmp_path / record(out[1]).file
    assert path.read_text() == text
    assert str(path) in result(out[1]).text and os.path.isabs(folder.location(record(out[1]).file))


def test_errors_keep_their_flags_and_point_at_the_end() -> None:
    folder = MemoryFolder()
    messages = turn("c1", lines(1000) + "Traceback: boom\n", is_error=True, exit_code=2)
    out = offload(messages, OffloadSettings(recent_max_bytes=2000, old_max_bytes=1000), folder)
    res = result(out[1])
    assert (res.is_error, res.exit_code) == (True, 2)
    check_cut(folder, messages[1], out[1], 2000)
    assert "read its last lines too" in res.text


def test_images_are_kept_and_only_text_parts_are_cut() -> None:
    folder = MemoryFolder()
    image = ImageBlock(media_type="image/png", width=10, height=10, data="AAAA")
    content = (TextBlock(text=lines(300)), image, TextBlock(text=lines(300)), TextBlock(text="end"))
    messages = [*turn("c1", content), *turn("c2", "ok")]
    s = OffloadSettings(recent_n=2, recent_max_bytes=4000, old_max_bytes=1000)
    out = offload(messages, s, folder)
    check_cut(folder, messages[1], out[1], 4000)
    parts = result(out[1]).content
    assert isinstance(parts, tuple) and image in parts
    assert parts[0] == content[0] and parts[1] == image  # the first part fits whole
    aged = offload([*out, *turn("c3", "ok"), *turn("c4", "ok")], s, folder)
    check_cut(folder, messages[1], aged[1], 1000)
    assert image in result(aged[1]).content
    assert record(aged[1]).stage == "old"


# --- aging, idempotency, prompt-cache stability -----------------------------------------


def test_aging_cuts_the_head_again_and_keeps_the_original_file() -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=1, recent_max_bytes=8000, old_max_bytes=1500)
    text = lines(2000)
    first = turn("c1", text)
    out1 = offload(first, s, folder)
    rec1 = record(out1[1])
    assert rec1.stage == "recent"
    files = dict(folder.files)
    folder.remove(rec1.file)  # the second cut never needs the original: it cuts the kept head
    out2 = offload([*out1, *turn("c2", "ok")], s, folder)
    assert folder.read(rec1.file) is None, "the truncated text is never saved as if it were the original"
    folder.files.update(files)
    rec2 = record(out2[1])
    assert (rec2.stage, rec2.file, rec2.original_bytes, rec2.original_lines) == (
        "old",
        rec1.file,
        rec1.original_bytes,
        2000,
    )
    check_cut(folder, first[1], out2[1], 1500)
    assert head_of(out1[1]).startswith(head_of(out2[1]))
    assert rec2.next_line == head_of(out2[1]).count("\n") + 1
    assert list(folder.files) == [rec1.file]


def test_offload_is_idempotent() -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=2, recent_max_bytes=4000, old_max_bytes=1000)
    messages = [m for i in range(6) for m in turn(f"c{i}", lines(100 * (i + 1)))]
    once = offload(messages, s, folder)
    writes = dict(folder.mtimes)
    twice = offload(once, s, folder)
    assert all(a is b for a, b in zip(once, twice, strict=True))
    assert folder.mtimes == writes, "nothing is written again"


def test_replay_changes_each_visible_text_at_most_twice() -> None:
    """Results arrive one by one and age; each message's text changes at most twice, and never again later."""
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=3, recent_max_bytes=6000, old_max_bytes=1200)
    sizes = [50, 300, 900, 1500, 700, 100, 2000, 10, 400, 150, 800, 60]
    tools = ["bash", "browser_navigate", "grep", "read_file"]
    live: list[Message] = []
    history: dict[str, list[str]] = {}
    for i, n in enumerate(sizes):
        new = turn(f"c{i}", lines(n), tool=tools[i % len(tools)])
        history[new[1].id] = [result(new[1]).text]
        before = [*live, *new]
        out = offload(before, s, folder)
        for a, b in zip(before, out, strict=True):
            if a is not b:
                assert (a.role, a.id) == ("tool", b.id)
            if b.role == "tool" and history[b.id][-1] != result(b).text:
                history[b.id].append(result(b).text)
        live = out
    for _ in range(len(sizes)):  # more steps with nothing new: no message changes any more
        again = offload(live, s, folder)
        assert all(a is b for a, b in zip(live, again, strict=True))
    changes = {mid: len(texts) - 1 for mid, texts in history.items()}
    assert max(changes.values()) <= 2
    assert changes["t-c6"] == 2, "a big result is cut when seen and again when old"
    assert changes["t-c1"] == 2, "a browser page: head + notice, then the notice alone"
    assert changes["t-c3"] == 1, "a big file read is cut once, when old"
    assert changes["t-c9"] == 1, "a middling result is cut once, when old"
    assert changes["t-c0"] == changes["t-c7"] == 0, "small results are never touched"
    assert sorted(folder.files) == sorted(record(m).file for m in live if m.role == "tool" and record_of(result(m)))


def test_record_round_trips_through_the_native_format() -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=1, recent_max_bytes=3000, old_max_bytes=1000)
    out = offload([*turn("c1", lines(1000)), *turn("c2", lines(1000))], s, folder)
    back = [message_from_dict(orjson.loads(dumps(m))) for m in out]
    assert back == out
    assert result(back[1]).extra[OFFLOAD_KEY] == record(out[1]).to_dict()
    assert OffloadRecord.from_dict(result(back[3]).extra[OFFLOAD_KEY]) == record(out[3])
    again = offload(back, s, folder)
    assert all(a is b for a, b in zip(back, again, strict=True)), "read back from disk, still idempotent"


def test_a_damaged_record_leaves_the_message_alone(caplog: pytest.LogCaptureFixture) -> None:
    bad = ToolResult(call_id="c1", content=lines(1000), extra={OFFLOAD_KEY: {"file": "elsewhere.txt"}})
    messages = [turn("c1", "")[0], Message(role="tool", content=(bad,))]
    with caplog.at_level(logging.WARNING, logger="ctxkeep"):
        out = offload(messages, OffloadSettings(recent_n=0, recent_max_bytes=2000, old_max_bytes=500), MemoryFolder())
    assert out[1] is messages[1]
    assert "'file' must name a file under tool_result/" in caplog.text
    with pytest.raises(ValueError, match="'file' must name"):
        original_file(bad)


def test_a_record_that_no_longer_matches_the_text_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=1, recent_max_bytes=3000, old_max_bytes=1000)
    out = offload(turn("c1", lines(1000)), s, folder)
    edited = Message(
        role="tool",
        id=out[1].id,
        content=(ToolResult(call_id="c1", content="rewritten by someone\n" * 100, extra=result(out[1]).extra),),
    )
    with caplog.at_level(logging.WARNING, logger="ctxkeep"):
        aged = offload([out[0], edited, *turn("c2", "ok")], s, folder)
    assert aged[1] is edited
    assert "no longer matches its offload record" in caplog.text


# --- policies ---------------------------------------------------------------------------


def test_browser_page_saved_on_first_sight_then_only_the_reference() -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=1, recent_max_bytes=5000, old_max_bytes=1000)
    page = "<html>" + "a page of some size " * 60 + "</html>"
    messages = turn("c1", page, tool="browser_navigate")
    out = offload(messages, s, folder)
    assert saved(folder, out[1]) == page
    assert result(out[1]).text.startswith(page + "\n[ctxkeep: this output")
    assert record(out[1]).stage == "recent"
    aged = offload([*out, *turn("c2", "ok")], s, folder)
    visible = result(aged[1]).text
    assert NOTICE.match(visible) and page not in visible
    assert "read it from line 1" in visible and record(aged[1]).kept_bytes == 0
    assert saved(folder, aged[1]) == page
    empty = turn("c3", "", tool="browser_navigate")
    assert offload(empty, s, folder)[1] is empty[1]


def test_browser_page_first_seen_when_old_keeps_only_the_reference() -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=0, recent_max_bytes=5000, old_max_bytes=1000)
    messages = turn("c1", lines(300), tool="playwright_snapshot")
    out = offload(messages, s, folder)
    check_cut(folder, messages[1], out[1], 1000)
    assert record(out[1]).kept_bytes == 0 and record(out[1]).stage == "old"


def test_a_small_browser_page_is_left_as_it_is_once_old() -> None:
    # A page within old_max_bytes costs little: rewriting it would cost every prompt cache more.
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=1, recent_max_bytes=5000, old_max_bytes=1000)
    page = "<html>small page</html>"
    out = offload(turn("c1", page, tool="browser_navigate"), s, folder)
    assert saved(folder, out[1]) == page
    aged = offload([*out, *turn("c2", "ok")], s, folder)
    assert aged[1] is out[1]
    old = OffloadSettings(recent_n=0, recent_max_bytes=5000, old_max_bytes=1000)
    first_seen_old = offload(turn("c3", page, tool="browser_navigate"), old, folder)
    assert result(first_seen_old[1]).text == page


def test_file_reads_are_left_alone_while_recent_and_cut_once_old() -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=1, recent_max_bytes=3000, old_max_bytes=1000)
    messages = turn("c1", lines(5000), tool="read_file")
    out = offload(messages, s, folder)
    assert out[1] is messages[1] and not folder.files, "a recent file read is neither cut nor saved"
    aged = offload([*out, *turn("c2", "ok")], s, folder)
    check_cut(folder, messages[1], aged[1], 1000)
    assert (record(aged[1]).stage, record(aged[1]).policy) == ("old", "file_read")


def test_custom_patterns_choose_the_policy() -> None:
    folder = MemoryFolder()
    s = OffloadSettings(
        recent_n=5,
        recent_max_bytes=3000,
        old_max_bytes=1000,
        policies=(ToolPolicy(kind="browser", patterns=("WEB_*",)), ToolPolicy(kind="file_read", patterns=("show",))),
    )
    messages = [
        *turn("c1", "tiny page", tool="web_fetch"),
        *turn("c2", lines(1000), tool="show"),
        *turn("c3", lines(1000), tool="read_file"),  # no longer a file-read tool with these policies
    ]
    out = offload(messages, s, folder)
    assert record(out[1]).policy == "browser"
    assert out[3] is messages[3]
    assert record(out[5]).policy == "default"


def test_tool_names_given_for_calls_outside_the_slice() -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=1, recent_max_bytes=3000, old_max_bytes=1000)
    slice_ = turn("c1", lines(1000), tool="bash")[1:]  # the call is in an earlier, settled part
    assert record(offload(slice_, s, folder)[0]).policy == "default"
    assert offload(slice_, s, folder, tool_names={"c1": "read_file"})[0] is slice_[0]
    # the given name wins over the call in the messages
    both = turn("c1", lines(1000), tool="bash")
    assert offload(both, s, folder, tool_names={"c1": "cat"})[1] is both[1]


# --- failures ---------------------------------------------------------------------------


class FullDisk(MemoryFolder):
    """A folder whose writes fail, like a full disk."""

    def write(self, name: str, data: bytes) -> None:
        raise StorageError(f"cannot write {name}: the disk is full", path=name, errno=28)


def test_a_failed_write_changes_nothing() -> None:
    messages = [*turn("c1", lines(1000)), *turn("c2", lines(10)), *turn("c3", lines(1000))]
    before = [dumps(m) for m in messages]
    folder = FullDisk()
    with pytest.raises(StorageError, match="disk is full"):
        offload(messages, OffloadSettings(recent_n=1, recent_max_bytes=3000, old_max_bytes=1000), folder)
    assert [dumps(m) for m in messages] == before
    assert not folder.files


def test_bad_settings_are_refused() -> None:
    with pytest.raises(TypeError, match="OffloadSettings"):
        offload([], {"recent_n": 3}, MemoryFolder())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retention_days"):
        cleanup(MemoryFolder(), [], retention_days=0, now=0.0)


# --- references and cleanup -------------------------------------------------------------


def test_referenced_files_reads_records_and_texts() -> None:
    folder = MemoryFolder()
    out = offload(turn("c1", lines(1000)), OffloadSettings(recent_max_bytes=2000, old_max_bytes=1000), folder)
    mentioned = [
        Message.of("user", "compare with /ws/tool_result/mentioned.txt."),
        Message(role="assistant", content=(ToolCall(id="c9", name="cat", arguments='{"p": "tool_result/arg.txt"}'),)),
    ]
    refs = referenced_files([*out, *mentioned])
    assert {record(out[1]).file, "tool_result/mentioned.txt", "tool_result/arg.txt"} <= refs


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_cleanup_respects_references_and_retention(kind: str, tmp_path: Path) -> None:
    folder: MemoryFolder | LocalFolder = MemoryFolder() if kind == "memory" else LocalFolder(tmp_path)
    live = offload(turn("c1", lines(1000)), OffloadSettings(recent_max_bytes=2000, old_max_bytes=1000), folder)
    referenced = record(live[1]).file
    old, mentioned, fresh = (original_name(f"m-{n}", "c") for n in ("old", "mentioned", "fresh"))
    live.append(Message.of("assistant", f"the log is in {mentioned}"))
    for name in (old, mentioned, fresh, "dialog/x.jsonl"):
        folder.write(name, b"x")
    now = 1_000 * DAY
    ages = {referenced: 40, old: 31, mentioned: 90, fresh: 29, "dialog/x.jsonl": 90}
    for name, days in ages.items():
        if isinstance(folder, MemoryFolder):
            folder.mtimes[name] = now - days * DAY
        else:
            os.utime(tmp_path / name, (now - days * DAY, now - days * DAY))
    assert cleanup(folder, live, retention_days=30, now=now) == [old]
    assert folder.read(old) is None
    for name in (referenced, mentioned, fresh, "dialog/x.jsonl"):
        assert folder.read(name) is not None
    assert cleanup(folder, [], retention_days=30, now=now) == sorted([referenced, mentioned])


def test_originals_are_named_by_their_ids_in_the_shape_cleanup_knows() -> None:
    name = original_name("t-c1", "c1")
    assert name == f"tool_result/{make_id('t-c1', 'c1')}.txt" and is_original(name)
    out = offload(turn("c1", lines(1000)), OffloadSettings(recent_max_bytes=2000, old_max_bytes=1000), MemoryFolder())
    assert record(out[1]).file == name
    for other in ("tool_result/notes.txt", name.upper(), f"{name}.bak", f"dialog/{name.split('/')[1]}", name[:-4]):
        assert not is_original(other), other


# --- properties -------------------------------------------------------------------------

texts = st.text(
    alphabet=st.one_of(
        st.sampled_from("\n\n\nab "),
        st.characters(codec="utf-8"),
        st.sampled_from("中文字🙂é"),
    ),
    max_size=3000,
)


@settings(max_examples=200, deadline=None)
@given(text=texts, old=st.integers(1, 2500), extra=st.integers(0, 3000), aged=st.booleans(), browser=st.booleans())
def test_head_and_file_give_back_the_original(text: str, old: int, extra: int, aged: bool, browser: bool) -> None:
    folder = MemoryFolder()
    s = OffloadSettings(recent_n=1, recent_max_bytes=old + extra, old_max_bytes=old)
    messages = turn("c1", text, tool="browser" if browser else "bash")
    out = offload(messages, s, folder)
    steps = [out]
    if aged:
        steps.append(offload([*out, *turn("c2", "ok")], s, folder))
    size = len(text.encode("utf-8", "surrogatepass"))
    for step, limit in zip(steps, (old + extra, old), strict=False):
        msg = step[1]
        if record_of(result(msg)) is None:
            assert msg is messages[1]
            assert size <= limit and not (browser and text)
            continue
        check_cut(folder, messages[1], msg, limit)
        data = text.encode("utf-8", "surrogatepass")
        assert data.startswith(head_of(msg).encode("utf-8", "surrogatepass"))
        assert folder.read(record(msg).file) == data
    final = steps[-1]
    assert all(a is b for a, b in zip(final, offload(final, s, folder), strict=True))


# --- real transcripts -------------------------------------------------------------------


def tool_messages(messages: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.role == "tool"]


@pytest.mark.parametrize("path", raw_params())
def test_real_transcripts(path: Path) -> None:
    """Every conversation offloaded with small limits: each cut's file holds exactly the original text."""
    transcript = load(path)
    s = OffloadSettings(recent_n=2, recent_max_bytes=2000, old_max_bytes=600)
    everything_recent = OffloadSettings(recent_n=10**9, recent_max_bytes=2000, old_max_bytes=600)
    cut = 0
    for conv in transcript.conversations:
        messages = list(conv.messages)
        names = {c.id: c.name for m in messages for c in m.tool_calls}
        recent = tool_messages(messages)[-2:]
        folder = MemoryFolder()
        # First every result as recent (as when each arrived), then aged: the two cuts of a life.
        young = offload(messages, everything_recent, folder)
        out = offload(young, s, folder)
        assert len(out) == len(messages)
        for i in tool_messages(messages):
            limit = 2000 if i in recent else 600
            if out[i] is messages[i]:
                file_read = s.policy_for(names.get(result(messages[i]).call_id)) == "file_read"
                assert (file_read and i in recent) or len(
                    result(messages[i]).text.encode("utf-8", "surrogatepass")
                ) <= limit
                continue
            cut += 1
            check_cut(folder, messages[i], out[i], limit)
            assert (result(out[i]).is_error, result(out[i]).exit_code) == (
                result(messages[i]).is_error,
                result(messages[i]).exit_code,
            )
        again = offload(out, s, folder)
        assert all(a is b for a, b in zip(out, again, strict=True))
        assert referenced_files(out) >= {record(m).file for m in out if m.role == "tool" and record_of(result(m))}
    if any(len(result(m).text) > 2000 for m in transcript.messages if m.role == "tool"):
        assert cut
