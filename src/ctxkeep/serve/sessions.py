"""One workspace per conversation under the proxy's root, and one request at a time in each.

    <root>/<conversation>/<branch>/     a ctxkeep workspace (`Session`): branch 0 first

or, with `ServeSettings.store`, the workspace ``<conversation>/<branch>`` in a PostgreSQL database, closed after
each request (its lock released), so several processes serve one database and a conversation's requests go to
any of them, in order: a request waits for the workspace another process holds (`ServeSettings.lock_timeout`).

A conversation is named by the client's ``X-Ctxkeep-Session`` header, else by the first words of its
first ask and a hash of how it begins (the route, the system prompt, the first message). Each request
syncs the client's whole history into the conversation's current branch. A history that no longer extends
what a branch holds (the client edited or removed a message, or is another conversation that begins the
same way) goes to the first other branch it extends, else to a new branch that takes it whole: nothing a
branch holds is rewritten or lost, and the upstream always gets a valid context.

The upstream's reply is recorded as the branch's pending reply: the next request that extends the
branch carries it back as the client kept it, and sync adds it from there; a retry or a regenerate
(the same history again) simply replaces it. A pending reply is added to the workspace when the
workspace is closed, so it is recognised after a restart too. Its usage tells how the upstream counts
against ctxkeep: a conversation whose upstream counts more gets a window smaller by that much.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import re
import shutil
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from ctxkeep.async_session import AsyncSession
from ctxkeep.errors import MessageError
from ctxkeep.session import Session
from ctxkeep.step import Step
from ctxkeep.summarize import Summarizer

from .dialect import BadRequest, Reply, Turn, WireForms, text_of
from .settings import ServeSettings

log = logging.getLogger("ctxkeep")

HEADER = "x-ctxkeep-session"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_WORD = re.compile(r"[a-z0-9]+")
# The words of a conversation's first ask kept in its name: enough to recognise it in a listing.
_SLUG_CHARS = 32


def conversation_key(header: str | None, route: str, turn: Turn, *, root: Path | None = None) -> str:
    """The conversation a request belongs to, which names its folder under `root`.

    The client's header, as it is when it is already a folder name, else made one (other characters turned
    into ``-``, a hash of the whole value added so two values never share a folder). Without a header, a
    short name from the first ask and a hash of how the conversation begins (the route, the system prompt,
    the first message): ``fix-the-login-bug-in-auth-3f2a9c01d4``. A folder under `root` named the way
    earlier versions named it (``c-<hash>``) is found by that name.
    """
    if header is not None:
        return _header_name(header)
    first = turn.history[0] if turn.history else None
    seed = orjson.dumps([route, turn.system, first], option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(seed).hexdigest()
    old = "c-" + digest[:32]
    if root is not None and (root / old).is_dir():
        return old
    return f"{_slug(_first_ask(turn.history))}-{digest[:10]}"


def _header_name(header: str) -> str:
    if _NAME.fullmatch(header) and ".." not in header:
        return header
    if "/" in header or "\\" in header or ".." in header:
        raise BadRequest(
            f"the {HEADER} header must not hold '/', '\\' or '..' (it names a folder): use letters, digits,"
            " '.', '_' or '-'"
        )
    readable = _UNSAFE.sub("-", header).strip("-.")[:_SLUG_CHARS].rstrip("-.") or "session"
    return f"{readable}-{hashlib.sha256(header.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def _first_ask(history: Sequence[Any]) -> str:
    for message in history:
        if isinstance(message, dict) and message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def _slug(text: str) -> str:
    """The first words of `text`, lower case, joined by ``-``, at most `_SLUG_CHARS` characters."""
    slug = ""
    for word in _WORD.findall(text.lower()):
        longer = f"{slug}-{word}" if slug else word[:_SLUG_CHARS]
        if len(longer) > _SLUG_CHARS:
            break
        slug = longer
    return slug or "conversation"


class _Turns:
    """A conversation's lock, and how many requests hold it or wait for it."""

    def __init__(self) -> None:
        # FIFO (asyncio's lock wakes its waiters in order): a conversation's requests run in the order they came.
        self.lock = asyncio.Lock()
        # Requests holding or waiting for the lock. A conversation is closed only at 0, and its `_Turns` is
        # dropped only then: a waiter never holds a lock that a later request no longer shares.
        self.users = 0


class Sessions:
    """The conversations' workspaces, opened on first use and kept open (up to `ServeSettings.max_open`).

    Every change to a conversation's workspaces (open, reopen, close, discard) happens under its lock,
    from a request's turn or from `evict`, which takes the lock of an idle conversation like a request.
    """

    def __init__(self, settings: ServeSettings, summarizer: Callable[[], Summarizer | None]) -> None:
        self._settings = settings
        self._summarizer = summarizer
        self._turns: dict[str, _Turns] = {}
        self._evicting = False  # one eviction at a time; it goes on while any conversation can be closed
        self._open: OrderedDict[tuple[str, int], AsyncSession] = OrderedDict()
        self._branches: dict[str, list[int]] = {}  # most recently used first
        self._pending: dict[tuple[str, int], Reply] = {}  # the last reply of each branch, until the next request
        self._seen: dict[tuple[str, int], list[Any]] = {}  # the history items each branch took last, as parsed
        self._scale: dict[str, float] = {}  # per conversation: the upstream's token count over ctxkeep's, at most
        self._windows: dict[tuple[str, int], int] = {}  # the window each open workspace was opened with
        self._forms: dict[tuple[str, int], WireForms] = {}  # each open branch's context in wire form

    def key(self, header: str | None, route: str, turn: Turn) -> str:
        """The request's conversation (`conversation_key`), found among the folders under the root."""
        return conversation_key(header, route, turn, root=None if self._settings.store else self._settings.root)

    async def enter(self, key: str) -> Lease:
        """Wait for the conversation's turn; the `Lease` must be released (`Lease.release`) when done."""
        turns = self._turns.setdefault(key, _Turns())
        turns.users += 1
        try:
            await turns.lock.acquire()
        except BaseException:  # cancelled while waiting (the client went away)
            self.leave(key, turns)
            raise
        return Lease(self, key, turns)

    def leave(self, key: str, turns: _Turns) -> None:
        """A request is done with the conversation (`Lease.release`), or gave up waiting for it."""
        turns.users -= 1
        if turns.users == 0 and not any(k == key for k, _ in self._open) and self._turns.get(key) is turns:
            del self._turns[key]
            self._branches.pop(key, None)

    async def close(self) -> None:
        """Close every open workspace, with its pending reply added (their locks are released)."""
        while self._open:
            where, session = self._open.popitem(last=False)
            await self._close(where, session)

    def hold(self, key: str, branch: int, reply: Reply, counted: int) -> None:
        """Keep `reply` as the branch's pending reply (see the module's docstring), and learn from the
        upstream's count of the prompt beside ctxkeep's (`counted`) how the two tokenizers compare."""
        self._pending[(key, branch)] = reply
        # Only a prompt of some size says how the tokenizers compare: on a small one the upstream's fixed
        # overheads (a tool-use preamble, say) would pass for a ratio.
        if reply.prompt_tokens is not None and counted >= self._settings.window // 4:
            self._scale[key] = max(self._scale.get(key, 1.0), reply.prompt_tokens / counted)

    def forms(self, key: str, branch: int) -> WireForms:
        """The branch's context in wire form, as the last request sent it (`WireForms`)."""
        return self._forms.setdefault((key, branch), WireForms())

    def window_for(self, key: str) -> int:
        """The window a conversation's workspaces keep, by ctxkeep's count: `ServeSettings.window`, made
        smaller by how much more the upstream counts (learned from its usage), so its own count fits."""
        return max(1024, int(self._settings.window / self._scale.get(key, 1.0)))

    async def _close(self, where: tuple[str, int], session: AsyncSession) -> None:
        self._seen.pop(where, None)
        self._windows.pop(where, None)
        self._forms.pop(where, None)
        reply = self._pending.pop(where, None)
        try:
            if reply is not None:
                await session.run(lambda s: _note_usage(s, reply))
                await session.add(reply.message)
        except MessageError as exc:
            # The client has the reply all the same: it comes back with the next request and is synced then.
            log.warning("conversation %s: the upstream's last reply was not recorded: %s", where[0], exc)
        finally:
            await session.close()

    async def step(self, key: str, turn: Turn) -> tuple[Step, AsyncSession, int]:
        """Sync the turn's history into the branch it extends (a new one when none does) and prepare."""
        for branch in self._branch_order(key):
            session = await self._session(key, branch)
            step = await self._extend(session, (key, branch), turn)
            if step is None:
                continue
            self._use(key, branch)
            return step, session, branch
        branch = max(self._branch_order(key), default=-1) + 1
        session = await self._session(key, branch)
        try:
            await session.sync(turn.history)
        except MessageError as exc:
            await self._discard(key, branch)
            raise BadRequest(f"the messages cannot be taken: {exc}", param="messages") from None
        self._seen[(key, branch)] = list(turn.history)
        if branch:
            log.warning("conversation %s: the history diverged from what it held; branch %d started", key, branch)
        self._use(key, branch)
        return await session.prepare(turn.system, tools=turn.tools), session, branch

    async def _extend(self, session: AsyncSession, where: tuple[str, int], turn: Turn) -> Step | None:
        """Take what is new in the turn's history into the branch and prepare; None when the history does
        not extend the branch.

        The fast path: when the history begins with exactly the items this branch took last time, only the
        items after them are added, so a request does not convert and match a long history again.
        Otherwise (a restart, an edit, a different client) `Session.sync` decides.
        """
        seen = self._seen.get(where)
        new = list(turn.history[len(seen) :]) if seen is not None and _begins_with(turn.history, seen) else None
        pending = self._pending.get(where)
        step = await session.run(lambda s: _extended(s, turn, new, pending))
        if step is None:
            return None
        self._pending.pop(where, None)  # carried back and taken, or dropped by a retry
        self._seen[where] = list(turn.history)
        return step

    def _branch_order(self, key: str) -> list[int]:
        if key not in self._branches:
            if self._settings.store is not None:
                from ctxkeep.postgres.database import workspaces

                names = [n.removeprefix(f"{key}/") for n in workspaces(self._settings.store, f"{key}/")]
                found = [int(n) for n in names if n.isdigit()]
            else:
                folder = self._settings.root / key
                found = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
            self._branches[key] = sorted(found, reverse=True)
        return list(self._branches[key])

    def _use(self, key: str, branch: int) -> None:
        self._branches[key] = [branch, *(b for b in self._branches.get(key, []) if b != branch)]

    def _path(self, key: str, branch: int) -> Path:
        return self._settings.root / key / str(branch)

    async def _session(self, key: str, branch: int) -> AsyncSession:
        window = self.window_for(key)
        opened = self._open.get((key, branch))
        # Reopened only for a window smaller by 2% or more: the ratio creeps up by a token now and then.
        if opened is not None and window >= 0.98 * self._windows.get((key, branch), window):
            self._open.move_to_end((key, branch))
            return opened
        if opened is not None:
            # The upstream counts more than ctxkeep: open it again with the smaller window (its sizes follow).
            # Its pending reply and the digests stay: they are the branch's, not this object's.
            del self._open[(key, branch)]
            await opened.close()
            log.info("conversation %s: the upstream counts more tokens; window %d from now", key, window)
        store = self._settings.store
        if store is None:
            await asyncio.to_thread(_private_folder, self._settings.root / key)
        session = await asyncio.to_thread(
            functools.partial(
                Session.open,
                f"{key}/{branch}" if store is not None else self._path(key, branch),
                window=window,
                summarizer=self._summarizer(),
                lock_timeout=self._settings.lock_timeout,
                background=self._settings.background,
                durability=self._settings.durability,
                store=store,
            )
        )
        opened = AsyncSession(session)
        self._open[(key, branch)] = opened
        self._windows[(key, branch)] = window
        return opened

    async def _discard(self, key: str, branch: int) -> None:
        """Close and remove a branch this request created and could not fill (it holds nothing)."""
        session = self._open.pop((key, branch), None)
        if session is not None:
            await self._close((key, branch), session)
        if self._settings.store is not None:
            from ctxkeep.postgres.database import drop_workspace

            await asyncio.to_thread(drop_workspace, self._settings.store, f"{key}/{branch}")
            return
        await asyncio.to_thread(shutil.rmtree, self._path(key, branch), ignore_errors=True)
        with contextlib.suppress(OSError):  # a refused request leaves no folder: only an empty one goes
            await asyncio.to_thread((self._settings.root / key).rmdir)

    async def tidy(self) -> None:
        """`evict`, after a request's answer is sent; never raises: a workspace that fails to close is logged."""
        try:
            await self.evict()
        except Exception as exc:  # the answer is gone: nobody else to tell
            log.warning("closing idle workspaces failed: %s: %s", type(exc).__name__, exc)

    async def evict(self) -> None:
        """Close the least recently used workspaces past `max_open` whose conversation no request holds or
        waits for; each under its conversation's lock, so a request that comes meanwhile waits for the close."""
        if self._evicting:
            return  # the running eviction goes on until nothing more can be closed
        self._evicting = True
        # A database's workspaces are all closed once idle: another process may serve the next request.
        keep = 0 if self._settings.store is not None else self._settings.max_open
        try:
            while len(self._open) > keep:
                idle = next((w for w in self._open if w[0] not in self._turns or not self._turns[w[0]].users), None)
                if idle is None:
                    return  # every open workspace is in use: closed when its requests are done
                turns = self._turns.setdefault(idle[0], _Turns())
                turns.users += 1
                try:
                    async with turns.lock:  # free at once: nobody held or waited for it
                        session = self._open.pop(idle, None)
                        if session is not None:
                            await self._close(idle, session)
                finally:
                    self.leave(idle[0], turns)
        finally:
            self._evicting = False


class Lease:
    """A conversation's turn: its requests wait for one another; other conversations go on in parallel."""

    def __init__(self, sessions: Sessions, key: str, turns: _Turns) -> None:
        self._sessions = sessions
        self._turns = turns
        self._held = True
        self.key = key
        self.session: AsyncSession | None = None
        self.branch = 0

    async def step(self, turn: Turn) -> Step:
        """Sync the client's history and run the pre-reasoning pass (`Sessions.step`)."""
        step, self.session, self.branch = await self._sessions.step(self.key, turn)
        return step

    @property
    def forms(self) -> WireForms:
        """The branch's context in wire form (`Sessions.forms`), once `step` chose the branch."""
        return self._sessions.forms(self.key, self.branch)

    def record(self, reply: Reply, counted: int) -> None:
        """Keep the upstream's whole reply as the branch's pending reply (see the module's docstring);
        `counted` is ctxkeep's count of the prompt the upstream answered."""
        if self.session is not None:
            self._sessions.hold(self.key, self.branch, reply, counted)

    async def release(self) -> None:
        """Let the conversation's next request in (once; later calls do nothing)."""
        if not self._held:
            return
        self._held = False
        self._turns.lock.release()
        self._sessions.leave(self.key, self._turns)


def _extended(session: Session, turn: Turn, new: list[Any] | None, pending: Reply | None) -> Step | None:
    """In the session's worker: the usage of the `pending` reply noted for the step it answered, `new` added
    (the whole history synced when None), then the pass; None, with nothing added, when the history does
    not extend the session."""
    _note_usage(session, pending)
    try:
        if new is not None:
            session.add(new)
        else:
            session.sync(turn.history)
    except MessageError:
        return None
    return session.prepare(turn.system, tools=turn.tools)


def _note_usage(session: Session, reply: Reply | None) -> None:
    """The upstream's count of the request `reply` answered, noted for the session's last step (`Session.note_usage`),
    when it said how much of it its cache served: `ctxkeep show` then takes that, not the prefix kept."""
    if reply is None or reply.prompt_tokens is None or reply.cached_tokens is None:
        return
    if min(reply.prompt_tokens, reply.cached_tokens, reply.written_tokens or 0) < 0:
        return  # not counts: nothing to note
    session.note_usage(
        input_tokens=reply.prompt_tokens, cached_tokens=reply.cached_tokens, written_tokens=reply.written_tokens
    )


def _begins_with(history: Sequence[Any], seen: list[Any]) -> bool:
    """Whether `history` begins with the items `seen` (parsed JSON), compared by value.

    Equality of the parsed values runs in C over the strings' bytes: a 100,000-token history compares in
    tens of microseconds, where serializing and hashing each item took a third of a millisecond, and
    nothing is kept but the items the request parsed anyway. It is JSON's equality but for one thing: a
    ``true`` equals a ``1`` (and ``false`` a ``0``) in the same place of an earlier message, which no
    client rewrites.
    """
    return len(history) >= len(seen) and list(history[: len(seen)]) == seen


def _private_folder(folder: Path) -> None:
    """Create the conversation's folder (and the root) for its owner alone, when missing."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
