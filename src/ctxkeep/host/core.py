"""What every adapter does, framework-free: open the workspace once, sync a host's whole history, prepare,
and tell, for each message of the context, which of the host's own items it came from; and the memory
tools an adapter registers (`memory_tools_of`), which each adapter wraps in its framework's tool type.

Handing back the host's own items (not a conversion of ctxkeep's copy) keeps what ctxkeep does not
model and the host's provider may need: message ids, reasoning items, signatures, metadata. Only what
ctxkeep changed (an offloaded tool result) and what it adds (the summary, an explicit result for an
aborted call) are built anew.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxkeep.async_session import AsyncSession
from ctxkeep.content_ids import Entry, key_of, number
from ctxkeep.context import SUMMARY_ID, SYSTEM_ID, Context
from ctxkeep.errors import WorkspaceError
from ctxkeep.host.inputs import unnumbered
from ctxkeep.host.sync import appended, new_entries
from ctxkeep.live import Live, Tools
from ctxkeep.memory.tools import MemoryTool, memory_tools
from ctxkeep.messages import NO_RESULT_TEXT, Message, ToolResult
from ctxkeep.session import OPEN_KEYWORDS, Session
from ctxkeep.settings import DEFAULT_WINDOW, DurabilitySettings, EngineSettings
from ctxkeep.step import Step

Workspace = str | Path | Session | AsyncSession
# An adapter's `memory` option: False (no tools), True (`memory_tools` of the adapter's workspace), or the
# tools to register (`memory_tools(ws, embedder=None)`, a subset...).
Memory = bool | Sequence[MemoryTool]


def memory_tools_of(
    workspace: Workspace, memory: Memory, settings: Mapping[str, Any] | None = None
) -> list[MemoryTool]:
    """The memory tools an adapter on `workspace` registers for its `memory` option.

    True gives `memory_tools` of the same store the session keeps, so what the agent writes is what the
    flush, consolidation and search of that workspace see. Raises `TypeError` for an option that is none
    of the three.
    """
    if memory is False:
        return []
    if memory is True:
        if isinstance(workspace, str | Path) and (settings or {}).get("store") is not None:
            # The tools would keep a database's connections beside the session's, open for as long as the agent.
            raise WorkspaceError(
                "memory=True with store= needs the session itself: give the adapter"
                f" Session.open({str(workspace)!r}, store=...) rather than its name"
            )
        if isinstance(workspace, str | Path):
            return memory_tools(workspace)
        session = workspace.session if isinstance(workspace, AsyncSession) else workspace
        return memory_tools(session.store)  # memory is part of every store: the session's workspace keeps it
    if isinstance(memory, Sequence) and not isinstance(memory, str) and all(isinstance(t, MemoryTool) for t in memory):
        return list(memory)
    raise TypeError(f"memory must be True, False or a list of MemoryTools (memory_tools(...)); got {memory!r}")


class SessionSource:
    """The session an adapter runs on: opened from a path on first use (off the event loop on the async
    path), or the `Session`/`AsyncSession` given. Closing closes only what it opened."""

    def __init__(self, workspace: Workspace, settings: dict[str, Any]) -> None:
        if isinstance(workspace, Session | AsyncSession):
            if settings:
                raise WorkspaceError(
                    f"settings ({', '.join(sorted(settings))}) apply when the adapter opens the workspace;"
                    " pass them to Session.open instead, or give the adapter the workspace's path"
                )
        elif not isinstance(workspace, str | Path):
            raise WorkspaceError(
                f"expected a workspace path, a ctxkeep Session or an AsyncSession; got {type(workspace).__name__}"
            )
        else:
            _check_settings(settings)
        self._path = workspace if isinstance(workspace, str | Path) else None
        self._settings = settings
        self._session = workspace.session if isinstance(workspace, AsyncSession) else workspace
        self._async = workspace if isinstance(workspace, AsyncSession) else None
        self._open_lock = asyncio.Lock()

    def session(self) -> Session:
        """The session, opened now when the adapter was given a path."""
        if not isinstance(self._session, Session):
            assert self._path is not None
            self._session = Session.open(self._path, **self._settings)
        return self._session

    async def asession(self) -> AsyncSession:
        """The session for coroutines; opening it (disk, lock) runs in a worker thread."""
        if self._async is None:
            async with self._open_lock:
                if self._async is None:
                    session = self._session
                    if not isinstance(session, Session):
                        session = await asyncio.to_thread(self.session)
                    self._async = AsyncSession(session)
        return self._async

    @property
    def opened(self) -> Session | None:
        """The session, when open (None before the first call of an adapter given a path)."""
        return self._session if isinstance(self._session, Session) else None

    def close(self) -> None:
        """Release the workspace when this source opened it; a session given to the adapter stays open."""
        if self._path is not None and isinstance(self._session, Session):
            self._session.close()
            self._session, self._async = self._path, None

    async def aclose(self) -> None:
        """`close`, after the calls already made on the async session, off the event loop."""
        if self._path is None or not isinstance(self._session, Session):
            return
        if self._async is not None:
            await self._async.close()
        else:
            await asyncio.to_thread(self._session.close)
        self._session, self._async = self._path, None


def _check_settings(given: dict[str, Any]) -> None:
    """Raise the `TypeError` (or `ValueError`) `Session.open` would for these keywords, now: a misspelt or bad
    setting fails where the adapter is made, not at the framework's first model call, deep in its stack."""
    if "durability" in given:
        DurabilitySettings.of(given["durability"])
    overrides = {k: v for k, v in given.items() if k not in OPEN_KEYWORDS}
    if overrides and given.get("settings") is None:
        window = given.get("window")
        EngineSettings.for_window(window if isinstance(window, int) else DEFAULT_WINDOW, **overrides)


@dataclass(frozen=True, slots=True)
class Piece:
    """One message of the context to send, and where it came from in the host's history."""

    message: Message
    # The host's items it was converted from (several for a Responses-API assistant turn); empty for what
    # ctxkeep adds: the summary, and an explicit error result for a call that never got one.
    items: range
    # ctxkeep changed its content (a tool result cut and offloaded, lone surrogates replaced): the host's
    # item needs the new text.
    changed: bool = False

    @property
    def is_summary(self) -> bool:
        """The summary message ctxkeep puts before the recent messages."""
        return self.message.id == SUMMARY_ID


# Converts the items of a history from its item `start` on to entries whose ids are not derived yet.
Converter = Callable[[Sequence[object], int], list[Entry]]


class Intake:
    """A host's history taken into a session call after call, at the cost of what is new (as AgentScope's
    middleware caches each Msg's conversion): the items the last call took are not converted, matched or
    synced again.

    A host hands over its whole history every call, mostly the same objects with a few new ones after them.
    The intake keeps the items it took last and their entries; a history that begins with exactly those
    items (the same object, or an equal one, and the same `version`) has only its new items converted (from
    the last message on: a run of Responses items may have grown) and added, when the session is as this
    intake left it. Anything else (an edited history, a session changed elsewhere, the first call) takes the
    whole history, as `Session.sync` does. One intake per conversation, like the session it feeds.
    """

    def __init__(self, convert: Converter = unnumbered, *, version: Callable[[object], object] | None = None) -> None:
        """`convert` turns host items into entries (default: what `Session.sync` takes); `version` tells an item
        changed in place (an AgentScope Msg grows by blocks: its block count)."""
        self._convert = convert
        self._version = version
        self._items: list[object] = []  # the items the last call took (held, so identity is a fair test)
        self._versions: list[object] = []
        self._entries: list[Entry] = []
        self._seen: dict[str, int] = {}  # occurrences of each key in `_entries`, to number what comes next
        self._live: Live | None = None  # the session's live context as the last call left it

    def prepare(self, session: Session, history: Sequence[object], system: str | None, tools: Tools) -> Prepared:
        """Take what is new in `history`, run the pre-reasoning pass, map the context back onto the history.
        Blocking: the async adapters call `aprepare`."""
        entries, fresh = self._take(history)
        session.add(self._new(session.live, entries, fresh))
        return self._done(session, session.prepare(system, tools=tools), entries, len(history))

    async def aprepare(
        self, session: AsyncSession, history: Sequence[object], system: str | None, tools: Tools
    ) -> Prepared:
        """`prepare` for an event loop: conversion, disk and summarizer all run in worker threads."""
        entries, fresh = await asyncio.to_thread(self._take, history)
        await session.add(await asyncio.to_thread(self._new, session.session.live, entries, fresh))
        step = await session.prepare(system, tools=tools)
        return await asyncio.to_thread(self._done, session.session, step, entries, len(history))

    def _take(self, history: Sequence[object]) -> tuple[list[Entry], int | None]:
        """The entries of the whole `history`, and the index of its first item the last call did not take when
        it only added items after those (None: take it whole)."""
        items = list(history)
        versions = [self._version(i) for i in items] if self._version is not None else []
        same = _common(self._items, items)
        if versions and same:
            same = next((k for k, (a, b) in enumerate(zip(self._versions, versions, strict=False)) if a != b), same)
        took = len(self._items)
        fresh: int | None = took if took and same == took else None
        if fresh is None:
            seen: dict[str, int] = {}
            entries = number(self._convert(items, 0), seen)
        else:
            # From the last message on: its items may have been joined by the new ones (a Responses run).
            start = min(took, self._entries[-1].index) if self._entries else took
            keep = next((k for k, e in enumerate(self._entries) if e.index >= start), len(self._entries))
            seen = dict(self._seen)
            for e in self._entries[keep:]:
                if e.key is not None:
                    seen[e.key] -= 1
            tail = number(self._convert(items[start:], start), seen)
            redone = [e for e in tail if e.index < took]
            if [e.message.id for e in redone] != [e.message.id for e in self._entries[keep:]]:
                fresh = None  # an item taken before came out otherwise: let the session judge the whole history
            entries = [*self._entries[:keep], *tail]
        self._items, self._versions, self._entries, self._seen = items, versions, entries, seen
        return entries, fresh

    def _new(self, live: Live, entries: Sequence[Entry], fresh: int | None) -> list[Message]:
        """The messages to add: those of the new items when the session is as the last call left it, else
        what of the whole history the session does not hold (`sync.new_entries`)."""
        # Until this call's pass is done, the next call takes its history whole: a history refused here (or a
        # failed add) must be judged whole again, not skipped as taken.
        left, self._live = self._live, None
        if fresh is not None and live is left:
            return [e.message for e in appended(live, [e for e in entries if e.index >= fresh])]
        return [e.message for e in new_entries(live, entries)]

    def _done(self, session: Session, step: Step, entries: Sequence[Entry], size: int) -> Prepared:
        self._live = session.live
        return step, pieces(step.context, entries, size)


Prepared = tuple[Step, "list[Piece]"]


def _common(old: Sequence[object], new: Sequence[object]) -> int:
    """How many leading items of `new` are those of `old` (the same object, or an equal one)."""
    for k, (a, b) in enumerate(zip(old, new, strict=False)):
        if a is not b and a != b:
            return k
    return min(len(old), len(new))


def prepare(session: Session, history: Sequence[object], system: str | None, tools: Tools) -> Prepared:
    """Sync the host's whole `history` (items `Session.sync` takes), run the pre-reasoning pass, and map the
    context back onto the history, once (an adapter keeps an `Intake`, which takes only what is new)."""
    return Intake().prepare(session, history, system, tools)


def pieces(context: Context, entries: Sequence[Entry], size: int) -> list[Piece]:
    """The context's summary and messages (not its system prompt: every host sends its own), each with the
    host items it came from. `entries` are `inputs.convert` of the history of `size` items."""
    spans = _spans(entries, size)
    by_id = {e.message.id: k for k, e in enumerate(entries)}
    by_key: dict[str, list[int]] | None = None
    used: set[int] = set()
    out: list[Piece] = []
    for msg in context.as_messages():
        if msg.id == SYSTEM_ID:
            continue
        k = by_id.get(msg.id)
        if k is None and msg.id != SUMMARY_ID and not _placeholder(msg, by_id):
            # Not found by id: a message sync renumbered past an id the workspace held, or a history that is
            # ctxkeep's own compacted view; the content key finds it (the newest such item not matched yet).
            if by_key is None:
                by_key = {}
                for j, e in enumerate(entries):
                    by_key.setdefault(key_of(e.message), []).append(j)
            k = next((j for j in reversed(by_key.get(key_of(msg), ())) if j not in used), None)
        if k is None:
            out.append(Piece(msg, range(0)))
        else:
            used.add(k)
            # An item with lone surrogates cannot be sent as it is (no request body can hold them).
            changed = entries[k].replaced or msg.content != entries[k].message.content
            out.append(Piece(msg, spans[k], changed=changed))
    return out


def _placeholder(msg: Message, by_id: dict[str, int]) -> bool:
    """An explicit result ctxkeep sent for a call that got none (`context.of`): the host has no such item."""
    return (
        msg.role == "tool"
        and msg.id not in by_id
        and any(isinstance(b, ToolResult) and b.content == NO_RESULT_TEXT for b in msg.content)
    )


def _spans(entries: Sequence[Entry], size: int) -> list[range]:
    """The host items each entry came from: from its item up to the next entry's (a run of Responses items
    makes one message). Entries from one item (an Anthropic message split in pieces) share it."""
    starts = sorted({e.index for e in entries})
    ends = dict(zip(starts, [*starts[1:], size], strict=True))
    return [range(e.index, ends[e.index]) for e in entries]


def emit_once(pieces: Sequence[Piece]) -> list[tuple[Piece, range]]:
    """Each piece with the items still to hand back for it: an item shared by pieces goes once."""
    seen: set[int] = set()
    out: list[tuple[Piece, range]] = []
    for p in pieces:
        if p.items and p.items.start in seen:
            continue
        seen.update(p.items)
        out.append((p, p.items))
    return out
