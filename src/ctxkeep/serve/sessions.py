"""One workspace per conversation under the proxy's root, and one request at a time in each.

    <root>/<conversation>/<branch>/     a ctxkeep workspace (`Session`): branch 0 first

A conversation is named by the client's ``X-Ctxkeep-Session`` header, else by a hash of how it begins
(the route, the system prompt, the first message). Each request syncs the client's whole history into
the conversation's current branch. A history that no longer extends what a branch holds (the client
edited or removed a message, retried an answer the proxy recorded, or is another conversation that
begins the same way) goes to the first other branch it extends, else to a new branch that takes it
whole: nothing a branch holds is rewritten or lost, and the upstream always gets a valid context.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import shutil
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import orjson

from ctxkeep.async_session import AsyncSession
from ctxkeep.engine import Step
from ctxkeep.errors import MessageError
from ctxkeep.session import Session
from ctxkeep.summarize import Summarizer

from .dialect import BadRequest, Reply, Turn
from .settings import ServeSettings

log = logging.getLogger("ctxkeep")

HEADER = "x-ctxkeep-session"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def conversation_key(header: str | None, route: str, turn: Turn) -> str:
    """The conversation a request belongs to: the client's header, else derived from how it begins."""
    if header is not None:
        if not _NAME.fullmatch(header) or ".." in header:
            raise BadRequest(
                f"the {HEADER} header must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or"
                " digit (it names a folder)"
            )
        return header
    first = turn.history[0] if turn.history else None
    seed = orjson.dumps([route, turn.system, first], option=orjson.OPT_SORT_KEYS)
    return "c-" + hashlib.sha256(seed).hexdigest()[:32]


class Sessions:
    """The conversations' workspaces, opened on first use and kept open (up to `ServeSettings.max_open`)."""

    def __init__(self, settings: ServeSettings, summarizer: Callable[[], Summarizer | None]) -> None:
        self._settings = settings
        self._summarizer = summarizer
        self._locks: dict[str, asyncio.Lock] = {}
        self._open: OrderedDict[tuple[str, int], AsyncSession] = OrderedDict()
        self._branches: dict[str, list[int]] = {}  # most recently used first

    async def enter(self, key: str) -> Lease:
        """Wait for the conversation's turn; the `Lease` must be released (`Lease.release`) when done."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        await lock.acquire()
        return Lease(self, key, lock)

    async def close(self) -> None:
        """Close every open workspace (their locks are released)."""
        while self._open:
            _, session = self._open.popitem(last=False)
            await session.close()

    async def step(self, key: str, turn: Turn) -> tuple[Step, AsyncSession, int]:
        """Sync the turn's history into the branch it extends (a new one when none does) and prepare."""
        for branch in self._branch_order(key):
            session = await self._session(key, branch)
            try:
                await session.sync(turn.history)
            except MessageError:
                continue
            self._use(key, branch)
            return await session.prepare(turn.system, tools=turn.tools), session, branch
        branch = max(self._branch_order(key), default=-1) + 1
        session = await self._session(key, branch)
        try:
            await session.sync(turn.history)
        except MessageError as exc:
            await self._discard(key, branch)
            raise BadRequest(f"the messages cannot be taken: {exc}", param="messages") from None
        if branch:
            log.warning("conversation %s: the history diverged from what it held; branch %d started", key, branch)
        self._use(key, branch)
        return await session.prepare(turn.system, tools=turn.tools), session, branch

    def _branch_order(self, key: str) -> list[int]:
        if key not in self._branches:
            folder = self._settings.root / key
            found = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
            self._branches[key] = sorted(found, reverse=True)
        return list(self._branches[key])

    def _use(self, key: str, branch: int) -> None:
        self._branches[key] = [branch, *(b for b in self._branches.get(key, []) if b != branch)]

    def _path(self, key: str, branch: int) -> Path:
        return self._settings.root / key / str(branch)

    async def _session(self, key: str, branch: int) -> AsyncSession:
        opened = self._open.get((key, branch))
        if opened is not None:
            self._open.move_to_end((key, branch))
            return opened
        folder = self._settings.root / key
        await asyncio.to_thread(_private_folder, folder)
        session = await asyncio.to_thread(
            Session.open,
            self._path(key, branch),
            window=self._settings.window,
            summarizer=self._summarizer(),
            lock_timeout=self._settings.lock_timeout,
        )
        opened = AsyncSession(session)
        self._open[(key, branch)] = opened
        return opened

    async def _discard(self, key: str, branch: int) -> None:
        """Close and remove a branch this request created and could not fill (it holds nothing)."""
        session = self._open.pop((key, branch), None)
        if session is not None:
            await session.close()
        await asyncio.to_thread(shutil.rmtree, self._path(key, branch), ignore_errors=True)

    async def _evict(self) -> None:
        """Close the least recently used workspaces past `max_open` whose conversation is idle."""
        for key, branch in list(self._open):
            if len(self._open) <= self._settings.max_open:
                return
            lock = self._locks.get(key)
            if lock is not None and lock.locked():
                continue
            session = self._open.pop((key, branch))
            await session.close()
            if not any(k == key for k, _ in self._open):
                self._locks.pop(key, None)


class Lease:
    """A conversation's turn: its requests wait for one another; other conversations go on in parallel."""

    def __init__(self, sessions: Sessions, key: str, lock: asyncio.Lock) -> None:
        self._sessions = sessions
        self._lock = lock
        self.key = key
        self.session: AsyncSession | None = None
        self.branch = 0

    async def step(self, turn: Turn) -> Step:
        """Sync the client's history and run the pre-reasoning pass (`Sessions.step`)."""
        step, self.session, self.branch = await self._sessions.step(self.key, turn)
        return step

    async def record(self, reply: Reply) -> None:
        """Keep the upstream's reply, so the next request (which carries it back) extends what is held."""
        if self.session is None:
            return
        try:
            await self.session.add(reply.message)
        except MessageError as exc:
            # The answer is the client's all the same: it comes back with the next request and is synced then.
            log.warning("conversation %s: the upstream's reply was not recorded: %s", self.key, exc)

    async def release(self) -> None:
        """Let the conversation's next request in, and close idle workspaces past the limit."""
        if self._lock.locked():
            self._lock.release()
            with contextlib.suppress(Exception):
                await self._sessions._evict()


def _private_folder(folder: Path) -> None:
    """Create the conversation's folder (and the root) for its owner alone, when missing."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
