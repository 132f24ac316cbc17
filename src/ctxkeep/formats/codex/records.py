"""Reading a rollout file into records: wrapped or legacy bare lines, with the event_msg records apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxkeep.formats.source import Source, describe, parse_timestamp

_RECORD_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call", "tool_search_call"})
_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output", "tool_search_output"})
_ASSISTANT_TYPES = _CALL_TYPES | {"reasoning", "web_search_call", "image_generation_call"}
_COMPACTION_TYPES = frozenset({"compaction", "compaction_summary", "context_compaction"})
# harness bookkeeping and request controls: never conversation
_IGNORED_ITEMS = frozenset({"ghost_snapshot", "compaction_trigger", "configuration_update", "additional_tools"})
_ITEM_TYPES = _ASSISTANT_TYPES | _OUTPUT_TYPES | _COMPACTION_TYPES | _IGNORED_ITEMS | {"message", "agent_message"}


class _Bad(ValueError):
    """A record that does not have the shape the format requires."""


def _reason(kind: str, exc: Exception) -> str:
    return f"{kind} record: {describe(exc)}"


_Record = tuple[str, int, Mapping[str, Any], datetime | None]


def _records(source: Source) -> tuple[list[_Record], list[_Record]]:
    """(kind, line, payload, timestamp) for the records that matter, and the event_msg records apart."""
    out: list[_Record] = []
    events: list[_Record] = []
    unknown: dict[str, int] = {}
    first = True
    for lineno, rec in source.records():
        is_first, first = first, False
        if not isinstance(rec, dict):
            source.skip(lineno, f"expected a JSON object, got {type(rec).__name__}")
            continue
        kind = rec.get("type")
        payload = rec.get("payload")
        if "payload" in rec:
            if not isinstance(kind, str) or not isinstance(payload, dict):
                source.skip(lineno, "a rollout line needs a string 'type' and an object 'payload'")
                continue
            if kind == "event_msg":
                events.append((kind, lineno, payload, parse_timestamp(rec.get("timestamp"))))
                continue
            if kind not in _RECORD_TYPES:
                unknown[kind] = unknown.get(kind, 0) + 1
                continue
            out.append((kind, lineno, payload, parse_timestamp(rec.get("timestamp"))))
        elif is_first and kind is None and "id" in rec:  # old files: a bare session meta first
            out.append(("session_meta", lineno, rec, parse_timestamp(rec.get("timestamp"))))
        elif "record_type" in rec:  # old files: {"record_type": "state"} bookkeeping lines
            source.leave_out(f"{rec['record_type']} record (bookkeeping)")
        elif isinstance(kind, str) and kind in _ITEM_TYPES:  # old files: a bare response item
            out.append(("response_item", lineno, rec, parse_timestamp(rec.get("timestamp"))))
        else:
            source.skip(lineno, "not a Codex rollout record (no 'payload', not a response item)")
    for kind, n in sorted(unknown.items()):
        source.notes.append(f"left out {n} record(s) of unknown type {kind!r}")
        source.leave_out(f"{kind} record (unknown type)", n)
    return out, events


def _conversation_id(meta: Mapping[str, Any] | None, path: str) -> str:
    if meta is not None and isinstance(meta.get("id"), str) and meta["id"]:
        return str(meta["id"])
    return Path(path).stem


def _event_type(event: _Record) -> str:
    kind = event[2].get("type")
    return kind if isinstance(kind, str) else "?"


def _what_is_there(records: Sequence[_Record], events: Sequence[_Record]) -> str:
    """A short account of a file that holds no conversation, for the error message."""
    counts: dict[str, int] = {}
    for kind, _, _, _ in records:
        counts[kind] = counts.get(kind, 0) + 1
    for event in events:
        name = f"event_msg {_event_type(event)}"
        counts[name] = counts.get(name, 0) + 1
    if not counts:
        return "no Codex records at all"
    shown = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1])[:8])
    return f"no message, tool call or user/agent message event, only {shown}"
