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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxkeep.async_session import AsyncSession
from ctxkeep.context import SUMMARY_ID, SYSTEM_ID, Context
from ctxkeep.errors import WorkspaceError
from ctxkeep.host.inputs import Entry, convert, key_of
from ctxkeep.live import Tools
from ctxkeep.memory.tools import MemoryTool, memory_tools
from ctxkeep.messages import NO_RESULT_TEXT, Message, ToolResult
from ctxkeep.session import Session
from ctxkeep.step import Step

Workspace = str | Path | Session | AsyncSession
# An adapter's `memory` option: False (no tools), True (`memory_tools` of the adapter's workspace), or the
# tools to register (`memory_tools(ws, embedder=None)`, a subset...).
Memory = bool | Sequence[MemoryTool]


def memory_tools_of(workspace: Workspace, memory: Memory) -> list[MemoryTool]:
    """The memory tools an adapter on `workspace` registers for its `memory` option.

    True gives `memory_tools` of the same store the session keeps, so what the agent writes is what the
    flush, consolidation and search of that workspace see. Raises `TypeError` for an option that is none
    of the three.
    """
    if memory is False:
        return []
    if memory is True:
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


def prepare(session: Session, history: Sequence[object], system: str | None, tools: Tools) -> tuple[Step, list[Piece]]:
    """Sync the host's whole `history` (items `Session.sync` takes), run the pre-reasoning pass, and map the
    context back onto the history. Blocking: the async adapters call `aprepare`."""
    entries = convert(history)
    session.sync(history)
    step = session.prepare(system, tools=tools)
    return step, pieces(step.context, entries, len(history))


async def aprepare(
    session: AsyncSession, history: Sequence[object], system: str | None, tools: Tools
) -> tuple[Step, list[Piece]]:
    """`prepare` for an event loop: conversion, disk and summarizer all run in worker threads."""
    entries = await asyncio.to_thread(convert, history)
    await session.sync(history)
    step = await session.prepare(system, tools=tools)
    return step, await asyncio.to_thread(pieces, step.context, entries, len(history))


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
