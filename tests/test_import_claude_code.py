"""Claude Code session JSONL: real sessions counted independently, and hand-built trees."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RAW, raw_files, raw_params

from ctxkeep import formats
from ctxkeep.errors import FormatError
from ctxkeep.formats import claude_code
from ctxkeep.formats.source import Conversation, Source
from ctxkeep.messages import ImageBlock, Message, ThinkingBlock, ToolCall
from ctxkeep.pairing import validate

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


# --- real sessions -------------------------------------------------------------------


def raw_counts(path: Path) -> dict[bool, tuple[int, int]]:
    """{is_sidechain: (distinct tool_use ids, tool_result blocks)} straight from the file.

    The rule: every user/assistant entry counts, main and sidechain entries apart. That is
    right for the shared files because none has a rewound branch (the importer says so:
    the test checks it notes no left-out branch).
    """
    calls: dict[bool, set[str]] = {False: set(), True: set()}
    results = {False: 0, True: 0}
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        entry = json.loads(line)
        content = (entry.get("message") or {}).get("content")
        if entry.get("type") not in ("user", "assistant") or not isinstance(content, list):
            continue
        side = bool(entry.get("isSidechain"))
        for block in content:
            if block.get("type") == "tool_use":
                calls[side].add(block["id"])
            elif block.get("type") == "tool_result":
                results[side] += 1
    return {side: (len(calls[side]), results[side]) for side in (False, True)}


def imported_counts(conversations: list[Conversation]) -> dict[bool, tuple[int, int]]:
    counts = {False: [0, 0], True: [0, 0]}
    for conv in conversations:
        side = conv.title.startswith(("sidechain", "subagent"))
        for msg in conv.messages:
            counts[side][0] += len(msg.tool_calls)
            counts[side][1] += msg.tool_result is not None
    return {side: (c[0], c[1]) for side, c in counts.items()}


@pytest.mark.parametrize("path", raw_params("claude_code"))
def test_real_session(path: Path) -> None:
    source = Source.from_path(path)
    assert claude_code.sniff(source)
    conversations = claude_code.parse(source)

    assert imported_counts(conversations) == raw_counts(path)
    for conv in conversations:
        assert conv.messages, conv.title
        assert validate(conv.messages) == [], conv.title
    # no file of the shared set has a rewound branch or an unpaired call or result
    assert not [n for n in source.notes if "branches" in n or "no result" in n or "no call" in n]
    if "_subagent_" in path.name:
        assert [c.title.split()[0] for c in conversations] == ["subagent"]

    again = claude_code.parse(Source.from_path(path))
    assert [(c.id, [m.id for m in c.messages]) for c in again] == [
        (c.id, [m.id for m in c.messages]) for c in conversations
    ]


def other_format_params() -> list[object]:
    """The shared raw files of every other format (skipped when the folder is absent)."""
    files = sorted(set(raw_files()) - set(raw_files("claude_code")))
    return [pytest.param(p, id=p.name) for p in files] or raw_params()


@pytest.mark.parametrize("path", other_format_params())
def test_sniff_rejects_other_formats(path: Path) -> None:
    assert not claude_code.sniff(Source.from_path(path))


# --- hand-built sessions -------------------------------------------------------------


def entry(kind: str, uuid: str, parent: str | None, content: Any, **fields: Any) -> dict[str, Any]:
    """A Claude Code entry; `mid` makes an assistant entry part of that API response."""
    message: dict[str, Any] = {"role": kind, "content": content}
    if "mid" in fields:
        message["id"] = fields.pop("mid")
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": kind,
        "uuid": uuid,
        "sessionId": "sess",
        "timestamp": "2026-01-02T03:04:05.678Z",
        "message": message,
        **fields,
    }


def call(cid: str, name: str = "Bash") -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": name, "input": {"command": f"run {cid}"}}


def result(cid: str, text: str = "ok", **more: Any) -> list[dict[str, Any]]:
    return [{"type": "tool_result", "tool_use_id": cid, "content": text, **more}]


def text(t: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": t}]


def progress(uuid: str, parent: str) -> dict[str, Any]:
    return {
        "type": "progress",
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "sess",
        "data": {"type": "hook_progress"},
    }


def load(*entries: Any, lenient: bool = False) -> tuple[list[Conversation], list[str]]:
    lines = [e if isinstance(e, str) else json.dumps(e) for e in entries]
    source = Source.from_bytes("\n".join(lines).encode(), path="session.jsonl", lenient=lenient)
    return claude_code.parse(source), source.notes


def shape(messages: tuple[Message, ...]) -> list[str]:
    """Each message as role plus its call ids / result id / text, for readable asserts."""
    out = []
    for m in messages:
        if m.tool_result is not None:
            out.append(f"tool {m.tool_result.call_id}")
        elif m.tool_calls:
            out.append(f"{m.role} " + ",".join(c.id for c in m.tool_calls))
        else:
            out.append(f"{m.role} {m.text}")
    return out


def test_parallel_calls_stored_as_a_chain_with_results_on_side_branches() -> None:
    # Claude Code 2.1: each call its own entry, chained; each result hangs off its call's entry
    convs, notes = load(
        entry("user", "u1", None, "list and count"),
        entry("assistant", "a1", "u1", [{"type": "thinking", "thinking": "both", "signature": "sig"}], mid="m1"),
        entry("assistant", "a2", "a1", [call("t1")], mid="m1"),
        entry("assistant", "a3", "a2", [call("t2")], mid="m1"),
        progress("p1", "a3"),
        entry("user", "r1", "a2", result("t1")),
        entry("assistant", "a4", "p1", [call("t3")], mid="m1"),  # a late piece, after a hook ran
        entry("user", "r3", "a4", result("t3")),
        entry("user", "r2", "a3", result("t2")),
        entry("assistant", "a5", "r2", text("done"), mid="m2"),
    )
    (conv,) = convs
    assert shape(conv.messages) == [
        "user list and count",
        "assistant t1,t2,t3",
        "tool t1",
        "tool t2",
        "tool t3",
        "assistant done",
    ]
    assert validate(conv.messages) == [] and notes == []
    first = conv.messages[1]
    assert isinstance(first.content[0], ThinkingBlock) and first.content[0].signature == "sig"
    assert first.id == "a1" and first.extra["claude_code"]["entries"] == ["a1", "a2", "a3", "a4"]
    assert json.loads(first.tool_calls[0].arguments) == {"command": "run t1"}
    assert conv.messages[0].timestamp is not None and conv.messages[0].timestamp.utcoffset() is not None


def test_parallel_calls_stored_as_siblings_under_one_parent() -> None:
    convs, notes = load(
        entry("user", "u1", None, "go"),
        entry("assistant", "a1", "u1", [call("t1")], mid="m1"),
        entry("assistant", "a2", "u1", [call("t2")], mid="m1"),
        entry("user", "r2", "a2", result("t2")),
        entry("user", "r1", "a1", result("t1")),
        entry("assistant", "a3", "r1", text("both ran"), mid="m2"),
    )
    assert shape(convs[0].messages) == ["user go", "assistant t1,t2", "tool t1", "tool t2", "assistant both ran"]
    assert notes == []


def test_rewind_keeps_the_newest_branch() -> None:
    convs, notes = load(
        entry("user", "u1", None, "first"),
        entry("assistant", "a1", "u1", text("one"), mid="m1"),
        entry("user", "u2", "a1", "old question"),
        entry("assistant", "a2", "u2", [call("t1")], mid="m2"),
        entry("user", "r1", "a2", result("t1")),
        entry("user", "u2b", "a1", "new question"),  # the user rewound to after "one"
        entry("assistant", "a2b", "u2b", text("new answer"), mid="m3"),
    )
    assert shape(convs[0].messages) == ["user first", "assistant one", "user new question", "assistant new answer"]
    assert notes == [
        "the main conversation: 3 user/assistant entries on other (rewound or abandoned) branches were not imported"
    ]


def test_sidechain_becomes_its_own_conversation() -> None:
    side = {"isSidechain": True}
    convs, _ = load(
        {"type": "summary", "summary": "Fix the build", "leafUuid": "a2"},
        entry("user", "u1", None, "delegate"),
        entry("assistant", "a1", "u1", [call("task", "Task")], mid="m1"),
        entry("user", "s1", None, "subtask prompt", **side),
        entry("assistant", "s2", "s1", [call("t9", "Read")], mid="m9", **side),
        entry("user", "s3", "s2", result("t9"), **side),
        entry("assistant", "s4", "s3", text("sub done"), mid="m10", **side),
        entry("user", "r1", "a1", result("task", "sub done")),
        entry("assistant", "a2", "r1", text("all done"), mid="m2"),
    )
    main, sub = convs
    assert main.title == "Fix the build" and main.id == "sess"
    assert shape(main.messages) == ["user delegate", "assistant task", "tool task", "assistant all done"]
    assert sub.title == "sidechain 1" and sub.id == "sess:sidechain-s1"
    assert shape(sub.messages) == ["user subtask prompt", "assistant t9", "tool t9", "assistant sub done"]


def test_subagent_file_is_titled_by_its_agent() -> None:
    agent = {"isSidechain": True, "agentId": "a485154"}
    convs, _ = load(
        entry("user", "s1", None, "look around", **agent),
        entry("assistant", "s2", "s1", text("looked"), mid="m1", **agent),
    )
    assert [(c.title, c.id) for c in convs] == [("subagent a485154", "sess:agent-a485154")]


def test_compaction_continues_the_conversation_with_the_summary_as_user_text() -> None:
    convs, notes = load(
        entry("user", "u1", None, "long task"),
        entry("assistant", "a1", "u1", text("working"), mid="m1"),
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": "b1",
            "parentUuid": None,
            "logicalParentUuid": "gone",
            "sessionId": "sess",
            "isSidechain": False,
            "content": "Conversation compacted",
        },
        entry("user", "c1", "b1", "This session is being continued ... summary", isCompactSummary=True),
        entry("assistant", "a2", "c1", text("continuing"), mid="m2"),
    )
    msgs = convs[0].messages
    assert shape(msgs) == [
        "user long task",
        "assistant working",
        "user This session is being continued ... summary",
        "assistant continuing",
    ]
    assert msgs[2].extra["claude_code"] == {"isCompactSummary": True}
    assert len(notes) == 1 and "not in the file" in notes[0]


def test_results_keep_errors_exit_codes_and_images() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
    convs, _ = load(
        entry("user", "u1", None, [{"type": "text", "text": "see"}, image]),
        entry("assistant", "a1", "u1", [call("t1"), call("t2", "BashOutput"), call("t3", "Read")], mid="m1"),
        entry("user", "r1", "a1", result("t1", "Exit code 2\nboom", is_error=True), toolUseResult="Error: Exit code 2"),
        entry("user", "r2", "a1", result("t2", "running"), toolUseResult={"exitCode": 0, "stdout": "x" * 500}),
        entry("user", "r3", "a1", [{"type": "tool_result", "tool_use_id": "t3", "content": [image]}]),
    )
    msgs = convs[0].messages
    assert isinstance(msgs[0].content[1], ImageBlock) and msgs[0].content[1].data == PNG_B64
    r1, r2, r3 = (m.tool_result for m in msgs[2:])
    assert r1 is not None and r1.is_error and r1.exit_code == 2
    assert r2 is not None and not r2.is_error and r2.exit_code == 0
    assert r2.extra["claude_code"] == {"toolUseResult": {"exitCode": 0}}  # long outputs are not copied
    assert r3 is not None and r3.exit_code is None
    assert r3.content == (ImageBlock(media_type="image/png", width=None, height=None, data=PNG_B64),)


def test_unpaired_calls_and_results_are_kept_and_reported_not_invented() -> None:
    convs, notes = load(
        entry("user", "u1", None, "go"),
        entry("user", "r0", "u1", result("lost")),  # its call is not in the file
        entry("assistant", "a1", "r0", [call("t1")], mid="m1"),  # the session ended mid-call
    )
    msgs = convs[0].messages
    assert shape(msgs) == ["user go", "tool lost", "assistant t1"]
    assert sorted(p.kind for p in validate(msgs)) == ["missing_result", "orphan_result"]
    assert len(notes) == 2 and "1 tool calls have no result: t1" in notes[0] and "no call" in notes[1]


def test_metadata_entries_are_not_conversation() -> None:
    convs, notes = load(
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}, "isSnapshotUpdate": False},
        {"type": "queue-operation", "operation": "enqueue", "sessionId": "sess", "timestamp": "2026-01-02T03:04:05Z"},
        progress("p0", "none"),
        entry("user", "u1", "p0", "hi"),
        entry("assistant", "a1", "u1", text("hello"), mid="m1"),
        {"type": "system", "subtype": "turn_duration", "uuid": "y1", "parentUuid": "a1", "isSidechain": False},
        {"type": "attachment", "uuid": "z1", "parentUuid": "y1", "isSidechain": False},
        {"type": "last-prompt", "lastPrompt": "hi", "leafUuid": "a1", "sessionId": "sess"},
        {"type": "agent-name", "agentName": "Claude Code", "sessionId": "sess"},
        {"type": "pr-link", "prNumber": 7, "prUrl": "https://example.invalid/pull/7", "sessionId": "sess"},
        {"type": "permission-mode", "permissionMode": "default", "sessionId": "sess"},
        {"type": "made-up-record", "sessionId": "sess"},
    )
    assert shape(convs[0].messages) == ["user hi", "assistant hello"]
    assert notes[:2] == [
        "entries of unknown type not imported: 1 'made-up-record'",
        "attachments of unknown kind not imported: 1 '?'",
    ]
    assert len(notes) == 3 and "not in the file" in notes[2]  # progress p0 names a parent that is not there


def test_malformed_line_raises_with_its_line_number_or_is_skipped() -> None:
    good = [entry("user", "u1", None, "hi"), entry("assistant", "a1", "u1", text("hello"), mid="m1")]
    for bad in ('{"parentUuid": "u1", "type": "user", "uuid": "x"', json.dumps(entry("user", "x", "a1", 5))):
        with pytest.raises(FormatError) as info:
            load(good[0], bad, good[1])
        assert info.value.line == 2 and info.value.path == "session.jsonl"

        convs, notes = load(good[0], bad, good[1], lenient=True)
        assert shape(convs[0].messages) == ["user hi", "assistant hello"]
        assert len(notes) == 1 and notes[0].startswith("skipped line 2: ")


def test_ids_are_stable_and_unique() -> None:
    entries = [
        entry("user", "u1", None, "go"),
        entry("assistant", "a1", "u1", [call("t1"), call("t2")], mid="m1"),
        entry("user", "r1", "a1", result("t1") + result("t2") + text("and stop")),  # one entry, three messages
    ]
    first, _ = load(*entries)
    second, _ = load(*entries)
    ids = [m.id for m in first[0].messages]
    assert ids == [m.id for m in second[0].messages] == ["u1", "a1", "r1:0", "r1:1", "r1:2"]
    assert [m.source_id for m in first[0].messages] == ["u1", "a1", "r1", "r1", "r1"]
    assert shape(first[0].messages)[-1] == "user and stop"
    assert all(isinstance(b, ToolCall) for b in first[0].messages[1].content)


def test_sniff() -> None:
    assert claude_code.sniff(Source.from_bytes(json.dumps(entry("user", "u1", None, "hi")).encode()))
    line = {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}}
    assert claude_code.sniff(Source.from_bytes(json.dumps(line).encode()))
    assert not claude_code.sniff(Source.from_bytes(b'{"role": "user", "content": "hi"}'))
    # sessions that start with a newer metadata record, and trimmed entries with no parentUuid
    for first in (
        {"type": "last-prompt", "lastPrompt": "hi", "leafUuid": "u1", "sessionId": "sess"},
        {"type": "custom-title", "customTitle": "Fix it", "sessionId": "sess"},
        {"type": "permission-mode", "permissionMode": "default", "sessionId": "sess"},
        {"type": "user", "sessionId": "sess", "uuid": "u1", "message": {"role": "user", "content": "hi"}},
    ):
        assert claude_code.sniff(Source.from_bytes(json.dumps(first).encode())), first
    assert not claude_code.sniff(Source.from_bytes(b'{"type": "user", "message": {"content": "hi"}}'))


def test_subagent_files_beside_a_session_are_loaded_with_it(tmp_path: Path) -> None:
    """The layout Claude Code 2.1 writes: <session>.jsonl and <session>/subagents/agent-*.jsonl."""
    main = RAW / "cc_spotter_fa812bfe.jsonl"
    subs = [RAW / "cc_spotter_subagent_a93ccab.jsonl", RAW / "cc_spotter_subagent_aa84377.jsonl"]
    if not main.exists():
        pytest.skip(f"no transcripts in {RAW}")
    session = tmp_path / "fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl"
    shutil.copy(main, session)
    folder = tmp_path / session.stem / "subagents"
    folder.mkdir(parents=True)
    for sub in subs:
        shutil.copy(sub, folder / f"agent-{sub.stem.rsplit('_', 1)[1]}.jsonl")
    transcript = formats.load(session)
    titles = [c.title for c in transcript.conversations]
    assert titles[1:] == ["subagent a93ccab", "subagent aa84377"]
    alone = formats.load(main)
    assert len(alone.conversations) == 1
    assert transcript.conversations[0].messages == alone.conversations[0].messages


# --- trimmed and newer files ---------------------------------------------------------


def no_id(cid: str | None = None, name: str = "Bash") -> dict[str, Any]:
    """A tool_use block that names no id (trimmed or hand-made files); `cid` only labels the command."""
    return {"type": "tool_use", "name": name, "input": {"command": f"run {cid or name}"}}


def bare_result(text: str = "ok", **more: Any) -> list[dict[str, Any]]:
    """A tool_result block with no tool_use_id."""
    return [{"type": "tool_result", "content": text, **more}]


def test_assistant_entries_without_message_id_are_responses_of_their_own() -> None:
    convs, notes = load(
        entry("user", "u1", None, "go"),
        entry("assistant", "a1", "u1", [call("t1"), call("t2")]),  # no message id
        entry("user", "r1", "a1", result("t1")),
        entry("user", "r2", "a1", result("t2")),  # hangs off the call's entry, beside the path
        entry("assistant", "a2", "r1", text("first")),
        entry("assistant", "a3", "a2", text("second")),
    )
    assert shape(convs[0].messages) == [
        "user go",
        "assistant t1,t2",
        "tool t1",
        "tool t2",
        "assistant first",
        "assistant second",
    ]
    assert notes == []
    assert "message_id" not in convs[0].messages[1].extra["claude_code"]


def test_result_without_tool_use_id_takes_the_entrys_source_tool_use_id() -> None:
    convs, notes = load(
        entry("user", "u1", None, "go"),
        entry("assistant", "a1", "u1", [call("t1")], mid="m1"),
        entry("user", "r1", "a1", bare_result("done"), sourceToolUseID="t1", toolUseResult={"exitCode": 0}),
    )
    msgs = convs[0].messages
    assert shape(msgs) == ["user go", "assistant t1", "tool t1"]
    assert msgs[2].tool_result is not None and msgs[2].tool_result.exit_code == 0
    assert validate(msgs) == [] and notes == []


def test_call_without_id_takes_the_id_its_result_names() -> None:
    convs, notes = load(
        entry("user", "u1", None, "go"),
        entry("assistant", "a1", "u1", [no_id()]),
        entry("user", "r1", "a1", bare_result(), sourceToolUseID="t7", sourceToolAssistantUUID="a1"),
        entry("user", "r2", "a1", bare_result("rejected", is_error=True), sourceToolUseID="t8"),  # a rewound try
        entry("assistant", "a2", "r1", text("listed")),
    )
    assert shape(convs[0].messages) == ["user go", "assistant t7", "tool t7", "assistant listed"]
    assert validate(convs[0].messages) == []
    assert notes == [
        "1 tool calls have no id in the file: 1 took the id their result names, 0 got a made-up one",
        "the main conversation: 1 user/assistant entries on other (rewound or abandoned) branches were not imported",
    ]


def test_call_and_result_without_ids_are_paired_through_the_tree_with_a_stable_made_up_id() -> None:
    entries = [
        entry("user", "u1", None, "go"),
        entry("assistant", "a1", "u1", [text("searching")[0], no_id()]),
        entry("user", "r1", "a1", bare_result("a.txt"), toolUseResult={"stdout": "a.txt"}),
    ]
    convs, notes = load(*entries)
    msgs = convs[0].messages
    made_up = msgs[1].tool_calls[0].id
    assert shape(msgs) == ["user go", f"assistant {made_up}", f"tool {made_up}"]
    assert validate(msgs) == []
    assert notes == ["1 tool calls have no id in the file: 0 took the id their result names, 1 got a made-up one"]
    assert load(*entries)[0][0].messages[1].tool_calls[0].id == made_up


def test_result_with_no_way_to_its_call_is_a_bad_record() -> None:
    entries = [
        entry("user", "u1", None, "go"),
        entry("assistant", "a1", "u1", [call("t1"), call("t2")], mid="m1"),  # two calls: which one?
        entry("user", "r1", "a1", bare_result()),
        entry("assistant", "a2", "r1", text("next")),
    ]
    with pytest.raises(FormatError, match="names no tool_use_id") as info:
        load(*entries)
    assert info.value.line == 3
    convs, notes = load(*entries, lenient=True)
    assert shape(convs[0].messages) == ["user go", "assistant t1,t2", "assistant next"]  # the tree still holds
    assert notes[0].startswith("skipped line 3: a tool_result names no tool_use_id")


def test_tool_blocks_in_the_wrong_entry_are_bad_records() -> None:
    for bad in (entry("user", "x", "u1", [call("t1")]), entry("assistant", "x", "u1", result("t1"), mid="m9")):
        with pytest.raises(FormatError, match="block in a"):
            load(entry("user", "u1", None, "hi"), bad)


def test_titles_prefer_the_users_over_summaries_over_generated_ones() -> None:
    talk = [entry("user", "u1", None, "hi"), entry("assistant", "a1", "u1", text("hello"), mid="m1")]
    summary = {"type": "summary", "summary": "Greeting", "leafUuid": "a1"}
    custom = {"type": "custom-title", "customTitle": "My title", "sessionId": "sess"}
    generated = {"type": "ai-title", "aiTitle": "Saying hello", "sessionId": "sess"}
    assert load(*talk, generated, summary, custom)[0][0].title == "My title"
    assert load(*talk, generated, summary)[0][0].title == "Greeting"
    assert load(*talk, generated)[0][0].title == "Saying hello"


def attachment(uuid: str, parent: str, **body: Any) -> dict[str, Any]:
    return {
        "type": "attachment",
        "uuid": uuid,
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": "sess",
        "timestamp": "2026-01-02T03:04:06Z",
        "attachment": body,
    }


def test_attachments_with_text_the_model_saw_are_user_text() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
    convs, notes = load(
        entry("user", "u1", None, "fix the build"),
        attachment("m1", "u1", type="nested_memory", path="/repo/CLAUDE.md", content={"content": "Use tabs."}),
        attachment("h1", "m1", type="hook_success", hookName="SessionStart", content="", exitCode=0),
        attachment("d1", "h1", type="deferred_tools_delta", addedNames=["Read"]),
        entry("assistant", "a1", "d1", [call("t1")], mid="m1"),
        attachment("c1", "a1", type="hook_additional_context", content=["lint first"]),  # beside the path
        entry("user", "r1", "a1", result("t1")),
        attachment("q1", "r1", type="queued_command", prompt=[{"type": "text", "text": "also this"}, image]),
        attachment("x1", "q1", type="brand_new_kind", text="?"),
        entry("assistant", "a2", "x1", text("on it"), mid="m2"),
    )
    msgs = convs[0].messages
    assert shape(msgs) == [
        "user fix the build",
        "user Use tabs.",
        "assistant t1",
        "tool t1",
        "user lint first",
        "user also this",
        "assistant on it",
    ]
    assert [m.extra.get("claude_code", {}).get("attachment") for m in msgs] == [
        None,
        "nested_memory",
        None,
        None,
        "hook_additional_context",
        "queued_command",
        None,
    ]
    assert isinstance(msgs[5].content[1], ImageBlock) and msgs[1].id == "m1"
    assert validate(msgs) == []
    assert notes == ["attachments of unknown kind not imported: 1 'brand_new_kind'"]


def test_a_session_start_hook_output_is_user_text_naming_its_hook_and_the_rest_is_counted() -> None:
    rules = "# Beads Workflow Context\n- Do NOT use TodoWrite for task tracking"
    lines = [
        attachment(
            "h1", "", type="hook_success", hookName="SessionStart:startup", hookEvent="SessionStart", content=rules
        ),
        attachment("h2", "h1", type="hook_success", hookName="PostToolUse:Bash", hookEvent="PostToolUse", content="ok"),
        entry("user", "u1", "h2", "fix the build"),
        {"type": "progress", "uuid": "p1", "parentUuid": "u1", "data": {"type": "hook_progress"}},
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {}},
        entry("assistant", "a1", "u1", text("on it"), mid="m1"),
    ]
    lines[0]["parentUuid"] = None
    source = Source.from_bytes("\n".join(json.dumps(e) for e in lines).encode(), path="session.jsonl")
    [conv] = claude_code.parse(source)
    assert shape(conv.messages) == [f"user {rules}", "user fix the build", "assistant on it"]
    assert conv.messages[0].extra["claude_code"] == {"attachment": "hook_success", "hookName": "SessionStart:startup"}
    assert source.left_out == {
        "attachment hook_success (no text the model saw)": 1,
        "progress entry (not conversation)": 1,
        "file-history-snapshot entry (not conversation)": 1,
    }


def test_a_prompt_queued_mid_turn_that_no_entry_holds_is_read_from_the_queue() -> None:
    def queue(operation: str, content: str | None = None) -> dict[str, Any]:
        op = {"type": "queue-operation", "operation": operation, "sessionId": "sess"}
        return op if content is None else {**op, "content": content}

    convs, notes = load(
        entry("user", "u1", None, "fix the build"),
        queue("enqueue", "also run the linter"),  # sent as the next prompt: a user entry holds it
        queue("dequeue"),
        queue("enqueue", "and check the logs"),  # taken back to the input box: never sent
        queue("popAll", "and check the logs"),
        queue("enqueue", "and delete the temp file"),  # sent mid-turn: on no entry
        entry("assistant", "a1", "u1", [call("t1")], mid="m1"),
        queue("remove"),
        entry("user", "r1", "a1", result("t1")),
        entry("assistant", "a2", "r1", text("on it"), mid="m2"),
        entry("user", "u2", "a2", "also run the linter"),
    )
    assert shape(convs[0].messages) == [
        "user fix the build",
        "assistant t1",
        "tool t1",
        "user and delete the temp file",
        "assistant on it",
        "user also run the linter",
    ]
    assert notes == ["1 prompt(s) the user queued mid-turn are on no entry; read from the queue"]


def test_repeated_uuids_are_reported_once() -> None:
    convs, notes = load(
        entry("user", "u1", None, "hi"),
        entry("assistant", "a1", "u1", text("hello"), mid="m1"),
        *[entry("user", "u1", "a1", f"copy {n}") for n in range(7)],
    )
    assert shape(convs[0].messages) == ["user hi", "assistant hello"]
    assert notes == ["7 entries repeat the uuid of an earlier entry and were not imported (lines 3, 4, 5, 6, 7 ...)"]
