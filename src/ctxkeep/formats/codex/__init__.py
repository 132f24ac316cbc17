"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``), legacy and current, read-only.

Response items become the conversation; the UI events that repeat them are read only when a file has
nothing else. Items of one model response share one assistant message, and a notice Codex recorded
while calls awaited their outputs is moved after those outputs, so no message separates a call from
its result. Exit codes come from the output headers. What every record becomes and what is left out
on purpose: docs/formats.md#codex-cli.
"""

from __future__ import annotations

from ctxkeep.formats.codex.events import _SPOKEN_EVENTS, _read_events
from ctxkeep.formats.codex.records import (
    _RECORD_TYPES,
    _conversation_id,
    _event_type,
    _reason,
    _records,
    _what_is_there,
)
from ctxkeep.formats.codex.turns import COMPACTED_HEADER as COMPACTED_HEADER
from ctxkeep.formats.codex.turns import ENCRYPTED_COMPACTION_TEXT as ENCRYPTED_COMPACTION_TEXT
from ctxkeep.formats.codex.turns import NAME as NAME
from ctxkeep.formats.codex.turns import _Builder
from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source

__all__ = ["parse", "sniff"]

_LEGACY_META_KEYS = frozenset({"id", "timestamp", "instructions", "git"})


def sniff(source: Source) -> bool:
    """A rollout line ``{"type": "session_meta"|..., "payload": {...}}``, or an old unwrapped session meta."""
    sample = source.sample()
    if not isinstance(sample, dict):
        return False
    if sample.get("type") in _RECORD_TYPES and isinstance(sample.get("payload"), dict):
        return True
    keys = set(sample)
    return "type" not in keys and {"id", "timestamp"} <= keys <= _LEGACY_META_KEYS


def parse(source: Source) -> list[Conversation]:
    """The one conversation of a rollout file."""
    records, events = _records(source)
    meta = next((p for kind, _, p, _ in records if kind == "session_meta"), None)
    conv_id = _conversation_id(meta, source.path)
    builder = _Builder(source=source, conv_id=conv_id)
    seen_meta = False
    has_items = any(kind in ("response_item", "compacted") for kind, _, _, _ in records)
    for kind, lineno, payload, ts in records:
        try:
            if kind == "session_meta":
                if not seen_meta:
                    builder.session_meta(payload, ts)
                seen_meta = True  # later ones (resumed or forked sessions) repeat the header
            elif kind == "response_item":
                builder.item(payload, ts)
            elif kind == "compacted":
                builder.compacted(payload, ts)
            elif kind == "turn_context":
                builder.settle()  # a new turn: the previous assistant message is complete
        except RECORD_ERRORS as exc:  # _Bad is a ValueError
            source.skip(lineno, _reason(kind, exc))
    if not has_items:
        _read_events(builder, events)
    builder.settle()
    builder.report()
    if has_items and not builder.spoken and any(_event_type(e) in _SPOKEN_EVENTS for e in events):
        source.notes.append(
            "the response items hold no user or assistant message, but user_message/agent_message events do; "
            "those events were not imported (they normally repeat the response items)"
        )
    if not any(m.role in ("user", "assistant", "tool") for m in builder.messages):
        raise source.error(f"no conversation in this file: {_what_is_there(records, events)}")
    return [Conversation(id=conv_id, messages=tuple(builder.messages))]
