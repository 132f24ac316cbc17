"""The message model and tool-call pairing: validate and repair."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkeep.codec import message_from_dict, message_to_dict
from ctxkeep.formats.anthropic import from_anthropic, to_anthropic
from ctxkeep.formats.openai import to_openai
from ctxkeep.messages import (
    NO_RESULT_TEXT,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    make_id,
    without_surrogates,
)
from ctxkeep.pairing import repair, validate


def call(*ids: str, text: str = "") -> Message:
    blocks: list[TextBlock | ToolCall] = [TextBlock(text=text)] if text else []
    blocks += [ToolCall(id=i, name=f"tool_{i}", arguments='{"x": 1}') for i in ids]
    return Message(role="assistant", content=tuple(blocks))


def result(call_id: str, text: str = "out") -> Message:
    return Message(role="tool", content=(ToolResult(call_id=call_id, content=text),))


def user(text: str = "hi") -> Message:
    return Message.of("user", text)


def kinds(messages: list[Message]) -> list[tuple[str, int]]:
    return [(p.kind, p.index) for p in validate(messages)]


def test_messages_are_immutable() -> None:
    msg = user("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.role = "assistant"  # type: ignore[misc]
    block = TextBlock(text="x", extra={"k": [1]})
    with pytest.raises(TypeError):
        block.extra["k"] = 2  # type: ignore[index]


def test_message_rejects_misplaced_blocks() -> None:
    with pytest.raises(ValueError, match="belongs in a tool message"):
        Message(role="user", content=(ToolResult(call_id="a"),))
    with pytest.raises(ValueError, match="belongs in an assistant message"):
        Message(role="user", content=(ToolCall(id="a", name="x"),))
    with pytest.raises(ValueError, match="exactly one ToolResult"):
        Message(role="tool", content=(ToolResult(call_id="a"), ToolResult(call_id="b")))
    with pytest.raises(ValueError, match="role must be one of"):
        Message(role="bot", content=())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="from_input"):
        ToolCall(id="a", name="x", arguments={"a": 1})  # type: ignore[arg-type]


def test_make_id_is_stable() -> None:
    assert make_id("a", 1) == make_id("a", 1) != make_id("a", 2)


@given(st.lists(st.text(st.characters(exclude_categories=())) | st.integers(), min_size=1, max_size=4))
def test_make_id_is_the_uuid5_of_its_parts(parts: list[object]) -> None:
    # Ids saved in workspaces stay what they were: uuid5 in the package's namespace, lone surrogates allowed.
    texts = [str(p) for p in parts]
    if any("\x1f" in t or "\x1e" in t for t in texts):
        texts = ["\x1e", *(t.replace("\x1e", "\x1e0").replace("\x1f", "\x1e1") for t in texts)]
    namespace = uuid.UUID("5b0f6f2e-7f43-4c55-9a59-6b0c1f1d2a10").bytes
    digest = hashlib.sha1(namespace + "\x1f".join(texts).encode("utf-8", "surrogatepass")).digest()
    assert make_id(*parts) == str(uuid.UUID(bytes=digest[:16], version=5))
    assert make_id("ctxkeep-input", "user\x1f\x1ftext:ok", 0) == "3f8d2d3f-8e45-5ee0-96a7-11fd6ff738c8"


def test_native_dict_round_trip() -> None:
    msg = Message(
        role="assistant",
        content=(
            ThinkingBlock(text="hm", signature="s"),
            TextBlock(text="x", extra={"cache": True}),
            ToolCall(id="c", name="n", arguments="{}"),
        ),
        source_id="src-1",
    )
    tool = Message(
        role="tool",
        content=(
            ToolResult(
                call_id="c",
                content=(TextBlock(text="t"), ImageBlock(media_type="image/png", data="AA")),
                is_error=True,
                exit_code=3,
            ),
        ),
    )
    for m in (msg, tool):
        assert message_from_dict(message_to_dict(m)) == m


def test_well_formed_conversation_has_no_problems() -> None:
    msgs = [user(), call("a", "b"), result("a"), result("b"), call("c", text="more"), result("c"), user("thanks")]
    assert validate(msgs) == []
    assert repair(msgs) == (msgs, [])


def test_validate_finds_each_kind_with_its_index() -> None:
    assert kinds([result("x")]) == [("orphan_result", 0)]
    assert kinds([call("a"), user()]) == [("missing_result", 0)]
    assert kinds([result("a"), call("a")]) == [("result_before_call", 0)]
    assert kinds([call("a"), user(), result("a")]) == [("separated_result", 2)]
    assert kinds([call("a"), result("a"), result("a")]) == [("duplicate_result", 2)]
    assert kinds([call("a"), result("a"), call("a"), result("a")]) == [
        ("duplicate_call_id", 2),
        ("duplicate_result", 3),
    ]
    m = user()
    assert kinds([m, m]) == [("duplicate_message_id", 1)]


def test_repair_dangling_call_gets_explicit_result() -> None:
    msgs, changes = repair([user(), call("a", "b"), result("a"), user("next")])
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool", "user"]
    added = msgs[3].tool_result
    assert added is not None and added.call_id == "b" and added.text == NO_RESULT_TEXT and added.is_error
    assert [c.action for c in changes] == ["added a result for a call with none"]
    assert validate(msgs) == []


def test_repair_orphan_result_becomes_user_text() -> None:
    msgs, changes = repair([user(), result("ghost", "data 42")])
    assert [m.role for m in msgs] == ["user", "user"]
    assert "ghost" in msgs[1].text and "data 42" in msgs[1].text
    assert changes[0].call_id == "ghost"


def test_repair_moves_results_next_to_calls() -> None:
    msgs, changes = repair([result("a", "early"), call("a"), user(), call("b"), user("x"), result("b")])
    assert [m.role for m in msgs] == ["assistant", "tool", "user", "assistant", "tool", "user"]
    assert msgs[1].tool_result is not None and msgs[1].tool_result.text == "early"
    assert {c.call_id for c in changes} == {"a", "b"}
    assert validate(msgs) == []


def test_repair_renames_duplicate_call_ids_with_their_results() -> None:
    msgs, changes = repair([call("a"), result("a", "1"), call("a"), result("a", "2")])
    assert validate(msgs) == []
    second = msgs[2].tool_calls[0]
    assert second.id != "a"
    assert msgs[3].tool_result is not None and msgs[3].tool_result.call_id == second.id
    assert any("repeated call id" in c.action for c in changes)


def test_repaired_output_is_accepted_shape_for_both_apis() -> None:
    msgs, _ = repair([user(), call("a", "b"), user("interrupt"), result("b"), result("zzz")])
    chat = to_openai(msgs)
    # OpenAI: every tool message follows its assistant turn's tool_calls
    open_ids: set[str] = set()
    for m in chat:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids
            open_ids.discard(m["tool_call_id"])
        else:
            assert not open_ids
            open_ids = {c["id"] for c in m.get("tool_calls", [])}
    # Anthropic: the message after tool_use holds a tool_result for each call
    _, anth = to_anthropic(msgs)
    for prev, nxt in itertools.pairwise(anth):
        uses = {b["id"] for b in prev["content"] if isinstance(b, dict) and b["type"] == "tool_use"}
        if uses:
            got = {b["tool_use_id"] for b in nxt["content"] if b["type"] == "tool_result"}
            assert got == uses


# --- properties --------------------------------------------------------------------


@st.composite
def messy_conversations(draw: st.DrawFn) -> list[Message]:
    """Conversations with calls, results, orphans, repeats and reordering."""
    ids = [f"c{i}" for i in range(draw(st.integers(1, 6)))]
    out: list[Message] = []
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "call", "result", "result", "text"]))
        if kind == "user":
            out.append(user(draw(st.text(max_size=5))))
        elif kind == "call":
            out.append(call(*draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))))
        elif kind == "result":
            out.append(result(draw(st.sampled_from([*ids, "orphan"]))))
        else:
            out.append(Message.of("assistant", "ok"))
    return out


def _payloads(messages: list[Message]) -> list[str]:
    """Every piece of text the messages carry, to check nothing was dropped."""
    texts: list[str] = []
    for m in messages:
        for b in m.content:
            if isinstance(b, TextBlock | ToolResult):
                texts.append(b.text)
    return texts


@settings(max_examples=300, deadline=None)
@given(messy_conversations())
def test_repair_always_validates_and_drops_nothing(messages: list[Message]) -> None:
    fixed, changes = repair(messages)
    assert validate(fixed) == []
    # every input text survives, possibly inside a wrapper
    joined = "\x00".join(_payloads(fixed))
    for text in _payloads(messages):
        assert text in joined
    # calls are never dropped
    assert sum(len(m.tool_calls) for m in fixed) == sum(len(m.tool_calls) for m in messages)
    if validate(messages) == []:
        assert changes == []
    # and the Anthropic shape round-trips the pairing
    system, out = to_anthropic(fixed)
    back = from_anthropic(out, system=system)
    assert validate(back) == []


def test_image_from_url() -> None:
    data = ImageBlock.from_url("data:image/webp;base64,UklGRg==")
    assert (data.media_type, data.data, data.url) == ("image/webp", "UklGRg==", None)
    web = ImageBlock.from_url("https://example.com/a/shot.PNG?x=1")
    assert (web.media_type, web.data, web.url) == ("image/png", None, "https://example.com/a/shot.PNG?x=1")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ToolResult(call_id=None), "ToolResult.call_id must be str, got NoneType"),  # type: ignore[arg-type]
        (lambda: ToolResult(call_id=""), "non-empty id of its call"),
        (lambda: ToolResult(call_id="a", content=[{"text": "x"}]), "a part of ToolResult.content must be"),  # type: ignore[list-item]
        (lambda: ToolResult(call_id="a", exit_code="1"), "ToolResult.exit_code must be int or None"),  # type: ignore[arg-type]
        (lambda: ToolCall(id=7, name="x"), "ToolCall.id must be str"),  # type: ignore[arg-type]
        (lambda: ToolCall(id="a", name=None), "ToolCall.name must be str"),  # type: ignore[arg-type]
        (lambda: ThinkingBlock(text=None), "ThinkingBlock.text must be str"),  # type: ignore[arg-type]
        (lambda: ImageBlock(media_type="image/png", width="9"), "ImageBlock.width must be int or None"),  # type: ignore[arg-type]
        (lambda: Message(role="user", content=(), id=None), "Message.id must be str"),  # type: ignore[arg-type]
    ],
)
def test_bad_field_types_fail_with_the_field_named(build: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        build()


def test_repair_same_call_id_twice_in_one_message() -> None:
    msgs, changes = repair([call("x", "x"), result("x", "first"), result("x", "second")])
    assert validate(msgs) == []
    first, second = msgs[0].tool_calls
    assert first.id == "x" and second.id != "x"
    answers = {m.tool_result.call_id: m.tool_result.text for m in msgs[1:] if m.tool_result}
    assert answers == {"x": "first", second.id: "second"}
    assert [c.action for c in changes] == ["gave a repeated call id a new one"]


def test_renamed_call_ids_do_not_depend_on_the_window() -> None:
    history = [user(), call("x"), result("x"), user("again"), call("x"), result("x")]
    whole, _ = repair(history)
    tail, _ = repair(history[1:])
    assert whole[4].tool_calls[0].id == tail[3].tool_calls[0].id != "x"


def test_timestamps_must_be_aware_and_content_must_be_blocks() -> None:
    with pytest.raises(ValueError, match="time zone"):
        Message.of("user", "x", timestamp=datetime(2026, 1, 1))
    with pytest.raises(TypeError, match=r"Message\.timestamp must be datetime"):
        Message.of("user", "x", timestamp="2026-01-01")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"use Message\.of"):
        Message(role="user", content="hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"a block of Message\.content"):
        Message(role="user", content=("hello",))  # type: ignore[arg-type]
    assert Message.of("user", "x", timestamp=datetime(2026, 1, 1, tzinfo=UTC)).timestamp is not None


def test_without_surrogates_replaces_lone_ones_everywhere_and_joins_pairs() -> None:
    clean = Message.of("user", "ok \U0001f600", id="m", extra={"k": ["v"]})
    assert without_surrogates(clean) is clean  # nothing to do: the same object
    broken = Message(
        role="assistant",
        id="m\ud800",
        content=(
            TextBlock(text="half \ud83d, a pair \ud83d\ude00, a low \udc00"),
            ThinkingBlock(text="t\udfff", signature="s"),
            ToolCall(id="c\ud801", name="bash", arguments='{"a": "\ud83d"}', extra={"x\ud800": ["y\udc00", 1]}),
        ),
        extra={"nested": {"deep": ["\ud83d"]}},
    )
    fixed = without_surrogates(broken)
    assert fixed.id == "m\ufffd" and fixed.text == "half \ufffd, a pair \U0001f600, a low \ufffd"
    call = fixed.tool_calls[0]
    assert (call.id, call.arguments, dict(call.extra)) == ("c\ufffd", '{"a": "\ufffd"}', {"x\ufffd": ["y\ufffd", 1]})
    assert dict(fixed.extra) == {"nested": {"deep": ["\ufffd"]}}
    encoded = json.dumps(message_to_dict(fixed), ensure_ascii=False).encode("utf-8")  # no surrogate is left
    assert message_from_dict(json.loads(encoded)) == fixed
