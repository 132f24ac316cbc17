"""The proxy's outgoing messages: each context message converted to the wire form once while it stays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxkeep import Message, Session
from ctxkeep.serve.chat import ChatCompletions
from ctxkeep.serve.dialect import WireForms
from ctxkeep.serve.messages_api import AnthropicMessages, alternate

pytestmark = pytest.mark.extra("serve")


def test_wire_forms_convert_only_the_messages_the_last_call_did_not_have() -> None:
    a, b, c = (Message.of("user", text) for text in ("a", "b", "c"))
    converted: list[str] = []

    def convert(message: Message) -> dict[str, Any]:
        converted.append(message.text)
        return {"content": message.text}

    forms = WireForms()
    first = forms.of([a, b], convert)
    second = forms.of([a, b, c], convert)
    assert converted == ["a", "b", "c"]
    assert second[0] is first[0] and second[1] is first[1]
    edited = Message.of("user", "b")  # equal to b, but another message: an offloaded output is one
    forms.of([a, edited], convert)
    forms.of([c], convert)  # c was not in the last call: forgotten, converted again
    assert converted == ["a", "b", "c", "b", "c"]

    def other(message: Message) -> dict[str, Any]:
        return {"other": message.text}

    assert forms.of([c], other) == [{"other": "c"}]  # another route's form is never mistaken for this one's


def test_the_outgoing_body_is_the_steps_context_and_reuses_what_stayed(tmp_path: Path) -> None:
    system = {"role": "system", "content": "You are terse."}
    history: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
    call = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    chat, forms = ChatCompletions(), WireForms()
    sent = []
    with Session.open(tmp_path, window=100_000) as session:
        for turn_messages in (
            [],
            [{"role": "assistant", "content": None, "tool_calls": [call]}],
            [{"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"}, {"role": "user", "content": "and?"}],
        ):
            history += turn_messages
            body = {"model": "m", "messages": [system, *history], "temperature": 0}
            turn = chat.parse(body)
            session.sync(turn.history)
            step = session.prepare(turn.system)
            out = chat.outgoing(body, turn, step, forms)
            # Each message's JSON is sent as it was serialized once (an `orjson.Fragment`).
            assert orjson.loads(orjson.dumps(out)) == {**body, "messages": [system, *step.to_openai(system=False)]}
            sent.append(out["messages"])
    assert len(sent[2]) == 5 and all(sent[2][i] is sent[1][i] for i in range(3))


def test_the_anthropic_body_is_the_steps_context_with_each_group_converted_once(tmp_path: Path) -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py"}
    turns: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": "list the files"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "Listing."}, use]}],
        # The result and the next ask in one user message: one group of two ctxkeep messages.
        [{"role": "user", "content": [result, {"type": "text", "text": "and?"}]}],
        [{"role": "assistant", "content": "Two files."}, {"role": "user", "content": "thanks"}],
    ]
    messages, forms, history = AnthropicMessages(), WireForms(), []
    sent = []
    with Session.open(tmp_path, window=100_000) as session:
        for new in turns:
            history += new
            body = {"model": "m", "max_tokens": 100, "system": "Be terse.", "messages": history}
            turn = messages.parse(body)
            session.sync(turn.history)
            step = session.prepare(turn.system)
            out = messages.outgoing(body, turn, step, forms)
            expected = {**body, "messages": alternate([dict(m) for m in step.to_anthropic()[1]])}
            assert orjson.loads(orjson.dumps(out)) == expected
            sent.append(out["messages"])
    assert len(sent[3]) == 5 and all(sent[3][i] is sent[2][i] for i in range(3))  # serialized once, sent again
