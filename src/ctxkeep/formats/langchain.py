"""LangChain messages both ways: to OpenAI chat dicts (what a session takes) and from ctxkeep messages.

The LangChain adapter (`ctxkeep.adapters.langchain`) is hook glue over these. Needs ``langchain-core``
(``pip install 'ctxkeep[langchain]'``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ctxkeep.errors import MessageError
from ctxkeep.messages import ImageBlock, Message, TextBlock, ToolResult

__all__ = ["as_chat_dicts", "chat_dict", "content_of", "message_of", "to_langchain"]


# --- LangChain -> OpenAI chat dicts (what Session.sync takes) -------------------------------------------


def as_chat_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as OpenAI chat dicts, one each, for `Session.sync` and counting.

    Tool calls (valid or not: the provider is sent both) keep their ids, so results stay paired.
    Reasoning blocks are left out (the chat format has no place for them). Raises `MessageError` naming
    the position of a message of an unknown kind.
    """
    return [chat_dict(i, m) for i, m in enumerate(messages)]


def chat_dict(i: int, msg: object) -> dict[str, Any]:
    """LangChain message `msg`, item `i` of a history, as an OpenAI chat dict (`as_chat_dicts`)."""
    if isinstance(msg, ToolMessage):
        return {"role": "tool", "tool_call_id": msg.tool_call_id, "content": _chat_content(msg.content)}
    if isinstance(msg, AIMessage):
        calls = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
            for c in msg.tool_calls
            if c.get("id")
        ]
        calls += [
            {"id": c["id"], "type": "function", "function": {"name": c["name"] or "", "arguments": c["args"] or ""}}
            for c in msg.invalid_tool_calls
            if c.get("id")
        ]
        text = msg.text
        out: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
        if calls:
            out["tool_calls"] = calls
        return out
    if not isinstance(msg, BaseMessage):
        raise MessageError(f"history item {i}: expected a LangChain message, got {type(msg).__name__}", index=i)
    role: str | None = None
    if isinstance(msg, SystemMessage):
        role = "system"
    elif isinstance(msg, HumanMessage):
        role = "user"
    elif isinstance(msg, ChatMessage) and msg.role in ("system", "developer", "user", "assistant"):
        role = msg.role
    if role is None:
        raise MessageError(
            f"history item {i}: a {type(msg).__name__} ({msg.type!r}) is not a message ctxkeep can place;"
            " expected a HumanMessage, AIMessage, ToolMessage or SystemMessage",
            index=i,
        )
    return {"role": role, "content": _chat_content(msg.content)}


def _chat_content(content: str | list[str | dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif block.get("type") == "image_url":
            parts.append({"type": "image_url", "image_url": block["image_url"]})
        elif block.get("type") == "image" and (block.get("url") or block.get("base64")):
            url = block.get("url") or f"data:{block.get('mime_type', 'image/png')};base64,{block['base64']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            # Anything else (a file, audio, a provider's block) counts as its JSON text: never as nothing.
            parts.append({"type": "text", "text": json.dumps(block, ensure_ascii=False, default=str)})
    return parts


# --- ctxkeep -> LangChain ---------------------------------------------------------------------------------


def to_langchain(messages: Sequence[Message]) -> list[AnyMessage]:
    """ctxkeep messages as LangChain messages: ids kept, tool calls with their parsed arguments, each
    result a `ToolMessage` with its call's id (``status="error"`` for an error result)."""
    return [message_of(m) for m in messages]


def message_of(msg: Message, *, summary: bool = False) -> AnyMessage:
    """A ctxkeep message as a LangChain message; `summary` marks ctxkeep's summary as LangChain's own marks its."""
    if msg.role == "tool":
        result = msg.content[0]
        assert isinstance(result, ToolResult)
        return ToolMessage(
            content=content_of(msg),
            tool_call_id=result.call_id,
            status="error" if result.is_error else "success",
            id=msg.id,
        )
    if msg.role == "assistant":
        calls = [{"name": c.name, "args": c.input_object(), "id": c.id, "type": "tool_call"} for c in msg.tool_calls]
        return AIMessage(content=msg.text, tool_calls=calls, id=msg.id)
    if msg.role == "system":
        return SystemMessage(content=content_of(msg), id=msg.id)
    # LangChain's own summarization marks its summary message so; other middleware recognises it.
    extra = {"lc_source": "summarization"} if summary else {}
    return HumanMessage(content=content_of(msg), id=msg.id, additional_kwargs=extra)


def content_of(msg: Message) -> str | list[str | dict[str, Any]]:
    """A ctxkeep message's content (a tool message's: its result's) as LangChain content: text, or parts with images."""
    blocks = msg.content
    if msg.role == "tool":
        result = blocks[0]
        assert isinstance(result, ToolResult)
        if isinstance(result.content, str):
            return result.content
        blocks = result.content
    if not any(isinstance(b, ImageBlock) for b in blocks):
        return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
    parts: list[str | dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            url = b.url if b.url is not None else f"data:{b.media_type};base64,{b.data or ''}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts
