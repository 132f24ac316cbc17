"""Anthropic Messages, both ways.

    from_anthropic(messages, system=None) -> list[Message]
    to_anthropic(list[Message])           -> (system, messages)

The system prompt sits apart from the messages in Anthropic's API; here it becomes a
leading system message. A user message's ``tool_result`` blocks each become a tool
message, and the user message's other blocks stay in a user message, in order.
`to_anthropic` joins them again: the pieces of one original message go back into one
message, and a run of tool messages (with the user text after it) becomes one user
message, which is what the API requires after an assistant turn with tool calls.

Block types ctxkeep does not model (``document``, ``server_tool_use``,
``web_search_tool_result``, ``search_result``, ...) are kept whole and written back;
unmodelled fields (``cache_control``, ``citations``) likewise. So Anthropic -> ctxkeep ->
Anthropic gives back equal values.

Exporting messages from elsewhere: consecutive messages of the same role are not merged
(the API merges them itself); call `repair` first if pairing may be broken.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxkeep.formats.chat import parse_message_file, storable
from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source, describe
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    make_id,
)

NAME = "anthropic"


_GROUP = "anthropic:group"  # id of the original message a piece came from
_FORM = "anthropic:content"  # "str" when the original content was a plain string
_BLOCK = "anthropic:block"  # an unmodelled block, written back as it was
_PRESENT = "anthropic:present"  # optional keys of a tool_result that were present

System = str | list[dict[str, Any]] | None


def from_anthropic(
    messages: Sequence[Mapping[str, Any]], *, system: System = None, conversation_id: str = "", start: int = 0
) -> list[Message]:
    """Messages from Anthropic message dicts (and the separate system prompt).

    Ids are derived from `conversation_id` and the position (`start` + index), as in
    `from_openai`, and lone UTF-16 surrogates replaced by U+FFFD as there. Raises ValueError naming a bad message.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise ValueError(f"expected a list of messages, got {type(messages).__name__}")
    out: list[Message] = []
    if system is not None:
        try:
            out.append(storable(_system_in(system, make_id(NAME, conversation_id, "system")), "system"))
        except RECORD_ERRORS as exc:
            raise ValueError(f"system: {describe(exc)}") from exc
    for i, raw in enumerate(messages, start):
        try:
            out.extend(storable(m, f"message {i}") for m in _message_in(raw, i, conversation_id))
        except RECORD_ERRORS as exc:
            raise ValueError(f"message {i}: {describe(exc)}") from exc
    return out


def _system_in(system: System, msg_id: str) -> Message:
    if isinstance(system, str):
        return Message(role="system", id=msg_id, content=(TextBlock(text=system),), extra={_FORM: "str"})
    assert system is not None
    return Message(role="system", id=msg_id, content=tuple(_block_in(b) for b in system))


def _message_in(raw: Mapping[str, Any], index: int, conv_id: str) -> list[Message]:
    if not isinstance(raw, Mapping):
        raise TypeError(f"expected a message object, got {type(raw).__name__}")
    role = raw["role"]
    if role not in ("user", "assistant"):
        raise ValueError(f"role must be user or assistant, got {role!r}")
    base_id = make_id(NAME, conv_id, index)
    extra: dict[str, Any] = {_GROUP: base_id}
    unknown = {k: v for k, v in raw.items() if k not in ("role", "content")}
    if unknown:
        extra[NAME] = unknown
    content = raw["content"]
    if isinstance(content, str):
        extra[_FORM] = "str"
        return [Message(role=role, id=base_id, content=(TextBlock(text=content),), extra=extra)]

    pieces: list[Message] = []
    pending: list[Block] = []

    def flush() -> None:
        if pending:
            msg_id = make_id(NAME, conv_id, index, len(pieces)) if pieces else base_id
            pieces.append(Message(role=role, id=msg_id, content=tuple(pending), extra=extra))
            pending.clear()

    for block in content:
        if block.get("type") == "tool_result" and role == "user":
            flush()
            msg_id = make_id(NAME, conv_id, index, len(pieces)) if pieces else base_id
            pieces.append(Message(role="tool", id=msg_id, content=(_result_in(block),), extra=extra))
        else:
            pending.append(_block_in(block))
    flush()
    if not pieces:  # an empty content list is still a message
        pieces.append(Message(role=role, id=base_id, content=(), extra=extra))
    return pieces


def _block_in(block: Mapping[str, Any]) -> Block:
    kind = block["type"]
    rest = {k: v for k, v in block.items() if k not in _MODELLED.get(kind, ())}
    extra: dict[str, Any] = {NAME: rest} if rest else {}
    if kind == "text":
        return TextBlock(text=block["text"], extra=extra)
    if kind == "thinking":
        return ThinkingBlock(text=block["thinking"], signature=block.get("signature"), extra=extra)
    if kind == "redacted_thinking":
        return ThinkingBlock(text="", signature=block["data"], redacted=True, extra=extra)
    if kind == "tool_use":
        return ToolCall.from_input(id=block["id"], name=block["name"], input=block["input"], extra=extra)
    if kind == "image" and block["source"].get("type") in ("base64", "url"):
        return _image_in(block["source"], extra)
    return TextBlock(text=_describe_block(block), extra={_BLOCK: dict(block)})


_MODELLED: dict[str, tuple[str, ...]] = {
    "text": ("type", "text"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "tool_use": ("type", "id", "name", "input"),
    "image": ("type", "source"),
}


def _image_in(source: Mapping[str, Any], extra: dict[str, Any]) -> ImageBlock:
    if source["type"] == "base64":
        return ImageBlock(media_type=source["media_type"], data=source["data"], extra=extra)
    return ImageBlock(media_type=source.get("media_type", "image/jpeg"), url=source["url"], extra=extra)


def _describe_block(block: Mapping[str, Any]) -> str:
    """Readable text for a block kept whole, so counting and summaries still see it."""
    text = block.get("text") or block.get("content")
    if isinstance(text, str):
        return text
    return f"[{block.get('type')}] " + json.dumps(block, ensure_ascii=False)[:2000]


def _result_in(block: Mapping[str, Any]) -> ToolResult:
    raw = block.get("content", "")
    content: str | tuple[TextBlock | ImageBlock, ...]
    if isinstance(raw, str):
        content = raw
    else:
        parts = [_block_in(b) for b in raw]
        content = tuple(p if isinstance(p, TextBlock | ImageBlock) else TextBlock(text=str(p)) for p in parts)
    present = [k for k in ("content", "is_error") if k in block]
    rest = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content", "is_error")}
    extra: dict[str, Any] = {_PRESENT: present}
    if rest:
        extra[NAME] = rest
    return ToolResult(call_id=block["tool_use_id"], content=content, is_error=bool(block.get("is_error")), extra=extra)


# --- export --------------------------------------------------------------------------


def to_anthropic(messages: Sequence[Message]) -> tuple[System, list[dict[str, Any]]]:
    """(system, messages) for Anthropic's Messages API.

    Several system messages are joined into one system prompt of text blocks. What the API
    rejects is left out of the request (the messages themselves are not changed): empty text
    blocks, thinking without the signature Anthropic needs to accept it back (reasoning from
    other providers), redacted thinking without data, and messages left with no content.
    """
    system_msgs = [m for m in messages if m.role == "system"]
    system: System = None
    if len(system_msgs) == 1 and system_msgs[0].extra.get(_FORM) == "str":
        system = system_msgs[0].text or None
    elif system_msgs:
        system = [_block_out(b) for m in system_msgs for b in m.content if _sendable(b)] or None
    out = [message for group in groups(messages) if (message := group_message(group)) is not None]
    return system, out


def groups(messages: Sequence[Message]) -> list[list[Message]]:
    """The messages but the system ones, grouped as `to_anthropic` sends them: one Anthropic message a group
    (`group_message`), which depends on the group's messages alone (a host converts only the new groups)."""
    return _groups([m for m in messages if m.role != "system"])


def group_message(group: Sequence[Message]) -> dict[str, Any] | None:
    """A group of `groups` as one Anthropic message; None when nothing in it can be sent."""
    message = _group_out(list(group))
    return message if message["content"] else None


def _sendable(block: Block) -> bool:
    """False for blocks the API rejects: empty text, thinking it cannot verify."""
    if block.extra.get(_BLOCK) is not None or isinstance(block, ToolCall | ToolResult | ImageBlock):
        return True
    if isinstance(block, ThinkingBlock):
        return bool(block.signature)
    return bool(block.text)


def _groups(messages: Sequence[Message]) -> list[list[Message]]:
    """Consecutive pieces of one original message; else a run of tool messages + user text."""
    groups: list[list[Message]] = []
    for msg in messages:
        prev = groups[-1][-1] if groups else None
        if prev is not None and _joins(prev, msg):
            groups[-1].append(msg)
        else:
            groups.append([msg])
    return groups


def _joins(prev: Message, msg: Message) -> bool:
    g_prev, g_msg = prev.extra.get(_GROUP), msg.extra.get(_GROUP)
    if g_prev is not None and g_msg is not None:
        return bool(g_prev == g_msg)
    return prev.role == "tool" and msg.role in ("tool", "user")


def _group_out(group: list[Message]) -> dict[str, Any]:
    first = group[0]
    role = "user" if first.role == "tool" else first.role
    out: dict[str, Any] = {"role": role}
    blocks: list[dict[str, Any]] = []
    for msg in group:
        for block in msg.content:
            if _sendable(block):
                blocks.append(_result_out(block) if isinstance(block, ToolResult) else _block_out(block))
    if first.extra.get(_FORM) == "str" and len(blocks) == 1 and blocks[0]["type"] == "text":
        out["content"] = blocks[0]["text"]
    else:
        out["content"] = blocks
    out.update(first.extra.get(NAME, {}))
    return out


def _block_out(block: Block) -> dict[str, Any]:
    kept = block.extra.get(_BLOCK)
    if kept is not None:
        return dict(kept)
    rest = dict(block.extra.get(NAME, {}))
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text, **rest}
    if isinstance(block, ThinkingBlock):
        if block.redacted:
            return {"type": "redacted_thinking", "data": block.signature or "", **rest}
        out = {"type": "thinking", "thinking": block.text}
        if block.signature is not None:
            out["signature"] = block.signature
        return {**out, **rest}
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input_object(), **rest}
    if isinstance(block, ImageBlock):
        if block.url is not None and block.data is None:
            source: dict[str, Any] = {"type": "url", "url": block.url}
        else:
            source = {"type": "base64", "media_type": block.media_type, "data": block.data or ""}
        return {"type": "image", "source": source, **rest}
    return _result_out(block)


def _result_out(result: ToolResult) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
    present = result.extra.get(_PRESENT, ["content", "is_error"] if result.is_error else ["content"])
    if "content" in present:
        if isinstance(result.content, str):
            out["content"] = result.content
        else:
            out["content"] = [_block_out(b) for b in result.content]
    if "is_error" in present or result.is_error:
        out["is_error"] = result.is_error
    out.update(result.extra.get(NAME, {}))
    return out


# --- files ---------------------------------------------------------------------------

_MARKERS = ('"tool_use"', '"tool_result"', '"thinking"', '"redacted_thinking"')


def sniff(source: Source) -> bool:
    """A request body or message list with Anthropic content blocks or a separate system."""
    sample = source.sample()
    body = sample.get("messages") if isinstance(sample, dict) else sample
    if not (isinstance(body, list) and body and all(isinstance(m, dict) and "role" in m for m in body[:5])):
        return False
    if isinstance(sample, dict) and "system" in sample:
        return True
    head = source.head()
    return any(marker in head for marker in _MARKERS) and '"tool_calls"' not in head


def parse(source: Source) -> list[Conversation]:
    """Conversations from a JSON or JSONL file of Anthropic messages."""
    return parse_message_file(source, from_anthropic, system_field=True)
