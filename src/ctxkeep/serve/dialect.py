"""What the proxy needs to know of an API's wire format: one `Dialect` per route.

`ctxkeep.serve.chat` (OpenAI chat completions) and `ctxkeep.serve.messages_api` (Anthropic messages)
implement it; the request handler in `ctxkeep.serve.app` is written once against this protocol.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Protocol

from ctxkeep.context import Context
from ctxkeep.messages import Message
from ctxkeep.step import Step

from .sse import Event


class BadRequest(Exception):
    """A request body the proxy cannot take: the client gets a 400 with this message; the upstream is not called."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Turn:
    """A request's conversation, as the proxy reads it."""

    # The system prompt's text (for counting and for the conversation's key); None without one.
    system: str | None
    # The conversation after the leading system prompt, as the client sent it: what `Session.sync` takes.
    history: Sequence[Any]
    # The request's tool schemas (they count against the window).
    tools: Sequence[Mapping[str, Any]] | None
    # Whether the client asked for server-sent events.
    stream: bool
    # The leading system messages exactly as sent, passed on unchanged (OpenAI form; empty for Anthropic).
    prefix: Sequence[Any] = ()


@dataclass(frozen=True, slots=True)
class Reply:
    """The assistant's answer, as the client will send it back in its next request, and the upstream's count."""

    message: dict[str, Any]
    # The prompt's tokens as the upstream counted them (usage), when it said.
    prompt_tokens: int | None = None
    # The reply's tokens as the upstream counted them (usage), when it said: for the request's log line.
    output_tokens: int | None = None
    # Of the prompt's tokens, those the upstream's prompt cache served, and those written to it, when it said:
    # noted for the step (`Session.note_usage`), so `ctxkeep show` prices what the cache really held.
    cached_tokens: int | None = None
    written_tokens: int | None = None


class Reassembler(Protocol):
    """Builds the reply of a streamed answer from its events."""

    def feed(self, event: Event) -> None:
        """Take the next event of the stream."""

    def reply(self) -> Reply | None:
        """The whole reply once the stream said it ended; None when it was cut short or refused."""


class WireForms:
    """A branch's messages in an API's wire form, kept while they stay in its context: a request converts
    only the messages its step added or changed (an offloaded output is a new `Message`), not the context.

    Messages are immutable values, so a message's form is kept by the message's identity; a form is kept
    with the message itself and the converter, so a recycled ``id`` or the other route is never mistaken for it.
    """

    def __init__(self) -> None:
        self._forms: dict[int, tuple[Message, Callable[[Message], Any], Any]] = {}
        self._groups: dict[tuple[int, ...], tuple[tuple[Message, ...], Callable[[Sequence[Message]], Any], Any]] = {}
        # The last call's messages and forms, in order: a context that only grew is matched by identity in C.
        self._last: tuple[list[Message], list[Any], Callable[[Message], Any] | None] = ([], [], None)
        # `of_folded`'s last call: its messages, its output, its fold, and where (a message, an output) a call with
        # messages added after them takes the fold up again.
        self._folded: tuple[list[Message], list[Any], Fold | None, int, int] = ([], [], None, 0, 0)
        self._summary: tuple[str, list[Message]] | None = None  # the summary, and the message it is sent as

    def context(self, context: Context) -> list[Message]:
        """The context's messages but its system prompt: the summary as the message `Context.as_messages` makes,
        made once while the summary stays (a new message on each request would match no form of the last)."""
        if context.summary is None:
            return list(context.messages)
        if self._summary is None or self._summary[0] != context.summary:
            lead = Context(system=None, summary=context.summary, messages=(), tokens=0).as_messages()
            self._summary = (context.summary, lead)
        return [*self._summary[1], *context.messages]

    def of(self, messages: Iterable[Message], convert: Callable[[Message], Any]) -> list[Any]:
        """`convert` of each message, reused from the last call for the messages it had; the others are
        forgotten, so what is kept is one context's worth."""
        messages = list(messages)
        last, last_out, last_convert = self._last
        if last_convert is convert and len(messages) >= len(last) and all(map(operator.is_, last, messages)):
            # The last context and messages after it (a step outside compaction and aging): only those converted.
            out = [*last_out, *self._converted(messages[len(last) :], convert, self._forms)]
        else:
            old, self._forms = self._forms, {}
            out = self._converted(messages, convert, old)
        self._last = (messages, out, convert)
        return out

    def _converted(
        self, messages: list[Message], convert: Callable[[Message], Any], old: dict[int, tuple[Message, Any, Any]]
    ) -> list[Any]:
        """The forms of `messages`, reused from `old` where it has them, kept in `self._forms`."""
        forms, out = self._forms, []
        for message in messages:
            kept = old.get(id(message))
            if kept is None or kept[0] is not message or kept[1] is not convert:
                kept = (message, convert, convert(message))
            forms[id(message)] = kept
            out.append(kept[2])
        return out

    def of_groups(
        self, groups: Iterable[Sequence[Message]], convert: Callable[[Sequence[Message]], Any], *, adding: bool = False
    ) -> list[Any]:
        """`of` for an API whose wire message is made of several messages (Anthropic's: tool results joined):
        `convert` of each group, reused while the group holds the same messages. `adding`: the groups are only
        the context's last ones (`of_folded`'s), kept beside the others, not instead of them (a group the last
        run outgrew stays until the next whole call, at the context's next change before its end)."""
        old, out = self._groups, []
        forms = old if adding else {}
        for group in groups:
            key = tuple(map(id, group))
            kept = old.get(key)
            if kept is None or kept[1] is not convert or not all(map(operator.is_, kept[0], group)):
                kept = (tuple(group), convert, convert(group))
            forms[key] = kept
            out.append(kept[2])
        self._groups = forms
        return out

    def of_folded(self, messages: list[Message], fold: Fold) -> list[Any]:
        """`fold`'s output for `messages`, for a conversion that reads them in order and whose output before some
        point no later message changes (Anthropic's: groups, then runs of one role joined; a new message can
        only join the last run). `fold(forms, messages, adding)` returns its output and that point: the first
        message and the first output it may redo. A context that only grew since the last call (matched by
        identity, in C) is folded from that point on, not from its first message."""
        last, out, last_fold, at, at_out = self._folded
        if last_fold is fold and len(messages) >= len(last) and all(map(operator.is_, last, messages)):
            tail, tail_at, tail_out = fold(self, messages[at:], True)
            result = [*out[:at_out], *tail]
            self._folded = (messages, result, fold, at + tail_at, at_out + tail_out)
        else:
            result, at, at_out = fold(self, messages, False)
            self._folded = (messages, result, fold, at, at_out)
        return result


# A conversion `WireForms.of_folded` takes up where it left off: (forms, messages, adding) -> output, and the
# first message and output that messages added after these may change.
Fold = Callable[[WireForms, list[Message], bool], tuple[list[Any], int, int]]


class Dialect(Protocol):
    """One API's request and answer shapes."""

    def parse(self, body: dict[str, Any], *, checked: int = 0) -> Turn:
        """The request's conversation; `BadRequest` when the body is not one. The first `checked` messages
        were taken in an earlier request, as they are (`KnownBodies.accepted`): they need no check again."""

    def outgoing(self, body: dict[str, Any], turn: Turn, step: Step, forms: WireForms) -> dict[str, Any]:
        """The body to send upstream: every field as the client sent it, the messages compacted; `forms` holds
        the branch's messages already converted (the wire form must not be changed in place)."""

    def reply(self, answer: Any) -> Reply | None:
        """The reply in a JSON answer; None when the answer holds none."""

    def reassembler(self) -> Reassembler:
        """A fresh reassembler for one streamed answer."""

    def error(self, kind: str, message: str) -> dict[str, Any]:
        """An error body in this API's shape, which its SDK turns into an exception with `message`."""

    def stream_error(self, kind: str, message: str) -> bytes:
        """An error event to end a stream that broke after its first bytes were sent."""

    def ends(self, event: Event) -> bool:
        """Whether `event` is one a whole stream ends with (a stream that stops before one was cut)."""


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts/blocks of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def check_messages(body: dict[str, Any], roles: frozenset[str], *, checked: int = 0) -> list[Any]:
    """`body["messages"]`, checked to be a non-empty list of objects whose role is one of `roles`; its first
    `checked` ones are known to be (a long history's earlier messages, taken in an earlier request)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array of message objects", param="messages")
    rest = messages[checked:] if checked > 0 else messages
    # Checked in C first (`map` over the list): a history of a thousand messages in a few microseconds, where
    # the loop below takes a tenth of a millisecond; the loop only finds and names what is wrong.
    with contextlib.suppress(TypeError):  # an unhashable role: named by the loop
        if set(map(type, rest)) <= {dict} and roles.issuperset(map(dict.get, rest, repeat("role"))):
            return messages
    for i, msg in enumerate(rest, len(messages) - len(rest)):
        if not isinstance(msg, dict):
            raise BadRequest(f"messages[{i}] must be an object, got {type(msg).__name__}", param=f"messages[{i}]")
        if not isinstance(msg.get("role"), str) or msg["role"] not in roles:
            legacy = " (send a function's result as a 'tool' message)" if msg.get("role") == "function" else ""
            raise BadRequest(
                f"messages[{i}].role must be one of {', '.join(sorted(roles))}; got {msg.get('role')!r}{legacy}",
                param=f"messages[{i}].role",
            )
    return messages


def check_tools(body: dict[str, Any]) -> list[Any] | None:
    """`body["tools"]`, checked to be a list of objects when present."""
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise BadRequest("'tools' must be an array of tool objects", param="tools")
    return tools


def check_stream(body: dict[str, Any]) -> bool:
    """`body["stream"]`, checked to be a boolean when present."""
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"'stream' must be true or false; got {stream!r}", param="stream")
    return stream


def without_none(value: Any) -> Any:
    """`value` with every None field of its objects left out, as a client sends a reply back."""
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_none(v) for v in value]
    return value
