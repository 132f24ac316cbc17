"""The memory flush: before a compaction, what matters in the messages it cuts is written to the day's log.

`before_compaction` runs in the pass's hook before a compaction (`ctxkeep.memory.hooks.MemoryHooks`), with
the compaction's own plan, its summary written: the messages it gets are exactly those the compaction
archives, for a `/compact` as for the threshold. It writes their preferences and try-error lessons to
``memory/YYYY-MM-DD.md``: with the model it is given (the session's compaction model when it has one; a
few tool-using steps: search memory to avoid repeats, write, done), else by rule (`ctxkeep.memory.extract`).
The cycle (how many messages the archive held before this compaction) is recorded in ``memory/flush.json``
before anything else, so a flush never runs twice for one cycle, even after a crash or a compaction that
could not be written; it changes no message, so it can never make a compaction loop. Nothing found,
nothing written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson

from ctxkeep.errors import CtxkeepError
from ctxkeep.messages import Message
from ctxkeep.providers import Completion, Model, Turn
from ctxkeep.settings import MemorySettings
from ctxkeep.store import MEMORY_DIR, Store

from .extract import Note, extract
from .files import append_entries

log = logging.getLogger("ctxkeep")

STATE_FILE = f"{MEMORY_DIR}/flush.json"
KINDS = ("preference", "lesson", "fact")
# Of the messages about to be compacted, what the model reads: the newest part when they are many.
PROMPT_CHARS = 24_000
REPLY_TOKENS = 1_024
# The whole model flush, all its calls: the agent waits for it, so it gets no more than one summary call's
# usual time; a call still running then times out and the rule's notes are written instead.
BUDGET_SECONDS = 60.0

_SYSTEM = (
    "You keep an agent's long-term memory. The conversation below is about to be removed from the agent's"
    " context. Save what the agent must still know in later sessions: the user's preferences and habits"
    " (stated or shown), and lessons from trial and error (what failed, why, and what fixed it). Facts about"
    " the task itself are kept elsewhere; do not save them unless they will matter in another session."
    " Each entry is one self-contained sentence with exact names, commands and paths.\n"
    'Answer with one JSON object per turn: {"action": "search", "query": ...} to look in memory for what'
    ' is already saved; {"action": "write", "entries": [{"kind": "preference"|"lesson"|"fact",'
    ' "text": ...}]} to save; {"action": "done"} when nothing (more) is worth saving.'
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["search", "write", "done"]},
        "query": {"type": "string"},
        "entries": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"kind": {"type": "string", "enum": list(KINDS)}, "text": {"type": "string"}},
                "required": ["kind", "text"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["action", "query", "entries"],
    "additionalProperties": False,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class FlushRun:
    """What one flush did: the entries written, how (model or rule), the model calls, and its time."""

    cycle: int  # the messages archived before the compaction it ran for (-1: called directly)
    notes: tuple[Note, ...]
    written_to: str | None
    by: str  # "model" or "rule"
    calls: int = 0
    seconds: float = 0.0
    errors: tuple[str, ...] = field(default=())


def flushed_cycle(store: Store) -> int | None:
    """The compaction cycle the last flush ran for, or None."""
    raw = store.read_memory(STATE_FILE)
    if raw is None:
        return None
    try:
        value = orjson.loads(raw).get("cycle")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def before_compaction(
    store: Store,
    messages: Sequence[Message],
    *,
    cycle: int,
    now: datetime,
    settings: MemorySettings,
    model: Model | None = None,
) -> FlushRun | None:
    """Flush the `messages` a compaction is about to archive, unless this `cycle` was flushed already.

    Never raises for a failure of its own (a full disk, a failing model): it logs it, and the pass goes on.
    """
    if not settings.flush or not messages:
        return None
    try:
        if flushed_cycle(store) == cycle:
            return None
        # Recorded first: whatever happens next, this cycle is not flushed again.
        store.write_memory(STATE_FILE, orjson.dumps({"cycle": cycle, "at": now.isoformat()}))
        run = flush(store, messages, now=now, model=model, steps=settings.flush_steps)
        run = replace(run, cycle=cycle)
    except CtxkeepError as exc:
        log.warning("memory flush skipped: %s", exc)
        return None
    log.info("memory flush: %d entries by %s in %.2f s", len(run.notes), run.by, run.seconds)
    return run


def flush(
    store: Store, messages: Sequence[Message], *, now: datetime, model: Model | None = None, steps: int = 3
) -> FlushRun:
    """Write the preferences and lessons of `messages` to the day's log of `now`; by `model` when given.

    A model that fails or answers nonsense falls back to the rule, so a flush always keeps what the rule finds.
    """
    started = time.perf_counter()
    errors: list[str] = []
    calls = 0
    notes: list[Note] = []
    by = "rule"
    if model is not None:
        try:
            notes, calls = _model_notes(model, messages, steps=steps, search=lambda q: _search(store, q))
            by = "model" if calls else "rule"  # no time left for even one call: the rule's notes
        except (CtxkeepError, ValueError) as exc:
            errors.append(f"the model flush failed ({exc}); the rule's notes are kept instead")
            log.warning("%s", errors[-1])
            notes = []
    if by == "rule":
        notes = extract(messages)
    written = None
    if notes:
        for kind in KINDS:
            texts = [n.text for n in notes if n.kind == kind]
            if texts:
                written = append_entries(store, texts, at=now, tag=kind)
    return FlushRun(
        cycle=-1,
        notes=tuple(notes),
        written_to=written,
        by=by,
        calls=calls,
        seconds=time.perf_counter() - started,
        errors=tuple(errors),
    )


def _search(store: Store, query: str) -> str:
    """What memory already holds about `query` (full text only: the flush must stay cheap)."""
    from .search import open_index, search

    with open_index(store) as index:
        index.update()
        hits = search(index, query, k=5, source="memory")
    return "\n".join(f"- {h.text[:300]}" for h in hits) or "(nothing saved about this)"


def _model_notes(
    model: Model, messages: Sequence[Message], *, steps: int, search: Callable[[str], str]
) -> tuple[list[Note], int]:
    """The notes the model writes in at most `steps` calls, and the calls made. Raises on a reply that is no action."""
    from ctxkeep.summarize.model.prompts import render_conversation

    conversation = render_conversation(messages)
    if len(conversation) > PROMPT_CHARS:
        conversation = "[… earlier part left out …]\n" + conversation[-PROMPT_CHARS:]
    turns = [Turn(role="user", text=f"<conversation>\n{conversation}\n</conversation>\n\nWhat should be saved?")]
    notes: list[Note] = []
    deadline = time.monotonic() + BUDGET_SECONDS
    for call in range(1, steps + 1):
        left = deadline - time.monotonic()
        if left <= 0:  # the agent waits for this: what was written so far is kept, the rest is not asked
            return notes, call - 1
        request = Completion(
            system=_SYSTEM, turns=tuple(turns), max_tokens=REPLY_TOKENS, schema=SCHEMA, timeout=max(1.0, left)
        )
        reply = model.complete(request)
        action = _action(reply.text)
        turns.append(Turn(role="assistant", text=reply.text))
        if action["action"] == "done":
            return notes, call
        if action["action"] == "search":
            observation = search(str(action.get("query") or ""))
        else:
            written = [Note(e["kind"], " ".join(e["text"].split())) for e in action.get("entries") or ()]
            notes.extend(n for n in written if n.text)
            observation = f"saved {len(written)} entries"
        turns.append(Turn(role="user", text=observation + "\nNext action?"))
    return notes, steps


def _action(text: str) -> dict[str, Any]:
    """The action of a reply, checked; `ValueError` when the reply is none."""
    start, end = text.find("{"), text.rfind("}")
    try:
        value = orjson.loads(text[start : end + 1]) if start >= 0 else None
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or value.get("action") not in ("search", "write", "done"):
        raise ValueError(f"the reply is not an action: {text[:200]!r}")
    entries = value.get("entries") or []
    if value["action"] == "write" and (
        not isinstance(entries, list)
        or not all(isinstance(e, dict) and e.get("kind") in KINDS and isinstance(e.get("text"), str) for e in entries)
    ):
        raise ValueError(f"the entries of a write are not [{{kind, text}}]: {text[:200]!r}")
    return value
