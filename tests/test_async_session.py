"""AsyncSession: the session's calls as coroutines that never block the event loop."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.validating_server import JSONHandler

from ctxkeep import (
    AsyncSession,
    Completion,
    EngineSettings,
    Message,
    ModelSummarizer,
    ModelSummarySettings,
    Session,
    SummaryRequest,
    get_model,
)
from ctxkeep.errors import ProviderError
from ctxkeep.providers import Turn
from ctxkeep.settings import CompactSettings
from ctxkeep.summarize import ExtractiveSummarizer
from ctxkeep.summarize.testing import fixed_summary

SETTINGS = EngineSettings(compact=CompactSettings(max_input_length=2_000, compact_ratio=0.7, reserve_ratio=0.2))


class Gated:
    """A summarizer that waits until the test lets it go: the loop must stay free meanwhile."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.waited_out = False

    def summarize(self, request: SummaryRequest) -> str:
        self.started.set()
        self.waited_out = not self.go.wait(120)  # only a blocked event loop would leave it waiting that long
        return ExtractiveSummarizer().summarize(request)


def test_a_compaction_does_not_block_the_event_loop(tmp_path: Path) -> None:
    gated = Gated()

    async def main() -> None:
        async with await AsyncSession.open(tmp_path, settings=SETTINGS, summarizer=gated) as session:
            for i in range(12):
                await session.add([Message.of("user", f"question {i}: " + "word " * 150)])
                await session.add([Message.of("assistant", f"answer {i}")])
            compacting = asyncio.create_task(session.prepare("be brief"))
            # The loop runs while the summarizer works in its thread.
            while not gated.started.is_set() and not compacting.done():
                await asyncio.sleep(0.01)
            gated.go.set()
            step = await compacting
            assert step.compaction is not None

    asyncio.run(asyncio.wait_for(main(), 600))  # stops a hung test only
    assert gated.started.is_set() and not gated.waited_out
    with Session.open(tmp_path, settings=SETTINGS) as reopened:
        assert reopened.summary is not None and len(reopened.messages) < 24


def test_calls_on_one_session_keep_their_order(tmp_path: Path) -> None:
    async def main() -> tuple[Message, ...]:
        async with await AsyncSession.open(tmp_path) as session:
            await asyncio.gather(*(session.add(Message.of("user", f"m{i}", id=f"m{i}")) for i in range(20)))
            synced = await session.sync([Message.of("user", f"m{i}", id=f"m{i}") for i in range(21)])
            assert [m.id for m in synced] == ["m20"]
            step = await session.prepare("be brief")
            assert step.context.messages == session.messages
            return session.messages

    messages = asyncio.run(asyncio.wait_for(main(), 600))  # stops a hung test only
    assert [m.id for m in messages] == [f"m{i}" for i in range(21)]


class SummaryServer:
    """A local chat-completions server that answers every request with a valid summary after `delay`
    seconds, noting each request's User-Agent (the SDK names its async client there)."""

    def __init__(self, delay: float) -> None:
        self.agents: list[str] = []
        server = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.agents.append(self.headers.get("User-Agent", ""))
                time.sleep(delay)
                turns = tuple(Turn(role=m["role"], text=m["content"]) for m in body["messages"][1:])
                text = fixed_summary(Completion(system=body["messages"][0]["content"], turns=turns, max_tokens=100))
                reply = {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                }
                self.send_json(200, reply)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


def test_a_model_summarizer_uses_the_sdks_async_client_on_the_loop(tmp_path: Path) -> None:
    api = SummaryServer(delay=0.3)
    summarizer = ModelSummarizer(
        get_model("openai:summarizer", base_url=api.url), settings=ModelSummarySettings(audit=False)
    )
    ticks = 0

    async def main() -> None:
        nonlocal ticks
        async with await AsyncSession.open(tmp_path, settings=SETTINGS, summarizer=summarizer) as session:
            for i in range(12):
                await session.add([Message.of("user", f"question {i}: " + "word " * 150)])
                await session.add([Message.of("assistant", f"answer {i}")])
            compacting = asyncio.create_task(session.prepare("be brief"))
            while not compacting.done():  # the loop keeps running while the model is asked
                ticks += 1
                await asyncio.sleep(0.01)
            step = compacting.result()
            assert step.compaction is not None and step.failure is None
            assert session.summarizer is not summarizer  # a copy on this loop; the caller's is untouched
            assert session.summarizer.last_run is not None and session.summarizer.last_run.calls >= 1

    try:
        asyncio.run(main())
    finally:
        api.http.shutdown()
        api.http.server_close()
    assert api.agents and all(agent.startswith("AsyncOpenAI/") for agent in api.agents)
    assert ticks > 1
    with pytest.raises(ProviderError, match="would wait for itself"):

        async def on_the_loop() -> None:
            bound = summarizer.model.on_loop(asyncio.get_running_loop())  # type: ignore[attr-defined]
            bound.complete(Completion(system="s", turns=(Turn(role="user", text="hi"),), max_tokens=5))

        asyncio.run(on_the_loop())


def test_every_call_runs_in_one_worker_thread_started_at_open(tmp_path: Path) -> None:
    threads: set[str] = set()

    class Noting:
        def summarize(self, request: SummaryRequest) -> str:
            threads.add(threading.current_thread().name)
            return ExtractiveSummarizer().summarize(request)

    async def main() -> None:
        session = await AsyncSession.open(tmp_path, settings=SETTINGS, summarizer=Noting())
        for i in range(12):
            await session.add([Message.of("user", f"question {i}: " + "word " * 150)])
        await session.compact()
        await session.close()
        await session.close()  # a second close does nothing

    asyncio.run(main())
    assert len(threads) == 1 and next(iter(threads)).startswith("ctxkeep")


def test_run_calls_the_session_in_its_worker_after_the_calls_made_before(tmp_path: Path) -> None:
    def add_and_prepare(session: Session) -> tuple[str, int, int]:
        session.add([Message.of("assistant", "second")])
        step = session.prepare("You are terse.")
        return threading.current_thread().name, len(session.messages), step.context.tokens

    async def main() -> tuple[str, int, int]:
        session = await AsyncSession.open(tmp_path)
        try:
            # Made first, so run after: the run sees the first message and adds the second.
            _, ran = await asyncio.gather(session.add([Message.of("user", "first")]), session.run(add_and_prepare))
            return ran
        finally:
            await session.close()

    thread, held, tokens = asyncio.run(main())
    assert thread.startswith("ctxkeep") and thread != threading.current_thread().name
    assert held == 2 and tokens > 0
