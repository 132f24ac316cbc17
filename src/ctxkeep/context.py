"""The context sent to the model: the three layers (system prompt, summary, recent messages) and their cost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from .formats.anthropic import to_anthropic
from .formats.openai import to_openai
from .live import Live
from .messages import Message
from .pairing import repair
from .tokens import Counter

if TYPE_CHECKING:  # the SDKs' parameter types, for type checkers only: no SDK is imported at run time
    from anthropic.types import MessageParam
    from openai.types.chat import ChatCompletionMessageParam

SUMMARY_TAG = "context-summary"
# The ids of the system prompt and summary messages `Context.as_messages` adds (a host may send them back).
SYSTEM_ID = "ctxkeep-system"
SUMMARY_ID = "ctxkeep-summary"


@dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """The three layers to send to the model, and their token count."""

    system: str | None
    summary: str | None
    messages: Sequence[Message]  # a `ctxkeep.seq.Seq` (reads like a tuple) when it comes from a `Live`
    tokens: int

    def as_messages(self) -> list[Message]:
        """System prompt, summary (as a user message) and the recent messages, ready for an exporter."""
        out: list[Message] = []
        if self.system:
            out.append(_system_message(self.system))
        if self.summary:
            out.append(_summary_message(self.summary))
        out.extend(self.messages)
        return out

    def to_openai(self, *, system: bool = True) -> list[ChatCompletionMessageParam]:
        """The context as the openai SDK's ``messages=``: no ``None`` fields, typed as the SDK's parameters.

        `system=False` leaves the system prompt out, for a host that sends its own.
        """
        messages = self.as_messages()
        if self.system and not system:
            messages = messages[1:]
        return cast("list[ChatCompletionMessageParam]", to_openai(messages))

    def to_anthropic(self) -> tuple[str | None, list[MessageParam]]:
        """The context as the anthropic SDK's ``system=`` and ``messages=``, typed as the SDK's parameters."""
        messages = self.as_messages()[1:] if self.system else self.as_messages()
        _, out = to_anthropic(messages)
        return self.system or None, cast("list[MessageParam]", out)


def summary_message_text(summary: str) -> str:
    """The summary as the model sees it: wrapped in a tag so it is never mistaken for a user request."""
    return f"<{SUMMARY_TAG}>\n{summary}\n</{SUMMARY_TAG}>"


def _system_message(system: str) -> Message:
    return Message.of("system", system, id=SYSTEM_ID)


def _summary_message(summary: str) -> Message:
    return Message.of("user", summary_message_text(summary), id=SUMMARY_ID)


def system_tokens_of(system: str | None, counter: Counter) -> int:
    """Tokens the system prompt adds to the context, message overhead included."""
    return counter.count_message(_system_message(system)) if system else 0


def summary_tokens_of(summary: str | None, counter: Counter) -> int:
    """Tokens the summary adds to the context as the message `Context.as_messages` sends."""
    return counter.count_message(_summary_message(summary)) if summary else 0


def _first_unanswered(live: Live) -> int:
    """Where the repair of `live` starts: its first message holding a call with no result. The live context
    refuses reused ids and pairs each result with the turn just before it, so what comes earlier is sent as
    it is (a host that prepares between a call and its result paid a walk of the whole history: 39 ms at
    100k tokens). 0 when the recorded place does not hold the call (the whole history, as before)."""
    places = [(at, call) for call, (at, _) in live.pairs.open.items()]
    places += [(at, call) for call, at in live.pairs.abandoned.items()]
    at, call = min(places)
    if 0 <= at < len(live.messages) and any(c.id == call for c in live.messages[at].tool_calls):
        return at
    return 0


def of(live: Live, counter: Counter) -> Context:
    """The context to send for `live`: an aborted tool call gets an explicit error result, so no provider refuses it."""
    messages, tokens = live.messages, live.tokens
    if live.pairs.open or live.pairs.abandoned:
        # A call that never got its result (an aborted tool) would make the provider refuse the request:
        # the model sees an explicit "[no result recorded]" error result instead. The live state keeps the
        # call open, so a result that arrives later still pairs with it.
        start = _first_unanswered(live)
        repaired, _ = repair(messages[start:])
        live_ids = {id(m) for m in messages[start:]}
        tokens += sum(counter.count_each([m for m in repaired if id(m) not in live_ids]))
        messages = (*messages[:start], *repaired)
    return Context(system=live.system, summary=live.summary, messages=messages, tokens=tokens)
