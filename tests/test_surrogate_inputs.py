"""Lone UTF-16 surrogates (what Node's JSON.stringify writes, and Python's json reads back) through every
way a host hands messages in: dicts, SDK objects, `Session.add`/`sync`, `from_openai`/`from_anthropic`
and the adapters' converters. Each replaces them with U+FFFD, keeps the message, and logs a warning once,
when the message is added; no way raises `UnicodeEncodeError`, and the conversation goes on."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from ctxkeep import Session, to_messages
from ctxkeep.formats.anthropic import from_anthropic
from ctxkeep.formats.openai import from_openai, to_openai
from ctxkeep.messages import Message, make_id

HIGH, LOW = "\ud83d", "\udc00"


def openai_turn() -> list[dict[str, Any]]:
    call = {"id": f"c{HIGH}", "type": "function", "function": {"name": "grep", "arguments": f'{{"q": "{LOW}"}}'}}
    return [
        {"role": "user", "content": f"find {HIGH}x"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{HIGH}", "content": f"found {LOW}"},
    ]


def anthropic_turn() -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": f"t{LOW}", "name": "grep", "input": {"q": HIGH}}
    result = {"type": "tool_result", "tool_use_id": f"t{LOW}", "content": [{"type": "text", "text": f"r{HIGH}"}]}
    return [
        {"role": "user", "content": [{"type": "text", "text": f"find {LOW}"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, use]},
        {"role": "user", "content": [result]},
    ]


def responses_turn() -> list[dict[str, Any]]:
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"find {HIGH}"}]},
        {"type": "function_call", "call_id": f"f{HIGH}", "name": "grep", "arguments": "{}", "id": f"fc{LOW}"},
        {"type": "function_call_output", "call_id": f"f{HIGH}", "output": f"out {LOW}"},
    ]


def storable(messages: list[Message]) -> bool:
    """Whether every message's text, ids and arguments can be written as UTF-8 (what a file or a body needs)."""
    text = json.dumps(to_openai(messages), ensure_ascii=False)
    text.encode("utf-8")
    return "\ufffd" in text


TURNS = {"openai": openai_turn, "anthropic": anthropic_turn, "responses": responses_turn}


@pytest.mark.parametrize("kind", TURNS)
def test_dicts_of_every_kind_are_converted_with_replacements(kind: str) -> None:
    messages = to_messages(TURNS[kind]())
    assert storable(messages)
    assert to_messages(TURNS[kind]()) == messages  # ids stay derived from content: the same each time


@pytest.mark.parametrize("kind", TURNS)
def test_session_add_and_sync_keep_the_turn_and_go_on(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = TURNS[kind]()
    with caplog.at_level(logging.WARNING, logger="ctxkeep"), Session.open(tmp_path / "a") as s:
        added = s.sync(history)
        assert len(added) == 3 and storable(list(s.messages))
        assert sum("U+FFFD" in r.getMessage() for r in caplog.records) == 3  # each message noted once
        caplog.clear()
        assert s.sync(history) == []  # the next turn: the same history is recognised, nothing re-noted
        history.append({"role": "user", "content": "next"})
        assert [m.text for m in s.sync(history)] == ["next"]
        assert not [r for r in caplog.records if "U+FFFD" in r.getMessage()]
        s.prepare()
        kept = list(s.messages)
    with Session.open(tmp_path / "a") as s:
        assert list(s.messages) == kept
        assert s.sync(history) == []
    with Session.open(tmp_path / "b") as s:
        s.add(TURNS[kind]())
        assert storable(list(s.messages))


def test_sdk_objects_are_converted_with_replacements(tmp_path: Path) -> None:
    from anthropic.types import Message as AnthropicMessage
    from openai.types.chat import ChatCompletionMessage

    chat = ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": None, "tool_calls": openai_turn()[1]["tool_calls"]}
    )
    reply = AnthropicMessage.model_validate(
        {
            "id": f"msg{HIGH}",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": anthropic_turn()[1]["content"],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    with Session.open(tmp_path) as s:
        s.add([{"role": "user", "content": "go"}, chat, openai_turn()[2]])
        s.add({"role": "assistant", "content": reply.content})  # the usual loop: the SDK's blocks in a dict
        s.add(anthropic_turn()[2])
        assert storable(list(s.messages))
        assert s.messages[1].tool_calls[0].id == "c\ufffd"


def test_messages_given_directly_are_stored_with_replacements(tmp_path: Path) -> None:
    with Session.open(tmp_path) as s:
        s.add(Message.of("user", f"a{HIGH}", id="u1"))
        s.sync([Message.of("user", f"a{HIGH}", id="u1"), Message.of("user", f"b{LOW}", id="u2")])
        assert [m.text for m in s.messages] == ["a\ufffd", "b\ufffd"]


def test_from_openai_and_from_anthropic_replace_and_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ctxkeep"):
        assert storable(from_openai(openai_turn()))
        assert storable(from_anthropic(anthropic_turn(), system=f"be {HIGH}"))
    assert sum("U+FFFD" in r.getMessage() for r in caplog.records) == 7  # 3 + the system + 3


def test_make_id_takes_any_text() -> None:
    assert make_id("a", HIGH) != make_id("a", LOW) != make_id("a", "\ufffd")
    assert make_id("plain", 1) == str(uuid.uuid5(uuid.UUID("5b0f6f2e-7f43-4c55-9a59-6b0c1f1d2a10"), "plain\x1f1"))


@pytest.mark.extra("langchain")
def test_langchain_messages_with_surrogates_sync_and_are_sent_replaced(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from ctxkeep.adapters.langchain import as_chat_dicts, handback
    from ctxkeep.host import core as _core

    ai = AIMessage(content="", tool_calls=[{"id": "c1", "name": "grep", "args": {"q": HIGH}}])
    history = [HumanMessage(f"find {HIGH}"), ai, ToolMessage(f"found {LOW}", tool_call_id="c1")]
    with Session.open(tmp_path) as s:
        _, pieces = _core.prepare(s, as_chat_dicts(history), None, None)
        sent = handback(pieces, history)
    assert sent[0].content == "find \ufffd" and sent[2].content == "found \ufffd"


@pytest.mark.extra("pydantic-ai")
def test_pydantic_ai_history_with_surrogates_syncs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from ctxkeep.adapters.pydantic_ai import from_pydantic_ai

    history = [ModelRequest(parts=[UserPromptPart(content=f"hi {HIGH}")]), ModelResponse(parts=[TextPart(f"yo {LOW}")])]
    with caplog.at_level(logging.WARNING, logger="ctxkeep"), Session.open(tmp_path) as s:
        first = from_pydantic_ai(history).messages
        s.sync(first)
        assert [m.text for m in s.messages] == ["hi \ufffd", "yo \ufffd"]
        assert [m.id for m in first] == [m.id for m in from_pydantic_ai(history).messages]
        assert s.sync(from_pydantic_ai(history).messages) == []
    assert sum("U+FFFD" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.extra("agentscope")
def test_agentscope_history_with_surrogates_syncs(tmp_path: Path) -> None:
    from agentscope.message import AssistantMsg, UserMsg

    from ctxkeep.adapters.agentscope import history_messages

    history = [UserMsg(name="user", content=f"hi {HIGH}"), AssistantMsg(name="agent", content=f"yo {LOW}")]
    with Session.open(tmp_path) as s:
        s.sync(history_messages(history))
        assert [m.text for m in s.messages] == ["hi \ufffd", "yo \ufffd"]
        assert s.sync(history_messages(history)) == []
