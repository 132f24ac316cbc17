"""AsyncSession: the session's calls as coroutines that never block the event loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from ctxkeep import AsyncSession, EngineSettings, Message, Session, SummaryRequest
from ctxkeep.settings import CompactSettings
from ctxkeep.summarize import ExtractiveSummarizer

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
