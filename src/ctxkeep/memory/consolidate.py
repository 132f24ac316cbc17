"""Daily consolidation: the day logs written since the last one are merged into MEMORY.md, losing no entry.

Every log whose content changed since it was last merged is taken, oldest first (a missed midnight catches
up). By rule, each entry goes to a section of MEMORY.md by its tag (``[preference]`` to Preferences,
``[lesson]`` to Lessons, ``[fact]`` to Facts, the rest to Notes) with its day, unless MEMORY.md already
holds the same text. With a model, the model may also rewrite and merge entries, and name the ones a newer
entry supersedes; every entry it drops without naming is put back, so none a person or the agent wrote is
lost: each is in the new MEMORY.md or listed under ``## Superseded``. The old MEMORY.md is copied to
``memory/backup/`` first, and ``memory/consolidated.json`` records what was merged, after MEMORY.md is
written: a crash in between merges again, and the repeats are recognised.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from ctxkeep.providers import Completion, Model, Turn
from ctxkeep.store import MEMORY_DIR, MEMORY_FILE, Store

from .files import (
    MEMORY_HEADING,
    Entry,
    daily_logs,
    entries_of,
    insert_in_section,
    memory_lock,
)

log = logging.getLogger("ctxkeep")

STATE_FILE = f"{MEMORY_DIR}/consolidated.json"
BACKUP_DIR = f"{MEMORY_DIR}/backup"
SUPERSEDED = "Superseded"
SECTION_OF_TAG = {"preference": "Preferences", "lesson": "Lessons", "fact": "Facts"}
DEFAULT_SECTION = "Notes"
_STAMP = re.compile(r"^(?:[0-9]{2}:[0-9]{2} )?(?:\[(?P<tag>[a-z]+)\] )?")
_DAY_NOTE = re.compile(r" \([0-9]{4}-[0-9]{2}-[0-9]{2}\)$")
_TIME = re.compile(r"^(?P<h>[01]?[0-9]|2[0-3]):(?P<m>[0-5][0-9])$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Consolidation:
    """What one consolidation merged: the logs, entries added, repeats skipped, entries superseded, the backup."""

    logs: tuple[str, ...]
    added: int
    repeated: int
    superseded: int
    backup: str | None
    by: str  # "rule" or "model"


def _key(text: str) -> str:
    """An entry's identity: its words, without the time, the tag, the day note or case."""
    body = _DAY_NOTE.sub("", _STAMP.sub("", text.strip(), count=1))
    return " ".join(body.casefold().split())


def pending_logs(store: Store) -> list[str]:
    """The day logs changed since they were last merged, oldest first."""
    merged = _merged(store)
    out = []
    for _, name in daily_logs(store):
        data = store.read_memory(name) or b""
        if merged.get(name) != hashlib.sha256(data).hexdigest():
            out.append(name)
    return out


def _merged(store: Store) -> dict[str, str]:
    raw = store.read_memory(STATE_FILE)
    try:
        files = orjson.loads(raw).get("files") if raw else None
    except (orjson.JSONDecodeError, AttributeError):
        files = None
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def consolidate(store: Store, *, now: datetime, model: Model | None = None) -> Consolidation:
    """Merge the pending day logs into MEMORY.md (a backup of the old one first); what was merged."""
    with memory_lock(store):
        names = pending_logs(store)
        if not names:
            return Consolidation(logs=(), added=0, repeated=0, superseded=0, backup=None, by="rule")
        texts = {name: store.read_memory(name) or b"" for name in names}
        old = (store.read_memory(MEMORY_FILE) or b"").decode("utf-8", errors="replace")
        new_entries = [(name, e) for name in names for e in entries_of(texts[name].decode("utf-8", errors="replace"))]
        document, added, repeated = merge_by_rule(old, new_entries)
        superseded, by = 0, "rule"
        if model is not None and added:
            try:
                document, superseded = merge_by_model(model, document)
                by = "model"
            except ValueError as exc:
                log.warning("the model could not consolidate memory (%s); merged by rule", exc)
        backup = None
        if old.strip():
            backup = f"{BACKUP_DIR}/MEMORY-{now.strftime('%Y%m%dT%H%M%S')}.md"
            store.write_memory(backup, old.encode())
        store.write_memory(MEMORY_FILE, document.encode())
        merged = _merged(store)
        merged.update({name: hashlib.sha256(data).hexdigest() for name, data in texts.items()})
        store.write_memory(
            STATE_FILE, orjson.dumps({"files": merged, "at": now.isoformat()}, option=orjson.OPT_INDENT_2)
        )
    return Consolidation(logs=tuple(names), added=added, repeated=repeated, superseded=superseded, backup=backup, by=by)


def merge_by_rule(document: str, entries: list[tuple[str, Entry]]) -> tuple[str, int, int]:
    """`document` (MEMORY.md) with each new entry in its tag's section; and how many were added and repeated."""
    known = {_key(e.text) for e in entries_of(document)}
    added = repeated = 0
    if not document.strip():
        document = f"{MEMORY_HEADING}\n"
    for name, entry in entries:
        key = _key(entry.text)
        if not key:
            continue
        if key in known:
            repeated += 1
            continue
        known.add(key)
        m = _STAMP.match(entry.text)
        tag = m["tag"] if m is not None else None
        body = _STAMP.sub("", entry.text.strip(), count=1)
        day = name.rsplit("/", 1)[-1].removesuffix(".md")
        text = body if _DAY_NOTE.search(body) else f"{body} ({day})"
        lines = text.splitlines()
        item = "\n".join([f"- {lines[0]}", *(f"  {line}" for line in lines[1:])]) + "\n"
        document = insert_in_section(document, SECTION_OF_TAG.get(tag or "", DEFAULT_SECTION), item)
        added += 1
    return document, added, repeated


_MODEL_SYSTEM = (
    "You maintain MEMORY.md, an agent's long-term memory: Markdown, '## Section' headings, one '- ' list item"
    " per entry. Tidy the document you are given: merge entries that say the same thing, and when a newer entry"
    " (later day) contradicts or replaces an older one, keep the newer and name the older as superseded. Keep"
    ' every other entry, with its exact names, commands, paths and days. Answer with JSON: {"memory": the new'
    ' document, "superseded": [{"entry": the old entry\'s text, "by": the entry that replaces it}]}.'
)
_MODEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memory": {"type": "string"},
        "superseded": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"entry": {"type": "string"}, "by": {"type": "string"}},
                "required": ["entry", "by"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["memory", "superseded"],
    "additionalProperties": False,
}


def merge_by_model(model: Model, merged: str) -> tuple[str, int]:
    """The model's tidy of `merged`, with every entry of it the model dropped unnamed put back; superseded count.

    Raises `ValueError` when the reply is not the JSON asked for (the caller keeps the rule's merge).
    """
    from ctxkeep.errors import ProviderError

    try:
        reply = model.complete(
            Completion(
                system=_MODEL_SYSTEM,
                turns=(Turn(role="user", text=f"<memory>\n{merged}\n</memory>"),),
                # The tidy document is no longer than the merged one (2 characters a token, at least).
                max_tokens=min(8_192, max(1_024, len(merged) // 2 + 512)),
                schema=_MODEL_SCHEMA,
            )
        )
    except ProviderError as exc:
        raise ValueError(str(exc)) from exc
    try:
        value = orjson.loads(reply.text[reply.text.find("{") : reply.text.rfind("}") + 1])
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not isinstance(value.get("memory"), str) or not value["memory"].strip():
        raise ValueError(f"the reply is not {{memory, superseded}}: {reply.text[:200]!r}")
    document: str = value["memory"]
    present = {_key(e.text) for e in entries_of(document)}
    listed = [s for s in value.get("superseded") or [] if isinstance(s, dict) and isinstance(s.get("entry"), str)]
    named = {_key(s["entry"]) for s in listed}
    original = entries_of(merged)
    superseded = 0
    for entry in original:
        key = _key(entry.text)
        if key in present:
            continue
        if key in named:
            by = next(str(s.get("by", "")) for s in listed if _key(s["entry"]) == key)
            item = f"- {entry.text.splitlines()[0]} (superseded by: {' '.join(by.split())[:300]})\n"
            document = insert_in_section(document, SUPERSEDED, item)
            superseded += 1
        else:
            # Dropped without a word: not the model's to lose.
            document = insert_in_section(document, entry.section or DEFAULT_SECTION, f"- {entry.text}\n")
    return document, superseded


def next_run(now: datetime, at: str = "00:00") -> datetime:
    """The next time of day `at` (``HH:MM``, local time of `now`) strictly after `now`."""
    m = _TIME.match(at)
    if m is None:
        raise ValueError(f"the time of day is HH:MM, 00:00 to 23:59; got {at!r}")
    run = now.replace(hour=int(m["h"]), minute=int(m["m"]), second=0, microsecond=0)
    return run if run > now else run + timedelta(days=1)


def cron_line(workspace: str, at: str = "00:00", *, program: Sequence[str] = ("ctxkeep",)) -> str:
    """The crontab line that runs `program` (``ctxkeep``, or the absolute command the CLI gives) to consolidate
    `workspace` every day at `at` (local time).

    cron runs it with /bin/sh from the home folder and a bare PATH, so the CLI gives absolute paths; each
    word is quoted for the shell, and ``%`` (a line break to cron) is escaped.
    """
    m = _TIME.match(at)
    if m is None:
        raise ValueError(f"the time of day is HH:MM, 00:00 to 23:59; got {at!r}")
    command = shlex.join([*program, "memory", "consolidate", "--workspace", workspace])
    return f"{int(m['m'])} {int(m['h'])} * * * " + command.replace("%", "\\%")
