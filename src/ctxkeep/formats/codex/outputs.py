"""Tool outputs as results: their content forms, exit codes and failures."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ctxkeep.formats.codex.items import _content_item, _rest
from ctxkeep.formats.codex.records import _Bad
from ctxkeep.messages import ImageBlock, TextBlock, ToolResult

# exit-code headers of shell outputs: "Exit code: 1" (shell tool), "Process exited with code 1" (unified exec)
_EXIT_RE = re.compile(r"^(?:Exit code:|Process exited with code)\s*(-?\d+)\s*$", re.MULTILINE)
_HEADER_CHARS = 600  # the headers sit above "Output:"; the command's own output is never searched


def _output(item: Mapping[str, Any], kind: str) -> ToolResult:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise _Bad(f"{kind} without a 'call_id'")
    extra: dict[str, Any] = {"codex:type": kind}
    if kind == "tool_search_output":
        extra.update(_rest(item, {"type", "call_id", "tools", "id"}))
        return ToolResult(call_id=call_id, content=json.dumps(item.get("tools"), ensure_ascii=False), extra=extra)
    extra.update(_rest(item, {"type", "call_id", "output", "id"}))
    content, exit_code, failed = _output_body(item.get("output"), extra)
    is_error = failed or (exit_code is not None and exit_code != 0)
    return ToolResult(call_id=call_id, content=content, is_error=is_error, exit_code=exit_code, extra=extra)


def _output_body(
    output: Any, extra: dict[str, Any]
) -> tuple[str | tuple[TextBlock | ImageBlock, ...], int | None, bool]:
    """(content, exit code, explicit failure) of an output; `extra` gets what is not content."""
    if isinstance(output, dict) and "type" in output and "content" not in output:
        output = [output]  # a single content item given on its own
    if isinstance(output, list):
        parts = tuple(_content_item(p) or TextBlock(text=json.dumps(p, ensure_ascii=False)) for p in output)
        return parts, None, False
    failed = False
    if isinstance(output, dict):  # {"content": ..., "success": false}
        if not isinstance(output.get("content"), str):
            raise _Bad("output object without text 'content'")
        failed = output.get("success") is False
        if "success" in output:
            extra["codex:success"] = output["success"]
        output = output["content"]
    if not isinstance(output, str):
        raise _Bad(f"output must be text or a list of content items, got {type(output).__name__}")
    wrapped = _json_wrapped(output)
    if wrapped is not None:
        text, metadata = wrapped
        extra["codex:output_form"] = "json"
        extra["codex:metadata"] = metadata
        code = metadata.get("exit_code")
        return text, code if isinstance(code, int) and not isinstance(code, bool) else None, failed
    return output, _header_exit_code(output), failed


def _json_wrapped(text: str) -> tuple[str, dict[str, Any]] | None:
    """Older Codex: ``{"output": "...", "metadata": {"exit_code": 0, ...}}`` as text."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and isinstance(value.get("output"), str) and isinstance(value.get("metadata"), dict):
        return value["output"], value["metadata"]
    return None


def _header_exit_code(text: str) -> int | None:
    """The exit code from the header lines above ``Output:``, if the output has such headers."""
    end = text.find("\nOutput:", 0, _HEADER_CHARS)
    if end < 0:  # no header block: any "Exit code" line would be the command's own output
        return None
    m = _EXIT_RE.search(text, 0, end)
    return int(m.group(1)) if m else None
