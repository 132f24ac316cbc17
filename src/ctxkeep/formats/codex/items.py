"""Response items and message parts as blocks: text, images, reasoning, tool calls, web searches."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxkeep.formats.codex.records import _Bad
from ctxkeep.messages import Block, ImageBlock, TextBlock, ThinkingBlock, ToolCall


def _content_item(part: Any) -> TextBlock | ImageBlock | None:
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
        return TextBlock(text=part["text"])
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        extra = {"detail": part["detail"]} if part.get("detail") is not None else {}
        return ImageBlock.from_url(part["image_url"], extra=extra)
    return None


def _rest(item: Mapping[str, Any], modelled: frozenset[str] | set[str]) -> dict[str, Any]:
    """The item's fields ctxkeep does not model, kept in extra."""
    rest = {k: v for k, v in item.items() if k not in modelled}
    return {"codex": rest} if rest else {}


def _texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def _reasoning(item: Mapping[str, Any]) -> ThinkingBlock:
    summary = _texts(item.get("summary"))
    raw = _texts(item.get("content"))
    text = "\n\n".join(summary or raw)
    extra = _rest(item, {"type", "summary", "content", "encrypted_content", "id"})
    if summary and raw:
        extra["codex:reasoning_text"] = "\n\n".join(raw)
    encrypted = item.get("encrypted_content")
    if encrypted is not None:
        extra["codex:encrypted_content"] = encrypted
    return ThinkingBlock(text=text, redacted=not text and encrypted is not None, extra=extra)


def _call(item: Mapping[str, Any], kind: str) -> ToolCall:
    call_id = item.get("call_id") or (item.get("id") if kind == "local_shell_call" else None)
    if not isinstance(call_id, str) or not call_id:
        raise _Bad(f"{kind} without a 'call_id'")
    extra: dict[str, Any] = {"codex:type": kind}
    if kind == "function_call":
        args = item["arguments"]
        arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        name = item["name"]
        extra.update(_rest(item, {"type", "arguments", "name", "call_id", "id"}))
    elif kind == "custom_tool_call":
        if not isinstance(item.get("input"), str):
            raise _Bad("custom_tool_call 'input' must be text")
        arguments = json.dumps({"input": item["input"]}, ensure_ascii=False)
        name = item["name"]
        extra.update(_rest(item, {"type", "input", "name", "call_id", "id"}))
    elif kind == "local_shell_call":
        arguments = json.dumps(item["action"], ensure_ascii=False)
        name = "local_shell"
        extra.update(_rest(item, {"type", "action", "call_id", "id"}))
    else:  # tool_search_call
        arguments = json.dumps(item.get("arguments"), ensure_ascii=False)
        name = "tool_search"
        extra.update(_rest(item, {"type", "arguments", "call_id", "id"}))
    if not isinstance(name, str) or not name:
        raise _Bad(f"{kind} without a tool 'name'")
    return ToolCall(id=call_id, name=name, arguments=arguments, extra=extra)


def _web_search(item: Mapping[str, Any]) -> TextBlock:
    action = item.get("action")
    action = action if isinstance(action, dict) else {}
    kind = action.get("type")
    if kind == "search":
        queries = action.get("queries")
        what = "; ".join(q for q in queries if isinstance(q, str)) if isinstance(queries, list) and queries else None
        text = f"[web search: {what or action.get('query') or ''}]"
    elif kind == "open_page":
        text = f"[web search: open {action.get('url') or ''}]"
    elif kind == "find_in_page":
        text = f"[web search: find {action.get('pattern') or ''!r} in {action.get('url') or ''}]"
    else:
        text = "[web search]"
    return TextBlock(text=text, extra={"codex:item": dict(item)})


def _image_generation(item: Mapping[str, Any]) -> Block:
    result = item.get("result")
    extra = _rest(item, {"type", "result", "id"})
    if isinstance(result, str) and result:
        return ImageBlock(media_type="image/png", data=result, extra=extra)
    prompt = item.get("revised_prompt")
    return TextBlock(text=f"[image generation: {prompt or item.get('status') or 'no image'}]", extra=extra)
