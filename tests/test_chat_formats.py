"""OpenAI, Anthropic and AgentScope messages: lossless round trips and conversions."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import raw_params

from ctxkeep.errors import FormatError
from ctxkeep.formats import load
from ctxkeep.formats.agentscope import from_agentscope, to_agentscope
from ctxkeep.formats.anthropic import from_anthropic, to_anthropic
from ctxkeep.formats.openai import from_openai, to_openai
from ctxkeep.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.pairing import validate

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

OPENAI_CHAT: list[dict[str, Any]] = [
    {"role": "developer", "content": "You are terse."},
    {"role": "system", "content": "Use tools."},
    {
        "role": "user",
        "name": "ann",
        "content": [
            {"type": "text", "text": "What is in /tmp and this picture?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}", "detail": "low"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "/tmp"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "stat", "arguments": "{not json"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "bad args"}]},
    {
        "role": "assistant",
        "content": "",
        "refusal": None,
        "tool_calls": [
            {"id": "call_3", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_3", "content": "done"},
    {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Two files."}, {"type": "refusal", "refusal": "no"}]},
    {"role": "assistant", "tool_calls": [{"id": "call_4", "function": {"name": "x", "arguments": "{}"}, "index": 0}]},
    {"role": "tool", "tool_call_id": "call_4", "content": "ok"},
]

ANTHROPIC_SYSTEM: list[dict[str, Any]] = [
    {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}},
]
ANTHROPIC_CHAT: list[dict[str, Any]] = [
    {"role": "user", "content": "List /tmp and read a.txt"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Two tools at once.", "signature": "sig=="},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "/tmp", "n": 1.5}},
            {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "/tmp/a.txt"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "is_error": True,
                "content": [
                    {"type": "text", "text": "permission denied"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
                ],
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "text", "text": "also check b"},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "Done.", "citations": [{"type": "char_location", "cited_text": "a"}]},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "is_error": False}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t9", "name": "noop", "input": {}}]},
]

AGENTSCOPE_MSGS: list[dict[str, Any]] = [
    {
        "id": "m1",
        "name": "user",
        "role": "user",
        "content": "hello",
        "metadata": {},
        "timestamp": "2025-03-01 10:00:00.000",
    },
    {
        "id": "m2",
        "name": "Friday",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "need to look"},
            {"type": "tool_use", "id": "c1", "name": "execute_shell_command", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "c2", "name": "view_text_file", "input": {"file_path": "a.md"}},
        ],
        "metadata": {},
        "timestamp": "2025-03-01 10:00:01.000",
        "invocation_id": "inv-1",
    },
    {
        "id": "m3",
        "name": "system",
        "role": "system",
        "content": [
            {"type": "tool_result", "id": "c1", "name": "execute_shell_command", "output": "a.md"},
            {
                "type": "tool_result",
                "id": "c2",
                "name": "view_text_file",
                "output": [{"type": "text", "text": "# A"}, {"type": "audio", "source": {"type": "url", "url": "u"}}],
            },
        ],
        "metadata": {},
        "timestamp": "2025-03-01 10:00:02.000",
    },
    {
        "id": "m4",
        "name": "Friday",
        "role": "assistant",
        "content": [{"type": "text", "text": "Done"}],
        "metadata": {"x": 1},
        "timestamp": "2025-03-01 10:00:03.000",
        "generate_reason": "normal_reply",
    },
]


def test_openai_round_trip_is_lossless() -> None:
    original = copy.deepcopy(OPENAI_CHAT)
    messages = from_openai(OPENAI_CHAT)
    assert to_openai(messages) == original
    assert original == OPENAI_CHAT  # input untouched


def test_openai_import_model() -> None:
    messages = from_openai(OPENAI_CHAT)
    assert [m.role for m in messages][:4] == ["system", "system", "user", "assistant"]
    image = messages[2].content[1]
    assert isinstance(image, ImageBlock) and image.media_type == "image/png" and image.data == PNG_B64
    calls = messages[3].tool_calls
    assert [c.id for c in calls] == ["call_1", "call_2"] and calls[1].arguments == "{not json"
    assert validate(messages) == []


def test_anthropic_round_trip_is_lossless() -> None:
    original = copy.deepcopy(ANTHROPIC_CHAT)
    messages = from_anthropic(ANTHROPIC_CHAT, system=ANTHROPIC_SYSTEM)
    system, out = to_anthropic(messages)
    assert system == ANTHROPIC_SYSTEM
    assert out == original


def test_anthropic_string_system_round_trips() -> None:
    messages = from_anthropic(ANTHROPIC_CHAT[:1], system="Be brief.")
    assert to_anthropic(messages) == ("Be brief.", ANTHROPIC_CHAT[:1])


def test_anthropic_results_become_tool_messages() -> None:
    messages = from_anthropic(ANTHROPIC_CHAT)
    roles = [m.role for m in messages]
    assert roles[:5] == ["user", "assistant", "tool", "tool", "user"]
    thinking = messages[1].content[0]
    assert isinstance(thinking, ThinkingBlock) and thinking.signature == "sig=="
    call = messages[1].tool_calls[0]
    assert json.loads(call.arguments) == {"path": "/tmp", "n": 1.5}
    result = messages[3].tool_result
    assert result is not None and result.is_error and "permission denied" in result.text


def test_openai_to_anthropic_conversion_is_api_shaped() -> None:
    messages = from_openai(OPENAI_CHAT)
    system, out = to_anthropic(messages)
    assert isinstance(system, list) and [b["text"] for b in system] == ["You are terse.", "Use tools."]
    assistant = out[1]
    assert [b["type"] for b in assistant["content"]] == ["tool_use", "tool_use"]
    assert assistant["content"][1]["input"] == {"arguments": "{not json"}  # not an object: wrapped
    results = out[2]
    assert results["role"] == "user"
    assert [b["tool_use_id"] for b in results["content"]] == ["call_1", "call_2"]


def test_anthropic_to_openai_conversion() -> None:
    out = to_openai(from_anthropic(ANTHROPIC_CHAT[:3]))
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user"]
    assert out[1]["content"] == "Looking."
    assert out[1]["tool_calls"][0] == {
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "ls", "arguments": '{"path": "/tmp", "n": 1.5}'},
    }
    assert out[3]["content"][1]["type"] == "text"  # image in a tool result becomes a note
    assert out[4] == {"role": "user", "content": "also check b"}


def test_agentscope_round_trip_is_lossless() -> None:
    original = copy.deepcopy(AGENTSCOPE_MSGS)
    messages = from_agentscope(AGENTSCOPE_MSGS)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert messages[0].id == "m1" and messages[0].timestamp is not None
    assert validate(messages) == []
    assert to_agentscope(messages) == original


def test_agentscope_export_of_foreign_messages() -> None:
    out = to_agentscope(from_openai(OPENAI_CHAT[2:6]))
    assert [m["role"] for m in out] == ["user", "assistant", "system"]
    results = out[2]["content"]
    assert [(b["id"], b["name"]) for b in results] == [("call_1", "ls"), ("call_2", "stat")]


@pytest.mark.parametrize(
    ("convert", "bad", "fragment"),
    [
        (from_openai, [{"content": "x"}], "message 0: missing field 'role'"),
        (from_openai, [{"role": "robot", "content": "x"}], "unknown role"),
        (from_anthropic, [{"role": "user"}], "missing field 'content'"),
        (from_agentscope, ["text"], "expected a Msg object"),
    ],
)
def test_bad_messages_say_what_is_wrong(convert: Any, bad: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        convert(bad)


_text = st.text(max_size=30)
_args = st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), _text, st.booleans(), st.none()), max_size=3)


@st.composite
def _openai_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": draw(_text)}]
    for turn in range(draw(st.integers(0, 4))):
        out.append({"role": "user", "content": draw(_text)})
        n = draw(st.integers(0, 3))
        calls = [
            {
                "id": f"c{turn}_{k}",
                "type": "function",
                "function": {"name": draw(_text), "arguments": json.dumps(draw(_args))},
            }
            for k in range(n)
        ]
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": draw(st.one_of(st.none(), _text)) if calls else draw(_text),
        }
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
        out.extend({"role": "tool", "tool_call_id": c["id"], "content": draw(_text)} for c in calls)
    return out


@settings(max_examples=60, deadline=None)
@given(_openai_conversations())
def test_openai_round_trip_property(chat: list[dict[str, Any]]) -> None:
    messages = from_openai(chat)
    assert to_openai(messages) == chat
    assert validate(messages) == []
    # and through Anthropic's shape: every call keeps its result
    system, out = to_anthropic(messages)
    back = from_anthropic(out, system=system)
    calls = [c.id for m in back for c in m.tool_calls]
    results = [r.call_id for m in back if (r := m.tool_result) is not None]
    assert calls == results
    assert all(isinstance(b, ToolCall | ToolResult) or b for m in back for b in m.content)


# --- real data -----------------------------------------------------------------------


@pytest.mark.parametrize("path", raw_params("tau_bench_results"))
def test_openai_round_trip_on_real_tau_bench_trajectories(path: Path) -> None:
    runs = json.loads(path.read_text(encoding="utf-8"))
    for run in runs:
        original = copy.deepcopy(run["traj"])
        assert to_openai(from_openai(run["traj"])) == original


@pytest.mark.parametrize("path", raw_params("claude_code"))
def test_anthropic_round_trip_on_real_claude_code_messages(path: Path) -> None:
    """Each Claude Code entry holds an Anthropic API message: it must come back equal."""
    messages = []
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") in ("user", "assistant") and isinstance(entry.get("message"), dict):
            messages.append(entry["message"])
    assert messages
    original = copy.deepcopy(messages)
    for i, msg in enumerate(messages):  # one at a time: consecutive entries may share a role
        system, out = to_anthropic(from_anthropic([msg]))
        assert system is None
        assert out == [original[i]]


_ODD: list[Any] = [None, 0, "", "x", [], {}, [None], {"type": None}, True]


def _json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _json_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:10]):
            out += _json_paths(v, (*prefix, i))
    return out


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_converters_reject_odd_input_with_value_error_only(data: st.DataObject) -> None:
    """Any field dropped or of the wrong type: a ValueError naming the message, never another error."""
    name, convert, sample = data.draw(
        st.sampled_from(
            [
                ("openai", from_openai, OPENAI_CHAT),
                ("anthropic", from_anthropic, ANTHROPIC_CHAT),
                ("agentscope", from_agentscope, AGENTSCOPE_MSGS),
            ]
        ),
        label="format",
    )
    msgs = copy.deepcopy(sample)
    path = data.draw(st.sampled_from(_json_paths(msgs)[1:]), label="path")
    parent = msgs
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans(), label="drop") and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(st.sampled_from(_ODD), label="odd")
    try:
        messages = convert(msgs)
    except ValueError as exc:
        assert str(exc).startswith(("message ", "Msg ")), f"{name}: {exc}"
        return
    # what was accepted exports again without error
    {"openai": to_openai, "anthropic": to_anthropic, "agentscope": to_agentscope}[name](messages)


# --- review fixes ----------------------------------------------------------------------


def test_jsonl_files_keep_messages_apart_on_export(tmp_path: Path) -> None:
    """Per-line conversion must not merge unrelated messages when exported again."""
    lines = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "text", "text": "second"}]},
        {"role": "user", "content": "third"},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in lines) + "\n")
    messages = load(path, format="anthropic").messages
    assert len({m.id for m in messages}) == 3
    assert to_anthropic(messages)[1] == lines
    msgs = [
        {"id": f"m{i}", "name": "u", "role": r, "content": t, "metadata": {}, "timestamp": None}
        for i, (r, t) in enumerate([("user", "a"), ("assistant", "b")])
    ]
    as_path = tmp_path / "msgs.jsonl"
    as_path.write_text("\n".join(json.dumps(m) for m in msgs) + "\n")
    assert to_agentscope(load(as_path, format="agentscope").messages) == msgs


def test_agentscope_keeps_extra_block_keys() -> None:
    msgs = [
        {
            "id": "a",
            "name": "Friday",
            "role": "assistant",
            "metadata": {},
            "timestamp": "2025-03-01 10:00:00.000",
            "content": [
                {"type": "thinking", "thinking": "secret plan", "signature": "sig"},
                {"type": "tool_use", "id": "c1", "name": "shell", "input": {"cmd": "ls"}, "raw_input": '{"cmd": "ls"}'},
            ],
        },
        {
            "id": "b",
            "name": "system",
            "role": "system",
            "metadata": {},
            "timestamp": "2025-03-01 10:00:01.000",
            "content": [{"type": "tool_result", "id": "c1", "name": "shell", "output": "a.md"}],
        },
    ]
    messages = from_agentscope(msgs)
    assert validate(messages) == []
    thinking = messages[0].content[0]
    assert isinstance(thinking, ThinkingBlock) and thinking.signature == "sig"
    assert to_openai(messages)[0]["content"] is None  # hidden reasoning is not sent as text
    assert to_agentscope(messages) == msgs


def test_to_anthropic_leaves_out_what_the_api_rejects() -> None:
    messages = [
        Message.of("system", ""),
        Message(role="user", content=(TextBlock(text=""),)),
        Message(role="assistant", content=(ThinkingBlock(text="other provider's reasoning"), TextBlock(text="hi"))),
        Message(role="assistant", content=(ThinkingBlock(text="", signature="", redacted=True),)),
        Message(role="assistant", content=(ToolCall(id="t", name="noargs", arguments=""),)),
        Message(role="tool", content=(ToolResult(call_id="t", content="ok"),)),
    ]
    system, out = to_anthropic(messages)
    assert system is None
    assert out == [
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "noargs", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
    ]


def test_pretty_printed_request_body_loads(tmp_path: Path) -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body, indent=2))
    assert [m.text for m in load(path).messages] == ["hi", "yo"]
    anth = tmp_path / "anthropic.json"
    anth.write_text(json.dumps({"system": "be brief", **body}, indent=2))
    transcript = load(anth)
    assert transcript.format == "anthropic" and transcript.messages[0].role == "system"
    with pytest.raises(FormatError, match="use --format anthropic"):
        load(anth, format="openai")


def test_ids_follow_position_with_start() -> None:
    a = from_openai([{"role": "user", "content": "one"}])
    b = from_openai([{"role": "user", "content": "two"}], start=1)
    both = from_openai([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
    assert [m.id for m in a + b] == [m.id for m in both]
    with pytest.raises(ValueError, match="expected a list of messages"):
        from_openai("hello")  # type: ignore[arg-type]


def test_openai_arguments_given_as_an_object() -> None:
    chat = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
        }
    ]
    messages = from_openai(chat)
    assert messages[0].tool_calls[0].arguments == '{"a": 1}'
    assert to_openai(messages) == chat
    del chat[0]["tool_calls"][0]["function"]["arguments"]
    assert to_openai(from_openai(chat)) == chat
