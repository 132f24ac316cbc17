"""`AsyncSession`: a `Session` for an event loop, which never blocks it.

Every call that may touch the disk (fsync), wait for the workspace's lock or call a summarizer (a
model) runs in the session's own worker thread, started once when it opens (a thread started per call
makes the loop wait for the new thread to run, which on a busy machine is a stall); calls on one session
are serialised, in the order they were made. A
`ModelSummarizer` on an SDK model sends its requests through the SDK's async client on the session's
event loop (`SDKModel.on_loop`): the HTTP exchange is one more task of the loop, the thread only waits.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from .errors import WorkspaceError
from .live import Live, Tools
from .messages import Message
from .session import Session
from .step import Step
from .summarize import ModelSummarizer, Summarizer

T = TypeVar("T")


class AsyncSession:
    """`Session`'s methods as coroutines. Open it with ``await AsyncSession.open(path)``; use ``async with``."""

    def __init__(self, session: Session, *, worker: ThreadPoolExecutor | None = None) -> None:
        self._session = session
        self._turn = asyncio.Lock()
        self._worker = worker or ThreadPoolExecutor(1, thread_name_prefix="ctxkeep")
        self._closed = False

    @classmethod
    async def open(cls, path: str | Path, **kw: Any) -> AsyncSession:
        """The session in folder `path` (created when missing); keyword arguments as for `Session.open`.

        A `ModelSummarizer` given as `summarizer=` is used as a copy whose model requests run on the
        SDK's async client on this event loop (`session.summarizer` is that copy: read `last_run` there).
        """
        if "summarizer" in kw:
            kw["summarizer"] = _on_loop(kw["summarizer"], asyncio.get_running_loop())
        worker = ThreadPoolExecutor(1, thread_name_prefix="ctxkeep")
        try:
            session = await asyncio.get_running_loop().run_in_executor(
                worker, functools.partial(Session.open, path, **kw)
            )
        except BaseException:
            worker.shutdown(wait=False)
            raise
        return cls(session, worker=worker)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session(self) -> Session:
        """The synchronous session underneath (do not call it while a coroutine of this one runs)."""
        return self._session

    @property
    def summarizer(self) -> Summarizer:
        """The summarizer compactions use."""
        return self._session.summarizer

    @property
    def live(self) -> Live:
        """The live context as committed."""
        return self._session.live

    @property
    def messages(self) -> Sequence[Message]:
        """The live messages, oldest first."""
        return self._session.messages

    @property
    def summary(self) -> str | None:
        """The current summary, or None before the first compaction."""
        return self._session.summary

    async def add(self, messages: Iterable[object] | object) -> None:
        """`Session.add`, off the event loop."""
        async with self._turn:
            await self._run(self._session.add, messages)

    async def history(self) -> list[Message]:
        """`Session.history`, off the event loop (it reads the archive)."""
        async with self._turn:
            return await self._run(self._session.history)

    async def sync(self, history: Iterable[object]) -> list[Message]:
        """`Session.sync`, off the event loop."""
        async with self._turn:
            return await self._run(self._session.sync, history)

    async def prepare(
        self,
        system: str | None = None,
        *,
        tools: Tools = None,
        now: datetime | None = None,
    ) -> Step:
        """`Session.prepare`, off the event loop: a compaction's summarizer never stalls the agent's other work."""
        async with self._turn:
            return await self._run(self._session.prepare, system, tools=tools, now=now)

    async def compact(
        self,
        focus: str | None = None,
        *,
        system: str | None = None,
        tools: Tools = None,
        now: datetime | None = None,
    ) -> Step:
        """`Session.compact`, off the event loop."""
        async with self._turn:
            return await self._run(self._session.compact, focus, system=system, tools=tools, now=now)

    async def run(self, call: Callable[[Session], T]) -> T:
        """``call(session)`` in the worker, in turn with the other calls: several `Session` calls (an `add`
        then a `prepare`, say) for one trip to the thread instead of one each."""
        async with self._turn:
            return await self._run(call, self._session)

    async def note_usage(self, *, input_tokens: int, cached_tokens: int, written_tokens: int | None = None) -> None:
        """`Session.note_usage`, off the event loop."""
        async with self._turn:
            await self._run(
                self._session.note_usage,
                input_tokens=input_tokens,
                cached_tokens=cached_tokens,
                written_tokens=written_tokens,
            )

    async def pin(self, message_id: str) -> None:
        """`Session.pin`, off the event loop."""
        async with self._turn:
            await self._run(self._session.pin, message_id)

    async def unpin(self, message_id: str) -> None:
        """`Session.unpin`, off the event loop."""
        async with self._turn:
            await self._run(self._session.unpin, message_id)

    async def close(self) -> None:
        """Release the workspace's lock, once the calls already made have finished; close the async client
        of a model summarizer `open` put on the loop."""
        async with self._turn:
            if self._closed:
                return
            await self._run(self._session.close)
            self._closed = True
        self._worker.shutdown(wait=False)
        model = getattr(self._session.summarizer, "model", None)
        if getattr(model, "_loop", None) is asyncio.get_running_loop():
            await model.aclose()  # type: ignore[union-attr]

    async def _run(self, call: Callable[..., T], *args: Any, **kw: Any) -> T:
        """`call` in the session's worker thread; `WorkspaceError` once the session is closed (a call queued
        behind `close` found the worker shut down: the executor's RuntimeError before)."""
        if self._closed:
            raise WorkspaceError(
                "this session is closed (its workspace's lock released): open the workspace again to go on"
            )
        return await asyncio.get_running_loop().run_in_executor(self._worker, functools.partial(call, *args, **kw))


def _on_loop(summarizer: object, loop: asyncio.AbstractEventLoop) -> object:
    """A `ModelSummarizer` on an SDK model as a copy on `loop`'s async client; any other summarizer as it is."""
    if isinstance(summarizer, ModelSummarizer) and callable(getattr(summarizer.model, "on_loop", None)):
        model = summarizer.model.on_loop(loop)  # type: ignore[attr-defined]
        return ModelSummarizer(model, settings=summarizer.settings, counter=summarizer.counter)
    return summarizer
