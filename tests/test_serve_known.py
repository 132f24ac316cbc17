"""Request bodies parsed by their new messages alone (`ctxkeep.serve.known`): always what a whole parse gives."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkeep.serve import known as known_mod
from ctxkeep.serve.known import KnownBodies, extended, located

pytestmark = pytest.mark.extra("serve")

Serializer = Callable[[Any], bytes]
# How SDKs write a body: Python's json (spaces, \u escapes), JavaScript's JSON.stringify (compact, UTF-8), indented.
SERIALIZERS: dict[str, Serializer] = {
    "python": lambda v: json.dumps(v).encode(),
    "compact": orjson.dumps,
    "indented": lambda v: json.dumps(v, indent=2, ensure_ascii=False).encode(),
}
# Text that a scanner of brackets and quotes could trip on.
TEXT = st.text(alphabet=st.sampled_from(list('ab ]}[{",:\\\n\té数🙂')), max_size=12)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": TEXT},
    optional={
        "extra": st.lists(st.dictionaries(TEXT, TEXT, max_size=2), max_size=2),
        "n": st.integers(-(2**53), 2**53),
    },
)
# What a turn does to the history: add messages, rewrite one of the last (a moved cache marker), rewrite an
# early one (an edit), change a field after the messages, or send the same body again (a retry).
STEP = st.one_of(
    st.tuples(st.just("add"), st.lists(MESSAGE, min_size=1, max_size=3)),
    st.tuples(st.just("mark"), st.integers(1, 3)),
    st.tuples(st.just("edit"), st.integers(0, 100)),
    st.tuples(st.just("field"), TEXT),
    st.tuples(st.just("again"), st.none()),
)


def _apply(messages: list[dict[str, Any]], fields: dict[str, Any], step: tuple[str, Any]) -> None:
    kind, arg = step
    if kind == "add":
        messages += arg
    elif kind == "mark":
        i = max(0, len(messages) - arg)
        messages[i] = {**messages[i], "cache_control": {"type": "ephemeral"}}
    elif kind == "edit":
        messages[arg % len(messages)] = {"role": "user", "content": "edited"}
    elif kind == "field":
        fields["metadata"] = {"note": arg}


@settings(max_examples=150, deadline=None)
@given(
    serializer=st.sampled_from(sorted(SERIALIZERS)),
    first=st.lists(MESSAGE, min_size=1, max_size=4),
    steps=st.lists(STEP, max_size=8),
    head=st.booleans(),
)
def test_every_body_parses_to_what_a_whole_parse_gives(
    serializer: str, first: list[dict[str, Any]], steps: list[tuple[str, Any]], head: bool
) -> None:
    dump = SERIALIZERS[serializer]
    known = KnownBodies(limit=4)
    messages, fields = list(first), {"tools": [{"type": "function", "function": {"name": "a]{"}}]}
    for step in [("again", None), *steps]:
        _apply(messages, fields, step)
        # Fields before the messages (as the anthropic SDK writes them) or after (as openai's does).
        body = (
            {"model": "m", "messages": messages, **fields} if head else {"messages": messages, "model": "m", **fields}
        )
        raw = dump(body)
        assert known.parse(raw, "s") == (orjson.loads(raw), False)


def _raw(messages: list[dict[str, Any]], **fields: Any) -> bytes:
    return json.dumps({"messages": messages, "model": "m", **fields}).encode()


def test_a_grown_body_is_read_from_the_known_one_and_an_edit_is_not() -> None:
    history = [{"role": "user", "content": f"ask {i} ]}}"} for i in range(5)]
    first = _raw(history)
    known = located(first, orjson.loads(first))
    assert known is not None
    grown = _raw([*history, {"role": "assistant", "content": "done"}])
    taken = extended(known, grown)
    assert taken is not None and taken.body == orjson.loads(grown)
    assert all(a is b for a, b in zip(taken.messages, known.messages, strict=False))  # the known ones, not parsed again
    assert extended(known, first) is not None  # a retry: nothing new
    edited = _raw([{"role": "user", "content": "ask 0, edited"}, *history[1:]])
    assert extended(known, edited) is None  # an earlier message changed: parsed whole


@pytest.mark.parametrize(
    "tail",
    [
        b",]",  # a trailing comma
        b',{"role":"user"}]]',  # one bracket too many
        b',{"role":"user","content":"open]',  # a string never closed
        b' {"role":"user"}]',  # no comma
        b",1]",  # not an object
    ],
)
def test_a_broken_new_tail_gets_the_whole_parse_and_its_error(tail: bytes) -> None:
    known = KnownBodies(limit=4)
    head = b'{"messages":[{"role":"user","content":"a"}'
    known.parse(head + b'],"model":"m"}', "s")
    raw = head + tail + b',"model":"m"}'
    try:
        expected: object = orjson.loads(raw)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            known.parse(raw, "s")
    else:
        assert known.parse(raw, "s")[0] == expected


def test_messages_named_twice_is_never_read_by_parts() -> None:
    first = b'{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}'
    assert located(first, orjson.loads(first)) is None  # the parse took the second: the bytes say the first
    known = KnownBodies(limit=4)
    base = b'{"messages":[{"role":"user","content":"a"}],"model":"m"}'
    known.parse(base, "s")
    sneaky = b'{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"messag\\u0065s":[]}'
    assert known.parse(sneaky, "s")[0] == orjson.loads(sneaky)  # the fields after them name it again


def test_a_body_naming_a_field_twice_is_never_reused() -> None:
    message = b'{"role":"user","content":"' + b"x" * 200 + b'"}'
    first = b'{"model":"a","messages":[' + message + b'],"model":"b"}'
    assert located(first, orjson.loads(first)) is None  # its head would say "b" where a later body says "a"
    known = KnownBodies(limit=4)
    known.parse(first, "s")
    grown = b'{"model":"a","messages":[' + message + b',{"role":"assistant","content":"hi"}],"stream":true}'
    assert known.parse(grown, "s")[0] == orjson.loads(grown)


def test_a_lone_surrogate_in_the_new_messages_is_replaced_as_in_a_whole_parse() -> None:
    known = KnownBodies(limit=4)
    known.parse(b'{"messages":[{"role":"user","content":"a"}]}', "s")
    body, replaced = known.parse(
        b'{"messages":[{"role":"user","content":"a"},{"role":"user","content":"\\ud800"}]}', "s"
    )
    assert replaced and body == {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "\ufffd"}]}


def test_conversations_that_begin_alike_are_each_known(monkeypatch: pytest.MonkeyPatch) -> None:
    known = KnownBodies(limit=8)
    system = {"role": "system", "content": "You are terse. " * 20}
    histories = [[system, {"role": "user", "content": f"task {k}"}] for k in range(3)]
    for history in histories:
        known.parse(_raw(history), None)
    whole: list[bytes] = []
    monkeypatch.setattr(known_mod, "request_json", lambda raw: whole.append(raw) or (orjson.loads(raw), False))
    for history in histories:
        grown = _raw([*history, {"role": "assistant", "content": "ok"}])
        assert known.parse(grown, None)[0] == orjson.loads(grown)
    assert whole == []  # each read by its new message alone
    known.parse(_raw([system, {"role": "user", "content": "task 9"}]), None)
    assert whole == []  # the system message is known: only the ask after it is new
    other = {"role": "system", "content": "You are terse. " * 19 + "You are kind."}
    known.parse(_raw([other, {"role": "user", "content": "task 9"}]), None)
    assert len(whole) == 1  # begins alike, then differs within the first message: parsed whole


def test_a_client_whose_bytes_always_change_stops_paying_for_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    known = KnownBodies(limit=64)
    searched: list[bytes] = []
    real = known_mod.located
    monkeypatch.setattr(known_mod, "located", lambda raw, body: searched.append(raw) or real(raw, body))
    history = [{"role": "user", "content": "ask"}]
    for i in range(40):  # a request id first: no two bodies begin alike
        history.append({"role": "assistant", "content": f"answer {i}"})
        known.parse(json.dumps({"request_id": i, "messages": history}).encode(), None)
    assert len(searched) < 24  # 16, then one in eight
    whole: list[bytes] = []
    monkeypatch.setattr(known_mod, "request_json", lambda raw: whole.append(raw) or (orjson.loads(raw), False))
    for i in range(10):  # a client that sends the same bytes again: known within eight requests, then for good
        history.append({"role": "user", "content": f"more {i}"})
        raw = json.dumps({"messages": history, "model": "m"}).encode()
        assert known.parse(raw, "s")[0] == orjson.loads(raw)
    assert len(whole) <= 8 and whole[-1] != raw


def test_only_messages_the_route_took_go_unchecked_in_a_later_body() -> None:
    history = [{"role": "user", "content": f"ask {i}"} for i in range(4)]
    known = KnownBodies(limit=4)
    body, _ = known.parse(_raw(history), "s")
    assert known.accepted(body) == 0  # new: every message is checked
    known.accept(body)
    grown, _ = known.parse(_raw([*history, {"role": "assistant", "content": "done"}]), "s")
    assert known.accepted(grown) == 4  # the four it took; the new one is checked
    # A body the route refused (a role it does not take) is never taken: what extends it is checked whole.
    known.parse(_raw([{"role": "robot", "content": "x"}, *history]), "r")  # refused: not `accept`ed
    again, _ = known.parse(_raw([{"role": "robot", "content": "x"}, *history, *history]), "r")
    assert known.accepted(again) == 0
    assert known.accepted(body) == 0  # not the last body parsed: nothing is claimed for it
