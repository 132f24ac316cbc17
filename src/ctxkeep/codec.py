"""The persistence codec: a `Message` as a JSON object and a JSONL line, every field kept.

The live log, the archive (``dialog/YYYY-MM-DD.jsonl``) and ctxkeep's own transcript format all
hold these lines. `message_to_dict` and `message_from_dict` are exact inverses. What JSON in UTF-8
cannot hold is never half-written: lone surrogates become U+FFFD, any other value is a `MessageError`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import orjson

from ctxkeep.errors import MessageError
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    without_surrogates,
)

MARK = "ctxkeep/1"

log = logging.getLogger("ctxkeep")


def block_to_dict(block: Block) -> dict[str, Any]:
    """A JSON-ready dict for one block."""
    d: dict[str, Any]
    match block:
        case TextBlock():
            d = {"type": "text", "text": block.text}
        case ThinkingBlock():
            d = {"type": "thinking", "text": block.text}
            if block.signature is not None:
                d["signature"] = block.signature
            if block.redacted:
                d["redacted"] = True
        case ToolCall():
            d = {"type": "tool_call", "id": block.id, "name": block.name, "arguments": block.arguments}
        case ToolResult():
            content = block.content if isinstance(block.content, str) else [block_to_dict(b) for b in block.content]
            d = {"type": "tool_result", "call_id": block.call_id, "content": content}
            if block.is_error:
                d["is_error"] = True
            if block.exit_code is not None:
                d["exit_code"] = block.exit_code
        case ImageBlock():
            d = {"type": "image", "media_type": block.media_type}
            for key in ("width", "height", "data", "url"):
                if getattr(block, key) is not None:
                    d[key] = getattr(block, key)
    if block.extra:
        d["extra"] = dict(block.extra)
    return d


def block_from_dict(d: dict[str, Any]) -> Block:
    """The inverse of `block_to_dict`."""
    if not isinstance(d, dict):
        raise TypeError(f"expected a block object, got {type(d).__name__}")
    extra = d.get("extra") or {}
    kind = d.get("type")
    if kind == "text":
        return TextBlock(text=d["text"], extra=extra)
    if kind == "thinking":
        return ThinkingBlock(
            text=d["text"], signature=d.get("signature"), redacted=bool(d.get("redacted")), extra=extra
        )
    if kind == "tool_call":
        return ToolCall(id=d["id"], name=d["name"], arguments=d["arguments"], extra=extra)
    if kind == "tool_result":
        raw = d["content"]
        content: str | tuple[Any, ...] = raw if isinstance(raw, str) else tuple(block_from_dict(b) for b in raw)
        return ToolResult(
            call_id=d["call_id"],
            content=content,
            is_error=bool(d.get("is_error")),
            exit_code=d.get("exit_code"),
            extra=extra,
        )
    if kind == "image":
        return ImageBlock(
            media_type=d["media_type"],
            width=d.get("width"),
            height=d.get("height"),
            data=d.get("data"),
            url=d.get("url"),
            extra=extra,
        )
    raise ValueError(f"unknown block type {kind!r}")


def message_to_dict(msg: Message) -> dict[str, Any]:
    """A JSON-ready dict for one message."""
    d: dict[str, Any] = {"v": MARK, "id": msg.id, "role": msg.role}
    if msg.timestamp is not None:
        d["timestamp"] = msg.timestamp.isoformat()
    if msg.source_id is not None:
        d["source_id"] = msg.source_id
    d["content"] = [block_to_dict(b) for b in msg.content]
    if msg.extra:
        d["extra"] = dict(msg.extra)
    return d


def message_from_dict(d: dict[str, Any]) -> Message:
    """The inverse of `message_to_dict`. Raises TypeError/ValueError/KeyError on a malformed dict."""
    if not isinstance(d, dict) or not isinstance(d.get("content"), list):
        raise TypeError("expected an object with a 'content' list")
    ts = d.get("timestamp")
    return Message(
        role=d["role"],
        id=d["id"],
        timestamp=datetime.fromisoformat(ts) if ts else None,
        source_id=d.get("source_id"),
        content=tuple(block_from_dict(b) for b in d["content"]),
        extra=d.get("extra") or {},
    )


def dumps(msg: Message) -> bytes:
    """One JSONL line (with its newline) for `msg`; lone surrogates are written as U+FFFD (see `storable`)."""
    try:
        return orjson.dumps(message_to_dict(msg)) + b"\n"
    except orjson.JSONEncodeError:
        return orjson.dumps(message_to_dict(storable([msg])[0])) + b"\n"


def storable(messages: Sequence[Message]) -> list[Message]:
    """`messages` as they can be written: each lone UTF-16 surrogate replaced by U+FFFD.

    Replacing keeps the message (what a user wants from text an editor or Node wrote) where refusing
    would lose it. Raises `MessageError` for a message holding, in its `extra`, a value JSON cannot
    hold (a set, bytes, an object, a non-string key, an integer past 64 bits, NaN or an infinity).
    """
    out: list[Message] = []
    for i, msg in enumerate(messages):
        try:
            clean = without_surrogates(msg)
        except RecursionError:
            raise MessageError(_too_deep(msg.id, i), index=i) from None
        if clean is not msg:
            log.warning("message %s: lone UTF-16 surrogates replaced with U+FFFD; the message is kept", msg.id)
        try:
            orjson.dumps(message_to_dict(clean))
        except orjson.JSONEncodeError as exc:
            raise MessageError(
                f"the message {msg.id!r} at position {i} cannot be stored ({exc}): `extra` may hold only"
                " JSON values (str, int, float, bool, None, lists, and dicts with str keys)",
                index=i,
            ) from None
        out.append(clean)
    check_finite(out)
    return out


def _too_deep(message_id: str, index: int) -> str:
    return (
        f"the message {message_id!r} at position {index} cannot be stored: a value in it is nested deeper than"
        " JSON here can hold (254 levels); flatten it"
    )


def check_finite(messages: Sequence[Message]) -> None:
    """Raise `MessageError` for a message holding NaN or an infinity (in `extra`, in a call's arguments),
    which orjson writes as null: the message would read back changed. For a line holding ``null``."""
    for i, msg in enumerate(messages):
        try:
            _refuse_non_finite(message_to_dict(msg))
        except ValueError as exc:
            raise MessageError(
                f"the message {msg.id!r} at position {i} cannot be stored ({exc}): JSON has no NaN or infinity;"
                " give a number, a string or None",
                index=i,
            ) from None


def _refuse_non_finite(value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is no JSON number")
    if isinstance(value, dict):
        for v in value.values():
            _refuse_non_finite(v)
    elif isinstance(value, list | tuple):
        for v in value:
            _refuse_non_finite(v)


_ID_START = b'{"v":"' + MARK.encode() + b'","id":"'


def ids_in(data: bytes) -> Iterator[str]:
    """The message id of each line of `data` (lines `dumps` wrote); a line that is not one is passed over."""
    for line in data.split(b"\n"):
        if line.startswith(_ID_START):
            end = line.find(b'"', len(_ID_START))
            if end > 0 and b"\\" not in line[len(_ID_START) : end]:  # the common case, without parsing the line
                yield line[len(_ID_START) : end].decode("utf-8", "replace")
                continue
        if line.strip():
            with contextlib.suppress(orjson.JSONDecodeError):
                d = orjson.loads(line)
                if isinstance(d, dict) and isinstance(d.get("id"), str):
                    yield d["id"]
