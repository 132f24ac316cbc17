"""The cost model of a context edit (`ctxkeep.costs`): a cut is made when what it frees pays for re-sending the
tail at the cache's prices, each step's decision is kept with its expected saving, and a pause longer than the
cache lives makes every waiting cut, with or without timestamps."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from tests.builders import shell_turn

from ctxkeep.cli import main
from ctxkeep.context import Context
from ctxkeep.costs import compaction_cost, pays, rewrite_cost, room_cost, saving
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.messages import Message
from ctxkeep.session import Session
from ctxkeep.settings import CACHE_PRICES, CacheSettings, CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.step import Step
from ctxkeep.workspace.view import read

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
ANTHROPIC, OPENAI, NONE = CacheSettings.of("anthropic"), CacheSettings.of("openai"), CacheSettings.of("none")


def turn(i: int, size: int = 3_000) -> list[Message]:
    body = "\n".join(f"{i:04d}:{k:05d} " + "x" * 18 for k in range(size // 30))
    return shell_turn(i, ask=f"step {i}", output=body, note="run")


def settings(cache: CacheSettings, **kw: int) -> EngineSettings:
    offload = OffloadSettings(
        recent_n=2,
        recent_max_bytes=4_000,
        old_max_bytes=600,
        age_batch_bytes=kw.get("batch", 200_000),
        age_tail_tokens=kw.get("tail", 3_000),
        cache=cache,
    )
    return EngineSettings(compact=CompactSettings(max_input_length=1_000_000), offload=offload)


def test_a_rewrite_pays_when_what_it_frees_over_the_horizon_passes_the_write_premium_of_what_it_resends() -> None:
    # Anthropic: 1,000 freed tokens read 10 times at 0.1 save 1,000; re-sending 1,000 costs 1,150 more.
    assert saving(1_000, 1_000, ANTHROPIC) == pytest.approx(-150)
    assert not pays(1_000, 1_000, ANTHROPIC)
    assert pays(1_200, 1_000, ANTHROPIC)
    # OpenAI: no write premium, and a cached token still costs a quarter: the same cut pays well.
    assert saving(1_000, 1_000, OPENAI) == pytest.approx(2_500 - 750)
    # A cache that is gone anyway: nothing is re-sent for the rewrite, the freed tokens are saved in full.
    assert saving(1_000, 50_000, ANTHROPIC, lost=True) == pytest.approx(1_000 * (1.25 + 0.9))
    assert not pays(0, 0, NONE)  # a rewrite that frees nothing is never made


def test_a_compaction_costs_its_rewrite_and_with_a_model_summarizer_its_call() -> None:
    # 4,000 tokens of summary and kept tail written anew: 4,000 x (1.25 - 0.1) beyond reading them.
    assert rewrite_cost(4_000, ANTHROPIC) == pytest.approx(4_600)
    assert compaction_cost(4_000, ANTHROPIC) == pytest.approx(4_600)
    # A model summarizer reads 7,000 tokens and writes a 1,000-token summary, output at 5x input.
    assert compaction_cost(4_000, ANTHROPIC, read=7_000, written=1_000) == pytest.approx(4_600 + 7_000 + 5 * 1_000)
    assert compaction_cost(4_000, NONE) == 0  # no cache: nothing is dearer for being re-sent
    assert room_cost(4_600, 2_300) == pytest.approx(2)
    assert room_cost(4_600, 0) == float("inf")  # a rewrite that leaves no room under the threshold is no use


def test_cheap_prices_cut_each_result_as_it_ages_and_dear_ones_wait() -> None:
    """3 KB results re-sent behind two newer ones: without a cache (or at OpenAI's prices) the cut pays at once,
    at Anthropic's it does not, and the result waits for another to join it."""
    kinds: dict[str, list[str | None]] = {}
    for name, cache in (("none", NONE), ("openai", OPENAI), ("anthropic", ANTHROPIC)):
        with Session(MemoryFolder(), settings=settings(cache)) as session:
            steps = []
            for i in range(8):
                session.add(turn(i))
                step = session.prepare("sys", now=NOW)
                steps.append(step.live.aging.kind if step.live.aging else None)
            kinds[name] = steps
    assert kinds["none"][2:] == ["cut"] * 6, kinds
    assert kinds["openai"][2:] == ["cut"] * 6, kinds
    # At Anthropic's prices one waits for two more to join it: the cache is rewritten a third as often.
    assert kinds["anthropic"][2:] == ["wait", "wait", "cut"] * 2, kinds


def test_each_decision_says_what_it_frees_resends_and_saves() -> None:
    with Session(MemoryFolder(), settings=settings(ANTHROPIC, batch=7_000, tail=0)) as session:
        decisions = []
        for i in range(8):
            session.add(turn(i))
            decisions.append(session.prepare("sys", now=NOW).live.aging)
    batch = next(d for d in decisions if d is not None and d.kind == "batch")
    # Three waiting results cut together: each frees most of its tokens; the cache re-sends from the first on.
    assert [d.kind if d else None for d in decisions] == [None, None, "wait", "wait", "batch", "wait", "wait", "batch"]
    assert batch.freed > 1_500 and batch.resent > batch.freed / 2
    assert batch.saving == pytest.approx(saving(batch.freed, batch.resent, ANTHROPIC))


@pytest.mark.parametrize("stamped", [True, False], ids=["timestamps", "no-timestamps"])
def test_a_pause_longer_than_the_cache_lives_makes_every_waiting_cut(stamped: bool) -> None:
    with Session(MemoryFolder(), settings=settings(ANTHROPIC, tail=0)) as session:
        at = NOW
        for i in range(6):
            asked, at = at, at + timedelta(seconds=10 if i < 5 else 600)  # the last tool runs for ten minutes
            messages = turn(i)
            if stamped:
                messages = [replace(m, timestamp=at if m.role == "tool" else asked) for m in messages]
            session.add(messages)
            step = session.prepare("sys", now=at)
        assert step.live.aging is not None
        assert step.live.aging.kind == "cold"
        assert step.live.aging.resent == 0 and step.live.aging.saving > 0
        assert step.cached == 0  # nothing of the previous request is served from an expired cache
        assert session.live.waiting == 0


def test_a_step_that_waits_says_what_the_nearest_cut_would_have_cost() -> None:
    with Session(MemoryFolder(), settings=settings(ANTHROPIC)) as session:
        for i in range(3):
            session.add(turn(i))
            step = session.prepare("sys", now=NOW)
        wait = step.live.aging
        assert wait is not None and wait.kind == "wait"
        assert wait.freed > 0 and wait.resent > wait.freed and wait.saving < 0


def test_cache_settings_are_checked_and_named() -> None:
    assert OffloadSettings().cache == CACHE_PRICES["anthropic"]
    with pytest.raises(ValueError, match="must not exceed write"):
        CacheSettings(write=1.0, read=1.5)
    with pytest.raises(ValueError, match="multiple of the input price"):
        CacheSettings(write=-1)
    with pytest.raises(ValueError, match="one of anthropic, openai"):
        CacheSettings.of("acme")
    with pytest.raises(TypeError, match="CacheSettings"):
        OffloadSettings(cache="openai")  # type: ignore[arg-type]


def _prefix(before: Context, after: Step) -> int:
    """The tokens of `after`'s context that are the unchanged start of `before`, as a provider's cache counts them."""
    live, context = after.live, after.context
    if before.system != context.system:
        return 0
    if before.summary != context.summary:
        return live.fixed_tokens
    same = 0
    for a, b, n in zip(before.messages, context.messages, live.counts, strict=False):
        if a != b:
            break
        same += n
    return live.fixed_tokens + live.summary_tokens + same


def test_each_step_records_the_tokens_a_prompt_cache_held_and_show_bills_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = EngineSettings(
        compact=CompactSettings(max_input_length=12_000),
        offload=OffloadSettings(recent_n=2, recent_max_bytes=4_000, old_max_bytes=600, age_batch_bytes=7_000),
    )
    expected: list[int] = []
    with Session.open(tmp_path / "ws", settings=small) as session:
        previous = None
        for i in range(14):
            session.add(turn(i))
            step = session.prepare("sys", now=NOW)
            expected.append(0 if previous is None else _prefix(previous, step))
            assert step.cached == expected[-1], i
            previous = step.context
    view = read(LocalFolder(tmp_path / "ws"), name="ws")
    assert list(view.cached) == expected and len(view.steps) == 14
    assert any(d["kind"] == "batch" for d in view.aging)  # the decisions, with their step
    saved = view.savings()
    assert saved.cache is not None and saved.cache.cached == sum(expected)
    assert saved.cache.sent == pytest.approx(
        sum(c * 0.1 + (t - c) * 1.25 for t, c in zip(view.steps, expected, strict=True))
    )
    # Sending everything grows at its end only: its cache holds the whole previous request.
    whole = view.whole()
    held = [0, *(min(a, b) for a, b in pairwise(whole))]
    assert saved.cache.everything == pytest.approx(
        sum(c * 0.1 + (t - c) * 1.25 for t, c in zip(whole, held, strict=True))
    )
    assert main(["show", str(tmp_path / "ws"), "--json", "--price", "anthropic:claude-sonnet-4"]) == 0
    shown = json.loads(capsys.readouterr().out)["savings"]["with_cache"]
    assert shown["cached_tokens"] == sum(expected) and shown["read"] == 0.1
    assert shown["dollars_sent"] == pytest.approx(round(saved.cache.sent) * 3 / 1e6)


def test_the_model_apis_count_of_a_step_is_preferred_where_the_host_notes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`note_usage` after a step: its cached tokens by the upstream's share (the tokenizers may differ), in the
    step's note or, after a compaction (its note already written), in a record of its own; other steps keep
    the prefix kept; a count noted before any step of the session is another session's, and dropped."""
    small = EngineSettings(
        compact=CompactSettings(max_input_length=12_000),
        offload=OffloadSettings(recent_n=2, recent_max_bytes=4_000, old_max_bytes=600),
    )
    with Session.open(tmp_path / "ws", settings=small) as session:
        session.note_usage(input_tokens=10, cached_tokens=10)  # no step yet in this session
        kept = []
        for i in range(3):
            session.add(turn(i))
            kept.append(session.prepare("sys", now=NOW).cached)
        session.note_usage(input_tokens=2_000, cached_tokens=500, written_tokens=1_500)  # step 2, noted with it
        session.add(turn(3))
        compacted = session.compact(now=NOW)
        session.note_usage(input_tokens=1_000, cached_tokens=1_000)  # step 3: its note went with the compaction's
        with pytest.raises(ValueError, match="cached"):
            session.note_usage(input_tokens=1_000, cached_tokens=-1)
    assert compacted.compaction is not None
    view = read(LocalFolder(tmp_path / "ws"), name="ws")
    assert len(view.steps) == 4 and view.billed == 2
    assert list(view.cached) == [*kept[:2], round(view.steps[2] * 500 / 2_000), view.steps[3]]
    assert view.cached[2] != kept[2] or kept[2] == round(view.steps[2] / 4)
    assert main(["show", str(tmp_path / "ws"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["savings"]["with_cache"]
    assert shown["cached_tokens"] == sum(view.cached) and shown["cached_steps_billed"] == 2
    assert main(["show", str(tmp_path / "ws")]) == 0
    assert "2 step(s) as the model's API counted them" in capsys.readouterr().out
