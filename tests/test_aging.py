"""Results age (get their "old" cut) only where a prompt cache loses little: at once when little was sent after
them, else a batch at a time and at every compaction, so the context otherwise only grows at its end; small
results are never rewritten; over the threshold a compaction runs rather than an aging, unless asked or aging buys
room more cheaply."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.builders import shell_turn

from ctxkeep.budget import kept_tokens
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.offload import record_of
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.summarize import ModelSummarizer
from ctxkeep.summarize.testing import fixed_summary_model

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
# Results of 3,000 bytes: under the recent cut, over the old one by 2,400 bytes each.
OFFLOAD = OffloadSettings(
    recent_n=2, recent_max_bytes=4_000, old_max_bytes=600, age_batch_bytes=20_000, age_tail_tokens=0
)
ROOMY = EngineSettings(compact=CompactSettings(max_input_length=1_000_000), offload=OFFLOAD)


def turn(i: int, size: int = 3_000) -> list[Message]:
    body = "\n".join(f"{i:04d}:{k:05d} " + "x" * 18 for k in range(size // 30))
    return shell_turn(i, ask=f"step {i}", output=body, note="run")


def rewrites(settings: EngineSettings, turns: int, size: int = 3_000) -> tuple[list[int], Session]:
    """The steps at which a message already sent changed (the context did not just grow at its end)."""
    changed: list[int] = []
    session = Session(MemoryFolder(), settings=settings)
    sent: list[Message] = []
    for i in range(turns):
        session.add(turn(i, size))
        step = session.prepare("sys", now=NOW)
        now = list(step.context.messages)
        if now[: len(sent)] != sent:
            changed.append(i)
        sent = now
    return changed, session


def test_between_batches_the_context_only_grows_at_its_end() -> None:
    batched, session = rewrites(ROOMY, 30)
    with session:
        aged = [m for m in session.messages if (r := m.tool_result) is not None and _stage(r) == "old"]
    # 2,400 bytes freed per result, 20,000 wanted: the results age nine at a time, at three steps of thirty.
    assert len(batched) == 3, batched
    assert len(aged) == 27
    one_by_one, session = rewrites(EngineSettings(compact=ROOMY.compact, offload=_with(age_batch_bytes=0)), 30)
    session.close()
    assert len(one_by_one) == 28  # every step once two results are newer


def test_small_results_are_never_rewritten_and_cost_nothing_to_keep() -> None:
    changed, session = rewrites(ROOMY, 40, size=500)
    with session:
        assert changed == []
        # Only the results that may still change are tracked: the recent ones, never the whole history.
        assert len(session.live.tool_positions) == OFFLOAD.recent_n
        assert len(session.live.result_tools) == OFFLOAD.recent_n


def test_over_the_threshold_the_waiting_results_age_rather_than_compact_when_asked() -> None:
    offload = _with(age_tail_tokens=0, age_over_threshold=True)
    tight = EngineSettings(compact=CompactSettings(max_input_length=10_000, compact_ratio=0.7), offload=offload)
    with Session(MemoryFolder(), settings=tight) as session:
        for i in range(12):
            session.add(turn(i))
            step = session.prepare("sys", now=NOW)
            assert step.compaction is None, f"step {i}: aging the waiting results was enough"
            assert step.context.tokens <= tight.compact.compact_threshold
        assert session.live.waiting < 8  # they aged before the batch was full


def test_a_compaction_ages_the_results_it_keeps() -> None:
    settings = EngineSettings(compact=CompactSettings(max_input_length=60_000, reserve_ratio=0.2), offload=OFFLOAD)
    with Session(MemoryFolder(), settings=settings) as session:
        for i in range(6):
            session.add(turn(i))
            session.prepare("sys", now=NOW)
        assert session.live.waiting == 4  # 9,600 bytes to free: not yet a batch
        step = session.compact(now=NOW)
        assert step.compaction is not None
        results = [m.tool_result for m in session.messages if m.tool_result is not None]
        stages = [_stage(r) for r in results]
        assert stages[-OFFLOAD.recent_n :] == [None] * OFFLOAD.recent_n  # the newest stay as they were
        assert stages[: -OFFLOAD.recent_n] and set(stages[: -OFFLOAD.recent_n]) == {"old"}
        assert session.live.waiting == 0


@pytest.mark.parametrize("size", [3_000, 500], ids=["results-that-wait", "small-results"])
def test_over_the_threshold_the_cheaper_rewrite_runs_and_the_context_only_grew_before(size: int) -> None:
    """3 KB results that wait for their old cut: aging them frees more than half the context, for less than a
    compaction would cost, so the waiting results age instead. 500-byte results never wait: a compaction runs."""
    tight = EngineSettings(compact=CompactSettings(max_input_length=10_000, compact_ratio=0.7), offload=OFFLOAD)
    sent: list[Message] = []
    kinds: list[str] = []
    with Session(MemoryFolder(), settings=tight) as session:
        for i in range(24 if size > 600 else 60):
            session.add(turn(i, size))
            before = session.live.tokens
            step = session.prepare("sys", now=NOW)
            now = list(step.context.messages)
            if step.compaction is not None:
                kinds.append("compaction")
                assert session.live.waiting == 0  # the compaction aged what it kept: nothing waits after it
            elif step.live.aging is not None and step.live.aging.kind == "all":
                kinds.append("aged")
                assert before + 1_100 > tight.compact.compact_threshold  # only over the threshold
            else:
                assert now[: len(sent)] == sent, f"step {i}: a message sent before changed without a compaction"
            assert step.context.tokens <= tight.compact.compact_threshold
            sent = now
    assert kinds and set(kinds) == ({"aged"} if size == 3_000 else {"compaction"}), kinds


def test_when_no_compaction_can_run_over_the_threshold_the_waiting_results_age() -> None:
    class Refusing:
        def summarize(self, request: object) -> str:
            raise RuntimeError("no summary today")

    # A small summary: the room a compaction would leave is cheaper than aging's, so a compaction is tried.
    tight = EngineSettings(
        compact=CompactSettings(max_input_length=10_000, compact_ratio=0.7), offload=OFFLOAD, summary_max_chars=2_500
    )
    with Session(MemoryFolder(), settings=tight, summarizer=Refusing()) as session:
        failures = []
        for i in range(12):
            session.add(turn(i))
            step = session.prepare("sys", now=NOW)
            if step.failure is not None:
                failures.append(i)
                break
            assert step.compaction is None and step.context.tokens <= tight.compact.compact_threshold
        assert failures, "the compaction failed at some step"
        # ...so the waiting results got their old cut instead: the context is back under the threshold.
        assert session.live.waiting == 0
        assert step.context.tokens <= tight.compact.compact_threshold


def test_a_model_summarizers_call_is_counted_so_over_the_threshold_aging_spares_it() -> None:
    # 8 KB results of hex lines at a 16,000-token window: the fifth step passes the threshold with two results
    # waiting. Aging them re-sends the tail for little room; the extractive summarizer's compaction costs only its
    # rewrite of the summary and kept tail, and wins. A model summarizer's call also reads what it compacts and
    # writes the summary (output, `ctxkeep.costs.OUTPUT_PRICE`): then aging's room is the cheaper.
    settings = EngineSettings.for_window(16_000, age_batch_bytes=1_000_000)

    def kinds(**summarizer: object) -> list[str]:
        seen = []
        with Session(MemoryFolder(), settings=settings, **summarizer) as session:  # type: ignore[arg-type]
            for i in range(5):
                body = "\n".join(hashlib.sha256(f"{i}:{k}".encode()).hexdigest() for k in range(123))
                session.add(shell_turn(i, ask=f"step {i}", output=body, note="run"))
                step = session.prepare("sys", now=NOW)
                assert step.context.tokens <= settings.compact.compact_threshold
                seen.append("compaction" if step.compaction else step.live.aging.kind if step.live.aging else "-")
        return seen

    assert kinds() == ["-", "-", "-", "wait", "compaction"]
    assert kinds(summarizer=ModelSummarizer(fixed_summary_model())) == ["-", "-", "-", "wait", "all"]


def test_what_a_compaction_keeps_is_the_newest_group_when_it_passes_the_reserve() -> None:
    session = Session(MemoryFolder(), settings=ROOMY)
    with session:
        for i in range(3):
            session.add(turn(i))
        live = session.live
        group = sum(live.counts[-2:])  # the newest call and its result
        assert kept_tokens(live, reserve=10) == group
        assert kept_tokens(live, reserve=live.total) == live.total
        pinned = replace(live, pinned=frozenset({"r0"}))
        assert kept_tokens(pinned, reserve=10) == group + live.counts[2]


def test_a_result_ages_at_once_when_little_was_sent_after_it_and_its_cut_frees_more() -> None:
    # Every third result is big (12 KB, ~4x the small ones): once two results are newer, its cut re-sends
    # little and frees more than that, so it ages at that step. The small ones (3 KB) free less than the
    # two newer results they would make a cache re-send: alone, they wait for their batch.
    cheap = EngineSettings(compact=ROOMY.compact, offload=_with(age_tail_tokens=3_000, recent_max_bytes=16_000))
    sizes = [12_000 if i % 3 == 0 else 3_000 for i in range(9)]
    with Session(MemoryFolder(), settings=cheap) as session:
        sent: list[Message] = []
        for i, size in enumerate(sizes):
            session.add(turn(i, size))
            step = session.prepare("sys", now=NOW)
            now = list(step.context.messages)
            results = [k for k, m in enumerate(sent) if m.role == "tool"]
            first = next((k for k, (a, b) in enumerate(zip(sent, now, strict=False)) if a != b), None)
            if i >= 2 and sizes[i - 2] == 12_000:
                # The big one ages, and the small ones waiting before it with it while the whole cut still
                # frees more than it re-sends.
                assert first is not None and first <= results[-cheap.offload.recent_n], (i, first, results)
            else:
                assert first is None, (i, first)  # nothing else was rewritten
            sent = now
        stages = [_stage(m.tool_result) for m in session.messages if m.tool_result is not None]
        assert stages == ["old"] * 7 + [None] * 2, stages


@pytest.mark.parametrize(
    "body",
    [
        '{"rows": [' + ", ".join(f'{{"id": {k}, "name": "item-{k}", "ok": true}}' for k in range(14_000)) + "]}",
        "\n".join(f"第{k}行：构建日志，编译通过，没有错误。" for k in range(6_000)),
    ],
    ids=["one-line-json", "chinese-lines"],
)
def test_a_big_result_ages_once_little_is_sent_after_it(body: str) -> None:
    # Its own tokens are not what its cut costs a cache (its old size is no longer sent at all): with the
    # defaults at 128k, a result cut to 50 KB gets its 3 KB cut once it passes the 3 newest, not never.
    defaults = EngineSettings(compact=CompactSettings(max_input_length=128_000))
    with Session(MemoryFolder(), settings=defaults) as session:
        call = Message(role="assistant", content=(ToolCall(id="big", name="bash"),), id="a-big")
        session.add([Message.of("user", "read it", id="u"), call])
        session.add([Message(role="tool", content=(ToolResult(call_id="big", content=body),), id="r-big")])
        for i in range(6):
            session.add(turn(i, size=600))
            session.prepare("sys", now=NOW)
        big = next(m for m in session.messages if m.id == "r-big")
        assert big.tool_result is not None
        assert _stage(big.tool_result) == "old"
        assert len(big.tool_result.text.encode()) <= defaults.offload.old_max_bytes + 1_000  # the cut and its note


def test_a_waiting_result_with_too_much_sent_after_it_waits_for_its_batch() -> None:
    # Big results after it: the cut would cost the cache more than the budget, so nothing ages between batches.
    settings = EngineSettings(compact=ROOMY.compact, offload=_with(age_tail_tokens=500, age_batch_bytes=50_000))
    changed, session = rewrites(settings, 12)
    with session:
        assert changed == [], changed
        assert session.live.waiting == 10
        # The budget bounds what is looked at: a step costs the same whatever the history.
        assert len(session.live.tool_positions) == 12


def test_aging_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="age_tail_tokens"):
        OffloadSettings(age_tail_tokens=-1)
    with pytest.raises(TypeError, match="age_over_threshold"):
        OffloadSettings(age_over_threshold=1)  # type: ignore[arg-type]
    derived = EngineSettings.for_window(32_000).offload
    assert derived.age_tail_tokens == 22_400 // 30 and not derived.age_over_threshold
    assert EngineSettings.for_window(128_000).offload == OffloadSettings()


def _stage(result: ToolResult) -> str | None:
    record = record_of(result)
    return None if record is None else record.stage


def _with(**kw: int | bool) -> OffloadSettings:
    values = {"recent_n": 2, "recent_max_bytes": 4_000, "old_max_bytes": 600, "age_batch_bytes": 20_000}
    return OffloadSettings(**{**values, "age_tail_tokens": 0, **kw})  # type: ignore[arg-type]


def test_a_reopened_session_does_not_age_the_results_it_sent_before(tmp_path: Path) -> None:
    settings = EngineSettings(compact=ROOMY.compact, offload=_with(age_tail_tokens=500, age_batch_bytes=50_000))
    with Session(LocalFolder(tmp_path), settings=settings) as session:
        for i in range(6):
            session.add(turn(i))
            before = list(session.prepare("sys", now=NOW).context.messages)
        assert session.live.waiting == 4
    with Session(LocalFolder(tmp_path), settings=settings) as session:
        session.add(turn(6))
        now = list(session.prepare("sys", now=NOW).context.messages)
        # What was sent before the restart is sent again as it was: a provider's cache still holds it.
        assert now[: len(before)] == before
