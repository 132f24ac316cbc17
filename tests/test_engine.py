"""The pre-reasoning pass: trigger, gate, offload, split, summarize, archive, over hand-built sessions."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from ctxkeep import engine
from ctxkeep import plan as plan_mod
from ctxkeep.codec import message_from_dict
from ctxkeep.context import Context, system_tokens_of
from ctxkeep.errors import MessageError, PinnedOverBudgetError, SummaryError
from ctxkeep.folder import MemoryFolder
from ctxkeep.live import Live, add
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.pairing import validate
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.summarize import SECTIONS, SummaryRequest
from ctxkeep.tokens import get_counter

NOW = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
COUNTER = get_counter("o200k_base")
SMALL = EngineSettings(
    compact=CompactSettings(max_input_length=2_000, compact_ratio=0.7, reserve_ratio=0.2),
    offload=OffloadSettings(recent_n=2, recent_max_bytes=1_500, old_max_bytes=300),
)


class Recording:
    """A summarizer that writes a valid summary naming how many messages it saw, and keeps every request."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        body = "\n\n".join(f"## {s}\n- {len(request.messages)} messages" for s in SECTIONS)
        return body.replace("## Progress\n", "## Progress\n### Done\n### In Progress\n### Blocked\n")


class Raising:
    def summarize(self, request: SummaryRequest) -> str:
        raise SummaryError("the model timed out")


class Garbage:
    def summarize(self, request: SummaryRequest) -> str:
        return "lorem ipsum, no sections at all"


def turn(i: int, size: int = 40) -> list[Message]:
    call = ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": f"ls /srv/{i}"}))
    return [
        Message.of("user", f"request {i}: " + "word " * size, id=f"u{i}"),
        Message(role="assistant", content=(TextBlock(text=f"running step {i}"), call), id=f"a{i}"),
        Message(role="tool", content=(ToolResult(call_id=f"c{i}", content="out\n" * size),), id=f"r{i}"),
        Message.of("assistant", f"step {i} done", id=f"d{i}"),
    ]


def run(live: Live, summarizer=None, folder=None, settings=SMALL, system="be brief", **kw):  # type: ignore[no-untyped-def]
    setup = engine.Setup(
        settings=settings,
        counter=COUNTER,
        summarizer=summarizer or Recording(),
        store=folder if folder is not None else MemoryFolder(),
    )
    return engine.prepare(live, setup, system=system, now=NOW, **kw)


def test_under_the_threshold_nothing_changes() -> None:
    live = add(Live(), turn(0), COUNTER)
    step = run(live)
    assert step.compaction is None and step.failure is None
    assert step.context.messages == live.messages
    assert step.context.tokens == sum(COUNTER.count_each(step.context.as_messages()))
    assert [m.role for m in step.context.as_messages()] == ["system", "user", "assistant", "tool", "assistant"]


def test_over_the_threshold_compacts_archives_first_and_keeps_pairs() -> None:
    folder = MemoryFolder()
    live = add(Live(), [m for i in range(12) for m in turn(i)], COUNTER)
    step = run(live, folder=folder)
    c = step.compaction
    assert c is not None and c.compacted > 0 and c.tokens_after < c.tokens_before
    kept = step.live.messages
    assert step.archived + kept == live.messages
    assert validate(kept) == []
    assert sum(step.live.counts) <= SMALL.compact.reserve
    archived = [message_from_dict(json.loads(x)) for x in folder.read("dialog/2026-12-03.jsonl").splitlines()]
    assert archived == list(step.archived)
    assert step.live.summary is not None
    assert step.live.summary.startswith(
        f"The full earlier conversation is in dialog/2026-12-03.jsonl ({c.compacted} lines)"
    )
    assert step.context.tokens == sum(COUNTER.count_each(step.context.as_messages()))
    assert step.context.as_messages()[1].text.startswith("<context-summary>")


def test_second_compaction_updates_the_previous_summary() -> None:
    summarizer = Recording()
    folder = MemoryFolder()
    live = add(Live(), [m for i in range(12) for m in turn(i)], COUNTER)
    first = run(live, summarizer, folder)
    more = add(first.live, [m for i in range(12, 24) for m in turn(i)], COUNTER)
    second = run(more, summarizer, folder)
    assert second.compaction is not None
    assert summarizer.requests[0].previous is None
    assert summarizer.requests[1].previous == first.live.summary_body
    assert second.live.summary is not None and second.live.summary.count("## Goal") == 1
    lines = folder.read("dialog/2026-12-03.jsonl").splitlines()
    assert len(lines) == first.compaction.compacted + second.compaction.compacted  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", [Raising(), Garbage()])
def test_a_failed_summary_changes_nothing_and_is_not_retried_at_once(bad) -> None:  # type: ignore[no-untyped-def]
    folder = MemoryFolder()
    live = add(Live(), [m for i in range(12) for m in turn(i)], COUNTER)
    step = run(live, bad, folder)
    assert step.failure is not None and step.compaction is None
    assert step.live.messages == live.messages and step.live.summary is None
    assert folder.list("dialog/") == []
    again = run(add(step.live, [Message.of("user", "one more")], COUNTER), bad, folder)
    assert again.failure is None, "retried before the context grew by retry_growth"
    grown = add(again.live, turn(99, size=120), COUNTER)
    assert run(grown, Recording(), folder).compaction is not None


def test_a_failed_compaction_over_the_window_is_tried_again_as_soon_as_it_grows() -> None:
    live = add(Live(), [m for i in range(30) for m in turn(i)], COUNTER)
    assert live.tokens > SMALL.compact.max_input_length  # a request this size is refused anyway
    failed = run(live, Raising())
    assert failed.failure is not None
    assert run(failed.live, Recording()).failure is None  # nothing new: not tried again
    grown = run(add(failed.live, [Message.of("user", "one more")], COUNTER), Recording())
    assert grown.compaction is not None  # far less than retry_growth came, but it is over the window


def test_a_system_prompt_over_the_window_gets_the_smallest_context_and_one_warning() -> None:
    system = "rule " * 2_000  # alone over the window: compaction still sends the smallest context there is
    step = run(add(Live(), turn(0), COUNTER), system=system)
    assert step.compaction is not None and [m.id for m in step.live.messages] == ["d0"]
    assert len(step.warnings) == 1 and "over the model's window" in step.warnings[0]
    again = run(step.live, system=system)
    assert again.compaction is None and again.failure is not None  # nothing older is left to compact...
    third = run(again.live, system=system)
    assert third.compaction is None and third.failure is None  # ...and it is not tried again until it grows
    # A context over the window is never sent silently: every such step says so.
    assert len(third.warnings) == 1 and "over the model's window" in third.warnings[0]


def test_nothing_to_compact_is_a_failure_not_a_loop() -> None:
    live = add(Live(), [Message.of("user", "huge " * 3_000, id="big")], COUNTER)
    step = run(live)
    assert step.failure is not None and "nothing can be compacted" in step.failure.reason
    assert run(step.live).failure is None


def test_pinned_messages_stay_and_their_limit_is_enforced() -> None:
    live = add(Live(), [m for i in range(12) for m in turn(i)], COUNTER)
    step = run(replace(live, pinned=frozenset({"u0"})))
    assert step.live.messages[0].id == "u0" and "u0" not in {m.id for m in step.archived}
    over = add(Live(), [Message.of("user", "pinned " * 1_600, id="p"), *turn(1)], COUNTER)
    with pytest.raises(PinnedOverBudgetError, match="pinned messages take"):
        run(replace(over, pinned=frozenset({"p"})), manual=plan_mod.Manual())


def test_manual_compaction_passes_the_focus() -> None:
    summarizer = Recording()
    live = add(Live(), [m for i in range(3) for m in turn(i)], COUNTER)
    setup = engine.Setup(settings=SMALL, counter=COUNTER, summarizer=summarizer, store=MemoryFolder())
    step = engine.compact(live, setup, system=None, now=NOW, focus="the database migration")
    assert step.compaction is not None and step.compaction.reason == "manual"
    assert summarizer.requests[0].focus == "the database migration"


def test_big_results_are_offloaded_once_and_untouched_messages_keep_their_identity() -> None:
    folder = MemoryFolder()
    call = ToolCall(id="big", name="bash", arguments="{}")
    live = add(
        Live(),
        [
            Message.of("user", "go", id="u"),
            Message(role="assistant", content=(call,), id="a"),
            Message(role="tool", content=(ToolResult(call_id="big", content="x" * 100 + "\n" * 2000),), id="r"),
        ],
        COUNTER,
    )
    step = run(live, folder=folder, settings=replace(SMALL, compact=CompactSettings(max_input_length=100_000)))
    assert step.live.messages[0] is live.messages[0]
    assert step.live.messages[2] is not live.messages[2]
    assert len(folder.list("tool_result/")) == 1
    assert step.live.total == sum(COUNTER.count_each(step.live.messages))
    again = run(step.live, folder=folder, settings=replace(SMALL, compact=CompactSettings(max_input_length=100_000)))
    assert again.live.messages == step.live.messages and again.live.messages[2] is step.live.messages[2]


def test_add_refuses_orphan_results_and_repeated_call_ids() -> None:
    with pytest.raises(MessageError, match="not waiting for a result"):
        add(Live(), [Message(role="tool", content=(ToolResult(call_id="x", content=""),))], COUNTER)
    live = add(Live(), turn(0), COUNTER)
    with pytest.raises(MessageError, match="already live"):
        add(live, turn(0)[1:2], COUNTER)
    with pytest.raises(MessageError, match="answered already") as info:
        add(live, [Message.of("user", "fine"), turn(0)[2]], COUNTER)
    assert info.value.index == 1


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="retry_growth"):
        EngineSettings(retry_growth=2)
    with pytest.raises(ValueError, match="reserve_ratio"):
        CompactSettings(reserve_ratio=0.8)
    with pytest.raises(ValueError, match="old_max_bytes"):
        OffloadSettings(old_max_bytes=60_000)
    assert CompactSettings().compact_threshold == 89_600 and CompactSettings().reserve == 12_800


def test_the_whole_summary_respects_the_cap() -> None:
    from ctxkeep.summarize.extractive import ExtractiveSummarizer

    cfg = replace(SMALL, summary_max_chars=2_500)
    live = add(Live(), [m for i in range(40) for m in turn(i, size=60)], COUNTER)
    step = run(live, ExtractiveSummarizer(), settings=cfg)
    assert step.compaction is not None and step.live.summary is not None
    assert len(step.live.summary) <= 2_500
    with pytest.raises(ValueError, match="summary_max_chars"):
        EngineSettings(summary_max_chars=100)


def test_an_aborted_call_is_sent_with_an_explicit_error_result() -> None:
    aborted = turn(0)[:2]  # the assistant called a tool, and no result ever came
    live = add(Live(), [*aborted, Message.of("user", "never mind, go on", id="u1")], COUNTER)
    step = run(live)
    sent = step.context.as_messages()
    assert validate(sent) == []
    result = next(m for m in sent if m.role == "tool").tool_result
    assert result is not None and result.is_error and result.call_id == "c0"
    assert step.context.tokens == sum(COUNTER.count_each(sent))
    assert step.live.messages == live.messages  # the live state still waits for the result
    with pytest.raises(MessageError, match="does not directly follow its call"):
        add(step.live, [turn(0)[2]], COUNTER)


def test_a_chinese_conversation_gets_a_chinese_archive_guide() -> None:
    from ctxkeep.summarize.extractive import ExtractiveSummarizer

    messages = [
        Message.of("user" if i % 2 == 0 else "assistant", f"第{i}步：请检查配置文件并修复端口问题。" * 20, id=f"z{i}")
        for i in range(30)
    ]
    step = run(add(Live(), messages, COUNTER), ExtractiveSummarizer())
    assert step.live.summary is not None and step.live.summary.startswith(
        "完整的早期对话保存在 dialog/2026-12-03.jsonl"
    )


def test_plan_decides_with_no_store_and_no_summarizer() -> None:
    live = add(Live(), [m for i in range(12) for m in turn(i)], COUNTER)
    live = replace(live, system="be brief", system_tokens=system_tokens_of("be brief", COUNTER))
    decided = plan_mod.plan(live, SMALL, now=NOW, focus="the /srv paths")
    assert isinstance(decided, plan_mod.Plan) and decided.reason == "threshold" and decided.tokens == live.tokens
    assert decided.cut.to_compact + decided.cut.to_keep == live.messages
    assert decided.request.messages == decided.cut.to_compact and decided.request.focus == "the /srv paths"
    kept = sum(n for m, n in zip(live.messages, live.counts, strict=True) if m in decided.cut.to_keep)
    assert kept <= SMALL.compact.reserve

    small = add(Live(), turn(0), COUNTER)
    assert plan_mod.plan(small, SMALL, now=NOW) == plan_mod.Skip()
    manual = plan_mod.plan(small, SMALL, now=NOW, force=True)
    assert isinstance(manual, plan_mod.Plan) and manual.reason == "manual"

    # A system prompt that fills the threshold raises it (up to the window less the reserve) and squeezes the
    # kept tail, rather than stopping compaction.
    huge = replace(live, system_tokens=SMALL.compact.compact_threshold)
    squeezed = plan_mod.plan(huge, SMALL, now=NOW)
    assert isinstance(squeezed, plan_mod.Plan) and len(squeezed.cut.to_keep) < len(decided.cut.to_keep)

    alone = add(Live(), [Message.of("user", "huge " * 3_000, id="big")], COUNTER)
    skipped = plan_mod.plan(alone, SMALL, now=NOW)
    assert isinstance(skipped, plan_mod.Skip) and "nothing can be compacted" in (skipped.failure or "")


class Noting:
    """Hooks of the pass that note what they are given, and add a line to the first summary after."""

    def __init__(self) -> None:
        self.before: list[tuple[str, ...]] = []
        self.after: list[str] = []

    def before_compaction(self, plan: plan_mod.Plan, live: Live) -> None:
        self.before.append(tuple(m.id for m in plan.cut.to_compact))

    def after_compaction(self, plan: plan_mod.Plan, context: Context) -> Context:
        self.after.append(plan.reason)
        return replace(context, summary=f"{context.summary}\n\nnoted")


def test_the_hooks_of_the_pass_get_the_plan_applied_and_nothing_when_the_summary_fails() -> None:
    live = add(Live(), [m for i in range(12) for m in turn(i)], COUNTER)
    hooks = Noting()
    setup = engine.Setup(settings=SMALL, counter=COUNTER, summarizer=Raising(), store=MemoryFolder(), hooks=(hooks,))
    step = engine.prepare(live, setup, system="be brief", now=NOW)
    assert step.failure is not None and hooks.before == [] and hooks.after == []
    setup = replace(setup, summarizer=Recording(), writer=None)
    step = engine.prepare(live, setup, system="be brief", now=NOW)
    assert hooks.before == [tuple(m.id for m in step.archived)] and hooks.after == ["threshold"]
    # What the hook added is sent, and stays the live summary until the next compaction.
    assert step.context.summary is not None and step.context.summary.endswith("noted")
    assert step.live.summary == step.context.summary


class Swelling(Noting):
    """A hook whose addition (a long AGENTS.md, say) is bigger than the room the compaction made."""

    def after_compaction(self, plan: plan_mod.Plan, context: Context) -> Context:
        self.after.append(plan.reason)
        extra = "\n\n" + "rule " * 40_000
        return replace(context, summary=f"{context.summary}{extra}", tokens=context.tokens + COUNTER.count_text(extra))


def test_what_a_hook_adds_never_takes_a_context_that_fit_over_the_window(caplog: pytest.LogCaptureFixture) -> None:
    live = add(Live(), [m for i in range(12) for m in turn(i)], COUNTER)
    hooks = Swelling()
    setup = engine.Setup(settings=SMALL, counter=COUNTER, summarizer=Recording(), store=MemoryFolder(), hooks=(hooks,))
    step = engine.prepare(live, setup, system="be brief", now=NOW)
    assert hooks.after == ["threshold"]
    assert step.context.tokens <= SMALL.compact.max_input_length
    assert "rule rule" not in (step.context.summary or "") and step.live.summary == step.context.summary
    assert "over the model's window" in caplog.text
