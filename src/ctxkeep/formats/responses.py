"""OpenAI Responses-API input items from ctxkeep messages (the way in is `ctxkeep.host.inputs`).

    to_responses(list[Message]) -> list of input item dicts

A system or user message becomes a ``{"role", "content"}`` message item (text, or ``input_text`` and
``input_image`` parts); an assistant message becomes a message item with its text followed by one
``function_call`` item per call, so `ctxkeep.host.inputs` reads the run back as one message; a tool result
becomes a ``function_call_output`` with its call's id. Thinking is left out: a reasoning item cannot
be sent back without the provider's id and encrypted content, which ctxkeep does not keep. Parts
ctxkeep kept whole on the way in (``input_file``, ...) are written back as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxkeep.messages import ImageBlock, Message, TextBlock, ToolCall, ToolResult

_PART = "responses:part"  # an unmodelled part kept by `ctxkeep.host.inputs`, written back as it was


def to_responses(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Responses-API input items for `messages`."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        out.extend(_items(msg))
    return out


def _items(msg: Message) -> list[dict[str, Any]]:
    if msg.role == "tool":
        result = msg.content[0]
        assert isinstance(result, ToolResult)
        return [{"type": "function_call_output", "call_id": result.call_id, "output": _output(result)}]
    parts = [b for b in msg.content if isinstance(b, TextBlock | ImageBlock)]
    if msg.role == "assistant":
        items: list[dict[str, Any]] = []
        if any(isinstance(b, TextBlock) for b in parts):
            # Text, not `output_text` parts: those belong to an output message, which needs the
            # provider's item id; typed "message", so the calls that follow read back as one turn.
            items.append({"type": "message", "role": "assistant", "content": msg.text})
        items.extend(_call(c) for c in msg.content if isinstance(c, ToolCall))
        return items
    if all(isinstance(b, TextBlock) and not b.extra.get(_PART) for b in parts):
        return [{"role": msg.role, "content": msg.text}]
    return [{"role": msg.role, "content": [_input_part(b) for b in parts]}]


def _call(call: ToolCall) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments}


def _output(result: ToolResult) -> str | list[dict[str, Any]]:
    if isinstance(result.content, str):
        return result.content
    return [_input_part(b) for b in result.content]


def _input_part(block: TextBlock | ImageBlock) -> dict[str, Any]:
    kept = block.extra.get(_PART)
    if kept is not None:
        return dict(kept)
    if isinstance(block, ImageBlock):
        url = block.url if block.url is not None else f"data:{block.media_type};base64,{block.data or ''}"
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    return {"type": "input_text", "text": block.text}
