"""The content blocks of an entry's message as ctxkeep blocks, tool results with their exit codes."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ctxkeep.messages import Block, ImageBlock, TextBlock, ThinkingBlock, ToolCall, ToolResult, make_id

NAME = "claude_code"  # defined here, below the modules that use it; the package re-exports it
_EXIT_CODE = re.compile(r"(?:Error: )?Exit code (-?\d+)\b")


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _blocks(content: Any, obj: Mapping[str, Any], uuid: str) -> tuple[list[Block], list[int]]:
    """The blocks of an entry's message, and the positions of the calls and results that name no id.

    Those get a stable made-up id here; `_pair_unnamed` replaces it when the file tells more.
    """
    if isinstance(content, str):
        return [TextBlock(text=content)], []
    if not isinstance(content, list):
        raise TypeError(f"'message.content' must be text or a list, got {type(content).__name__}")
    n_results = sum(1 for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result")
    # toolUseResult and sourceToolUseID describe the entry's result; only unambiguous when there is one
    tool_use_result = obj.get("toolUseResult") if n_results == 1 else None
    source_call = _str(obj.get("sourceToolUseID")) if n_results == 1 else None
    blocks: list[Block] = []
    unnamed: list[int] = []
    for i, block in enumerate(content):
        key = _missing_id(block)
        if key == "tool_use_id" and source_call:
            block = {**block, key: source_call}
        elif key is not None:
            block = {**block, key: make_id(NAME, uuid, i)}
            unnamed.append(i)
        blocks.append(_block(block, tool_use_result))
    return blocks, unnamed


def _missing_id(block: Any) -> str | None:
    """The id field a tool_use or tool_result block leaves out or empty (trimmed files), else None."""
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    key = "id" if kind == "tool_use" else "tool_use_id" if kind == "tool_result" else None
    return key if key is not None and block.get(key) in (None, "") else None


def _block(block: Any, tool_use_result: Any) -> Block:
    if not isinstance(block, Mapping):
        raise TypeError(f"a content block must be an object, got {type(block).__name__}")
    kind = block["type"]
    if kind == "text":
        return TextBlock(text=block["text"])
    if kind == "thinking":
        return ThinkingBlock(text=block["thinking"], signature=block.get("signature"))
    if kind == "redacted_thinking":
        return ThinkingBlock(text="", signature=block["data"], redacted=True)
    if kind == "tool_use":
        return ToolCall.from_input(id=block["id"], name=block["name"], input=block.get("input", {}))
    if kind == "tool_result":
        return _result(block, tool_use_result)
    image = _image(block)
    return image if image is not None else _kept_whole(block)


def _image(block: Mapping[str, Any]) -> ImageBlock | None:
    source = block.get("source")
    if block.get("type") != "image" or not isinstance(source, Mapping):
        return None
    if source.get("type") == "base64":
        return ImageBlock(media_type=source.get("media_type") or "image/png", data=source.get("data"))
    if source.get("type") == "url":
        return ImageBlock(media_type=source.get("media_type") or "image/jpeg", url=source.get("url"))
    return None


def _kept_whole(block: Mapping[str, Any]) -> TextBlock:
    """A block ctxkeep does not model (document, tool_reference, ...): readable text, original in extra."""
    text = block.get("text") or block.get("content")
    if not isinstance(text, str):
        text = f"[{block.get('type')}] " + json.dumps(block, ensure_ascii=False)[:2000]
    return TextBlock(text=text, extra={NAME: {"block": dict(block)}})


def _result(block: Mapping[str, Any], tool_use_result: Any) -> ToolResult:
    raw = block.get("content", "")
    content: str | tuple[TextBlock | ImageBlock, ...]
    if raw is None:
        content = ""
    elif isinstance(raw, str):
        content = raw
    elif isinstance(raw, list):
        parts = [_block(b, None) for b in raw]
        content = tuple(p if isinstance(p, TextBlock | ImageBlock) else TextBlock(text=str(p)) for p in parts)
    else:
        raise TypeError(f"tool_result content must be text or a list, got {type(raw).__name__}")
    is_error = bool(block.get("is_error"))
    result = ToolResult(call_id=block["tool_use_id"], content=content, is_error=is_error)
    details = _small_fields(tool_use_result)
    exit_code = _exit_code(tool_use_result, result.text if is_error else "")
    if details or exit_code is not None:
        return ToolResult(
            call_id=result.call_id,
            content=content,
            is_error=is_error,
            exit_code=exit_code,
            extra={NAME: {"toolUseResult": details}} if details else {},
        )
    return result


def _exit_code(tool_use_result: Any, error_text: str) -> int | None:
    """The exit code when the record states one: ``exitCode``, or a failed Bash call's "Exit code N"."""
    if isinstance(tool_use_result, Mapping):
        code = tool_use_result.get("exitCode")
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    for text in (error_text, tool_use_result if isinstance(tool_use_result, str) else ""):
        match = _EXIT_CODE.match(text)
        if match:
            return int(match.group(1))
    return None


def _small_fields(tool_use_result: Any) -> dict[str, Any]:
    """The scalar fields of ``toolUseResult`` (flags, codes); file copies and outputs are left out."""
    if not isinstance(tool_use_result, Mapping):
        return {}
    return {
        k: v
        for k, v in tool_use_result.items()
        if isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 200)
    }
