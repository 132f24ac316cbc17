"""The event_msg fallback: a conversation rebuilt from UI events, for files with no response items."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ctxkeep.formats.codex.items import _texts, _web_search
from ctxkeep.formats.codex.records import _Bad, _event_type, _reason, _Record
from ctxkeep.formats.codex.turns import _Builder
from ctxkeep.formats.source import RECORD_ERRORS
from ctxkeep.messages import Block, ImageBlock, TextBlock, ThinkingBlock, ToolCall, ToolResult


def _read_events(builder: _Builder, events: Sequence[_Record]) -> None:
    """Rebuild the conversation from UI events, for files that have no response items."""
    if not any(_event_type(e) in _SPOKEN_EVENTS or _event_type(e) in _TOOL_ENDS for e in events):
        return
    ended = {e[2].get("call_id") for e in events if _event_type(e) in _TOOL_ENDS}
    called: set[str] = set()
    unended = 0
    for record in events:
        _, lineno, event, ts = record
        kind = _event_type(record)
        try:
            if kind in _TOOL_BEGINS and event.get("call_id") not in ended:
                unended += 1
            else:
                _read_event(builder, kind, event, ts, called)
        except RECORD_ERRORS as exc:  # _Bad is a ValueError
            builder.source.skip(lineno, _reason(f"event_msg {kind}", exc))
    builder.source.notes.append(
        "this file has no response items; the conversation was rebuilt from its event_msg records "
        "(user_message, agent_message, agent_reasoning, web search and tool events)"
    )
    if unended:
        builder.source.notes.append(f"left out {unended} tool call(s) whose begin event has no end event")


def _read_event(builder: _Builder, kind: str, event: Mapping[str, Any], ts: datetime | None, called: set[str]) -> None:
    """One event of the fallback; `called` holds the ids of the calls already placed."""
    if kind == "user_message":
        builder.add_other("user", _user_event(event), ts, None, {"codex:event": kind})
    elif kind == "agent_message":
        builder.add_assistant(TextBlock(text=_text_field(event, "message")), ts, None)
    elif kind == "agent_reasoning":
        builder.add_assistant(ThinkingBlock(text=_text_field(event, "text")), ts, None)
    elif kind == "web_search_end":
        action = event.get("action")
        if not isinstance(action, dict):
            action = {"type": "search", "query": event.get("query")}
        builder.add_assistant(_web_search({"action": action}), ts, None)
    elif kind in _TOOL_BEGINS or kind in _TOOL_ENDS:
        call = _event_call(_TOOL_BEGINS.get(kind) or _TOOL_ENDS[kind], event)
        if call.id not in called:  # newer Codex persists only the end event, which repeats the call
            builder.add_assistant(call, ts, None)
            called.add(call.id)
        if kind in _TOOL_ENDS:
            builder.add_result(_event_result(kind, event), ts, None)


_SPOKEN_EVENTS = frozenset({"user_message", "agent_message"})
# event type -> the kind of tool call it describes
_TOOL_BEGINS = {"exec_command_begin": "exec", "patch_apply_begin": "patch", "mcp_tool_call_begin": "mcp"}
_TOOL_ENDS = {"exec_command_end": "exec", "patch_apply_end": "patch", "mcp_tool_call_end": "mcp"}


def _text_field(event: Mapping[str, Any], key: str) -> str:
    value = event.get(key)
    if not isinstance(value, str):
        raise _Bad(f"{key!r} must be text")
    return value


def _user_event(event: Mapping[str, Any]) -> list[Block]:
    blocks: list[Block] = [TextBlock(text=_text_field(event, "message"))]
    images = event.get("images")
    for url in images if isinstance(images, list) else []:
        if isinstance(url, str) and url:
            blocks.append(ImageBlock.from_url(url))
    return blocks


def _event_call(kind: str, event: Mapping[str, Any]) -> ToolCall:
    """The tool call a begin or end event describes."""
    call_id = event.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise _Bad("tool event without a 'call_id'")
    if kind == "exec":
        name, args = "shell", {"command": event.get("command"), "workdir": event.get("cwd")}
    elif kind == "patch":
        name, args = "apply_patch", {"changes": event.get("changes")}
    else:
        invocation = event["invocation"]
        name, args = f"{invocation['server']}__{invocation['tool']}", invocation.get("arguments")
    extra = {"codex:event": "reconstructed from event_msg records"}
    return ToolCall(id=call_id, name=name, arguments=json.dumps(args, ensure_ascii=False), extra=extra)


def _event_result(kind: str, event: Mapping[str, Any]) -> ToolResult:
    """The result an end event reports."""
    call_id = str(event["call_id"])
    extra = {"codex:event": kind}
    if kind == "mcp_tool_call_end":
        result = event.get("result")
        if isinstance(result, dict) and isinstance(result.get("Ok"), dict):
            ok = result["Ok"]
            text = "\n".join(_texts(ok.get("content")))
            return ToolResult(call_id=call_id, content=text, is_error=ok.get("isError") is True, extra=extra)
        error = result.get("Err") if isinstance(result, dict) else result
        return ToolResult(call_id=call_id, content=str(error), is_error=True, extra=extra)
    stdout, stderr = event.get("stdout"), event.get("stderr")
    streams = "".join(s for s in (stdout, stderr) if isinstance(s, str))
    if kind == "patch_apply_end":
        return ToolResult(call_id=call_id, content=streams, is_error=event.get("success") is False, extra=extra)
    output = event.get("aggregated_output")
    code = event.get("exit_code")
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    content = output if isinstance(output, str) else streams
    return ToolResult(call_id=call_id, content=content, is_error=bool(exit_code), exit_code=exit_code, extra=extra)
