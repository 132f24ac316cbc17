"""A live context kept in a workspace folder, so one process can stop and another go on.

A `Session` composes: the pass (`ctxkeep.engine`, with its summary writer and hooks) and the workspace it
persists to (`ctxkeep.workspace`: the files, the commit protocol that makes it crash-safe, recovery).
It holds the workspace's lock from `open` to `close`: a second process waits up to `lock_timeout`
seconds, then gets `WorkspaceLockedError`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from . import budget, engine, postgres
from . import live as live_mod
from .codec import message_from_dict, storable
from .errors import WorkspaceError
from .folder import LocalFolder
from .host import inputs
from .host import sync as sync_mod
from .live import Live, Tools
from .messages import Message
from .offload import offload_new
from .plan import Manual
from .settings import DEFAULT_WINDOW, DurabilitySettings, EngineSettings
from .step import Billed, Step
from .store import Store
from .summarize import Summarizer
from .tokens import Counter
from .workspace import livelog
from .workspace.journal import Journal
from .writer import SummaryWriter


class Session:
    """A persistent live context: add messages, `prepare` before each reasoning step, `compact` by hand.

    Open it with `Session.open(path)` (a folder, created when missing) or pass any `Store`.
    Use it as a context manager, or call `close()`, to release the workspace's lock. What it holds
    (`live`, `store`, `settings`, ...) is read-only: it changes only through these methods, which
    write to the store first, so memory and disk never disagree.
    """

    def __init__(
        self,
        store: Store,
        *,
        settings: EngineSettings | None = None,
        counter: Counter | None = None,
        summarizer: Summarizer | None = None,
        lock_timeout: float = 10.0,
        now: datetime | None = None,
    ) -> None:
        """Open the workspace in `store`, waiting up to `lock_timeout` seconds (``float("inf")``: as long as
        it takes) for another process to release it. Raises `WorkspaceError` for a bad `lock_timeout`.

        With `CompactSettings.background` each summary is written ahead, in a thread of the session's own,
        from the step the context passes `CompactSettings.soft_threshold`: at the threshold it is applied
        without waiting for the summarizer (see `ctxkeep.writer.WriteAhead`), which then runs outside the
        caller's thread.
        """
        if not isinstance(lock_timeout, int | float) or isinstance(lock_timeout, bool) or not lock_timeout >= 0:
            raise WorkspaceError(
                "lock_timeout must be the seconds to wait for another process to release the workspace,"
                f' 0 or more (float("inf") waits as long as it takes); got {lock_timeout!r}'
            )
        self._setup = engine.Setup.with_defaults(store, settings=settings, counter=counter, summarizer=summarizer)
        assert self._setup.writer is not None
        self._writer: SummaryWriter = self._setup.writer  # told each step kept; closed with the session
        # One call at a time, and none after `close`: a call that went on past it would write without the
        # lock (another process may hold it by then) or submit to a writer whose thread is gone.
        self._turn = threading.RLock()
        self._closed = False
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(store.lock(lock_timeout))
        try:
            at = now or datetime.now().astimezone()
            self._journal, self._live = Journal.open(store, self._setup.counter, settings=self._setup.settings, now=at)
        except BaseException:
            self._stack.close()
            raise

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        window: int | None = None,
        background: bool = False,
        durability: DurabilitySettings | str = "step",
        store: str | None = None,
        **kw: Any,
    ) -> Session:
        """The session in folder `path` (created when missing). Keyword arguments as for `Session`, or settings.

        `window` (the model's context window, tokens; default 128,000) derives every size from it
        (`EngineSettings.for_window`); any other keyword is a setting that overrides its part
        (``Session.open(path, window=32_000, language="zh", recent_n=5)``). Explicit `settings` win over
        `window`, and take no overrides (`TypeError`). `background` writes summaries ahead
        (`CompactSettings.background`), whatever the settings say. `durability` (``"step"``, ``"batch"``,
        ``"off"`` or `DurabilitySettings`) says what a power loss may take (a kill takes nothing in any).

        `store`, a PostgreSQL URL (``postgresql://user@host/db``, the ``postgres`` extra), keeps the workspace
        in that database instead, `path` being its name there, on the process's connection pool for that URL.
        PostgreSQL commits each write with ``synchronous_commit`` on, whatever `durability` says.
        """
        overrides = {k: kw.pop(k) for k in list(kw) if k not in SESSION_KEYWORDS}
        if overrides and kw.get("settings") is not None:
            raise TypeError(
                f"settings= and setting keywords ({', '.join(sorted(overrides))}) both given: pass the keywords to"
                " EngineSettings.for_window(window, ...) and that as settings=, or drop settings="
            )
        if (window is not None or overrides) and kw.get("settings") is None:
            kw["settings"] = EngineSettings.for_window(window or DEFAULT_WINDOW, **overrides)
        if background:
            settings = kw.get("settings") or EngineSettings()
            kw["settings"] = replace(settings, compact=replace(settings.compact, background=True))
        if store is None:
            return cls(LocalFolder(path, durability=durability), **kw)
        if not postgres.is_url(store):
            raise WorkspaceError(
                f"store= takes a PostgreSQL URL, postgresql://user@host/db; got {store!r} (for a folder, give its"
                " path alone)"
            )
        database = postgres.open_store(store, str(path))
        try:
            session = cls(database, **kw)
        except BaseException:
            database.close()
            raise
        session._stack.callback(database.close)
        return session

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the workspace's lock, once a call in progress in another thread has finished. Everything is
        already on disk (and the step counts are noted); a summary being written ahead is dropped. Any later
        call but `close` raises `WorkspaceError`."""
        with self._turn:
            if self._closed:
                return
            self._closed = True
            try:
                self._writer.close()
                self._journal.close(self._live)
            finally:
                self._stack.close()

    @contextlib.contextmanager
    def _open_call(self) -> Iterator[None]:
        """Runs a call alone, on a session still open; `WorkspaceError` after `close`."""
        with self._turn:
            if self._closed:
                raise WorkspaceError(
                    "this session is closed (its workspace's lock released): open the workspace again to go on"
                )
            yield

    # --- reading ------------------------------------------------------------------

    @property
    def live(self) -> Live:
        """The live context as committed."""
        return self._live

    @property
    def store(self) -> Store:
        """Where the workspace is kept."""
        return self._setup.store

    @property
    def settings(self) -> EngineSettings:
        """The settings of every pass."""
        return self._setup.settings

    @property
    def counter(self) -> Counter:
        """The token counter."""
        return self._setup.counter

    @property
    def summarizer(self) -> Summarizer:
        """What writes the summary."""
        return self._setup.summarizer

    @property
    def messages(self) -> Sequence[Message]:
        """The live messages, oldest first."""
        return self._live.messages

    def history(self) -> list[Message]:
        """The whole conversation the session holds, oldest first: every archived message, then the live ones.

        A host that kept no history of its own rebuilds it from this (``to_openai(session.history())``) and
        syncs it again. Archived messages are as they were archived: an offloaded output keeps its cut text
        and the pointer to its saved original (`ctxkeep recall` puts the originals back). A pinned message
        stays live while later ones are archived, so it comes after them.
        """
        with self._open_call():
            archived: list[Message] = []
            for name, committed in self._live.archive.files.items():
                data = self.store.read_archive(name)[: committed.bytes]  # lines past the commit were never archived
                archived.extend(message_from_dict(orjson.loads(line)) for line in data.splitlines() if line.strip())
            return [*archived, *self._live.messages]

    @property
    def summary(self) -> str | None:
        """The current summary (archive guide included), or None before the first compaction."""
        return self._live.summary

    # --- changing -------------------------------------------------------------------

    def add(self, messages: Iterable[object] | object) -> None:
        """Append messages to the live context, durably.

        Takes ctxkeep `Message`s, OpenAI chat dicts or the openai SDK's message objects, Anthropic message
        dicts and Responses-API items (`ctxkeep.host.inputs`); those get ids from their content, past the ids
        the workspace holds. Raises `MessageError` before writing anything: for what is none of these, an
        id already live or archived, a result without its call (`ctxkeep.live.add` has the rules), or an
        `extra` value JSON cannot hold. Lone UTF-16 surrogates (Node writes them; no UTF-8 file can hold
        them) are replaced by U+FFFD and the message kept: losing a turn over one broken character would
        be worse.
        """
        with self._open_call():
            self._append(inputs.to_batch(messages, sync_mod.Held(self._live), self.settings.offload.max_message_chars))

    def sync(self, history: Iterable[object]) -> list[Message]:
        """Add what is new in the host's whole `history` (any kinds `add` takes); returns what was added.

        Idempotent: what the session holds, live or archived (or the system prompt and summary of a
        context it returned), is recognised by content-derived ids and skipped, so syncing the same
        history again, even after reopening, adds nothing. Raises `MessageError`, adding nothing, when
        the history no longer holds what the session has (an earlier message edited or removed).
        """
        with self._open_call():
            entries = inputs.convert(
                inputs.as_list(history, single=False), max_chars=self.settings.offload.max_message_chars, cut_later=True
            )
            batch = [e.message for e in sync_mod.new_entries(self._live, entries)]
            self._append(batch)
            return batch

    def _append(self, batch: list[Message]) -> None:
        if not batch:
            return
        checked = live_mod.check(self._live, batch)  # a batch refused writes nothing, not even a saved original
        # A big output is cut before it is counted or held: its original goes to its file once, and the
        # live log (and memory) hold the cut form and the pointer.
        batch = offload_new(batch, self.settings.offload, self.store, tool_names=self._live.result_tools)
        # One line per call: a crash mid-append leaves a torn last line, which reopening drops, so a
        # batch (a call and its results, say) is live entirely or not at all. Encoded first, so what
        # is kept in memory is exactly what the line holds.
        live = live_mod.add(self._live, batch, self.counter, checked=checked)  # counts
        try:
            line = livelog.batch_line(batch, live.counts[-len(batch) :])
        except orjson.JSONEncodeError:
            batch = storable(batch)  # surrogates replaced; MessageError for what JSON cannot hold
            live = live_mod.add(self._live, batch, self.counter)
            line = livelog.batch_line(batch, live.counts[-len(batch) :])
        self._journal.append(line)
        self._live = live

    def note_usage(self, *, input_tokens: int, cached_tokens: int, written_tokens: int | None = None) -> None:
        """Note how the model's API counted the request of the last `prepare` (the usage of its answer): every
        input token, those its prompt cache served, those written to it. `ctxkeep show` and `report` then take
        the cache's share from it instead of from the prefix kept (`Step.cached`). Raises `ValueError` for
        a count below 0."""
        billed = Billed(input=input_tokens, cached=cached_tokens, written=written_tokens)
        with self._open_call():
            self._journal.billed(billed)

    def pin(self, message_id: str) -> None:
        """Never offload nor compact this live message, nor the rest of its tool-call group.

        Raises `PinnedOverBudgetError` when the pins would take more than a compaction can leave them.
        """
        with self._open_call():
            live = budget.pin(self._live, message_id, budget.threshold_of(self._live, self.settings.compact))
            self._journal.commit(pinned=live.pinned)
            self._live = live

    def unpin(self, message_id: str) -> None:
        """Let this message (and its tool-call group) be offloaded and compacted again."""
        with self._open_call():
            live = budget.unpin(self._live, message_id)
            self._journal.commit(pinned=live.pinned)
            self._live = live

    def prepare(
        self,
        system: str | None = None,
        *,
        tools: Tools = None,
        now: datetime | None = None,
    ) -> Step:
        """Run the pre-reasoning pass and keep its result. Returns the `Step` (its `.context` goes to the model).

        `tools` are the tool schemas the request carries (OpenAI or Anthropic form): they count against
        the window like the system prompt. `now` (default: the local time) names the day's archive file
        when a compaction happens.
        """
        return self._run(system, tools, now, manual=None)

    def compact(
        self,
        focus: str | None = None,
        *,
        system: str | None = None,
        tools: Tools = None,
        now: datetime | None = None,
    ) -> Step:
        """Compact now, whatever the size; `focus` tells the summarizer what matters most."""
        return self._run(system, tools, now, manual=Manual(focus=focus))

    # --- internals --------------------------------------------------------------------

    def _run(self, system: str | None, tools: Tools, now: datetime | None, *, manual: Manual | None) -> Step:
        with self._open_call():
            at = now or datetime.now().astimezone()
            live = live_mod.with_tools(self._live, tools, self.counter)
            step = engine.prepare(live, self._setup, system=system, now=at, manual=manual)
            self._journal.step(step, at)
            self._live = step.live
            self._writer.after_step(step, at)
            return step


# The keywords `Session.open` passes to `Session` itself; any other is a setting (`EngineSettings.for_window`).
SESSION_KEYWORDS = frozenset({"settings", "counter", "summarizer", "lock_timeout", "now"})
# Every keyword `Session.open` takes that is not a setting: an adapter given these opens the session with them.
OPEN_KEYWORDS = SESSION_KEYWORDS | {"window", "background", "durability", "store"}
