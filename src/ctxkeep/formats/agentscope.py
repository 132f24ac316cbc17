"""AgentScope ``Msg`` dicts (what CoPaw agents keep in memory), both ways.

    from_agentscope(list of Msg.to_dict() values) -> list[Message]
    to_agentscope(list[Message])                  -> list of Msg dicts

A Msg has ``id``, ``name``, ``role`` (user / assistant / system), ``content`` (a string or
blocks: text, thinking, tool_use, tool_result, image, audio, video), ``metadata`` and a
local ``timestamp`` string. AgentScope's ReAct agent stores tool results as blocks of a
``system`` Msg named "system"; each ``tool_result`` block becomes a ctxkeep tool message,
and on export a run of tool messages becomes one such Msg again. Audio and video blocks
are kept whole and written back. Msg fields are kept, so AgentScope -> ctxkeep ->
AgentScope gives back equal dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

from ctxkeep.formats.chat import parse_message_file
from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source, describe, parse_timestamp
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

NAME = "agentscope"


_GROUP = "agentscope:group"
_MSG = "agentscope"  # the Msg's own fields other than role and content
_BLOCK = "agentscope:block"
_TS_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def from_agentscope(msgs: Sequence[Mapping[str, Any]], *, conversation_id: str = "", start: int = 0) -> list[Message]:
    """Messages from AgentScope Msg dicts. Raises ValueError naming a bad Msg.

    A Msg's own ``id`` becomes the message id; a Msg without one gets an id from
    `conversation_id` and its position (`start` + index).
    """
    if not isinstance(msgs, Sequence) or isinstance(msgs, str | bytes):
        raise ValueError(f"expected a list of Msg dicts, got {type(msgs).__name__}")
    out: list[Message] = []
    for i, raw in enumerate(msgs, start):
        try:
            out.extend(_msg_in(raw, i, conversation_id))
        except RECORD_ERRORS as exc:
            raise ValueError(f"Msg {i}: {describe(exc)}") from exc
    return out


def _msg_in(raw: Mapping[str, Any], index: int, conv_id: str) -> list[Message]:
    if not isinstance(raw, Mapping):
        raise TypeError(f"expected a Msg object, got {type(raw).__name__}")
    role = raw["role"]
    if role not in ("user", "assistant", "system"):
        raise ValueError(f"role must be user, assistant or system, got {role!r}")
    source_id = str(raw["id"]) if raw.get("id") is not None else None
    base_id = source_id or make_id(NAME, conv_id, index)
    extra: dict[str, Any] = {_GROUP: base_id, _MSG: {k: v for k, v in raw.items() if k not in ("role", "content")}}
    # AgentScope writes the agent's local time with no zone, which a file does not say: read as UTC
    ts = parse_timestamp(raw.get("timestamp"))
    content = raw["content"]
    if isinstance(content, str):
        extra["agentscope:content"] = "str"
        return [
            Message(
                role=role,
                id=base_id,
                source_id=source_id,
                timestamp=ts,
                content=(TextBlock(text=content),),
                extra=extra,
            )
        ]

    pieces: list[Message] = []
    pending: list[Block] = []

    def piece_id() -> str:
        return base_id if not pieces else f"{base_id}:{len(pieces)}"

    def flush() -> None:
        if pending:
            pieces.append(
                Message(
                    role=role, id=piece_id(), source_id=source_id, timestamp=ts, content=tuple(pending), extra=extra
                )
            )
            pending.clear()

    for block in content:
        if block.get("type") == "tool_result":
            flush()
            pieces.append(
                Message(
                    role="tool",
                    id=piece_id(),
                    source_id=source_id,
                    timestamp=ts,
                    content=(_result_in(block),),
                    extra=extra,
                )
            )
        else:
            pending.append(_block_in(block))
    flush()
    if not pieces:
        pieces.append(Message(role=role, id=base_id, source_id=source_id, timestamp=ts, content=(), extra=extra))
    return pieces


_MODELLED: dict[str, tuple[str, ...]] = {
    "text": ("type", "text"),
    "thinking": ("type", "thinking", "signature"),
    "tool_use": ("type", "id", "name", "input"),
}


def _block_in(block: Mapping[str, Any]) -> Block:
    kind = block.get("type")
    rest = {k: v for k, v in block.items() if k not in _MODELLED.get(str(kind), ())}
    extra: dict[str, Any] = {NAME: rest} if rest else {}
    if kind == "text":
        return TextBlock(text=block["text"], extra=extra)
    if kind == "thinking":
        return ThinkingBlock(text=block["thinking"], signature=block.get("signature"), extra=extra)
    if kind == "tool_use":
        return ToolCall.from_input(id=block["id"], name=block["name"], input=block["input"], extra=extra)
    if kind == "image" and set(block) == {"type", "source"}:
        src = block["source"]
        if src.get("type") == "base64" and set(src) == {"type", "media_type", "data"}:
            return ImageBlock(media_type=src["media_type"], data=src["data"])
        if src.get("type") == "url" and set(src) == {"type", "url"}:
            return ImageBlock.from_url(src["url"])
    # audio, video and shapes not modelled: kept whole, shown as text
    text = block.get("text") or f"[{kind}]"
    return TextBlock(text=str(text), extra={_BLOCK: dict(block)})


def _result_in(block: Mapping[str, Any]) -> ToolResult:
    output = block.get("output", "")
    content: str | tuple[TextBlock | ImageBlock, ...]
    if isinstance(output, str):
        content = output
    else:
        converted = [_block_in(b) for b in output]
        content = tuple(b if isinstance(b, TextBlock | ImageBlock) else TextBlock(text=str(b)) for b in converted)
    rest = {k: v for k, v in block.items() if k not in ("type", "id", "output", "is_error")}
    extra: dict[str, Any] = {_BLOCK + ":result": rest, "agentscope:is_error": "is_error" in block}
    return ToolResult(call_id=block["id"], content=content, is_error=bool(block.get("is_error")), extra=extra)


# --- export --------------------------------------------------------------------------


def to_agentscope(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """AgentScope Msg dicts for `messages`."""
    names: dict[str, str] = {}  # call id -> tool name, for tool_result blocks
    out: list[dict[str, Any]] = []
    group: list[Message] = []
    for msg in messages:
        for call in msg.tool_calls:
            names[call.id] = call.name
        if group and not _joins(group[-1], msg):
            out.append(_group_out(group, names))
            group = []
        group.append(msg)
    if group:
        out.append(_group_out(group, names))
    return out


def _joins(prev: Message, msg: Message) -> bool:
    g_prev, g_msg = prev.extra.get(_GROUP), msg.extra.get(_GROUP)
    if g_prev is not None and g_msg is not None:
        return bool(g_prev == g_msg)
    return prev.role == "tool" and msg.role == "tool"


def _group_out(group: list[Message], names: Mapping[str, str]) -> dict[str, Any]:
    first = group[0]
    fields = first.extra.get(_MSG)
    role = "system" if first.role == "tool" else first.role
    if fields is None:
        fields = {
            "id": first.id,
            "name": "system" if first.role == "tool" else first.role,
            "metadata": {},
            # AgentScope fills in the current time itself when the value is None
            "timestamp": first.timestamp.astimezone(UTC).strftime(_TS_FORMAT)[:-3] if first.timestamp else None,
        }
    blocks = [_block_out(b, names) for m in group for b in m.content]
    content: str | list[dict[str, Any]] = blocks
    if first.extra.get("agentscope:content") == "str":
        content = first.text
    return {**fields, "role": role, "content": content}


def _block_out(block: Block, names: Mapping[str, str]) -> dict[str, Any]:
    kept = block.extra.get(_BLOCK)
    if kept is not None:
        return dict(kept)
    rest = block.extra.get(NAME, {})
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text, **rest}
    if isinstance(block, ThinkingBlock):
        thinking: dict[str, Any] = {"type": "thinking", "thinking": block.text}
        if block.signature is not None:
            thinking["signature"] = block.signature
        return {**thinking, **rest}
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input_object(), **rest}
    if isinstance(block, ImageBlock):
        if block.url is not None:
            return {"type": "image", "source": {"type": "url", "url": block.url}}
        return {"type": "image", "source": {"type": "base64", "media_type": block.media_type, "data": block.data or ""}}
    output: str | list[dict[str, Any]]
    output = block.content if isinstance(block.content, str) else [_block_out(b, names) for b in block.content]
    out: dict[str, Any] = {"type": "tool_result", "id": block.call_id, "name": names.get(block.call_id, "")}
    out.update(block.extra.get(_BLOCK + ":result", {}))
    out["output"] = output
    if block.extra.get("agentscope:is_error", block.is_error):
        out["is_error"] = block.is_error
    return out


# --- files ---------------------------------------------------------------------------


def sniff(source: Source) -> bool:
    """A list (or JSONL) of Msg dicts: ``name``, ``role``, ``content`` and ``timestamp``."""
    sample = source.sample()
    first = sample[0] if isinstance(sample, list) and sample else sample
    return isinstance(first, dict) and {"name", "role", "content", "timestamp"} <= set(first)


def parse(source: Source) -> list[Conversation]:
    """Conversations from a JSON or JSONL file of AgentScope Msg dicts."""
    return parse_message_file(source, from_agentscope)
