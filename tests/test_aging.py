"""Results age (get their "old" cut) a batch at a time, so between batches the context only grows at its end
and a prompt cache keeps all of it; small results are never rewritten; a compaction ages what it keeps."""

from __future__ import annotations

from datetime import UTC, datetime

from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.offload import record_of
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
# Results of 3,000 bytes: under the recent cut, over the old one by 2,400 bytes each.
OFFLOAD = OffloadSettings(recent_n=2, recent_max_bytes=4_000, old_max_bytes=600, age_batch_bytes=20_000)
ROOMY = EngineSettings(compact=CompactSettings(max_input_length=1_000_000), offload=OFFLOAD)


def turn(i: int, size: int = 3_000) -> list[Message]:
    body = "\n".join(f"{i:04d}:{k:05d} " + "x" * 18 for k in range(size // 30))
    return [
        Message.of("user", f"step {i}", id=f"u{i}"),
        Message(role="assistant", content=(TextBlock(text="run"), ToolCall(id=f"c{i}", name="bash")), id=f"a{i}"),
        Message(role="tool", content=(ToolResult(call_id=f"c{i}", content=body),), id=f"r{i}"),
    ]


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


def test_over_the_threshold_the_waiting_results_age_rather_than_compact() -> None:
    tight = EngineSettings(compact=CompactSettings(max_input_length=10_000, compact_ratio=0.7), offload=OFFLOAD)
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


def _stage(result: ToolResult) -> str | None:
    record = record_of(result)
    return None if record is None else record.stage


def _with(**kw: int) -> OffloadSettings:
    values = {"recent_n": 2, "recent_max_bytes": 4_000, "old_max_bytes": 600, "age_batch_bytes": 20_000}
    return OffloadSettings(**{**values, **kw})
