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
from .step import Compaction, Failure, cached_tokens
from .step import Step as Step  # serve/ imports it from here
from .store import Store
from .summarize import ExtractiveSummarizer, Summarizer, SummaryRequest, resolve_language
from .summarize.minimal import minimal_summary
from .tokens import Counter, get_counter
from .writer import SummaryWriter, WriteNow, Written, writer_for

log = logging.getLogger("ctxkeep")

_TRIES = 2  # sizes of the smallest summary `_fitted` tries before the guide alone


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
    if live.offloaded or live.aging is not None:  # the last step's record, not this one's
        live = replace(live, offloaded=(), aging=None)
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
        step = apply(live, written, setup=setup, started=started)
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
    tail, rather than the request going over the window (the last resort a compaction's kept tail gets, `age_all`);
    still over, the summary sent is its smaller form (`_fitted`)."""
    settings = setup.settings
    if live.waiting and live.tokens > settings.compact.compact_threshold:
        live = offload_recent(live, settings.offload, setup.store, setup.counter, age=True)
    if live.tokens > settings.compact.max_input_length:
        # Even the newest results (a file read is whole while recent) get their older cut, as in `age_all`.
        offload = replace(settings.offload, recent_n=0)
        live = offload_recent(live, offload, setup.store, setup.counter, age=True)
        live = cut_oversize(live, settings.offload, setup.store, setup.counter)
    if live.tokens > settings.compact.max_input_length and live.summary:
        # And the summary sent its smaller form (the one built on stays), as after a compaction.
        request = SummaryRequest(messages=(), previous=live.summary_body, language=settings.language)
        live = _fitted(live, request, settings.compact.max_input_length, setup.counter)
    return live


def compact(live: Live, setup: Setup, *, system: str | None, now: datetime, focus: str | None = None) -> Step:
    """Compact now, whatever the size (a manual `/compact`)."""
    return prepare(live, setup, system=system, now=now, manual=Manual(focus=focus))


def apply(live: Live, written: Written, *, setup: Setup, started: float) -> Step:
    """Make a planned compaction real with its written summary: archive, guide, rebuild, second cut, record.

    What is sent is `written.summary`, unless the context with it is over the window even with every kept result at
    its older cut: then the largest of the smaller forms that fits (`_fitted`). The summary the next compaction
    builds on (`Live.summary_body`) is always `written.summary`.

    Raises `StorageError` when the archive cannot be written; the returned `Live` is then not made.
    """
    counter, settings = setup.counter, setup.settings
    plan, summary, usage = written.plan, written.summary, written.usage
    if not isinstance(summary, str):
        raise ValueError("only a written summary is applied, not a failure")
    cut, now = plan.cut, plan.at
    # The prompt cache is lost here anyway: the kept results past `recent_n` get their older cut now
    # (before the archive is written, so a disk that refuses an original leaves nothing to undo).
    kept = offload_recent(rebuild(live, cut.pinned + cut.to_keep), settings.offload, setup.store, counter, age=True)
    # Archive first: the compacted messages are on disk before they leave the live context.
    archive = archive_mod.append(setup.store, live.archive, cut.to_compact, now.date())
    language = resolve_language(plan.request)
    text, body = archive_mod.with_guide(summary, archive, language), summary
    if plan.append and live.summary and live.summary_body:
        # "frozen" layout: the parts sent before are kept byte for byte, the new one (with its guide) follows
        # (the AGENTS.md rules that ended them come back after it).
        frozen = without_rules(live.summary)
        text, body = f"{frozen}{PART_BREAK}{text}", f"{live.summary_body}{PART_BREAK}{summary}"
    after = _summarized(replace(kept, archive=archive), text, body, counter)
    threshold = threshold_of(after, settings.compact)
    if after.tokens > threshold:
        # The kept tail is too big (a group of huge parallel results, say): age its results now rather than
        # send a context over the threshold. This is the same second cut they would get later, only earlier.
        try:
            after = age_all(after, settings.offload, setup.store, counter)
        except CtxkeepError:
            archive_mod.restore(setup.store, live.archive)  # nothing may stay appended past the committed size
            raise
    smallest = after.tokens > settings.compact.max_input_length
    if smallest:
        request = plan.request
        if plan.append and live.summary_body:
            # A new part that takes the context over the window (its text cost more tokens than its room was
            # reckoned at): the parts sent before cannot all stay either (the cache is lost whatever is sent), so
            # the smaller form is of them all; the summary built on keeps every part.
            request = replace(request, previous=live.summary_body.replace(PART_BREAK, "\n\n"))
        after = _fitted(after, request, settings.compact.max_input_length, counter, plan.minimal)
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
        summary_chars=len(after.summary or ""),
        archive_file=archive_mod.archive_name(now.date()),
        seconds=time.perf_counter() - started,
        archive_lines=archive_mod.lines_added(live.archive, archive, now.date()),
        usage=usage,
        background=plan.background,
        smallest=smallest,
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


def _summarized(live: Live, text: str | None, body: str | None, counter: Counter) -> Live:
    """`live` sending the summary `text` (guide included; None: no summary), `body` the one the next compaction
    builds on."""
    return replace(live, summary=text, summary_body=body, summary_tokens=summary_tokens_of(text, counter))


def _fitted(after: Live, request: SummaryRequest, window: int, counter: Counter, room: int | None = None) -> Live:
    """`after`, over the `window` with its summary, sending the largest of the summary's smaller forms that fits:

        the smallest summary of `request` (`minimal_summary`: the user's words) in `room` characters (the plan's,
        `Plan.minimal`), or in what the window leaves if less ─► the archive guide at its shortest ─► no summary

    The last is what must be sent whatever the pass does (the system prompt, tools and the newest messages): when
    even that is over the window, the step says so (`_warn_over_window`). The summary built on stays the same.
    """
    body, archive, language = after.summary_body, after.archive, resolve_language(request)
    guide = archive_mod.with_guide("", archive, language)
    bare = after.tokens - after.summary_tokens
    fits = (window - bare) * CHARS_PER_TOKEN - len(guide) - 2
    for _ in range(_TRIES):
        text = archive_mod.with_guide(
            minimal_summary(request, max(0, fits if room is None else min(fits, room))), archive, language
        )
        fitted = _summarized(after, text, body, counter)
        if fitted.tokens <= window:
            return fitted
        # Fewer characters a token than reckoned (Chinese, say): try again at the rate it did take.
        fits = len(text) * (window - bare) // max(1, fitted.summary_tokens) - len(guide) - 2
    short = _summarized(after, archive_mod.short_guide(archive, language=language), body, counter)
    return short if short.tokens <= window else _summarized(after, None, body, counter)


def _after_compaction(step: Step, plan: Plan, setup: Setup) -> Step:
    """`step` with the context the hooks make of it. The summary they send (the workspace's AGENTS.md rules at
    its end, say) stays the live summary until the next compaction: dropping what they added a step later
    would rewrite the prompt from there (the summary the summarizer builds on, `summary_body`, never holds it)."""
    context = step.context
    for hook in setup.hooks:
        context = hook.after_compaction(plan, context)
    window = setup.settings.compact.max_input_length
    if context.tokens > window >= step.context.tokens:
        # What a hook adds is worth less than the room the compaction made: never the reason a context that fit
        # goes over the window (the AGENTS.md rules stay in their file, and return at a roomier compaction).
        log.warning(
            "what runs after the compaction would bring the context to %d tokens, over the model's window (%d):"
            " it is sent without that (the AGENTS.md rules stay in their file)",
            context.tokens,
            window,
        )
        return step
    if context.summary != step.context.summary and context.summary is not None:
        tokens = summary_tokens_of(context.summary, setup.counter)
        step = replace(step, live=replace(step.live, summary=context.summary, summary_tokens=tokens))
    return replace(step, context=context)


def _warn_over_window(step: Step, window: int) -> Step:
    """A context over the window is never sent silently: every such step says so, not only the first."""
    tokens = step.context.tokens
    if tokens <= window:
        return step
    live = step.live
    summary = f", the summary ({live.summary_tokens})" if live.summary_tokens else ""
    warning = (
        f"the context is {tokens} tokens, over the model's window ({window}): the system prompt and tools"
        f" ({live.fixed_tokens}){summary} and the newest messages that must stay ({live.total}) do not fit, and this"
        " is the smallest context they make; shorten the system prompt or tools, or raise max_input_length"
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
