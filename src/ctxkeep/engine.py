"""The pre-reasoning pass: trigger -> gate -> offload -> split -> summarize -> archive -> context.

An agent framework calls `prepare` before every reasoning step. It returns the three layers to
send to the model (system prompt, the living summary, the recent messages verbatim):

    live:      [ m0 m1 m2 m3 m4 m5 m6 m7 m8 m9 ]         over the threshold
                 └──── to_compact ────┘└ to_keep ┘       kept tail <= reserve, pairs never split
    archive:   dialog/2026-12-03.jsonl  += m0..m5         flushed to disk first
    context:   [system] [summary(m0..m5 + older)] [m6 m7 m8 m9]

A compaction has two phases, as pi-mono's: `plan` decides (gate, pins, reserve, split, the summary
request) without touching a file or a model; `apply` takes the summary and makes it real (archive,
guide, rebuild, second cut, record). `prepare` composes them with the steps of `ctxkeep.live`;
the caller commits the returned `Live` (see `ctxkeep.session`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from . import archive as archive_mod
from .context import Context, summary_tokens_of, system_tokens_of
from .context import of as context_of
from .errors import CtxkeepError, SummaryError
from .live import Live, age_all, offload_recent, rebuild
from .memory.hooks import MemoryHooks
from .memory.rules import RULES_TAG
from .messages import Message
from .offload import cleanup
from .plan import PART_BREAK, Manual, Plan, Skip, plan
from .providers import Model
from .records import Usage, usage_of
from .settings import EngineSettings
from .split import Split, pair_groups, safe_cuts
from .store import Store
from .summarize import (
    ExtractiveSummarizer,
    Summarizer,
    SummaryRequest,
    resolve_language,
    why_rejected,
    with_originals,
)
from .tokens import Counter, get_counter

if TYPE_CHECKING:
    from anthropic.types import MessageParam
    from openai.types.chat import ChatCompletionMessageParam

log = logging.getLogger("ctxkeep")


@dataclass(frozen=True, kw_only=True, slots=True)
class Compaction:
    """What one compaction did."""

    at: datetime
    reason: str
    focus: str | None
    tokens_before: int
    tokens_after: int
    compacted: int
    kept: int
    pinned: int
    boundary_moved: int
    summary_chars: int
    archive_file: str
    seconds: float
    # The lines of `archive_file` the compacted messages went to: first and last, counted from 1.
    archive_lines: tuple[int, int] = (0, 0)
    # What the summarizer spent (model calls, tokens, retries, ...).
    usage: Usage | None = None
    # The summary was written in the background before the threshold (`Draft`): `seconds` is then what
    # this step waited, `usage.seconds` what the summarizer took.
    background: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """A compaction that was not applied, and why. The live context is unchanged.

    `request` and `response` are what the summarizer was asked and answered, when known, so the
    failure can be saved and debugged (a session writes them to ``failed/``).
    """

    at: datetime
    reason: str
    tokens: int
    request: Mapping[str, Any] | None = None
    response: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """What `prepare` returns: the next live state, the context, and what happened."""

    live: Live
    context: Context
    compaction: Compaction | None = None
    failure: Failure | None = None
    archived: tuple[Message, ...] = ()
    warnings: tuple[str, ...] = ()
    # A compaction was due, but its summary is still being written in the background and the context is
    # not yet over `CompactSettings.wait_threshold`: this step sends the context as it is.
    deferred: bool = False

    def to_openai(self, *, system: bool = True) -> list[ChatCompletionMessageParam]:
        """The context to send, as the openai SDK's ``messages=`` (see `Context.to_openai`)."""
        return self.context.to_openai(system=system)

    def to_anthropic(self) -> tuple[str | None, list[MessageParam]]:
        """The context to send, as the anthropic SDK's ``system=`` and ``messages=``."""
        return self.context.to_anthropic()


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
        return cls(settings=settings, counter=counter, summarizer=summarizer, store=store, hooks=(memory,))


@dataclass(frozen=True, kw_only=True, slots=True)
class Written:
    """What the summarizer answered to one request: the summary to apply (or why there is none) and its cost."""

    summary: str | Failure
    usage: Usage


@dataclass(frozen=True, kw_only=True, slots=True)
class Draft:
    """A compaction planned past the soft threshold (`plan(..., ahead=True)`) whose summary is being written in the
    background (`future`), to be applied at the threshold if it still fits the live context (`fit`)."""

    plan: Plan
    future: Future[Written]
    # The summary body of the live context it was planned on: a compaction since makes it stale (with the
    # "frozen" layout the request's `previous` is not that body).
    summary_body: str | None


def tidy(live: Live, setup: Setup, now: datetime) -> list[str]:
    """Remove offloaded originals past their retention that no live message refers to; the names removed."""
    return cleanup(
        setup.store, live.messages, retention_days=setup.settings.offload.retention_days, now=now.timestamp()
    )


def prepare(
    live: Live,
    setup: Setup,
    *,
    system: str | None,
    now: datetime,
    manual: Manual | None = None,
    draft: Draft | None = None,
) -> Step:
    """Run the pre-reasoning pass once. `manual` compacts now (a `/compact`), with its optional focus.

    Files are written through `setup.store` (offloaded results, then the archive, always before the
    messages leave the returned `Live`). A summarizer that fails or returns an invalid summary leaves
    the live messages and the previous summary exactly as they were (`Step.failure`).

    `draft` is a summary being written in the background since the soft threshold (`plan(..., ahead=True)`). When a
    compaction is due and the draft still fits (`fit`), it is applied (waiting for it only once the context
    is over `CompactSettings.wait_threshold`; below, the step is `deferred`); else the summary is written
    now, as without one.
    """
    started = time.perf_counter()
    counter, settings = setup.counter, setup.settings
    if live.offloaded:
        live = replace(live, offloaded=())
    live = offload_recent(live, settings.offload, setup.store, counter)
    if system != live.system:
        live = replace(live, system=system, system_tokens=system_tokens_of(system, counter))
    if settings.offload.age_over_threshold:
        live = _aged_over(live, setup)  # a compaction may be spared, at the price of the prompt cache
    force = manual is not None
    decision = plan(live, settings, now=now, force=force, focus=manual.focus if manual else None)
    if isinstance(decision, Skip):
        return _warn_over_window(
            _skipped(_aged_over(live, setup), decision, now, counter), settings.compact.max_input_length
        )
    written: Written | None = None
    ahead = fit(draft, live) if draft is not None and not force else None
    if ahead is not None and draft is not None:
        if not draft.future.done() and decision.tokens <= settings.compact.wait_threshold:
            step = Step(live=live, context=context_of(live, counter), deferred=True)
            return _warn_over_window(step, settings.compact.max_input_length)
        drafted = _outcome(draft)
        if drafted is not None and _frees_enough(ahead, live, drafted, settings, counter):
            decision = replace(ahead, reason=decision.reason, tokens=decision.tokens, at=now)
            written = drafted
    elif draft is not None:
        _outcome(draft)  # one summary at a time: a summarizer need not be thread-safe
    if written is None:
        decision = with_saved_originals(decision, setup.store)
        written = write(setup.summarizer, decision.request)
    if isinstance(written.summary, Failure):
        failure = replace(written.summary, at=now, tokens=decision.tokens, usage=written.usage)
        step = _not_applied(_aged_over(live, setup), failure, counter)
    else:
        for hook in setup.hooks:
            hook.before_compaction(decision, live)
        step = apply(live, decision, written.summary, setup=setup, started=started, usage=written.usage)
        step = _after_compaction(step, decision, setup)
    return _warn_over_window(step, settings.compact.max_input_length)


def with_saved_originals(plan: Plan, store: Store) -> Plan:
    """`plan` with the end of each offloaded output's saved original in its request: the summarizer reads no
    file. (`read_original` is optional for a store: one without it leaves the kept heads alone, as does a
    file that cannot be read: the summary is not worth failing the compaction for.)"""
    read_original = getattr(store, "read_original", None)
    if not callable(read_original):
        return plan

    def read(name: str) -> bytes | None:
        try:
            data = read_original(name)
        except CtxkeepError as exc:
            log.warning("the summary judges %s by its kept head: %s", name, exc)
            return None
        return data if isinstance(data, bytes) else None

    return replace(plan, request=with_originals(plan.request, read))


def write(summarizer: Summarizer, request: SummaryRequest) -> Written:
    """Ask `summarizer` for the summary of `request`: the text to apply, or the `Failure`, and what it spent.

    Never raises for the summarizer's errors (they become the `Failure`); safe to run in another thread
    as long as the summarizer is not used elsewhere meanwhile.
    """
    began = time.perf_counter()
    summary = _summarize(summarizer, request)
    return Written(summary=summary, usage=usage_of(summarizer, seconds=time.perf_counter() - began))


def _aged_over(live: Live, setup: Setup) -> Live:
    """Over the threshold with no compaction applied, the results waiting for their older cut get it now."""
    if live.waiting and live.tokens > setup.settings.compact.compact_threshold:
        return offload_recent(live, setup.settings.offload, setup.store, setup.counter, age=True)
    return live


def compact(live: Live, setup: Setup, *, system: str | None, now: datetime, focus: str | None = None) -> Step:
    """Compact now, whatever the size (a manual `/compact`)."""
    return prepare(live, setup, system=system, now=now, manual=Manual(focus=focus))


def fit(draft: Draft, live: Live) -> Plan | None:
    """The `draft`'s plan, cut again on `live`, when its summary still fits: no compaction since (the same
    previous summary), the same pins, the messages it summarizes still the oldest live ones, and its cut
    still safe (no result that came since answers a call it summarizes). None when it no longer fits.

    The plan compacts the messages as they are now (results offloaded since included): what is
    archived is what was live.
    """
    old = draft.plan
    if live.summary_body != draft.summary_body:
        return None
    end = old.cut.cut
    if end > len(live.messages):
        return None
    pinned_ids = {m.id for m in old.cut.pinned}
    head = live.messages[:end]
    to_compact = tuple(m for m in head if m.id not in pinned_ids)
    pinned = tuple(m for m in head if m.id in pinned_ids)
    if [m.id for m in to_compact] != [m.id for m in old.cut.to_compact] or len(pinned) != len(pinned_ids):
        return None
    if not pinned_ids.issuperset(live.pinned.intersection(m.id for m in head)) or not safe_cuts(live.messages)[end]:
        return None
    cut = Split(to_compact=to_compact, pinned=pinned, to_keep=tuple(live.messages[end:]), is_valid=True, moved=0)
    return replace(old, cut=cut)


def outgrown(draft: Draft, live: Live, settings: EngineSettings) -> bool:
    """Whether a `draft` that is written should be planned again: the context is past the soft threshold and
    applying the draft now would not bring it back under (its results were offloaded or aged since, or much
    has come after it), so that at the threshold it would free too little. The new summary is reckoned at
    the size of the one it replaces.
    """
    compact = settings.compact
    if not draft.future.done() or live.tokens <= compact.soft_threshold:
        return False
    if live.summary_body != draft.summary_body or draft.plan.cut.cut > len(live.messages):
        return True
    pinned = {m.id for m in draft.plan.cut.pinned}
    end = draft.plan.cut.cut
    freed = sum(n for m, n in zip(live.messages[:end], live.counts[:end], strict=True) if m.id not in pinned)
    return live.tokens - freed > compact.soft_threshold


def _outcome(draft: Draft) -> Written | None:
    """What the draft's summarizer answered, waiting for it when it is still at work; None when it was cancelled."""
    try:
        return draft.future.result()
    except CancelledError:
        return None


def _frees_enough(ahead: Plan, live: Live, written: Written, settings: EngineSettings, counter: Counter) -> bool:
    """Whether the drafted summary is one to apply and, applied, leaves the context under the threshold."""
    if not isinstance(written.summary, str):
        return False
    compacted = {id(m) for m in ahead.cut.to_compact}
    freed = sum(n for m, n in zip(live.messages, live.counts, strict=True) if id(m) in compacted)
    after = live.tokens - freed - live.summary_tokens + summary_tokens_of(written.summary, counter)
    return after <= settings.compact.compact_threshold


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
        frozen = _without_rules(live.summary)
        text, body = f"{frozen}{PART_BREAK}{text}", f"{live.summary_body}{PART_BREAK}{summary}"
    after = replace(
        kept,
        summary=text,
        summary_body=body,
        summary_tokens=summary_tokens_of(text, counter),
        archive=archive,
    )
    threshold = settings.compact.compact_threshold
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
    if after.tokens > threshold:
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


def _without_rules(summary: str) -> str:
    """`summary` without the AGENTS.md rules `after_compaction` put at its end, if it has them."""
    at = summary.rfind(f"\n\n<{RULES_TAG}")
    return summary[:at] if at >= 0 and summary.endswith(f"</{RULES_TAG}>") else summary


def _warn_over_window(step: Step, window: int) -> Step:
    """A context over the window is never sent silently: every such step says so, not only the first."""
    tokens = step.context.tokens
    if tokens <= window:
        return step
    warning = (
        f"the context is {tokens} tokens, over the model's window ({window}): the system prompt, the summary and"
        " the newest messages that must stay do not fit; shorten the system prompt or raise max_input_length"
    )
    log.warning(warning)
    return replace(step, warnings=(*step.warnings, warning))


def _summarize(summarizer: Summarizer, request: SummaryRequest) -> str | Failure:
    """The summarizer's text when it is a summary to apply, else a `Failure` with what it was asked and answered."""
    try:
        body = summarizer.summarize(request)
    except SummaryError as exc:
        asked = getattr(exc, "request", None) or _describe(request, summarizer)
        return _failure(f"the summarizer failed: {exc}", asked, getattr(exc, "response", None))
    except Exception as exc:  # a user's summarizer may raise anything; the context must survive it
        log.exception("summarizer raised")
        reason = f"the summarizer raised {type(exc).__name__}: {exc}"
        return _failure(reason, _describe(request, summarizer), None)
    rejected = why_rejected(body)
    if rejected is not None:
        answered = body if isinstance(body, str) and body.strip() else repr(body)
        return _failure(rejected, _describe(request, summarizer), answered)
    assert isinstance(body, str)  # `why_rejected` refuses anything else
    return body


def _failure(reason: str, request: Mapping[str, Any] | None, response: str | None) -> Failure:
    # `at` and `tokens` are the step's; `prepare` fills them in.
    return Failure(at=datetime.min, reason=reason, tokens=0, request=request, response=response)


def _describe(request: SummaryRequest, summarizer: Summarizer) -> dict[str, Any]:
    """What a summarizer was asked, as JSON, when it did not say itself (message ids, not their text)."""
    return {
        "summarizer": type(summarizer).__name__,
        "messages": [m.id for m in request.messages],
        "previous": request.previous,
        "focus": request.focus,
        "language": request.language,
        "max_chars": request.max_chars,
    }


def _skipped(live: Live, skip: Skip, now: datetime, counter: Counter) -> Step:
    if skip.failure is not None:
        return _not_applied(live, Failure(at=now, reason=skip.failure, tokens=live.tokens), counter)
    if skip.warning is None:
        return Step(live=live, context=context_of(live, counter))
    log.warning(skip.warning)
    live = replace(live, failed_at=live.tokens)
    return Step(live=live, context=context_of(live, counter), warnings=(skip.warning,))


def _not_applied(live: Live, failure: Failure, counter: Counter) -> Step:
    log.warning("compaction not applied: %s", failure.reason)
    return Step(
        live=replace(live, failed_at=failure.tokens),
        context=context_of(live, counter),
        failure=failure,
        warnings=(f"compaction not applied: {failure.reason}",),
    )
