"""Opening a workspace: the committed state, then the live log read back to the messages it acknowledged.

What a crash may leave is put right here, in this order: the archive cut back to its committed size, the
live logs of other generations removed, a line cut short dropped (its `add` never returned), a torn piece
that a failed append glued before an acknowledged line dropped (and noted in the records), and originals
in ``tool_result/`` that a power loss cut short rewritten from the full texts the live log still holds.
A missing state file beside live or archived messages is a `WorkspaceError`: starting over would lose them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

import orjson

from ctxkeep import archive as archive_mod
from ctxkeep import live as live_mod
from ctxkeep.archive import Archive
from ctxkeep.codec import ids_in
from ctxkeep.context import summary_tokens_of
from ctxkeep.errors import CtxkeepError, WorkspaceError
from ctxkeep.live import Live
from ctxkeep.messages import Message
from ctxkeep.offload import saved_texts
from ctxkeep.store import STATE, Store, live_name
from ctxkeep.tokens import Counter

from . import livelog, records
from . import state as state_file
from .state import State

log = logging.getLogger("ctxkeep")


@dataclass(frozen=True, kw_only=True, slots=True)
class Recovered:
    """A workspace as reopened: its committed state, the live context, and whether the live log is to be rewritten
    (it holds replaced lines, or counts of another counter) so that the next open reads it fast."""

    state: State
    live: Live
    rewrite: bool


def recover(store: Store, counter: Counter, *, key: str | None, now: datetime) -> Recovered:
    """Open the workspace in `store` (a new one when it holds nothing): `key` is the counter's `count_key`, whose
    saved counts are trusted. Raises `WorkspaceError` for a damaged state file or live message."""
    raw = store.read_state()
    if raw is None:
        if store.live_generations() or store.archive_files():
            where = store.where(STATE)
            raise WorkspaceError(
                f"{where} is missing but the workspace holds live or archived messages;"
                " restore state.json from a backup rather than start over",
                path=where,
            )
        state = state_file.NEW
        store.commit_state(state.to_bytes())
        store.append_live(0, livelog.header(key))
    else:
        state = state_file.parse(raw, store.where(STATE))
    archive_mod.restore(store, state.archive)
    for generation in store.live_generations():
        if generation != state.generation:
            store.drop_live(generation)
    with livelog.collector_paused():
        read = _read_live(store, state.generation, now)
        trusted = key is not None and read.counter == key
        counts = _counts(read, counter) if trusted else counter.count_each(read.messages)
        live = live_mod.add(
            Live(
                summary=state.summary,
                summary_body=state.summary_body,
                summary_tokens=summary_tokens_of(state.summary, counter),
                archive=state.archive,
                failed_at=state.failed_at,
            ),
            read.messages,
            counter,
            counts=counts,
        )
    held = live_mod.message_ids(live)  # the index `add` built: no pass over the messages per pin
    live = replace(live, pinned=frozenset(p for p in state.pinned if p in held), archived=_archived_ids(store, state))
    _restore_originals(store, read.replaced)
    rewrite = bool(read.replaced) or not (trusted or key is None)
    return Recovered(state=state, live=live, rewrite=rewrite)


def _counts(read: livelog.Read, counter: Counter) -> list[int]:
    """The saved counts of the messages read, the missing ones counted now."""
    missing = [m for m, n in zip(read.messages, read.counts, strict=True) if n is None]
    fresh = iter(counter.count_each(missing))
    return [next(fresh) if n is None else n for n in read.counts]


def _restore_originals(store: Store, replaced: list[tuple[Message, Message]]) -> None:
    """Rewrite the originals a power loss cut short (see `LocalFolder.save_original`), from the full texts
    the live log still holds."""
    texts = saved_texts(replaced)
    if not texts:
        return
    sizes = {f.name: f.size for f in store.originals()}
    for name, data in texts.items():
        if sizes.get(name) != len(data):
            log.warning("%s was cut short or lost (a power loss?); rewritten from the live log", name)
            store.save_original(name, data)


def _read_live(store: Store, generation: int, now: datetime) -> livelog.Read:
    raw = store.read_live(generation)
    end = raw.rfind(b"\n") + 1
    if end < len(raw):
        # A line cut short by a crash: its `add` never returned, so it was never part of the context.
        store.cut_live(generation, end)
        raw = raw[:end]
    read = livelog.Read()
    lines = raw.split(b"\n")[:-1]
    torn: list[tuple[int, int]] = []  # (line number, bytes dropped)
    for lineno, line in enumerate(lines, 1):
        if not line or line.isspace():  # (strip would copy every line)
            continue
        try:
            livelog.apply(read, line)
        except (orjson.JSONDecodeError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            # A failed append that could not be cut back leaves the start of a line, and the next
            # append goes on after it: that `add` raised, the record glued to it was acknowledged.
            at = livelog.glued_record(line)
            if at is None:
                where = f"{store.where(live_name(generation))}:{lineno}"
                raise WorkspaceError(f"{where}: damaged live message ({exc})", path=where) from exc
            livelog.apply(read, line[at:])
            lines[lineno - 1] = line[at:]
            torn.append((lineno, at))
    if torn:
        _repair_live(store, generation, b"".join(line + b"\n" for line in lines), torn, now)
    return read


def _repair_live(store: Store, generation: int, data: bytes, torn: list[tuple[int, int]], now: datetime) -> None:
    """Rewrite a live log without the torn pieces found in it, and note each in the records."""
    name = live_name(generation)
    for lineno, dropped in torn:
        log.warning(
            "%s:%d: dropped %d bytes of a torn line a failed write left; no acknowledged message was in them",
            store.where(name),
            lineno,
            dropped,
        )
    try:
        store.start_live(generation, data)
        for lineno, dropped in torn:
            note = {"kind": "repaired", "at": now.isoformat(), "file": name, "line": lineno, "dropped": dropped}
            store.append_record(records.to_line(note))
    except CtxkeepError as exc:
        log.warning("live log repair postponed to the next open: %s", exc)


def _archived_ids(store: Store, state: State) -> frozenset[str]:
    """The ids of the archived messages, read back from the archive files as committed."""
    archive: Archive = state.archive
    ids: set[str] = set()
    for name, info in archive.files.items():
        ids.update(ids_in(store.read_archive(name)[: info.bytes]))
    return frozenset(ids)
