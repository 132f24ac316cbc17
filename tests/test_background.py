"""Summaries written ahead (``Session.open(..., background=True)``): started past the soft threshold in the session's
own thread, applied at the threshold when they still fit, put off while being written, never two at once."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter as Tally
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import pytest

from ctxkeep import plan as plan_mod
from ctxkeep import writer
from ctxkeep.async_session import AsyncSession
from ctxkeep.cli import main
from ctxkeep.errors import SummaryError
from ctxkeep.live import Live
from ctxkeep.live import add as live_add
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.plan import PART_BREAK
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings
from ctxkeep.split import Split
from ctxkeep.step import Step
from ctxkeep.summarize import ExtractiveSummarizer, SummaryRequest
from ctxkeep.writer import WriteAhead
from test_engine import COUNTER, NOW, SMALL, turn

# A window where the summary leaves room after a compaction (at SMALL's 2,000 tokens it fills the context
# nearly to the threshold again, so the next draft frees too little and the summary is written on the spot).
ROOMY = EngineSettings.for_window(4_000)
WAIT = 30.0  # seconds a test waits for another thread at most: only a hung thread ever reaches it


class Gated:
    """The extractive summarizer, answering only once `gate` is set; notes the threads it ran in, how many
    calls ran at once at most, and fails the calls `fail` lists (by their number, from 1)."""

    def __init__(self, *, open_: bool = True, fail: tuple[int, ...] = ()) -> None:
        self.gate = threading.Event()
        if open_:
            self.gate.set()
        self.answered = threading.Event()
        self.threads: list[str] = []
        self.fail = fail
        self.requests: list[SummaryRequest] = []
        self._lock = threading.Lock()
        self._running = 0
        self.most_at_once = 0

    def summarize(self, request: SummaryRequest) -> str:
        with self._lock:
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
            self.threads.append(threading.current_thread().name)
            self.requests.append(request)
            number = len(self.requests)
        try:
            if not self.gate.wait(WAIT):
                raise AssertionError("the test never opened the gate")
            if number in self.fail:
                raise SummaryError("the model is down")
            return ExtractiveSummarizer().summarize(request)
        finally:
            with self._lock:
                self._running -= 1
            self.answered.set()


def held_once(session: Session, added: list[str]) -> None:
    """Every message added is live or archived, exactly once."""
    live = [m.id for m in session.messages]
    archived = session.live.archived
    assert not set(live) & archived
    assert Tally(live + sorted(archived)) == Tally(added)


def add_turn(session: Session, i: int, added: list[str]) -> Step:
    messages = turn(i)
    session.add(messages)
    added += [m.id for m in messages]
    return session.prepare("be brief", now=NOW)


def until_drafted(session: Session, gated: Gated, added: list[str]) -> None:
    """Add turns until the session starts writing a summary ahead."""
    i = 0
    while not gated.requests:
        add_turn(session, i, added)
        i += 1
        assert i < 100, "no summary was started ahead"


def test_the_summary_is_written_ahead_and_applied_at_the_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gated = Gated()
    added: list[str] = []
    with Session.open(tmp_path, settings=ROOMY, summarizer=gated, background=True) as s:
        compactions = []
        for i in range(40):
            step = add_turn(s, i, added)
            if step.compaction is not None:
                compactions.append(step.compaction)
            assert step.context.tokens <= ROOMY.compact.wait_threshold
        held_once(s, added)
    assert compactions and all(c.background for c in compactions)
    assert gated.threads and all(t.startswith("ctxkeep-summary") for t in gated.threads)
    assert gated.most_at_once == 1
    records = (tmp_path / "compactions.jsonl").read_text()
    assert '"background":true' in records
    # `ctxkeep show` and `ctxkeep report` say so.
    assert main(["show", str(tmp_path), "--compaction", "1"]) == 0
    assert "background    True" in capsys.readouterr().out
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "report.html")]) == 0
    assert "in the background, before the threshold" in (tmp_path / "report.html").read_text()


def test_a_compaction_is_put_off_while_its_summary_is_written(tmp_path: Path) -> None:
    gated = Gated(open_=False)
    added: list[str] = []
    with Session.open(tmp_path, settings=ROOMY, summarizer=gated, background=True) as s:
        i = 0
        while s.live.tokens <= ROOMY.compact.compact_threshold:
            step = add_turn(s, i, added)
            i += 1
            assert step.compaction is None
        assert step.deferred and step.context.tokens > ROOMY.compact.compact_threshold
        assert len(gated.requests) == 1  # one summary being written, started past the soft threshold
        drafted = gated.requests[0]
        before = s.summary
        gated.gate.set()
        assert gated.answered.wait(WAIT)
        # The summary is there now: the next step applies it, archiving what it summarizes and nothing else.
        step = s.prepare("be brief", now=NOW)
        assert step.compaction is not None and step.compaction.background
        assert [m.id for m in step.archived] == [m.id for m in drafted.messages]
        assert before is None and s.summary is not None
        assert len(gated.requests) == 1
        held_once(s, added)


def test_a_draft_that_would_free_too_little_is_waited_for_at_the_threshold(tmp_path: Path) -> None:
    # At SMALL's window a summary may take most of what the draft frees: put off, the context would only
    # outgrow the draft, and a later step would wait for it and then for its extension (two summaries where
    # writing at the threshold takes one). So the first step over the threshold waits for the draft.
    gated = Gated(open_=False)
    added: list[str] = []
    with Session.open(tmp_path, settings=SMALL, summarizer=gated, background=True) as s:
        until_drafted(s, gated, added)
        threading.Timer(0.5, gated.gate.set).start()  # the draft is still at work when the threshold comes
        i = 100
        while True:
            step = add_turn(s, i, added)
            i += 1
            assert not step.deferred
            if step.compaction is not None or step.failure is not None:
                break
        assert step.compaction is not None and step.compaction.background
        assert len(gated.requests) == 1  # the draft alone: no extension
        held_once(s, added)


def test_over_the_wait_threshold_the_step_waits_for_the_summary(tmp_path: Path) -> None:
    gated = Gated(open_=False)
    added: list[str] = []
    with Session.open(tmp_path, settings=ROOMY, summarizer=gated, background=True) as s:
        until_drafted(s, gated, added)
        # Far over the threshold at once: the step cannot send this and must wait for the summary.
        big = Message.of("user", "and also " + "word " * 1_100, id="big")
        s.add(big)
        added.append(big.id)
        assert s.live.tokens > ROOMY.compact.wait_threshold
        threading.Timer(0.1, gated.gate.set).start()
        step = s.prepare("be brief", now=NOW)
        assert step.compaction is not None and step.compaction.background and not step.deferred
        assert len(gated.requests) == 1
        held_once(s, added)


def test_a_summary_that_failed_in_the_background_is_written_again_at_the_threshold(tmp_path: Path) -> None:
    gated = Gated(fail=(1,))
    added: list[str] = []
    with Session.open(tmp_path, settings=SMALL, summarizer=gated, background=True) as s:
        i = 0
        while (step := add_turn(s, i, added)).compaction is None:
            i += 1
            assert step.failure is None and i < 30
        assert not step.compaction.background
        assert gated.threads[0].startswith("ctxkeep-summary") and gated.threads[1] == "MainThread"
        held_once(s, added)
    assert '"kind":"failed"' not in (tmp_path / "compactions.jsonl").read_text()


def test_a_draft_that_frees_too_little_is_extended_not_written_again(tmp_path: Path) -> None:
    gated = Gated(open_=False)
    added: list[str] = []
    with Session.open(tmp_path, settings=ROOMY, summarizer=gated, background=True) as s:
        until_drafted(s, gated, added)
        # Far over the wait threshold at once, and by more than the draft can free: it is waited for, then
        # the rest of the messages the compaction cuts are summarized on top of it.
        for k in range(2):
            big = Message.of("user", "and also " + "word " * 1_100, id=f"big{k}")
            s.add(big)
            added.append(big.id)
        threading.Timer(0.1, gated.gate.set).start()
        step = s.prepare("be brief", now=NOW)
        assert step.compaction is not None and step.context.tokens <= ROOMY.compact.compact_threshold
        drafted, rest = gated.requests
        assert rest.previous == ExtractiveSummarizer().summarize(drafted)
        assert [m.id for m in step.archived] == [m.id for m in drafted.messages + rest.messages]
        assert rest.messages and gated.most_at_once == 1
        held_once(s, added)


def test_a_written_draft_the_context_outgrew_is_extended_by_the_next(tmp_path: Path) -> None:
    # A large reserve: the draft planned at the soft threshold cuts little, and two turns later, still under
    # the threshold, applying it would no longer bring the context back under the soft threshold.
    settings = EngineSettings(compact=CompactSettings(max_input_length=4_000, reserve_ratio=0.6))
    gated = Gated()
    added: list[str] = []
    with Session.open(tmp_path, settings=settings, summarizer=gated, background=True) as s:
        i = 0
        writer = s._setup.writer
        assert isinstance(writer, WriteAhead)
        while len(gated.requests) < 2:
            step = add_turn(s, i, added)
            if writer.draft is not None:
                writer.draft.future.result(WAIT)  # as an agent that thinks: the draft is written by the next step
            i += 1
            assert step.compaction is None and i < 60
        first, second = gated.requests[:2]
        assert second.previous == ExtractiveSummarizer().summarize(first)
        ids = [m.id for m in s.messages]
        assert [m.id for m in second.messages] == ids[len(first.messages) : len(first.messages) + len(second.messages)]
        assert [m.id for m in first.messages] == ids[: len(first.messages)]
        held_once(s, added)


def test_a_manual_compaction_waits_for_the_draft_and_writes_its_own(tmp_path: Path) -> None:
    gated = Gated(open_=False)
    added: list[str] = []
    with Session.open(tmp_path, settings=SMALL, summarizer=gated, background=True) as s:
        until_drafted(s, gated, added)
        threading.Timer(0.1, gated.gate.set).start()
        step = s.compact("the deploy")
        assert step.compaction is not None and not step.compaction.background
        assert step.compaction.focus == "the deploy"
        assert gated.most_at_once == 1 and len(gated.requests) == 2
        held_once(s, added)


def test_without_background_the_summarizer_runs_in_the_callers_thread(tmp_path: Path) -> None:
    gated = Gated()
    added: list[str] = []
    with Session.open(tmp_path, settings=SMALL, summarizer=gated) as s:
        steps = [add_turn(s, i, added) for i in range(20)]
    assert any(st.compaction for st in steps) and not any(st.deferred for st in steps)
    assert set(gated.threads) == {"MainThread"}


def test_closing_with_a_summary_being_written_loses_nothing(tmp_path: Path) -> None:
    gated = Gated(open_=False)
    added: list[str] = []
    try:
        with Session.open(tmp_path, settings=SMALL, summarizer=gated, background=True) as s:
            until_drafted(s, gated, added)
            live = s.messages
        with Session.open(tmp_path, settings=SMALL) as s:
            assert s.messages == live and s.summary is None
            held_once(s, added)
    finally:
        gated.gate.set()


def _live(messages: list[Message]) -> Live:
    return live_add(Live(), messages, COUNTER)


def test_a_draft_does_not_fit_once_its_cut_is_unsafe_or_the_summary_changed() -> None:
    first = turn(0) + turn(1)
    live = _live(first)
    plan = plan_mod.plan(live, SMALL, now=NOW, force=True)
    assert isinstance(plan, plan_mod.Plan)
    done: writer.Draft
    future: Future[writer.Written] = Future()
    done = writer.Draft(plan=plan, future=future, summary_body=None)
    assert writer.fit(done, live) is not None
    # A summary since: the draft summarizes from an older one.
    assert writer.fit(done, replace(live, summary_body="## Goal\n- other")) is None
    # A call in the draft whose result came after it: cutting there would split the pair.
    call = Message(role="assistant", content=(ToolCall(id="late", name="bash", arguments="{}"),), id="call")
    result = Message(role="tool", content=(ToolResult(call_id="late", content="ok"),), id="result")
    live = _live([*first, call])
    unsafe = Split(to_compact=(*first, call), pinned=(), to_keep=(), is_valid=True, moved=0)
    draft = writer.Draft(plan=replace(plan, cut=unsafe), future=future, summary_body=None)
    assert writer.fit(draft, live) is not None
    assert writer.fit(draft, live_add(live, [result], COUNTER)) is None


def test_an_async_session_writes_ahead_too(tmp_path: Path) -> None:
    gated = Gated()
    added: list[str] = []

    async def main() -> list[Step]:
        async with await AsyncSession.open(tmp_path, settings=ROOMY, summarizer=gated, background=True) as s:
            steps = []
            for i in range(40):
                messages = turn(i)
                await s.add(messages)
                added.extend(m.id for m in messages)
                steps.append(await s.prepare("be brief", now=NOW))
            held_once(s.session, added)
            return steps

    steps = asyncio.run(asyncio.wait_for(main(), 600))  # stops a hung test only
    assert any(st.compaction and st.compaction.background for st in steps)
    assert gated.threads and all(t.startswith("ctxkeep-summary") for t in gated.threads)


@pytest.mark.parametrize("ratio", [0.0, 1.5])
def test_the_soft_ratio_is_checked(ratio: float) -> None:
    with pytest.raises(ValueError, match="soft_ratio"):
        CompactSettings(soft_ratio=ratio)


def test_summaries_written_ahead_append_parts_in_the_frozen_layout(tmp_path: Path) -> None:
    # A window where a part fits beside the first summary (at 4,000 tokens every compaction consolidates).
    settings = replace(EngineSettings.for_window(16_000), summary_layout="frozen")
    gated = Gated()
    added: list[str] = []
    with Session.open(tmp_path, settings=settings, summarizer=gated, background=True) as s:
        steps = [add_turn(s, i, added) for i in range(130)]
        held_once(s, added)
    compactions = [st.compaction for st in steps if st.compaction is not None]
    assert len(compactions) >= 2 and all(c.background for c in compactions)
    # The second summary is the first, byte for byte, and a part after it.
    first, second = (st.context.summary or "" for st in steps if st.compaction is not None)
    assert second.startswith(first + PART_BREAK)
