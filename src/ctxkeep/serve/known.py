"""A request's JSON body, parsed by its new messages alone when it extends a body the route received before.

An agent sends its whole history on every turn, and an SDK serializes the same history to the same bytes:
request n+1 is request n's bytes with a few messages inserted before the ``]`` of ``messages`` (and perhaps
the fields after it changed). So each route keeps the last body of each conversation (`Known`): its bytes,
where each message of ``messages`` ends in them, and what they parsed to. A new body that begins with the
bytes of the known one up to the end of one of its last messages is read as

    {"model": "m", "messages": [ m0 , m1 , ... , mk , new... ] , "tools": [...] }
    └──────── the known bytes, compared, not parsed ───┘└parsed┘└─ parsed only when they changed

Equal bytes in the same place of a JSON text parse to equal values, so m0..mk are the known ones; the new
messages are parsed as an array of their own; the fields after ``messages`` are taken from the known body
when their bytes are equal, else parsed as an object of their own (one holding ``messages`` again is not
taken). Whatever is not provably that shape (a change in an earlier message, a body not JSON, a lone
surrogate) is parsed whole, as any first request is (`request_json`), with its errors.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ctxkeep.messages import value_without_surrogates

# A \uD800-\uDFFF escape: only a body holding one is worth a second, slower parse.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SPACE = re.compile(rb"[ \t\r\n]*")
_SCALAR = re.compile(rb"[^ \t\r\n,\]}]+")
_SPECIAL = re.compile(rb'[\[\]{}"]')  # what a container's end is found by
# How many of the known body's last messages a new body may have changed: a client that moves a cache marker
# (``cache_control``) to its newest message rewrites the one before it.
_BACK = 3
# Bodies kept whose first bytes are the same (conversations that begin alike, without the session header).
_ALIKE = 32
# The first bytes of a body, which find the bodies it may extend: within the first message of most.
_PROBE = 128


def request_json(raw: bytes) -> tuple[object, bool]:
    """The request's JSON, and whether lone UTF-16 surrogates in it were replaced by U+FFFD.

    orjson refuses a lone surrogate escape (``"\\ud800"``), which Node's JSON.stringify writes; refusing
    it would refuse the conversation on every later turn, since the client sends the message again. Such
    a body is read by the standard library instead, and cleaned as `Message.of` cleans its text.
    """
    try:
        return orjson.loads(raw), False
    except orjson.JSONDecodeError as exc:
        if _SURROGATE_ESCAPE.search(raw) is None:
            raise
        first = exc
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError):
        raise first from None  # not the surrogates: the error as orjson saw it
    clean = value_without_surrogates(value)
    if clean is value:
        raise first  # parsed by the standard library only: orjson's refusal stands
    return clean, True


def _refuse_constant(name: str) -> object:
    # NaN and Infinity are no JSON; the standard library would accept them where orjson does not.
    raise ValueError(f"{name} is not JSON")


@dataclass(frozen=True, slots=True)
class Known:
    """A body as received, and where its ``messages`` lie in its bytes."""

    raw: bytes
    body: dict[str, Any]  # what `raw` parsed to; never changed (a request gets its own copy)
    messages: tuple[Any, ...]  # body["messages"], as parsed
    ends: tuple[int, ...]  # where each message ends in `raw` (just past its closing brace)
    close: int  # where the ``]`` that closes ``messages`` is in `raw`
    accepted: int = 0  # the leading messages the route took as valid (`KnownBodies.accept`), in it or before


class KnownBodies:
    """The last body of each conversation on one route (at most `limit`, the least recently used dropped)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        # By the session header and the body's first bytes: the candidates, most recent first.
        self._alike: OrderedDict[tuple[str | None, bytes], list[Known]] = OrderedDict()
        self._count = 0
        self._misses: dict[tuple[str | None, bytes], int] = {}  # requests in a row a header's body was not extended
        self._fruitless = 0  # bodies parsed whole in a row on the route (none extended a known one)
        self._last: tuple[tuple[str | None, bytes], Known] | None = None  # the last body `parse` kept

    def parse(self, raw: bytes, header: str | None) -> tuple[object, bool]:
        """The body `raw` parses to (`request_json`'s), and whether surrogates were replaced; by its new
        messages alone when it extends a body this route received before for `header` (see the module)."""
        self._last = None
        key = (header, raw[:_PROBE])
        alike = self._alike.get(key, ())
        for known in alike:
            taken = extended(known, raw)
            if taken is not None:
                self._misses.pop(key, None)
                self._fruitless = 0
                self._keep(key, taken, replacing=known)
                return taken.body, False
        body, replaced = request_json(raw)
        if replaced or not isinstance(body, dict):
            return body, replaced
        # A client that never sends the same bytes twice would pay for finding the messages on every request
        # (a millisecond at 100,000 tokens): after two misses in a row of its session header, or 16 bodies in a
        # row on the route that none extended, they are found on one request in eight.
        self._fruitless += 1
        if alike and header is not None:
            misses = self._misses[key] = self._misses.get(key, 0) + 1
            if misses > 2 and misses % 8:
                return body, replaced
        if self._fruitless > 16 and self._fruitless % 8:
            return body, replaced
        found = located(raw, body)
        if found is not None:
            self._keep(key, found, replacing=None)
        return body, replaced

    def accepted(self, body: object) -> int:
        """How many leading messages of `body`, the last `parse`'s, are ones the route took before (`accept`):
        the same values, parsed from the same bytes, which need no second check."""
        return self._last[1].accepted if self._last is not None and self._last[1].body is body else 0

    def accept(self, body: object) -> None:
        """The route took `body`, the last `parse`'s, as valid: its messages need no check in a later body."""
        if self._last is None or self._last[1].body is not body:
            return
        key, known = self._last
        alike = self._alike.get(key)
        if alike and alike[0] is known:
            alike[0] = replace(known, accepted=len(known.messages))

    def _keep(self, key: tuple[str | None, bytes], known: Known, replacing: Known | None) -> None:
        self._last = (key, known)
        alike = self._alike.pop(key, [])
        # One body per session header (its conversation's last); without one, the last few that begin alike.
        kept = [] if key[0] is not None else [k for k in alike if k is not replacing][: _ALIKE - 1]
        self._count += len(kept) + 1 - len(alike)
        self._alike[key] = [known, *kept]
        while self._count > self._limit and len(self._alike) > 1:
            gone, dropped = self._alike.popitem(last=False)
            self._count -= len(dropped)
            self._misses.pop(gone, None)


def extended(known: Known, raw: bytes) -> Known | None:
    """`raw` read as `known` with messages added after one of its last ones (see the module); None when it
    is not provably that."""
    view = memoryview(known.raw)
    n = len(known.ends)
    for k in range(n - 1, max(-1, n - 1 - _BACK), -1):
        if raw.startswith(view[: known.ends[k]]):
            return _from(known, raw, k)
    return None


def _from(known: Known, raw: bytes, k: int) -> Known | None:
    """`raw`, whose bytes up to the end of `known`'s message `k` are `known`'s."""
    start = known.ends[k]
    walked = _walk_items(raw, start)
    if walked is None:
        return None
    ends, close = walked
    if ends:
        region = raw[start:close].lstrip(b" \t\r\n")
        try:
            new = orjson.loads(b"[" + region[1:] + b"]")
        except orjson.JSONDecodeError:
            return None  # a lone surrogate, say: parsed whole, with the slow path's care
        if not isinstance(new, list) or len(new) != len(ends):
            return None
    else:
        new = []
    old_rest = memoryview(known.raw)[known.close :]
    if raw[close:] == old_rest:
        body = dict(known.body)
    else:
        rest = _rest(raw, close)
        if rest is None:
            return None
        head = {}
        for name, value in known.body.items():
            if name == "messages":
                break
            head[name] = value
        body = {**head, "messages": None, **rest}
    messages = (*known.messages[: k + 1], *new)
    body["messages"] = list(messages)
    ends_all = (*known.ends[: k + 1], *ends)
    accepted = min(known.accepted, k + 1)
    return Known(raw=raw, body=body, messages=messages, ends=ends_all, close=close, accepted=accepted)


def _rest(raw: bytes, close: int) -> dict[str, Any] | None:
    """The fields after ``messages``' ``]`` at `close`, parsed as an object; None when they are not the rest of one
    (or name ``messages`` again, which would replace the one read)."""
    tail = raw[close + 1 :].lstrip(b" \t\r\n")
    if tail.startswith(b","):
        tail = tail[1:].lstrip(b" \t\r\n")
        if not tail.startswith(b'"'):
            return None  # `,}`: not JSON
    elif not tail.startswith(b"}"):
        return None
    try:
        rest = orjson.loads(b"{" + tail)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(rest, dict) or "messages" in rest:
        return None
    return rest


def located(raw: bytes, body: dict[str, Any]) -> Known | None:
    """`raw` (which parsed to `body`) with where its ``messages`` lie; None when its top-level object has no
    ``messages`` array of objects, or has any name twice."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return None
    pos = _SPACE.match(raw, 0).end()  # type: ignore[union-attr]
    if raw[pos : pos + 1] != b"{":
        return None
    found: tuple[tuple[int, ...], int] | None = None
    names: set[str | None] = set()
    pos += 1
    while True:
        pos = _SPACE.match(raw, pos).end()  # type: ignore[union-attr]
        if raw[pos : pos + 1] == b"}":
            break
        name_end = _string_end(raw, pos) if raw[pos : pos + 1] == b'"' else None
        if name_end is None:
            return None
        name = raw[pos:name_end]
        if _name(name) in names:
            # A name given twice parses to its last value: a later body reusing this one's fields would not.
            return None
        names.add(_name(name))
        pos = _SPACE.match(raw, name_end).end()  # type: ignore[union-attr]
        if raw[pos : pos + 1] != b":":
            return None
        pos = _SPACE.match(raw, pos + 1).end()  # type: ignore[union-attr]
        if _name(name) == "messages":
            if found is not None or raw[pos : pos + 1] != b"[":
                return None  # twice: the parse took the last, which this would not follow
            walked = _walk_items(raw, pos + 1, first=True)
            if walked is None:
                return None
            found = (tuple(walked[0]), walked[1])
            pos = walked[1] + 1
        else:
            end = _skip_value(raw, pos)
            if end is None:
                return None
            pos = end
        pos = _SPACE.match(raw, pos).end()  # type: ignore[union-attr]
        if raw[pos : pos + 1] == b",":
            pos += 1
        elif raw[pos : pos + 1] != b"}":
            return None
    if found is None or len(found[0]) != len(messages):
        return None
    return Known(raw=raw, body=body, messages=tuple(messages), ends=found[0], close=found[1])


def _name(token: bytes) -> str | None:
    if b"\\" not in token:
        return token[1:-1].decode("utf-8", "replace")
    try:
        name = orjson.loads(token)
    except orjson.JSONDecodeError:
        return None
    return name if isinstance(name, str) else None


def _walk_items(raw: bytes, pos: int, *, first: bool = False) -> tuple[list[int], int] | None:
    """The ends of the objects of an array from `pos` (just past its ``[`` when `first`, else just past an
    item) to its ``]``, and where that ``]`` is; None when what is there is not a run of objects."""
    ends: list[int] = []
    while True:
        pos = _SPACE.match(raw, pos).end()  # type: ignore[union-attr]
        if raw[pos : pos + 1] == b"]":
            return ends, pos
        if not (first and not ends):
            if raw[pos : pos + 1] != b",":
                return None
            pos = _SPACE.match(raw, pos + 1).end()  # type: ignore[union-attr]
        if raw[pos : pos + 1] != b"{":
            return None
        end = _skip_container(raw, pos)
        if end is None:
            return None
        ends.append(end)
        pos = end


def _skip_value(raw: bytes, pos: int) -> int | None:
    """Just past the JSON value at `pos`; None when none is there (what it holds is checked by the parse)."""
    head = raw[pos : pos + 1]
    if head in (b"{", b"["):
        return _skip_container(raw, pos)
    if head == b'"':
        return _string_end(raw, pos)
    scalar = _SCALAR.match(raw, pos)
    return scalar.end() if scalar is not None else None


def _skip_container(raw: bytes, pos: int) -> int | None:
    """Just past the object or array opening at `pos`: its brackets counted, its strings skipped (a bracket in
    a string is text). Strings are skipped by `bytes.find` of their closing quote, which runs at memory speed
    where a regular expression over a long text would read it a character at a time."""
    depth = 0
    search = _SPECIAL.search
    while True:
        char = raw[pos]
        if char == 0x22:  # "
            end = _string_end(raw, pos)
            if end is None:
                return None
            pos = end
        else:
            pos += 1
            depth += 1 if char in (0x7B, 0x5B) else -1  # { [ open, } ] close
            if depth == 0:
                return pos
        found = search(raw, pos)
        if found is None:
            return None
        pos = found.start()


def _string_end(raw: bytes, pos: int) -> int | None:
    """Just past the string opening at `pos`; None when it is not closed."""
    quote = pos
    while True:
        quote = raw.find(b'"', quote + 1)
        if quote < 0:
            return None
        escapes = quote - 1
        while raw[escapes] == 0x5C:  # an escaped quote is preceded by an odd number of backslashes
            escapes -= 1
        if (quote - 1 - escapes) % 2 == 0:
            return quote + 1
