"""The pi session importer: the real session and hand-built entries of every kind it maps."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import raw_params

from ctxkeep.errors import FormatError
from ctxkeep.formats import pi
from ctxkeep.formats.source import Source
from ctxkeep.messages import ImageBlock, Message, TextBlock, ThinkingBlock
from ctxkeep.pairing import count_pairs, validate

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TS = "2025-12-08T22:41:05.306Z"

# What the real files hold, checked by hand: pi_before_compaction has 6 calls that never got a
# result: 5 in responses the user aborted mid-call, 1 in the response right before an automatic
# compaction (pi compacted instead of running the call).
REAL_UNPAIRED = {"pi_before_compaction.jsonl": 6}


def raw_tool_pairs(path: Path) -> tuple[int, int, set[str]]:
    """(calls, results, call ids with no result) on the active branch, read with plain json."""
    entries = [json.loads(x) for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]
    entries = [e for e in entries if e["type"] != "session"]
    if all("parentId" in e for e in entries):  # a tree: walk back from the last entry
        by_id = {e["id"]: e for e in entries}
        branch, node = [], entries[-1]
        while node is not None:
            branch.append(node)
            node = by_id.get(node["parentId"]) if node["parentId"] else None
        entries = branch[::-1]
    messages = [e["message"] for e in entries if e["type"] == "message"]
    calls = [b["id"] for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "toolCall"]
    results = [m["toolCallId"] for m in messages if m["role"] == "toolResult"]
    return len(calls), len(results), set(calls) - set(results)


@pytest.mark.parametrize("path", raw_params("pi"))
def test_real_session_keeps_every_call_and_result(path: Path) -> None:
    n_calls, n_results, unpaired = raw_tool_pairs(path)
    source = Source.from_path(path)
    assert pi.sniff(source)
    [conv] = pi.parse(source)

    assert count_pairs(conv.messages) == (n_calls, n_results)
    # the only pairing problems are the calls the file itself left without a result
    problems = validate(conv.messages)
    assert sorted((p.kind, p.call_id) for p in problems) == sorted(("missing_result", c) for c in unpaired)
    assert len(unpaired) == REAL_UNPAIRED.get(path.name, 0)
    assert all(m.timestamp is not None and m.timestamp.tzinfo is not None for m in conv.messages)


@pytest.mark.parametrize("path", raw_params("pi"))
def test_real_session_unpaired_calls_are_aborted_or_cut_by_compaction(path: Path) -> None:
    [conv] = pi.parse(Source.from_path(path))
    msgs = conv.messages
    for problem in validate(msgs):
        stop = msgs[problem.index].extra.get("pi:stopReason")
        after = msgs[problem.index + 1] if problem.index + 1 < len(msgs) else None
        cut_by_compaction = after is not None and after.extra.get("pi:type") == "compaction"
        assert stop == "aborted" or cut_by_compaction, problem


@pytest.mark.parametrize("path", raw_params("pi"))
def test_real_session_compactions_are_user_text_in_place(path: Path) -> None:
    raw = [json.loads(x) for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]
    summaries = [e["summary"] for e in raw if e["type"] == "compaction"]
    [conv] = pi.parse(Source.from_path(path))
    imported = [m for m in conv.messages if m.extra.get("pi:type") == "compaction"]
    assert [m.text for m in imported] == [pi.COMPACTION_HEADER + s for s in summaries]
    ids = {m.id for m in conv.messages}
    assert all(m.role == "user" and m.extra["pi:firstKeptEntryId"] in ids for m in imported)


@pytest.mark.parametrize("path", raw_params("pi"))
def test_real_session_ids_are_stable(path: Path) -> None:
    first = pi.parse(Source.from_path(path))[0]
    second = pi.parse(Source.from_path(path))[0]
    assert [m.id for m in first.messages] == [m.id for m in second.messages]
    assert len({m.id for m in first.messages}) == len(first.messages)


# --- hand-built entries ----------------------------------------------------------------


def header(version: int | None = 3, **extra: Any) -> dict[str, Any]:
    h: dict[str, Any] = {"type": "session", "id": "sess-1", "timestamp": TS, "cwd": "/w", **extra}
    if version is not None:
        h["version"] = version
    return h


class Tree:
    """Builds version 3 entries; each appended entry is a child of `parent` (default: the last one)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = [header()]
        self.last: str | None = None

    def add(self, entry_id: str, kind: str, parent: str | bool | None = True, **fields: Any) -> str:
        parent_id = self.last if parent is True else parent
        self.entries.append({"type": kind, "id": entry_id, "parentId": parent_id, "timestamp": TS, **fields})
        self.last = entry_id
        return entry_id

    def message(self, entry_id: str, message: dict[str, Any], parent: str | bool | None = True) -> str:
        return self.add(entry_id, "message", parent, message={"timestamp": 1765233665292, **message})


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(*blocks: dict[str, Any], stop: str = "toolUse") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": list(blocks),
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-opus-4-5",
        "usage": {"input": 1, "output": 2},
        "stopReason": stop,
    }


def tool_call(call_id: str, name: str = "bash", **args: Any) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": args or {"command": "ls"}}


def tool_result(call_id: str, text: str, *, name: str = "bash", error: bool = False) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": name,
        "content": [{"type": "text", "text": text}],
        "isError": error,
    }


def source_of(records: list[Any], *, lenient: bool = False) -> Source:
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"
    return Source.from_bytes(text.encode(), path="session.jsonl", lenient=lenient)


def parse(records: list[Any], *, lenient: bool = False) -> list[Message]:
    return list(pi.parse(source_of(records, lenient=lenient))[0].messages)


def test_message_roles_and_blocks() -> None:
    t = Tree()
    image = {"type": "image", "data": PNG_B64, "mimeType": "image/png"}
    t.message("u1", {"role": "user", "content": [{"type": "text", "text": "look"}, image]})
    thinking = {"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig=="}
    t.message("a1", assistant(thinking, {"type": "text", "text": "Reading."}, tool_call("t1", "read", path="/a.py")))
    t.message("r1", tool_result("t1", "print(1)", name="read"))
    t.message("a2", assistant({"type": "text", "text": "Done."}, stop="stop"))
    messages = parse(t.entries)

    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert [m.id for m in messages] == ["u1", "a1", "r1", "a2"]
    assert isinstance(messages[0].content[1], ImageBlock) and messages[0].content[1].data == PNG_B64
    think, text, _ = messages[1].content
    assert isinstance(think, ThinkingBlock) and (think.text, think.signature) == ("hmm", "sig==")
    assert isinstance(text, TextBlock) and text.text == "Reading."
    assert messages[1].tool_calls[0].input() == {"path": "/a.py"}
    assert messages[1].extra["pi:model"] == "claude-opus-4-5"
    assert messages[1].extra["pi:stopReason"] == "toolUse"
    result = messages[2].tool_result
    assert result is not None and (result.call_id, result.content, result.is_error) == ("t1", "print(1)", False)
    assert messages[2].extra["pi:toolName"] == "read"
    assert messages[0].source_id == "u1"
    assert messages[0].timestamp is not None and messages[0].timestamp.tzinfo is not None
    assert validate(messages) == []


@pytest.mark.parametrize(
    ("text", "error", "exit_code"),
    [
        ("boom\n\nCommand exited with code 2", True, 2),
        ("(no output)\n\nCommand exited with code 1", True, 1),
        ("Command aborted", True, None),
        ("a.txt\nb.txt\n", False, None),
        ("Command exited with code 3", True, 3),  # the whole output
        ("out\n \t\n Command exited with code -1 \n\n", True, -1),
        ("out Command exited with code 4", True, None),  # not on its own line
        ("out\nCommand exited with code 4 more", True, None),  # not at the end
    ],
)
def test_bash_exit_codes(text: str, error: bool, exit_code: int | None) -> None:
    t = Tree()
    t.message("a1", assistant(tool_call("t1")))
    t.message("r1", tool_result("t1", text, error=error))
    result = parse(t.entries)[1].tool_result
    assert result is not None and (result.is_error, result.exit_code) == (error, exit_code)


def test_bash_exit_code_of_a_huge_blank_output_is_read_in_linear_time() -> None:
    # a regex retried at every newline took seconds here: the read must stay linear
    t = Tree()
    t.message("a1", assistant(tool_call("t1")))
    t.message("r1", tool_result("t1", "\n" * 200_000 + "Command exited with code 5" + " \n" * 200_000, error=True))
    t.message("r2", tool_result("t1", "\n" * 200_000 + "x", error=True))
    results = [m.tool_result for m in parse(t.entries)[1:]]
    assert [r.exit_code for r in results if r is not None] == [5, None]


def test_bash_exit_code_matches_the_line_rule() -> None:
    # the rule as a regex (quadratic on long blank outputs, fine on these short ones)
    rule = re.compile(r"\n\s*Command exited with code (-?\d+)\s*$")
    phrase = "Command exited with code "
    pieces = ["", "x", " ", "\n", "\t\n ", phrase, "7", "-12", "a\n", "\n\n"]
    for a, b, c, d in itertools.product(pieces, repeat=4):
        text = a + b + c + d
        m = rule.search("\n" + text)
        expected = int(m.group(1)) if m else None
        assert pi._bash_exit_code([TextBlock(text=text)]) == expected, text


def test_exit_code_line_only_counts_for_bash() -> None:
    t = Tree()
    t.message("a1", assistant(tool_call("t1", "read", path="log.txt")))
    t.message("r1", tool_result("t1", "log\nCommand exited with code 9", name="read"))
    result = parse(t.entries)[1].tool_result
    assert result is not None and result.exit_code is None


def test_tool_result_with_image_keeps_blocks() -> None:
    t = Tree()
    t.message("a1", assistant(tool_call("t1", "read", path="x.png")))
    content = [{"type": "text", "text": "Read image"}, {"type": "image", "data": PNG_B64, "mimeType": "image/png"}]
    t.message("r1", {**tool_result("t1", "", name="read"), "content": content})
    result = parse(t.entries)[1].tool_result
    assert result is not None and isinstance(result.content, tuple)
    assert [type(b).__name__ for b in result.content] == ["TextBlock", "ImageBlock"]


def test_active_branch_only() -> None:
    t = Tree()
    t.message("u1", user("start"))
    a1 = t.message("a1", assistant({"type": "text", "text": "ok"}, stop="stop"))
    t.message("u2", user("first try"))
    t.message("a2", assistant({"type": "text", "text": "abandoned"}, stop="stop"))
    t.message("u3", user("second try"), parent=a1)
    t.add("bs", "branch_summary", fromId="a2", summary="Tried X; it failed.")
    t.message("a3", assistant({"type": "text", "text": "kept"}, stop="stop"))
    src = source_of(t.entries)
    [conv] = pi.parse(src)
    assert [m.id for m in conv.messages] == ["u1", "a1", "u3", "bs", "a3"]
    assert conv.messages[3].text == pi.BRANCH_SUMMARY_HEADER + "Tried X; it failed."
    assert conv.messages[3].extra["pi:fromId"] == "a2"
    assert any("2 entries on other branches" in n for n in src.notes)


def test_compaction_is_user_text_in_place_and_messages_stay() -> None:
    t = Tree()
    t.message("u1", user("old question"))
    t.message("a1", assistant({"type": "text", "text": "old answer"}, stop="stop"))
    t.message("u2", user("kept question"))
    t.add("c1", "compaction", summary="## Goal\nrefactor", firstKeptEntryId="u2", tokensBefore=175004)
    t.message("u3", user("new question"))
    messages = parse(t.entries)
    assert [m.id for m in messages] == ["u1", "a1", "u2", "c1", "u3"]
    summary = messages[3]
    assert (summary.role, summary.text) == ("user", pi.COMPACTION_HEADER + "## Goal\nrefactor")
    assert summary.extra["pi:firstKeptEntryId"] == "u2"
    assert summary.extra["pi:tokensBefore"] == 175004


def test_version_1_linear_file_with_compaction_index() -> None:
    entries = [
        header(version=None),
        {"type": "message", "timestamp": TS, "message": user("one")},
        {"type": "message", "timestamp": TS, "message": user("two")},
        {"type": "thinking_level_change", "timestamp": TS, "thinkingLevel": "high"},
        {"type": "compaction", "timestamp": TS, "summary": "S", "firstKeptEntryIndex": 2, "tokensBefore": 9},
        {"type": "message", "timestamp": TS, "message": user("three")},
    ]
    messages = parse(entries)
    assert [m.text for m in messages] == ["one", "two", pi.COMPACTION_HEADER + "S", "three"]
    assert messages[2].extra["pi:firstKeptEntryIndex"] == 2
    assert messages[2].extra["pi:firstKeptEntryId"] == messages[1].id  # file position 2 = "two"
    assert all(m.source_id is None for m in messages)


def test_settings_and_extension_entries() -> None:
    t = Tree()
    t.add("m1", "model_change", provider="anthropic", modelId="claude-sonnet-4-5")
    t.add("k1", "thinking_level_change", thinkingLevel="high")
    t.add("x1", "custom", customType="todo", data={"items": []})
    t.add("cm", "custom_message", customType="reminder", content="Remember the tests.", display=False)
    t.message("h1", {"role": "hookMessage", "customType": "old", "content": [{"type": "text", "text": "v2 hook"}]})
    t.add("l1", "label", targetId="cm", label="important")
    t.add("s1", "session_info", name="Refactor session")
    src = source_of(t.entries)
    [conv] = pi.parse(src)
    assert [(m.role, m.text) for m in conv.messages] == [("user", "Remember the tests."), ("user", "v2 hook")]
    assert conv.messages[0].extra["pi:customType"] == "reminder"
    assert conv.title == "Refactor session"
    assert src.notes == []


def test_bash_execution_is_user_text_and_excluded_ones_are_noted() -> None:
    t = Tree()
    bash = {"role": "bashExecution", "command": "make", "output": "err", "exitCode": 2, "cancelled": False}
    t.message("b1", {**bash, "truncated": False})
    t.message("b2", {**bash, "truncated": False, "excludeFromContext": True})
    src = source_of(t.entries)
    [conv] = pi.parse(src)
    [m] = conv.messages
    assert m.role == "user"
    assert "make" in m.text and "err" in m.text and "2" in m.text
    assert m.extra["pi:exitCode"] == 2
    assert any("excludeFromContext" in n for n in src.notes)


def test_aborted_call_stays_unpaired() -> None:
    t = Tree()
    t.message("u1", user("go"))
    partial = {**tool_call("t1"), "partialJson": '{"comm'}
    t.message("a1", {**assistant(partial, stop="aborted"), "errorMessage": "Request was aborted."})
    t.message("u2", user("never mind"))
    messages = parse(t.entries)
    assert [(p.kind, p.call_id) for p in validate(messages)] == [("missing_result", "t1")]
    assert messages[1].tool_calls[0].extra["pi:partialJson"] == '{"comm'
    assert messages[1].extra["pi:errorMessage"] == "Request was aborted."


def test_parent_cycle_and_missing_parent_do_not_hang() -> None:
    cyc = Tree()
    cyc.message("a", user("a"), parent="b")
    cyc.message("b", user("b"), parent="a")
    src = source_of(cyc.entries)
    [conv] = pi.parse(src)
    assert [m.id for m in conv.messages] == ["a", "b"]
    assert any("cycle" in n for n in src.notes)

    orphan = Tree()
    orphan.message("x", user("x"), parent="gone")
    src = source_of(orphan.entries)
    assert [m.id for m in pi.parse(src)[0].messages] == ["x"]
    assert any("gone" in n for n in src.notes)


def test_malformed_line_raises_with_its_line_number() -> None:
    t = Tree()
    t.message("u1", user("a"))
    records = [*t.entries, '{"type": "message", "id": "u2", ', {"type": "message", "id": "u3", "parentId": "u1"}]
    with pytest.raises(FormatError) as info:
        pi.parse(source_of(records))
    assert info.value.line == 3


def test_malformed_line_skipped_when_lenient() -> None:
    t = Tree()
    t.message("u1", user("a"))
    records = [*t.entries, "not json at all"]
    t2 = Tree()
    t2.last = "u1"
    t2.message("u2", user("b"))
    src = source_of(records + t2.entries[1:], lenient=True)
    [conv] = pi.parse(src)
    assert [m.text for m in conv.messages] == ["a", "b"]
    assert len(src.notes) == 1 and "line 3" in src.notes[0]


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "message", "id": "m", "parentId": "u1", "timestamp": TS, "message": {"role": "robot", "content": []}},
        {"type": "message", "id": "m", "parentId": "u1", "timestamp": TS, "message": "hello"},
        {"type": "message", "id": "m", "parentId": "u1", "timestamp": TS, "message": {"role": "toolResult"}},
        {"type": "compaction", "id": "m", "parentId": "u1", "timestamp": TS, "summary": None},
        {"no_type": True},
    ],
)
def test_entries_of_the_wrong_shape_raise_or_are_skipped(bad: dict[str, Any]) -> None:
    t = Tree()
    t.message("u1", user("a"))
    records = [*t.entries, bad]
    with pytest.raises(FormatError) as info:
        pi.parse(source_of(records))
    assert info.value.line == 3
    src = source_of(records, lenient=True)
    [conv] = pi.parse(src)
    assert conv.messages[0].text == "a"
    assert any("line 3" in n for n in src.notes)


def test_unknown_entry_type_is_noted_not_fatal() -> None:
    t = Tree()
    t.message("u1", user("a"))
    t.add("z", "hologram")
    src = source_of(t.entries)
    [conv] = pi.parse(src)
    assert [m.text for m in conv.messages] == ["a"]
    assert src.notes == ["left out 1 entries of unknown type 'hologram'"]


def test_ids_are_stable_across_imports() -> None:
    entries = [header(version=None), *({"type": "message", "timestamp": TS, "message": user(str(i))} for i in range(3))]
    first, second = parse(entries), parse(entries)
    assert [m.id for m in first] == [m.id for m in second]
    assert len({m.id for m in first}) == 3


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (header(), True),
        (header(version=None), True),
        ({"timestamp": TS, "type": "session_meta", "payload": {"id": "x"}}, False),  # Codex
        ({"type": "summary", "summary": "x", "leafUuid": "u"}, False),  # Claude Code
        ({"role": "user", "content": "hi"}, False),  # OpenAI
    ],
)
def test_sniff(first: dict[str, Any], expected: bool) -> None:
    assert pi.sniff(source_of([first])) is expected


def test_calls_of_failed_responses_stay_unpaired_and_are_noted() -> None:
    t = Tree()
    t.message("u1", user("go"))
    t.message("a1", {**assistant(tool_call("t1"), tool_call("t2"), stop="error"), "errorMessage": "overloaded"})
    t.message("a2", assistant(tool_call("t3"), stop="aborted"))
    t.message("u2", user("again"))
    t.message("a3", assistant(tool_call("t4")))
    t.message("r4", tool_result("t4", "ok"))
    src = source_of(t.entries)
    [conv] = pi.parse(src)
    assert [(p.kind, p.call_id) for p in validate(conv.messages)] == [
        ("missing_result", "t1"),
        ("missing_result", "t2"),
        ("missing_result", "t3"),
    ]
    assert count_pairs(conv.messages) == (4, 1)  # nothing invented
    assert src.notes == [
        "2 tool call(s) have no result, kept as written: the response that made them ended with "
        "stopReason 'error', so pi ran none of them (t1, t2)",
        "1 tool call(s) have no result, kept as written: the response that made them ended with "
        "stopReason 'aborted', so pi ran none of them (t3)",
    ]
