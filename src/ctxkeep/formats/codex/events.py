"""The event_msg records: what they add to the response items, and the conversation rebuilt from them alone.

Codex records most things twice: a response item (what the model saw) and a UI event (what the
terminal showed). The response item wins; an event is read only when its response-item form is
absent (`Covered`), so nothing is imported twice and nothing the events alone hold is lost: some
rollouts keep the user's asks only as ``user_message`` events, or a command only as its
``exec_command_end`` event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ctxkeep.formats.codex.items import _texts, _web_search
from ctxkeep.formats.codex.records import _Bad, _event_type, _reason, _Record
from ctxkeep.formats.codex.turns import _Builder
from ctxkeep.formats.source import RECORD_ERRORS, Source
from ctxkeep.messages import Block, ImageBlock, TextBlock, ThinkingBlock, ToolCall, ToolResult


@dataclass
class Covered:
    """What the response items of a file already hold, to tell an event that repeats one from one that does not.

    Texts are matched as a multiset (each item answers for one event), in file order; tool events by
    their call id; web searches by their action.
    """

    texts: dict[str, list[str]] = field(default_factory=dict)  # event type -> item texts not yet matched
    call_ids: set[str] = field(default_factory=set)
    searches: list[Any] = field(default_factory=list)

    @classmethod
    def of(cls, records: Sequence[_Record]) -> Covered:
        """The messages, reasoning, calls and searches among `records` (the non-event records of a file)."""
        covered = cls()
        for kind, _, item, _ in records:
            if kind != "response_item":
                continue
            what = item.get("type")
            if what == "message" and item.get("role") in ("user", "assistant"):
                event = "user_message" if item["role"] == "user" else "agent_message"
                covered.texts.setdefault(event, []).append("\n".join(_texts(item.get("content"))))
            elif what == "reasoning":
                texts = _texts(item.get("summary")) + _texts(item.get("content"))
                covered.texts.setdefault("agent_reasoning", []).append("\n".join(texts))
            elif what == "web_search_call":
                covered.searches.append(item.get("action"))
            elif isinstance(item.get("call_id"), str):
                covered.call_ids.add(item["call_id"])
        return covered

    def repeats(self, kind: str, event: Mapping[str, Any]) -> bool:
        """True when a response item holds what `event` says; the item is then taken, answering no other."""
        if kind in _TOOL_BEGINS or kind in _TOOL_ENDS:
            return event.get("call_id") in self.call_ids
        if kind == "web_search_end":
            if event.get("action") in self.searches:
                self.searches.remove(event.get("action"))
                return True
            return False
        if kind not in _TEXT_EVENTS:
            return False
        pool = self.texts.get(kind, [])
        key = str(event.get(_TEXT_EVENTS[kind]) or "").strip()
        for j, text in enumerate(pool):
            if key in text:  # an empty key (an image alone) is answered by any item
                del pool[j]
                return True
        return False


def _missing(events: Sequence[_Record], covered: Covered, source: Source) -> list[_Record]:
    """The events whose response-item form is absent (all of a file with no response items), in order; the
    rest counted as left out. A begin event places its call (its end event gives the result); one with no
    end event is left out: the call never finished, and a call without its result cannot be sent."""
    ended = {e[2].get("call_id") for e in events if _event_type(e) in _TOOL_ENDS}
    out: list[_Record] = []
    unended = 0
    for record in events:
        kind = _event_type(record)
        if kind in _TOOL_BEGINS and not covered.repeats(kind, record[2]) and record[2].get("call_id") not in ended:
            unended += 1
        elif kind not in _READ:
            source.leave_out(f"event_msg {kind} (not conversation)")
        elif covered.repeats(kind, record[2]):
            source.leave_out(f"event_msg {kind} (repeats a response item)")
        else:
            out.append(record)
    if unended:
        source.leave_out("event_msg tool begin (no end event)", unended)
        source.notes.append(f"left out {unended} tool call(s) whose begin event has no end event")
    return out


def _read_events(builder: _Builder, events: Sequence[_Record], called: set[str]) -> None:
    """Read `events` in order, each into the message being built; `called` holds the ids of the calls placed."""
    for _, lineno, event, ts in events:
        kind = str(event.get("type"))
        try:
            _read_event(builder, kind, event, ts, called)
        except RECORD_ERRORS as exc:  # _Bad is a ValueError
            builder.source.skip(lineno, _reason(f"event_msg {kind}", exc))


def _rebuild(builder: _Builder, events: Sequence[_Record]) -> bool:
    """Rebuild the conversation from UI events, for a file that has no response items; False if they hold none."""
    if not any(_event_type(e) in _SPOKEN_EVENTS or _event_type(e) in _TOOL_ENDS for e in events):
        return False
    _read_events(builder, _missing(events, Covered(), builder.source), set())
    builder.source.notes.append(
        "this file has no response items; the conversation was rebuilt from its event_msg records "
        "(user_message, agent_message, agent_reasoning, web search and tool events)"
    )
    return True


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
# the events a conversation is made of (the others are bookkeeping: token counts, turn starts)
_READ = frozenset({
    "user_message", "agent_message", "agent_reasoning", "web_search_end",
    "exec_command_begin", "patch_apply_begin", "mcp_tool_call_begin",
    "exec_command_end", "patch_apply_end", "mcp_tool_call_end",
})  # fmt: skip
# events that say something in words -> the field holding the words
_TEXT_EVENTS = {"user_message": "message", "agent_message": "message", "agent_reasoning": "text"}
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
