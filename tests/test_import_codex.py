"""The Codex CLI rollout importer: real rollouts and hand-built records of every kind it maps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import raw_params

from ctxkeep.errors import FormatError
from ctxkeep.formats import codex
from ctxkeep.formats.source import Source
from ctxkeep.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.pairing import count_pairs, validate
from ctxkeep.tokens.images import image_tokens

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TS = "2026-05-11T08:27:17.490Z"


def raw_tool_pairs(path: Path) -> tuple[int, int, set[str]]:
    """(calls, outputs, call ids with no output), read straight from the file with plain json."""
    calls: list[str] = []
    outputs: set[str] = set()
    n_outputs = 0
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("type") != "response_item":
            continue
        item = rec["payload"]
        if item["type"] in ("function_call", "custom_tool_call", "local_shell_call"):
            calls.append(item.get("call_id") or item["id"])
        elif item["type"] in ("function_call_output", "custom_tool_call_output"):
            outputs.add(item["call_id"])
            n_outputs += 1
    return len(calls), n_outputs, {c for c in calls if c not in outputs}


@pytest.mark.parametrize("path", raw_params("codex"))
def test_real_rollout_keeps_every_call_and_output_paired(path: Path) -> None:
    n_calls, n_outputs, unpaired = raw_tool_pairs(path)
    source = Source.from_path(path)
    assert codex.sniff(source)
    [conv] = codex.parse(source)

    assert count_pairs(conv.messages) == (n_calls, n_outputs)
    problems = validate(conv.messages)
    assert [(p.kind, p.call_id) for p in problems] == [("missing_result", c) for c in sorted(unpaired)]
    assert source.notes == []
    assert all(m.timestamp is not None and m.timestamp.tzinfo is not None for m in conv.messages)
    assert conv.messages[0].role == "system"  # the base instructions


@pytest.mark.parametrize("path", raw_params("codex"))
def test_real_rollout_ids_are_stable(path: Path) -> None:
    first = codex.parse(Source.from_path(path))[0]
    second = codex.parse(Source.from_path(path))[0]
    assert [m.id for m in first.messages] == [m.id for m in second.messages]
    assert len({m.id for m in first.messages}) == len(first.messages)
    assert first.id == second.id


# --- hand-built records ----------------------------------------------------------------


def line(kind: str, payload: dict[str, Any], ts: str = TS) -> dict[str, Any]:
    return {"timestamp": ts, "type": kind, "payload": payload}


def item(payload: dict[str, Any]) -> dict[str, Any]:
    return line("response_item", payload)


def meta(**extra: Any) -> dict[str, Any]:
    return line("session_meta", {"id": "sess-1", "cwd": "/w", "cli_version": "0.125.0", **extra})


def msg(role: str, *texts: str, **extra: Any) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return item({"type": "message", "role": role, "content": [{"type": kind, "text": t} for t in texts], **extra})


def call(call_id: str, name: str = "exec_command", args: str = '{"cmd": "ls"}') -> dict[str, Any]:
    return item({"type": "function_call", "name": name, "arguments": args, "call_id": call_id})


def output(call_id: str, out: Any, kind: str = "function_call_output") -> dict[str, Any]:
    return item({"type": kind, "call_id": call_id, "output": out})


def source_of(records: list[Any], *, lenient: bool = False) -> Source:
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"
    return Source.from_bytes(text.encode(), path="rollout.jsonl", lenient=lenient)


def parse(records: list[Any], *, lenient: bool = False) -> list[Message]:
    return list(codex.parse(source_of(records, lenient=lenient))[0].messages)


def result_of(out: Any, kind: str = "function_call_output") -> ToolResult:
    messages = parse([meta(), call("c1"), output("c1", out, kind)])
    result = messages[-1].tool_result
    assert result is not None
    return result


def test_session_meta_gives_conversation_id_and_system_prompt() -> None:
    src = source_of([meta(base_instructions={"text": "You are Codex."}), msg("user", "hi")])
    [conv] = codex.parse(src)
    assert conv.id == "sess-1"
    assert [(m.role, m.text) for m in conv.messages] == [("system", "You are Codex."), ("user", "hi")]
    assert conv.messages[0].timestamp is not None and conv.messages[0].timestamp.tzinfo is not None


def test_developer_messages_become_system_text_in_place() -> None:
    messages = parse([meta(), msg("user", "a"), msg("developer", "<permissions>", "<mode>")])
    assert messages[1].role == "system"
    assert messages[1].extra["codex:role"] == "developer"
    assert [b.text for b in messages[1].content if isinstance(b, TextBlock)] == ["<permissions>", "<mode>"]


def test_user_image_from_data_url() -> None:
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}"}
    user = item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "see"}, image]})
    [m] = parse([meta(), user])
    assert isinstance(m.content[1], ImageBlock)
    assert (m.content[1].media_type, m.content[1].data) == ("image/png", PNG_B64)


def test_image_detail_is_where_token_counting_reads_it() -> None:
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}", "detail": "low"}
    [m] = parse([meta(), item({"type": "message", "role": "user", "content": [image]})])
    block = m.content[0]
    assert isinstance(block, ImageBlock) and block.extra["detail"] == "low"
    assert image_tokens(block, "openai", "high") == 85


def test_reasoning_becomes_thinking_with_encrypted_content_in_extra() -> None:
    summary = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "**Plan**"}],
        "encrypted_content": "gA1",
    }
    opaque = {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "gA2"}
    [m] = parse([meta(), item(summary), item(opaque), msg("assistant", "done")])
    first, second, text = m.content
    assert isinstance(first, ThinkingBlock) and isinstance(second, ThinkingBlock)
    assert (first.text, first.redacted, first.extra["codex:encrypted_content"]) == ("**Plan**", False, "gA1")
    assert (second.text, second.redacted, second.extra["codex:encrypted_content"]) == ("", True, "gA2")
    assert isinstance(text, TextBlock) and text.text == "done"


def test_one_model_response_is_one_assistant_message() -> None:
    messages = parse(
        [
            meta(),
            msg("user", "go"),
            item({"type": "reasoning", "summary": [], "encrypted_content": "x"}),
            msg("assistant", "Looking.", phase="commentary"),
            call("c1"),
            call("c2"),
            output("c1", "one"),
            output("c2", "two"),
            call("c3"),
            output("c3", "three"),
            msg("assistant", "All done.", phase="final_answer"),
        ]
    )
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    kinds = [type(b).__name__ for b in messages[1].content]
    assert kinds == ["ThinkingBlock", "TextBlock", "ToolCall", "ToolCall"]
    assert messages[1].content[1].extra["codex:phase"] == "commentary"
    assert [c.id for c in messages[1].tool_calls] == ["c1", "c2"]
    assert validate(messages) == []


def test_turn_context_ends_the_assistant_message() -> None:
    turn = line("turn_context", {"turn_id": "t2", "cwd": "/w", "model": "gpt-5.5"})
    messages = parse([meta(), msg("assistant", "first turn"), turn, msg("assistant", "second turn")])
    assert [m.text for m in messages] == ["first turn", "second turn"]


def test_custom_tool_call_input_is_wrapped_and_json_output_unwrapped() -> None:
    patch = "*** Begin Patch\n*** Update File: a.py\n*** End Patch\n"
    custom = item(
        {"type": "custom_tool_call", "status": "completed", "call_id": "p1", "name": "apply_patch", "input": patch}
    )
    wrapped = json.dumps({"output": "Success. Updated a.py\n", "metadata": {"exit_code": 0, "duration_seconds": 0.4}})
    messages = parse([meta(), custom, output("p1", wrapped, "custom_tool_call_output")])
    [tool_call] = messages[0].tool_calls
    assert (tool_call.name, tool_call.input()) == ("apply_patch", {"input": patch})
    assert tool_call.extra["codex:type"] == "custom_tool_call"
    result = messages[1].tool_result
    assert result is not None
    assert (result.content, result.exit_code, result.is_error) == ("Success. Updated a.py\n", 0, False)
    assert result.extra["codex:metadata"] == {"exit_code": 0, "duration_seconds": 0.4}


def test_local_shell_call_pairs_with_its_output() -> None:
    action = {"type": "exec", "command": ["bash", "-lc", "ls"], "timeout_ms": 1000}
    shell = item({"type": "local_shell_call", "call_id": "ls1", "status": "completed", "action": action})
    messages = parse([meta(), shell, output("ls1", "a.txt")])
    [tool_call] = messages[0].tool_calls
    assert (tool_call.id, tool_call.name, tool_call.input()) == ("ls1", "local_shell", action)
    assert validate(messages) == []


def test_web_search_is_assistant_text_not_a_tool_call() -> None:
    search = {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "ctx limits"}}
    [m] = parse([meta(), item(search)])
    assert m.role == "assistant" and m.tool_calls == ()
    assert m.text == "[web search: ctx limits]"


@pytest.mark.parametrize(
    ("out", "exit_code", "is_error"),
    [
        ("Exit code: 1\nWall time: 0.2 seconds\nOutput:\nboom\n", 1, True),
        ("Exit code: 0\nWall time: 0.2 seconds\nTotal output lines: 1\nOutput:\nok\n", 0, False),
        (
            "Chunk ID: a1\nWall time: 1.0 seconds\nProcess exited with code 2\nOriginal token count: 3\nOutput:\nx",
            2,
            True,
        ),
        ("Chunk ID: a1\nWall time: 1.0 seconds\nProcess running with session ID 7\nOutput:\n", None, False),
        ("a log file that says\nExit code: 3\n", None, False),  # no header block: the command's own text
        (json.dumps({"output": "fail\n", "metadata": {"exit_code": 127}}), 127, True),
        ({"content": "denied", "success": False}, None, True),
        ("Plan updated", None, False),
    ],
)
def test_exit_codes(out: Any, exit_code: int | None, is_error: bool) -> None:
    result = result_of(out)
    assert (result.exit_code, result.is_error) == (exit_code, is_error)


def test_output_as_content_items() -> None:
    items = [{"type": "input_text", "text": "screenshot:"}, {"type": "input_image", "image_url": "https://x/y.png"}]
    result = result_of(items)
    assert isinstance(result.content, tuple)
    first, second = result.content
    assert isinstance(first, TextBlock) and first.text == "screenshot:"
    assert isinstance(second, ImageBlock) and second.url == "https://x/y.png"


def test_event_msgs_are_not_imported_twice() -> None:
    records = [
        meta(),
        line("event_msg", {"type": "task_started", "turn_id": "t1"}),
        msg("user", "show tools"),
        line("event_msg", {"type": "user_message", "message": "show tools", "images": []}),
        line("event_msg", {"type": "token_count", "info": None}),
        line("event_msg", {"type": "agent_message", "message": "Here.", "phase": "final_answer"}),
        msg("assistant", "Here.", phase="final_answer"),
        line("event_msg", {"type": "task_complete", "last_agent_message": "Here."}),
    ]
    src = source_of(records)
    [conv] = codex.parse(src)
    assert [(m.role, m.text) for m in conv.messages] == [("user", "show tools"), ("assistant", "Here.")]
    assert src.notes == []


def test_compacted_summary_is_user_text_at_its_position() -> None:
    compacted = line("compacted", {"message": "## Goal\nship it", "replacement_history": [{"type": "message"}]})
    messages = parse([meta(), msg("user", "a"), msg("assistant", "b"), compacted, msg("user", "c")])
    assert [m.role for m in messages] == ["user", "assistant", "user", "user"]
    assert messages[2].text == codex.COMPACTED_HEADER + "## Goal\nship it"
    assert messages[2].extra["codex:type"] == "compacted"
    assert messages[2].extra["codex:replacement_history"] == [{"type": "message"}]


def test_encrypted_compaction_item_leaves_a_marker_and_a_note() -> None:
    src = source_of([meta(), msg("user", "a"), item({"type": "compaction", "encrypted_content": "zzz"})])
    [conv] = codex.parse(src)
    assert conv.messages[-1].text == codex.ENCRYPTED_COMPACTION_TEXT
    assert conv.messages[-1].extra["codex:encrypted_content"] == "zzz"
    assert any("encrypted" in n for n in src.notes)


def test_unknown_item_type_is_noted_not_fatal() -> None:
    src = source_of([meta(), item({"type": "hologram_call", "call_id": "h"}), msg("user", "a")])
    [conv] = codex.parse(src)
    assert [m.text for m in conv.messages] == ["a"]
    assert src.notes == ["left out 1 response item(s) of unknown type 'hologram_call'"]


def test_unpaired_call_is_kept_as_the_file_has_it() -> None:
    messages = parse([meta(), msg("user", "a"), call("c1"), msg("user", "stop")])
    assert [(p.kind, p.call_id) for p in validate(messages)] == [("missing_result", "c1")]


def test_malformed_line_raises_with_its_line_number() -> None:
    records = [meta(), msg("user", "a"), '{"type": "response_item", "payload": {', msg("user", "b")]
    with pytest.raises(FormatError) as info:
        codex.parse(source_of(records))
    assert info.value.line == 3


def test_malformed_line_skipped_when_lenient() -> None:
    records = [meta(), msg("user", "a"), '{"type": "response_item", "payload": {', msg("user", "b")]
    src = source_of(records, lenient=True)
    [conv] = codex.parse(src)
    assert [m.text for m in conv.messages] == ["a", "b"]
    assert len(src.notes) == 1 and "line 3" in src.notes[0]


@pytest.mark.parametrize(
    "bad",
    [
        item({"type": "function_call", "name": "ls", "arguments": "{}"}),  # no call_id
        item({"type": "function_call_output", "output": "x"}),  # no call_id
        item({"type": "message", "role": "user", "content": "not a list"}),
        item({"type": "message", "role": "robot", "content": []}),
        item({"type": "function_call_output", "call_id": "c", "output": 42}),
        {"type": "response_item", "payload": "text"},
        ["a", "list"],
    ],
)
def test_records_of_the_wrong_shape_raise_or_are_skipped(bad: Any) -> None:
    with pytest.raises(FormatError) as info:
        codex.parse(source_of([meta(), bad, msg("user", "z")]))
    assert info.value.line == 2
    src = source_of([meta(), bad, msg("user", "z")], lenient=True)
    [conv] = codex.parse(src)
    assert conv.messages[-1].text == "z"
    assert len(src.notes) == 1 and "line 2" in src.notes[0]


def test_old_unwrapped_rollout() -> None:
    records = [
        {"id": "old-1", "timestamp": "2025-06-01T10:00:00.000Z", "instructions": None},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": '{"output":"a\\n","metadata":{"exit_code":0}}'},
    ]
    src = source_of(records)
    assert codex.sniff(src)
    [conv] = codex.parse(src)
    assert conv.id == "old-1"
    assert [m.role for m in conv.messages] == ["user", "assistant", "tool"]
    result = conv.messages[2].tool_result
    assert result is not None and (result.content, result.exit_code) == ("a\n", 0)


def test_ids_are_stable_and_unique() -> None:
    records = [
        meta(base_instructions={"text": "sys"}),
        msg("user", "a"),
        call("c1"),
        output("c1", "x"),
        msg("user", "a"),
    ]
    first, second = parse(records), parse(records)
    assert [m.id for m in first] == [m.id for m in second]
    assert len({m.id for m in first}) == len(first)


def test_source_item_ids_are_used_when_present() -> None:
    with_id = item({"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": "a"}]})
    [m] = parse([meta(), with_id])
    assert (m.id, m.source_id) == ("msg_1", "msg_1")


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (meta(), True),
        ({"id": "old", "timestamp": "2025-06-01T10:00:00Z", "instructions": None, "git": {}}, True),
        ({"type": "session", "id": "x", "cwd": "/w", "timestamp": TS}, False),  # pi
        ({"type": "user", "message": {"role": "user", "content": "hi"}, "uuid": "u"}, False),  # Claude Code
        ({"role": "user", "content": "hi"}, False),  # OpenAI
    ],
)
def test_sniff(first: dict[str, Any], expected: bool) -> None:
    assert codex.sniff(source_of([first])) is expected


def test_tool_call_blocks_keep_arguments_text() -> None:
    [m] = parse([meta(), call("c1", "exec_command", '{"cmd": "ls -la", "workdir": "/w"}')])
    [block] = m.content
    assert isinstance(block, ToolCall)
    assert block.arguments == '{"cmd": "ls -la", "workdir": "/w"}'


# --- shapes found in rollouts from other projects ---------------------------------------


def event(payload: dict[str, Any]) -> dict[str, Any]:
    return line("event_msg", payload)


def shape(messages: list[Message]) -> list[str]:
    """Each message as role:text or role:call ids or role:result id, to compare orders at a glance."""
    out = []
    for m in messages:
        if m.tool_result is not None:
            out.append(f"tool:{m.tool_result.call_id}")
        elif m.tool_calls:
            out.append(f"{m.role}:" + ",".join(c.id for c in m.tool_calls))
        else:
            out.append(f"{m.role}:{m.text}")
    return out


def test_notice_between_call_and_output_moves_after_the_outputs() -> None:
    records = [
        meta(),
        msg("user", "go"),
        call("c1"),
        call("c2"),
        msg("developer", "approved: ls"),
        output("c1", "one"),
        msg("developer", "model switched"),
        output("c2", "two"),
        msg("assistant", "done"),
    ]
    src = source_of(records)
    [conv] = codex.parse(src)
    assert shape(list(conv.messages)) == [
        "user:go",
        "assistant:c1,c2",
        "tool:c1",
        "tool:c2",
        "system:approved: ls",
        "system:model switched",
        "assistant:done",
    ]
    assert validate(conv.messages) == []
    assert src.notes == [
        "moved 2 message(s) that Codex recorded between tool calls and their outputs "
        "to just after the outputs, so no message separates a call from its result"
    ]


def test_held_message_stays_in_place_when_the_outputs_never_come() -> None:
    turn = line("turn_context", {"turn_id": "t2"})
    src = source_of([meta(), msg("user", "go"), call("c1"), msg("user", "stop"), turn, msg("assistant", "ok")])
    [conv] = codex.parse(src)
    assert shape(list(conv.messages)) == ["user:go", "assistant:c1", "user:stop", "assistant:ok"]
    assert [(p.kind, p.call_id) for p in validate(conv.messages)] == [("missing_result", "c1")]
    assert src.notes == []


def test_model_speaking_after_a_held_message_places_it_first() -> None:
    reasoning = item({"type": "reasoning", "summary": [{"type": "summary_text", "text": "again"}]})
    messages = parse([meta(), call("c1"), msg("user", "actually, wait"), reasoning, msg("assistant", "ok")])
    assert shape(messages) == ["assistant:c1", "user:actually, wait", "assistant:ok"]
    assert isinstance(messages[2].content[0], ThinkingBlock)


def test_notice_between_parallel_calls_does_not_split_the_response() -> None:
    messages = parse([meta(), call("c1"), msg("developer", "note"), call("c2"), output("c1", "1"), output("c2", "2")])
    assert shape(messages) == ["assistant:c1,c2", "tool:c1", "tool:c2", "system:note"]
    assert validate(messages) == []


def test_items_of_the_same_response_join_it_while_outputs_come_in() -> None:
    search = item({"type": "web_search_call", "action": {"type": "search", "query": "q"}})
    messages = parse(
        [meta(), msg("user", "go"), call("c1"), call("c2"), output("c2", "two"), search, output("c1", "one")]
    )
    assert shape(messages) == ["user:go", "assistant:c1,c2", "tool:c2", "tool:c1"]
    assert isinstance(messages[1].content[-1], TextBlock) and messages[1].text == "[web search: q]"
    assert validate(messages) == []


def test_output_as_a_single_content_item() -> None:
    result = result_of({"type": "input_text", "text": "a.txt\n", "detail": None, "image_url": None})
    assert isinstance(result.content, tuple)
    [part] = result.content
    assert isinstance(part, TextBlock) and part.text == "a.txt\n"
    image = result_of({"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}"})
    assert isinstance(image.content, tuple)
    [picture] = image.content
    assert isinstance(picture, ImageBlock) and (picture.media_type, picture.data) == ("image/png", PNG_B64)


def test_file_with_only_events_is_read_from_them() -> None:
    records = [
        meta(),
        line("turn_context", {"cwd": "/w", "model": "gpt-6"}),
        event({"type": "user_message", "message": "pin the deps", "images": []}),
        event({"type": "agent_reasoning", "text": "check the lockfile"}),
        event({"type": "exec_command_begin", "call_id": "e1", "command": ["ls"], "cwd": "/w"}),
        event({"type": "exec_command_end", "call_id": "e1", "aggregated_output": "uv.lock\n", "exit_code": 0}),
        event({"type": "exec_command_end", "call_id": "e2", "command": ["false"], "stdout": "", "exit_code": 1}),
        event({"type": "exec_command_begin", "call_id": "e3", "command": ["sleep", "9"], "cwd": "/w"}),
        event({"type": "agent_message", "message": "Pinned."}),
        event({"type": "token_count", "info": None}),
    ]
    src = source_of(records)
    [conv] = codex.parse(src)
    assert shape(list(conv.messages)) == [
        "user:pin the deps",
        "assistant:e1",
        "tool:e1",
        "assistant:e2",
        "tool:e2",
        "assistant:Pinned.",
    ]
    assert validate(conv.messages) == []
    first, second = (m.tool_result for m in conv.messages if m.tool_result is not None)
    assert first is not None and (first.content, first.exit_code, first.is_error) == ("uv.lock\n", 0, False)
    assert second is not None and (second.exit_code, second.is_error) == (1, True)
    assert json.loads(conv.messages[1].tool_calls[0].arguments) == {"command": ["ls"], "workdir": "/w"}
    assert any("rebuilt from its event_msg records" in n for n in src.notes)
    assert any("1 tool call(s) whose begin event has no end event" in n for n in src.notes)


def test_user_asks_kept_only_as_events_are_read_at_their_place() -> None:
    records = [
        meta(),
        event({"type": "task_started", "turn_id": "t1"}),
        event({"type": "user_message", "message": "pin the deps", "images": []}),
        call("c1"),
        output("c1", "Exit code: 0\nOutput:\nuv.lock"),
        msg("assistant", "Pinned."),
        event({"type": "agent_message", "message": "Pinned."}),
        line("turn_context", {"cwd": "/w"}),
        event({"type": "user_message", "message": "now delete the file", "images": []}),
        msg("assistant", "Deleted."),
        event({"type": "token_count", "info": None}),
    ]
    src = source_of(records)
    [conv] = codex.parse(src)
    assert shape(list(conv.messages)) == [
        "user:pin the deps",
        "assistant:c1",
        "tool:c1",
        "assistant:Pinned.",
        "user:now delete the file",
        "assistant:Deleted.",
    ]
    assert any("read 2 event_msg record(s) that no response item repeats (user_message)" in n for n in src.notes)
    assert src.left_out == {
        "event_msg agent_message (repeats a response item)": 1,
        "event_msg task_started (not conversation)": 1,
        "event_msg token_count (not conversation)": 1,
    }


def test_an_event_repeating_a_response_item_is_read_once_even_when_the_text_comes_twice() -> None:
    records = [
        meta(),
        msg("user", "ok"),
        event({"type": "user_message", "message": "ok"}),
        msg("assistant", "Done."),
        event({"type": "user_message", "message": "ok"}),  # typed again; only the event has it
        msg("assistant", "Done again."),
    ]
    assert shape(parse(records)) == ["user:ok", "assistant:Done.", "user:ok", "assistant:Done again."]


def test_a_failing_command_kept_only_as_its_end_event_is_read_with_its_exit_code() -> None:
    records = [
        meta(),
        msg("user", "run the tests"),
        event({"type": "exec_command_begin", "call_id": "e1", "command": ["pytest"], "cwd": "/w"}),
        event(
            {
                "type": "exec_command_end",
                "call_id": "e1",
                "command": ["pytest"],
                "aggregated_output": "1 failed",
                "exit_code": 1,
            }
        ),
        call("c2"),
        event({"type": "exec_command_end", "call_id": "c2", "aggregated_output": "a\n", "exit_code": 0}),
        output("c2", "Exit code: 0\nOutput:\na"),
        msg("assistant", "One test fails."),
    ]
    src = source_of(records)
    messages = list(codex.parse(src)[0].messages)
    assert shape(messages) == [
        "user:run the tests",
        "assistant:e1",
        "tool:e1",
        "assistant:c2",
        "tool:c2",
        *["assistant:One test fails."],
    ]
    failed = messages[2].tool_result
    assert failed is not None and (failed.content, failed.exit_code, failed.is_error) == ("1 failed", 1, True)
    assert validate(messages) == []
    assert src.left_out == {"event_msg exec_command_end (repeats a response item)": 1}


def test_a_web_search_event_repeating_its_item_is_read_once() -> None:
    action = {"type": "search", "query": "uv lock"}
    records = [
        meta(),
        msg("user", "look it up"),
        event({"type": "web_search_end", "call_id": "ws1", "query": "uv lock", "action": action}),
        item({"type": "web_search_call", "status": "completed", "action": action}),
        event({"type": "web_search_end", "call_id": "ws2", "action": {"type": "search", "query": "pip"}}),
    ]
    assert shape(parse(records)) == ["user:look it up", "assistant:[web search: uv lock]\n[web search: pip]"]


@pytest.mark.parametrize("lenient", [False, True])
def test_file_without_conversation_is_a_format_error(lenient: bool) -> None:
    records = [meta(), event({"type": "token_count", "info": None}), event({"type": "error", "message": "rate limit"})]
    with pytest.raises(FormatError, match="no conversation") as info:
        codex.parse(source_of(records, lenient=lenient))
    assert "event_msg error" in str(info.value)


@pytest.mark.parametrize(
    ("end", "name", "content", "is_error"),
    [
        (
            {"type": "patch_apply_end", "call_id": "p1", "stdout": "Success.\n", "stderr": "", "success": True},
            "apply_patch",
            "Success.\n",
            False,
        ),
        (
            {
                "type": "mcp_tool_call_end",
                "call_id": "p1",
                "invocation": {"server": "docs", "tool": "search", "arguments": {"q": "x"}},
                "result": {"Ok": {"content": [{"type": "text", "text": "found"}], "isError": False}},
            },
            "docs__search",
            "found",
            False,
        ),
        (
            {
                "type": "mcp_tool_call_end",
                "call_id": "p1",
                "invocation": {"server": "docs", "tool": "search"},
                "result": {"Err": "timeout"},
            },
            "docs__search",
            "timeout",
            True,
        ),
    ],
)
def test_tool_end_events_give_call_and_result(end: dict[str, Any], name: str, content: str, is_error: bool) -> None:
    messages = parse([meta(), event({"type": "user_message", "message": "go"}), event(end)])
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[1].tool_calls[0].name == name
    result = messages[2].tool_result
    assert result is not None and (result.content, result.is_error) == (content, is_error)


def test_inspect_counts_the_records_left_out_by_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctxkeep.cli import main

    records = [
        meta(),
        msg("user", "show tools"),
        event({"type": "user_message", "message": "show tools"}),
        event({"type": "token_count", "info": None}),
        event({"type": "token_count", "info": None}),
        msg("assistant", "Here."),
        "{not json",
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    assert main(["inspect", str(path), "--lenient", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["left_out"] == {
        "event_msg token_count (not conversation)": 2,
        "event_msg user_message (repeats a response item)": 1,
        "unreadable": 1,
    }
    assert main(["inspect", str(path), "--lenient"]) == 0
    text = capsys.readouterr().out
    assert "records left out (no message made of them): 4" in text
    assert "2  event_msg token_count (not conversation)" in text
