"""Files of chat messages, shared by the openai, anthropic and agentscope formats.

A file holds one of:

    [msg, msg, ...]                          one conversation (pretty-printed or not)
    {"messages": [...], "system": ...}       a request body: one conversation
    {"role": ...}                            a single message
    JSONL, one message per line              one conversation
    JSONL, one {"messages": [...]} per line  one conversation per line (fine-tuning files)
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ctxkeep.formats.source import Conversation, Source
from ctxkeep.messages import Message, without_surrogates

log = logging.getLogger("ctxkeep")


def storable(msg: Message, where: str) -> Message:
    """`msg` with its lone UTF-16 surrogates (which no UTF-8 file or request body can hold) replaced by U+FFFD,
    and a warning naming `where` it came from when there were any: the message is kept, not refused."""
    clean = without_surrogates(msg)
    if clean is not msg:
        log.warning("%s: lone UTF-16 surrogates replaced with U+FFFD; the message is kept", where)
    return clean


class Convert(Protocol):
    """A ``from_<format>`` function: raw message dicts to messages, ValueError on bad input."""

    def __call__(self, messages: Any, /, *, conversation_id: str = ..., start: int = ...) -> list[Message]: ...


def parse_message_file(source: Source, convert: Convert, *, system_field: bool = False) -> list[Conversation]:
    """The conversations of a chat-message file (see the module docstring).

    `system_field` says whether a body's separate ``system`` belongs to the format (Anthropic);
    elsewhere it is an error that names the format that has one.
    """
    whole = _whole_document(source)
    if isinstance(whole, list):
        return [_conversation(source, {"messages": whole}, convert, "0", None, system_field)]
    if isinstance(whole, dict):
        body = whole if "messages" in whole else {"messages": [whole]}
        return [_conversation(source, body, convert, "0", None, system_field)]
    records = list(source.records())
    if records and all(isinstance(r, dict) and "messages" in r for _, r in records):
        return [_conversation(source, r, convert, f"line{n}", n, system_field) for n, r in records]
    messages: list[Message] = []
    for lineno, record in records:
        try:
            messages.extend(convert([record], start=lineno))
        except ValueError as exc:
            source.skip(lineno, str(exc))
    return [Conversation(id=source.path, messages=tuple(messages))]


def _whole_document(source: Source) -> Any:
    """The file as one JSON value, or None when it is JSONL (several values)."""
    if source.text.lstrip().startswith("["):
        return source.document()  # a list that does not parse is an error with its line
    return source.whole()


def _conversation(
    source: Source, body: dict[str, Any], convert: Convert, conv_id: str, line: int | None, system_field: bool
) -> Conversation:
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise source.error("expected a list of messages in 'messages'", line)
    system = body.get("system")
    if system is not None and not system_field:
        raise source.error("a separate 'system' field is Anthropic's request shape: use --format anthropic", line)
    try:
        if system is not None:
            messages = convert(raw, conversation_id=conv_id, system=system)  # type: ignore[call-arg]
        else:
            messages = convert(raw, conversation_id=conv_id)
    except ValueError as exc:
        raise source.error(str(exc), line) from exc
    return Conversation(id=conv_id, messages=tuple(messages))
