"""Hostile but realistic input: each case a user met, each with the answer a careful user expects.

Lone surrogates (what Node's JSON.stringify writes), values that are not ctxkeep's to hold, reused
message and call ids, and credentials in a base URL. The CLI cases run the installed console
script as a subprocess, with a timeout.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable
from dataclasses import replace
from pathlib import Path

import pytest
from tests.conftest import ROOT

from ctxkeep.aging import offload_recent
from ctxkeep.async_session import AsyncSession
from ctxkeep.codec import dumps, message_from_dict
from ctxkeep.errors import MessageError, ProviderError, WorkspaceError
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.formats import load
from ctxkeep.formats.source import Source
from ctxkeep.live import Live, add, check
from ctxkeep.messages import Message, ToolCall, ToolResult, make_id
from ctxkeep.offload import original_file
from ctxkeep.providers.failures import redact
from ctxkeep.providers.openai import OpenAIModel
from ctxkeep.providers.sdk import Connection
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.tokens import get_counter
from test_engine import NOW, turn
from test_providers import KEY, REQUEST, FakeAPI, Step, openai_success

COUNTER = get_counter("o200k_base")
SETTINGS = EngineSettings(
    compact=CompactSettings(max_input_length=2_000, compact_ratio=0.7, reserve_ratio=0.2),
    offload=OffloadSettings(recent_n=1, recent_max_bytes=1_500, old_max_bytes=300),
)
EXAMPLE = ROOT / "examples" / "claude_code_session.jsonl"
CLI = shutil.which("ctxkeep", path=str(Path(sys.executable).parent))
TIMEOUT = 120


def ctxkeep(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it."""
    assert CLI is not None, "the ctxkeep console script is not installed next to this Python"
    return subprocess.run([CLI, *argv], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)


# ── 12. lone surrogates ──────────────────────────────────────────────────────────────────────────


def with_lone_surrogate(tmp_path: Path) -> tuple[Path, int]:
    """The example transcript with a lone high surrogate escaped in one user text, as Node writes it."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if '"type": "user"' in line and "Please fix it" in line)
    lines[at] = lines[at].replace("Please fix it", "Please fix it \\ud83d", 1)
    path = tmp_path / "node.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, at + 1


@pytest.mark.parametrize("lenient", [False, True])
def test_a_lone_surrogate_is_replaced_and_noted_not_refused(tmp_path: Path, lenient: bool) -> None:
    path, line = with_lone_surrogate(tmp_path)
    clean = load(EXAMPLE)
    transcript = load(path, lenient=lenient)
    assert len(transcript.messages) == len(clean.messages)  # nothing dropped, even when lenient
    texts = [m.text for m in transcript.messages]
    assert any("Please fix it \ufffd" in t for t in texts)
    assert any("surrogate" in note and f"{line}" in note and "U+FFFD" in note for note in transcript.notes)


def test_surrogates_in_a_json_document_and_pairs_and_escaped_backslashes() -> None:
    text = '{"a": "x\\udc00y", "pair": "\\ud83d\\ude00", "literal": "\\\\ud83d", "b": "\\ud83dz"}'
    source = Source.from_bytes(("\n" + text).encode())
    assert source.document() == {"a": "x\ufffdy", "pair": "\U0001f600", "literal": "\\ud83d", "b": "\ufffdz"}
    assert len(source.notes) == 1 and "1 line(s) (2)" in source.notes[0]
    records = Source.from_bytes(f"{text}\n{text}\n".encode())
    assert [n for n, _ in records.records()] == [1, 2]
    assert len(records.notes) == 1 and "2 line(s) (1, 2)" in records.notes[0]


def test_a_bad_escape_is_still_invalid_json() -> None:
    source = Source.from_bytes(b'{"a": "\\ud83d\n', lenient=True)
    assert list(source.records()) == [] and "skipped line 1" in source.notes[-1]


def test_session_add_keeps_a_message_with_lone_surrogates(tmp_path: Path) -> None:
    call = ToolCall(id="c\ud800", name="bash", arguments='{"command": "echo \udfff"}')
    batch = [
        Message.of("user", "a\ud83db", id="u1", extra={"k\udc00": ["v\ud83d"]}),
        Message(role="assistant", content=(call,), id="a1"),
        Message(role="tool", content=(ToolResult(call_id="c\ud800", content="\ud83d\ude00 ok"),), id="r1"),
    ]
    with Session.open(tmp_path, settings=SETTINGS) as s:
        s.add(batch)
        kept = s.messages
    assert kept[0].text == "a\ufffdb" and dict(kept[0].extra) == {"k\ufffd": ["v\ufffd"]}
    assert kept[1].tool_calls[0].id == "c\ufffd" and kept[2].content[0].call_id == "c\ufffd"  # type: ignore[union-attr]
    assert kept[2].tool_result is not None and kept[2].tool_result.text == "\U0001f600 ok"  # a pair is joined
    with Session.open(tmp_path, settings=SETTINGS) as s:
        assert s.messages == kept


def test_the_codec_and_the_live_context_never_raise_unicode_errors() -> None:
    msg = Message.of("user", "x\ud83d", id="m")
    assert message_from_dict(json.loads(dumps(msg))).text == "x\ufffd"
    live = add(Live(), [msg], COUNTER)
    assert live.messages[0].text == "x\ufffd" and live.total == COUNTER.count_each(live.messages)[0]


# ── 13. errors that are ctxkeep's ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("bad", [None, "hello", 5, {"role": "user"}, [Message.of("user", "ok"), None]])
def test_add_refuses_what_is_not_a_message(bad: object) -> None:
    store = MemoryFolder()
    with Session(store) as s:
        before = dict(store.files)
        with pytest.raises(MessageError):
            s.add(bad)  # type: ignore[arg-type]
        assert store.files == before and s.messages == ()


@pytest.mark.parametrize("value", [{1, 2}, object(), b"bytes", 2**70, {1: "int key"}])
def test_a_value_json_cannot_hold_is_refused_before_anything_is_written(value: object) -> None:
    store = MemoryFolder()
    with Session(store) as s:
        before = dict(store.files)
        with pytest.raises(MessageError, match="extra"):
            s.add([Message.of("user", "ok", id="fine"), Message.of("user", "x", id="bad", extra={"v": value})])
        assert store.files == before and s.messages == ()
        s.add(Message.of("user", "ok", id="fine"))  # the session goes on
        assert [m.id for m in s.messages] == ["fine"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1.0, {"deep": float("-inf")}]])
def test_nan_and_infinity_are_refused_not_read_back_as_null(tmp_path: Path, value: object) -> None:
    """orjson writes them as null: the message would come back changed after a reopen."""
    with Session.open(tmp_path) as s:
        with pytest.raises(MessageError, match="NaN or infinity"):
            s.add([Message.of("user", "ok", id="fine"), Message.of("user", "x", id="bad", extra={"v": value})])
        with pytest.raises(MessageError, match="NaN or infinity"):
            s.sync([{"role": "user", "content": "x", "extra": {"v": value}}])
        s.add(Message.of("user", "ok", id="fine", extra={"v": None, "w": 1.5}))  # null and numbers are fine
    with Session.open(tmp_path) as s:
        assert [(m.id, dict(m.extra)) for m in s.messages] == [("fine", {"v": None, "w": 1.5})]


def _nested(depth: int, *, as_list: bool) -> object:
    value: object = {}
    for _ in range(depth):
        value = [value] if as_list else {"a": value}
    return value


@pytest.mark.parametrize("depth", [300, 100_000])
@pytest.mark.parametrize("as_list", [False, True])
def test_a_value_nested_too_deep_is_a_message_error(tmp_path: Path, depth: int, as_list: bool) -> None:
    """Never a RecursionError out of add or sync, and nothing written."""
    value = _nested(depth, as_list=as_list)
    with Session.open(tmp_path) as s:
        with pytest.raises(MessageError, match=r"nested deeper|Recursion limit"):
            s.add(Message.of("user", "x", extra={"v": value}))
        with pytest.raises(MessageError, match=r"nested deeper|Recursion limit"):
            s.sync([{"role": "user", "content": "x", "extra": {"v": value}}])
        s.add(Message.of("user", "ok", id="fine"))
    with Session.open(tmp_path) as s:
        assert [m.id for m in s.messages] == ["fine"]


@pytest.mark.parametrize("timeout", [None, "10", -1, float("nan")])
def test_a_bad_lock_timeout_is_a_ctxkeep_error(tmp_path: Path, timeout: object) -> None:
    with pytest.raises(WorkspaceError, match="lock_timeout"):
        Session.open(tmp_path, lock_timeout=timeout)
    with Session.open(tmp_path, lock_timeout=0):  # the lock was not left held
        pass


@pytest.mark.parametrize(
    "field, value",
    [
        ("summary", 5),
        ("summary_body", ["x"]),
        ("archive", []),
        ("archive", {"dialog/2026-12-03.jsonl": 3}),
        ("archive", {"dialog/2026-12-03.jsonl": {"bytes": -1, "lines": 0}}),
        ("pinned", 5),
        ("pinned", [1]),
        ("generation", "x"),
        ("generation", True),
        ("failed_at", "soon"),
        ("compactions", [1]),
        ("last_record", 5),
        ("archive", {"../evil.jsonl": {"bytes": 0, "lines": 0}}),
        ("archive", {"dialog/../../evil.jsonl": {"bytes": 0, "lines": 0}}),
        ("archive", {"/etc/passwd": {"bytes": 0, "lines": 0}}),
        ("archive", {"state.json": {"bytes": 0, "lines": 0}}),
    ],
)
def test_a_damaged_state_is_a_workspace_error(tmp_path: Path, field: str, value: object) -> None:
    with Session.open(tmp_path) as s:
        s.add(Message.of("user", "hello", id="u"))
    state = json.loads((tmp_path / "state.json").read_text())
    state[field] = value
    (tmp_path / "state.json").write_text(json.dumps(state))
    with pytest.raises(WorkspaceError, match=r"state\.json is damaged"):
        Session.open(tmp_path)


@pytest.mark.parametrize("name", ["../evil.jsonl", "dialog/../../x.jsonl", "/etc/passwd", "", "dialog//x"])
def test_a_file_name_leaving_the_workspace_is_a_workspace_error(tmp_path: Path, name: str) -> None:
    """`LocalFolder` refuses it with a ctxkeep error (a `ValueError` before), and reads or makes nothing."""
    folder = LocalFolder(tmp_path / "ws")
    with pytest.raises(WorkspaceError, match="stay inside"):
        folder.read_archive(name)
    with pytest.raises(WorkspaceError, match="stay inside"):
        folder.append_archive(name, b"x\n")
    assert not (tmp_path / "evil.jsonl").exists() and not (tmp_path / "x.jsonl").exists()


def test_a_closed_session_refuses_every_call_and_writes_nothing(tmp_path: Path) -> None:
    """After `close` the lock is gone: a call that went on would write past another process's lock."""
    s = Session.open(tmp_path, settings=SETTINGS)
    s.add(turn(0))
    s.close()
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    calls = {
        "add": lambda: s.add(turn(1)),
        "sync": lambda: s.sync([{"role": "user", "content": "more"}]),
        "prepare": s.prepare,
        "compact": s.compact,
        "pin": lambda: s.pin(s.messages[0].id),
        "unpin": lambda: s.unpin(s.messages[0].id),
        "history": s.history,
    }
    for name, call in calls.items():
        with pytest.raises(WorkspaceError, match="closed"):
            call()
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before, name
    s.close()  # closing again is harmless


def test_an_async_call_racing_close_is_a_workspace_error(tmp_path: Path) -> None:
    """`prepare` queued behind `close` (or made after it) raised the executor's RuntimeError before."""

    async def main() -> list[object]:
        session = await AsyncSession.open(tmp_path, settings=SETTINGS)
        await session.add(turn(0))
        raced = await asyncio.gather(session.close(), session.prepare(), return_exceptions=True)
        after = [await _outcome(call) for call in (session.prepare(), session.add(turn(1)), session.history())]
        return [*raced, *after]

    outcomes = asyncio.run(asyncio.wait_for(main(), 120))
    assert outcomes[0] is None
    assert all(isinstance(o, WorkspaceError) and "closed" in str(o) for o in outcomes[1:]), outcomes


async def _outcome(call: Awaitable[object]) -> object:
    try:
        return await call
    except Exception as exc:  # the test looks at which exception it was
        return exc


def test_a_prepare_in_another_thread_racing_close_never_raises_a_foreign_error(tmp_path: Path) -> None:
    """A summary written ahead (background) has a thread pool of its own, which `close` shuts down."""
    settings = replace(SETTINGS, compact=replace(SETTINGS.compact, background=True))
    for attempt in range(5):
        s = Session.open(tmp_path / str(attempt), settings=settings)
        errors: list[BaseException] = []

        def steps(session: Session = s, errors: list[BaseException] = errors) -> None:
            try:
                for i in range(200):
                    session.add(turn(i))
                    session.prepare(now=NOW)
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=steps)
        worker.start()
        time.sleep(0.05 * attempt)
        s.close()
        worker.join(60)
        assert not worker.is_alive()
        assert all(isinstance(e, WorkspaceError) for e in errors), errors
        with Session.open(tmp_path / str(attempt)):  # and the workspace opens again
            pass


def test_deeply_nested_argument_text_never_stops_compaction(tmp_path: Path) -> None:
    """Arguments are the model's JSON text: nested 100,000 deep, Python's json raised RecursionError in the
    summarizer, and every compaction of the session failed."""
    deep = "[" * 100_000 + "]" * 100_000
    call = Message(id="a", role="assistant", content=(ToolCall(id="deep", name="f", arguments=deep),))
    assert call.tool_calls[0].input() == deep and call.tool_calls[0].input_object() == {"arguments": deep}
    with Session.open(tmp_path, settings=SETTINGS) as s:
        s.add([Message.of("user", "go", id="u"), call])
        s.add(Message(id="r", role="tool", content=(ToolResult(call_id="deep", content="ok"),)))
        for i in range(1, 6):
            s.add(turn(i))
        step = s.compact(now=NOW)
    assert step.failure is None and step.compaction is not None


# ── 14. one message id, one original file ─────────────────────────────────────────────────────────


def test_a_message_id_already_live_is_refused(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        s.add(turn(0))
        size = (tmp_path / "live" / "00000000.jsonl").stat().st_size
        with pytest.raises(MessageError, match=r"'u0'.*already live"):
            s.add(Message.of("user", "again", id="u0"))
        with pytest.raises(MessageError, match=r"'x'.*earlier in this batch"):
            s.add([Message.of("user", "one", id="x"), Message.of("user", "two", id="x")])
        assert (tmp_path / "live" / "00000000.jsonl").stat().st_size == size
        assert [m.id for m in s.messages] == ["u0", "a0", "r0", "d0"]


def test_a_message_id_already_archived_is_refused_now_and_after_reopening(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        for i in range(12):
            s.add(turn(i))
            s.prepare("be brief", now=NOW)
        assert "u0" not in {m.id for m in s.messages}  # compacted into the archive
        with pytest.raises(MessageError, match=r"'u0'.*archived"):
            s.add(Message.of("user", "again", id="u0"))
    with Session.open(tmp_path, settings=SETTINGS) as s:
        with pytest.raises(MessageError, match=r"'u0'.*archived"):
            s.add(Message.of("user", "again", id="u0"))
        s.add(Message.of("user", "a new one", id="u-new"))


def big_result(message_id: str, call_id: str, text: str) -> list[Message]:
    call = ToolCall(id=call_id, name="bash", arguments="{}")
    return [
        Message(role="assistant", content=(call,), id=f"call-of-{message_id}"),
        Message(role="tool", content=(ToolResult(call_id=call_id, content=text * 2_000),), id=message_id),
    ]


def test_two_offloaded_results_never_share_a_file() -> None:
    # Ids chosen so that the old file name (ids joined by a separator) is the same for both.
    store = MemoryFolder()
    with Session(store, settings=SETTINGS) as s:
        s.add(big_result("m", "c1\x1fc2", "first "))
        s.prepare(None, now=NOW)
        s.add(big_result("m\x1fc1", "c2", "second "))
        s.prepare(None, now=NOW)
        files = [original_file(m.tool_result) for m in s.messages if m.tool_result is not None]
    assert len(files) == 2 and None not in files and files[0] != files[1]
    assert [bytes(store.files[f]).split()[0] for f in files if f] == [b"first", b"second"]


def test_make_id_is_one_to_one_whatever_the_parts_hold() -> None:
    assert make_id("a\x1fb", "c") != make_id("a", "b\x1fc")
    assert make_id("a\x1e", "b") != make_id("a", "\x1eb")
    ordinary = make_id("msg-1", "call-1")
    assert ordinary == "2dd24ce2-2738-59e3-8190-7cd278e3d7bd"  # the id it always had


# ── 15. a call id is live once ────────────────────────────────────────────────────────────────────


def test_a_call_id_cannot_come_back_once_its_result_settled() -> None:
    offload = OffloadSettings(recent_n=1)
    live = add(Live(), turn(0), COUNTER)
    live = add(live, turn(1), COUNTER)
    live = offload_recent(live, offload, MemoryFolder(), COUNTER)
    assert "c0" not in live.result_tools  # settled: no longer among the results that may change
    again = Message(role="assistant", content=(ToolCall(id="c0", name="bash", arguments="{}"),), id="a-again")
    with pytest.raises(MessageError, match=r"'c0'.*already live"):
        add(live, [again], COUNTER)


def test_a_session_refuses_a_settled_call_id_and_still_reopens(tmp_path: Path) -> None:
    big = EngineSettings(offload=OffloadSettings(recent_n=1))
    with Session.open(tmp_path, settings=big) as s:
        for i in range(3):
            s.add(turn(i))
            s.prepare(None, now=NOW)
        again = Message(role="assistant", content=(ToolCall(id="c0", name="bash", arguments="{}"),), id="a-again")
        with pytest.raises(MessageError, match=r"'c0'.*already live"):
            s.add(again)
    with Session.open(tmp_path, settings=big) as s:
        assert len(s.messages) == 12


def test_checks_stay_right_for_an_older_live_value() -> None:
    # Live values are immutable: extending an older one must not see ids only a newer one holds.
    base = add(Live(), turn(0), COUNTER)
    newer = add(base, turn(1), COUNTER)
    branch = add(base, turn(1), COUNTER)  # the same ids again, on the older value: allowed
    assert [m.id for m in branch.messages] == [m.id for m in newer.messages]
    with pytest.raises(MessageError, match="'u1'"):
        add(newer, [Message.of("user", "x", id="u1")], COUNTER)
    with pytest.raises(MessageError, match="'u1'"):
        add(branch, [Message.of("user", "x", id="u1")], COUNTER)


def test_what_check_found_is_used_only_for_its_own_value_and_batch() -> None:
    # `Session` checks a batch before offloading it and hands the pairing to `add`: given for another value, or
    # with a batch that pairs otherwise, it is ignored and the batch checked again.
    base = add(Live(), turn(0), COUNTER)
    call = Message(role="assistant", content=(ToolCall(id="k1", name="bash"),), id="a-k1")
    result = Message(role="tool", content=(ToolResult(call_id="k1", content="out"),), id="r-k1")
    checked = check(base, [call, result])
    cut = replace(result, content=(ToolResult(call_id="k1", content="[cut]"),))
    assert checked.holds(base, [call, cut])  # an offloaded output pairs as before
    assert [m.id for m in add(base, [call, cut], COUNTER, checked=checked).messages][-2:] == ["a-k1", "r-k1"]
    orphan = replace(result, content=(ToolResult(call_id="k2", content="out"),))
    assert not checked.holds(base, [call, orphan])
    with pytest.raises(MessageError, match="'k2'"):
        add(base, [call, orphan], COUNTER, checked=checked)
    newer = add(base, [call, result], COUNTER)
    assert not checked.holds(newer, [call, result])
    with pytest.raises(MessageError, match="already live"):
        add(newer, [call, result], COUNTER, checked=checked)


# ── 16. credentials in a base URL ────────────────────────────────────────────────────────────────


def test_redact_hides_userinfo_and_any_case_of_the_key() -> None:
    text = f"at http://bob:hunter22@h:8/v1 and https://tok@x.io, key {KEY.upper()} {KEY.lower()} {KEY}"
    out = redact(text, KEY)
    assert "hunter22" not in out and "bob" not in out and "tok@" not in out
    assert "http://***@h:8/v1" in out and "https://***@x.io" in out
    assert KEY.upper() not in out and KEY.lower() not in out and KEY not in out
    assert redact("mail me at a@b.c, see http://h/x@y", None) == "mail me at a@b.c, see http://h/x@y"


def test_a_provider_never_shows_the_credentials_of_its_base_url() -> None:
    with FakeAPI(openai_success) as api:
        url = api.url.replace("http://", "http://bob:hunter22@") + "/v1"
        env = {"CTXKEEP_TEST_KEY": KEY}
        model = OpenAIModel("gpt-test", Connection(base_url=url, api_key_env="CTXKEEP_TEST_KEY"), environ=env)
        assert "hunter22" not in repr(model) and "hunter22" not in str(model.endpoint)
        echo = f"bad key {KEY.upper()} for bob:hunter22 at {url}"
        api.script = [Step(status=401, body={"error": {"message": echo}})]
        with pytest.raises(ProviderError) as caught:
            model.complete(REQUEST)
    texts = [str(caught.value), repr(caught.value), repr(model), str(model.endpoint)]
    for text in texts:
        assert "hunter22" not in text and KEY.upper() not in text and KEY not in text
    assert "http://***@127.0.0.1" in str(caught.value)


def test_a_base_url_without_a_scheme_is_refused_without_being_echoed() -> None:
    for url in ("bob:hunter22@127.0.0.1:8080/v1", "ftp://bob:hunter22@h/v1"):
        with pytest.raises(ValueError, match="http:// or https://") as caught:
            Connection(base_url=url)
        assert "hunter22" not in str(caught.value)


def test_compact_with_credentials_in_base_url_prints_and_saves_none(tmp_path: Path) -> None:
    with FakeAPI(openai_success) as api:
        api.script = [Step(status=401, body={"error": {"message": "no: bob:hunter22"}}) for _ in range(200)]
        url = api.url.replace("http://", "http://bob:hunter22@") + "/v1"
        done = ctxkeep(
            "compact",
            str(ROOT / "examples" / "agent_session.jsonl"),
            "-o",
            str(tmp_path / "ws"),
            "--window",
            "16000",
            "--model",
            "openai:m",
            "--base-url",
            url,
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr
    written = [p.read_text(errors="replace") for p in (tmp_path / "ws").rglob("*") if p.is_file()]
    assert any("HTTP 401" in text for text in written)  # the failures were recorded ...
    for text in [done.stdout, done.stderr, *written]:
        assert "hunter22" not in text  # ... without the password


def test_inspect_reads_a_node_transcript(tmp_path: Path) -> None:
    path, _ = with_lone_surrogate(tmp_path)
    done = ctxkeep("inspect", str(path), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["messages"] == len(load(EXAMPLE).messages)
    assert any("surrogate" in note for note in report["notes"])
