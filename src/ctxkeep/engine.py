"""The pre-reasoning pass: trigger -> gate -> offload -> split -> summarize -> archive -> context.

An agent framework calls `prepare` before every reasoning step. It returns the three layers to
send to the model (system prompt, the living summary, the recent messages verbatim):

    live:      [ m0 m1 m2 m3 m4 m5 m6 m7 m8 m9 ]         over the threshold
                 └──── to_compact ────┘└ to_keep ┘       kept tail <= reserve, pairs never split
    archive:   dialog/2026-12-03.jsonl  += m0..m5         flushed to disk first
    context:   [system] [summary(m0..m5 + older)] [m6 m7 m8 m9]

A compaction has two phases, as pi-mono's: `ctxkeep.plan.plan` decides (gate, pins, reserve, split, the
summary request) without touching a file or a model; a summary writer (`ctxkeep.writer`: now, or ahead
in a thread) gets the summary; `apply` makes it real (archive, guide, rebuild, second cut, record).
Around it run the hooks of the pass (`PassHooks`: memory's flush before, its rules after), given the
plan itself. `prepare` composes them with the steps of `ctxkeep.aging`; the caller commits the returned
`Live` (see `ctxkeep.session`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from . import archive as archive_mod
from .aging import age_all, aged_tokens, cut_oversize, offload_recent
from .budget import kept_tokens, threshold_of
from .context import Context, summary_tokens_of, system_tokens_of
from .context import of as context_of
from .costs import compaction_cost, rewrite_cost, room_cost
from .errors import CtxkeepError
from .live import Live, rebuild
from .memory.hooks import MemoryHooks
from .memory.rules import without_rules
from .pairing import pair_groups
from .plan import PART_BREAK, Manual, Plan, Skip, plan
from .providers import Model
from .settings import CHARS_PER_TOKEN, EngineSettings
from .step import Compaction, Failure, Usage, cached_tokens
from .step import Step as Step  # serve/ imports it from here
from .store import Store
from .summarize import ExtractiveSummarizer, Summarizer, resolve_language
from .tokens import Counter, get_counter
from .writer import SummaryWriter, WriteNow, writer_for

log = logging.getLogger("ctxkeep")


class PassHooks(Protocol):
    """What runs around a compaction, given the compaction's own `Plan` (as pi-mono's `SessionBeforeCompactEvent`):
    a hook never computes a cut of its own, so it sees exactly what the compaction archives."""

    def before_compaction(self, plan: Plan, live: Live) -> None:
        """Called once the summary of `plan` is written, before it is applied: `plan.cut.to_compact` goes."""
        ...

    def after_compaction(self, plan: Plan, context: Context) -> Context:
        """The first context after the compaction of `plan`, as it is to be sent (its summary may grow)."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Setup:
    """What every pass runs with: the settings, the token counter, the summarizer, the workspace's store and the
    hooks around a compaction."""

    settings: EngineSettings
    counter: Counter
    summarizer: Summarizer
    store: Store
    hooks: tuple[PassHooks, ...] = ()
    # Where the summary comes from; None: `WriteNow` with `summarizer` (`with_defaults` follows the settings).
    writer: SummaryWriter | None = None

    def __post_init__(self) -> None:
        if self.writer is None:
            object.__setattr__(self, "writer", WriteNow(summarizer=self.summarizer, store=self.store))

    @classmethod
    def with_defaults(
        cls,
        store: Store,
        *,
        settings: EngineSettings | None = None,
        counter: Counter | None = None,
        summarizer: Summarizer | None = None,
    ) -> Setup:
        """A `Setup` with defaults for what is not given: the seed settings, o200k_base, the extractive summarizer;
        and memory's hooks (`MemoryHooks`), whose flush writes with the summarizer's model when it has one."""
        settings = settings or EngineSettings()
        counter = counter or get_counter("o200k_base")
        summarizer = summarizer or ExtractiveSummarizer()
        model = getattr(summarizer, "model", None)  # a `ModelSummarizer`'s compaction model
        memory = MemoryHooks(
            store=store,
            settings=settings.memory,
            counter=counter,
            model=model if isinstance(model, Model) else None,
        )
        writer = writer_for(summarizer, store, settings=settings, counter=counter)
        return cls(
            settings=settings, counter=counter, summarizer=summarizer, store=store, hooks=(memory,), writer=writer
        )


def prepare(
    live: Live,
    setup: Setup,
    *,
    system: str | None,
    now: datetime,
    manual: Manual | None = None,
) -> Step:
    """Run the pre-reasoning pass once. `manual` compacts now (a `/compact`), with its optional focus.

    The step says how much of its context a prompt cache holds from the previous one (`Step.cached`).

    Files are written through `setup.store` (offloaded results, then the archive, always before the
    messages leave the returned `Live`). A summarizer that fails or returns an invalid summary leaves
    the live messages and the previous summary exactly as they were (`Step.failure`).

    The summary comes from `setup.writer` (`ctxkeep.writer`): written now, or ahead in the background, in
    which case the step is `deferred` while it is still being written and the context is under
    `CompactSettings.wait_threshold`. The hooks of the pass (`PassHooks`) get the plan applied.
    """
    step = _prepare(live, setup, system=system, now=now, manual=manual)
    return replace(step, cached=cached_tokens(live, step))


def _prepare(live: Live, setup: Setup, *, system: str | None, now: datetime, manual: Manual | None) -> Step:
    started = time.perf_counter()
    counter, settings = setup.counter, setup.settings
    if live.offloaded:
        live = replace(live, offloaded=())
    if live.aging is not None:
        live = replace(live, aging=None)
    live = offload_recent(live, settings.offload, setup.store, counter, now=now)
    if system != live.system:
        live = replace(live, system=system, system_tokens=system_tokens_of(system, counter))
    force = manual is not None
    if not force:
        live = _spared(live, setup)
    decision = plan(live, settings, now=now, force=force, focus=manual.focus if manual else None)
    if isinstance(decision, Skip):
        return _warn_over_window(
            _skipped(_aged_over(live, setup), decision, now, counter), settings.compact.max_input_length
        )
    assert setup.writer is not None  # (set in `Setup.__post_init__`)
    written = setup.writer.write(decision, live)
    if written is None:
        step = Step(live=live, context=context_of(live, counter), deferred=True)
        return _warn_over_window(step, settings.compact.max_input_length)
    if isinstance(written.summary, Failure):
        failure = replace(written.summary, at=now, tokens=written.plan.tokens, usage=written.usage)
        step = _not_applied(_aged_over(live, setup), failure, counter)
    else:
        for hook in setup.hooks:
            hook.before_compaction(written.plan, live)
        step = apply(live, written.plan, written.summary, setup=setup, started=started, usage=written.usage)
        step = _after_compaction(step, written.plan, setup)
    return _warn_over_window(step, settings.compact.max_input_length)


def _spared(live: Live, setup: Setup) -> Live:
    """Over the threshold, `live` with its waiting results aged instead of a compaction, when aging brings it back
    under the threshold and buys that room more cheaply (`ctxkeep.costs.room_cost`); always with
    `age_over_threshold`.

    Aging re-sends the prompt from the first waiting result on; a compaction re-sends the new summary and the kept
    tail (the newest group whole), and a model summarizer's call reads what it compacts and writes the summary
    (`ctxkeep.costs.compaction_cost`). What aging frees is estimated (`aged_tokens`), so nothing is cut in vain.
    """
    settings = setup.settings
    threshold = threshold_of(live, settings.compact)
    if not live.waiting or live.tokens <= threshold:
        return live
    aged = aged_tokens(live, settings.offload)
    if aged >= threshold:
        return live
    if not settings.offload.age_over_threshold:
        first = live.tool_positions[0]
        before = live.fixed_tokens + live.summary_tokens + sum(live.counts[p] for p in range(first))
        summary = live.summary_tokens or settings.summary_max_chars // CHARS_PER_TOKEN
        kept = summary + kept_tokens(live, settings.compact.reserve)  # after the system prompt and tools
        model = getattr(setup.summarizer, "model", None) is not None
        cache = settings.offload.cache
        compacting = compaction_cost(
            kept, cache, read=live.tokens - live.fixed_tokens - kept if model else 0, written=summary if model else 0
        )
        aging = rewrite_cost(aged - before, cache)
        if room_cost(aging, threshold - aged) > room_cost(compacting, threshold - live.fixed_tokens - kept):
            return live
    return offload_recent(live, settings.offload, setup.store, setup.counter, age=True)


def _aged_over(live: Live, setup: Setup) -> Live:
    """Over the threshold with no compaction applied, the results waiting for their older cut get it now; and
    over the window, every result gets it and a message too big for the window (a pasted log) keeps its head and
    tail, rather than the request going over the window (the last resort a compaction's kept tail gets, `age_all`)."""
    settings = setup.settings
    if live.waiting and live.tokens > settings.compact.compact_threshold:
        live = offload_recent(live, settings.offload, setup.store, setup.counter, age=True)
    if live.tokens > settings.compact.max_input_length:
        # Even the newest results (a file read is whole while recent) get their older cut, as in `age_all`.
        offload = replace(settings.offload, recent_n=0)
        live = offload_recent(live, offload, setup.store, setup.counter, age=True)
        live = cut_oversize(live, settings.offload, setup.store, setup.counter)
    return live


def compact(live: Live, setup: Setup, *, system: str | None, now: datetime, focus: str | None = None) -> Step:
    """Compact now, whatever the size (a manual `/compact`)."""
    return prepare(live, setup, system=system, now=now, manual=Manual(focus=focus))


def apply(live: Live, plan: Plan, summary: str, *, setup: Setup, started: float, usage: Usage | None = None) -> Step:
    """Make a planned compaction real with its `summary`: archive, guide, rebuild, second cut, record.

    `usage` is what the summarizer spent, for the record.

    Raises `StorageError` when the archive cannot be written; the returned `Live` is then not made.
    """
    counter, settings = setup.counter, setup.settings
    cut, now = plan.cut, plan.at
    # The prompt cache is lost here anyway: the kept results past `recent_n` get their older cut now
    # (before the archive is written, so a disk that refuses an original leaves nothing to undo).
    kept = offload_recent(rebuild(live, cut.pinned + cut.to_keep), settings.offload, setup.store, counter, age=True)
    # Archive first: the compacted messages are on disk before they leave the live context.
    archive = archive_mod.append(setup.store, live.archive, cut.to_compact, now.date())
    text = archive_mod.with_guide(summary, archive, resolve_language(plan.request))
    body = summary
    if plan.append and live.summary and live.summary_body:
        # "frozen" layout: the parts sent before are kept byte for byte, the new one (with its guide) follows
        # (the AGENTS.md rules that ended them come back after it).
        frozen = without_rules(live.summary)
        text, body = f"{frozen}{PART_BREAK}{text}", f"{live.summary_body}{PART_BREAK}{summary}"
    after = replace(
        kept,
        summary=text,
        summary_body=body,
        summary_tokens=summary_tokens_of(text, counter),
        archive=archive,
    )
    threshold = threshold_of(after, settings.compact)
    if after.tokens > threshold:
        # The kept tail is too big (a group of huge parallel results, say): age its results now rather than
        # send a context over the threshold. This is the same second cut they would get later, only earlier.
        try:
            after = age_all(after, settings.offload, setup.store, counter)
        except CtxkeepError:
            archive_mod.restore(setup.store, live.archive)  # nothing may stay appended past the committed size
            raise
    compaction = Compaction(
        at=now,
        reason=plan.reason,
        focus=plan.request.focus,
        tokens_before=plan.tokens,
        tokens_after=after.tokens,
        compacted=len(cut.to_compact),
        kept=len(cut.to_keep),
        pinned=len(cut.pinned),
        boundary_moved=cut.moved,
        summary_chars=len(text),
        archive_file=archive_mod.archive_name(now.date()),
        seconds=time.perf_counter() - started,
        archive_lines=archive_mod.lines_added(live.archive, archive, now.date()),
        usage=usage,
        background=plan.background,
    )
    log.info("compacted %d -> %d tokens in %.2f s", plan.tokens, after.tokens, compaction.seconds)
    warnings: tuple[str, ...] = ()
    # Over the window, the one warning is `_warn_over_window`'s: this is the smallest context there is.
    if threshold < after.tokens <= settings.compact.max_input_length:
        warnings = (
            f"after compaction the context still has {after.tokens} tokens, over the threshold ({threshold});"
            " the kept messages are too large to shrink further",
        )
        if cut.pinned or len(set(pair_groups(cut.to_keep))) > 1:
            after = replace(after, failed_at=after.tokens)
        # Else only the newest message group stayed: it can go as soon as another message comes, so the
        # next step may compact again (and, with nothing new, finds nothing to compact and waits then).
    return Step(
        live=after,
        context=context_of(after, counter),
        compaction=compaction,
        archived=cut.to_compact,
        warnings=warnings,
    )


def _after_compaction(step: Step, plan: Plan, setup: Setup) -> Step:
    """`step` with the context the hooks make of it. The summary they send (the workspace's AGENTS.md rules at
    its end, say) stays the live summary until the next compaction: dropping what they added a step later
    would rewrite the prompt from there (the summary the summarizer builds on, `summary_body`, never holds it)."""
    context = step.context
    for hook in setup.hooks:
        context = hook.after_compaction(plan, context)
    if context.summary != step.context.summary and context.summary is not None:
        tokens = summary_tokens_of(context.summary, setup.counter)
        step = replace(step, live=replace(step.live, summary=context.summary, summary_tokens=tokens))
    return replace(step, context=context)


def _warn_over_window(step: Step, window: int) -> Step:
    """A context over the window is never sent silently: every such step says so, not only the first."""
    tokens = step.context.tokens
    if tokens <= window:
        return step
    fixed = step.live.fixed_tokens
    warning = (
        f"the context is {tokens} tokens, over the model's window ({window}): the system prompt and tools ({fixed}),"
        " the summary and the newest messages that must stay do not fit, and this is the smallest context they"
        " make; shorten the system prompt or tools, or raise max_input_length"
    )
    log.warning(warning)
    return replace(step, warnings=(*step.warnings, warning))


def _skipped(live: Live, skip: Skip, now: datetime, counter: Counter) -> Step:
    if skip.failure is not None:
        return _not_applied(live, Failure(at=now, reason=skip.failure, tokens=live.tokens), counter)
    return Step(live=live, context=context_of(live, counter))


def _not_applied(live: Live, failure: Failure, counter: Counter) -> Step:
    log.warning("compaction not applied: %s", failure.reason)
    return Step(
        # The size the next try must grow from is what is sent now (results may have aged since the plan).
        live=replace(live, failed_at=live.tokens),
        context=context_of(live, counter),
        failure=failure,
        warnings=(f"compaction not applied: {failure.reason}",),
    )
