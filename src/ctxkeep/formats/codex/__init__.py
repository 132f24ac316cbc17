"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``), legacy and current, read-only.

Response items become the conversation; a UI event is read, at its place, only when its response-item
form is absent (a user ask kept only as a ``user_message`` event, a command only as its end event), so
nothing is imported twice and nothing is lost; the events left out are counted in `Source.left_out`.
Items of one model response share one assistant message, and a notice Codex recorded while calls
awaited their outputs is moved after those outputs, so no message separates a call from its result.
Exit codes come from the output headers. What every record becomes and what is left out on purpose:
docs/formats.md#codex-cli.
"""

from __future__ import annotations

from ctxkeep.formats.codex.events import Covered, _missing, _read_events, _rebuild
from ctxkeep.formats.codex.records import (
    _RECORD_TYPES,
    _conversation_id,
    _reason,
    _Record,
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
    has_items = any(kind in ("response_item", "compacted") for kind, _, _, _ in records)
    if has_items:  # the events that add what no response item holds, each read at its own line
        added = _missing(events, Covered.of(records), source)
        if added:
            kinds = ", ".join(sorted({str(e[2].get("type")) for e in added}))
            source.notes.append(f"read {len(added)} event_msg record(s) that no response item repeats ({kinds})")
        _read_records(builder, sorted([*records, *added], key=lambda r: r[1]))
    else:
        _read_records(builder, records)
        _rebuild(builder, events)
    builder.settle()
    builder.report()
    if not any(m.role in ("user", "assistant", "tool") for m in builder.messages):
        raise source.error(f"no conversation in this file: {_what_is_there(records, events)}")
    return [Conversation(id=conv_id, messages=tuple(builder.messages))]


def _read_records(builder: _Builder, records: list[_Record]) -> None:
    """Each record, in order, into the builder's messages; a bad one skipped (lenient) or raised."""
    seen_meta = False
    called: set[str] = set()
    for record in records:
        kind, lineno, payload, ts = record
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
            elif kind == "event_msg":
                _read_events(builder, [record], called)
        except RECORD_ERRORS as exc:  # _Bad is a ValueError
            builder.source.skip(lineno, _reason(kind, exc))
