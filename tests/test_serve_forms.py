"""The proxy's outgoing messages: each context message converted to the wire form once while it stays."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxkeep import Message, Session
from ctxkeep.serve.chat import ChatCompletions
from ctxkeep.serve.dialect import BadRequest, WireForms
from ctxkeep.serve.known import KnownBodies
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


def a_turn(i: int, route: str) -> list[dict[str, Any]]:
    """A tool call, its ~2 KB result sent back with the next ask (in Anthropic's form one user message: one group
    of two ctxkeep messages), an answer, and two user messages in a row (a run the Anthropic route joins)."""
    result, ask = f"line {i}\n" * 300, f"and log {i}?"
    if route == "anthropic":
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "read_log", "input": {"n": i}}
        back = [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": result}, {"type": "text", "text": ask}]
        calls = [{"role": "assistant", "content": [{"type": "text", "text": f"Reading log {i}."}, use]}]
        results = [{"role": "user", "content": back}]
    else:
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "read_log", "arguments": f'{{"n": {i}}}'}}
        calls = [{"role": "assistant", "content": f"Reading log {i}.", "tool_calls": [call]}]
        results = [{"role": "tool", "tool_call_id": f"call_{i}", "content": result}, {"role": "user", "content": ask}]
    return [
        *calls,
        *results,
        {"role": "assistant", "content": f"Log {i} is fine."},
        {"role": "user", "content": f"next {i}"},
        {"role": "user", "content": f"(and be brief {i})"},
    ]


@pytest.mark.parametrize("route", ["anthropic", "openai"])
def test_a_body_made_from_the_last_one_is_the_body_made_whole(tmp_path: Path, route: str) -> None:
    """Across growth, retries and compactions (a summary at the head), the body made with the branch's kept
    forms (the Anthropic route folds only its last run of one role again) equals one made from nothing, and a
    summary that stays is serialized once."""
    dialect: AnthropicMessages | ChatCompletions = AnthropicMessages() if route == "anthropic" else ChatCompletions()
    forms = WireForms()
    history: list[dict[str, Any]] = [{"role": "user", "content": "read the logs"}]
    compactions, heads = 0, []
    with Session.open(tmp_path, window=8_000) as session:
        for i in range(30):
            history += a_turn(i, route)
            body = {"model": "m", "max_tokens": 100, "messages": history}
            for _ in range(2 if i % 7 == 3 else 1):  # now and then the same request again (a retry)
                turn = dialect.parse(body)
                session.sync(turn.history)
                step = session.prepare(turn.system)
                compactions += step.compaction is not None
                kept = dialect.outgoing(body, turn, step, forms)
                whole = dialect.outgoing(body, turn, step, WireForms())
                assert orjson.loads(orjson.dumps(kept)) == orjson.loads(orjson.dumps(whole))
                heads.append((step.context.summary, kept["messages"][0]))
    assert compactions >= 2
    same = [b is a for (s, a), (t, b) in pairwise(heads) if s is not None and s == t]
    assert same and all(same)  # the summary's message went out as it was serialized the first time


def test_a_role_the_route_does_not_take_is_refused_in_every_body_that_holds_it(tmp_path: Path) -> None:
    """Messages taken in an earlier request go unchecked in a later one (`KnownBodies.accepted`); a refused
    message never counts as taken, in its own body or in the longer ones after it."""
    chat, known = ChatCompletions(), KnownBodies(limit=4)
    history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for turn in range(3):
        body, _ = known.parse(orjson.dumps({"model": "m", "messages": history}), "s")
        assert isinstance(body, dict)
        chat.parse(body, checked=known.accepted(body))
        known.accept(body)
        history += [{"role": "assistant", "content": f"a{turn}"}, {"role": "user", "content": f"q{turn}"}]
    history += [{"role": "function", "content": "legacy"}]
    for _ in range(2):
        body, _ = known.parse(orjson.dumps({"model": "m", "messages": history}), "s")
        assert isinstance(body, dict)
        assert known.accepted(body) == 5  # the last body taken; the refused one adds none
        with pytest.raises(BadRequest, match=r"messages\[7\]\.role"):
            chat.parse(body, checked=known.accepted(body))
        history += [{"role": "user", "content": "again"}]
