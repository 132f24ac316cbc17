"""The summary writers: the engine asks one small interface for the summary of a compaction it planned.

    engine.prepare ── plan ──► SummaryWriter.write(plan, live) ──► Written (summary or Failure) | None
                                  ├─ WriteNow:   asks the summarizer on the spot
                                  └─ WriteAhead: a draft begun in a thread at the soft threshold, applied
                                                 if it still fits; else as WriteNow
    Session, after each step ───► SummaryWriter.after_step(step, now)   (WriteAhead starts or drops drafts)

As httpx's one-method transport: the engine knows `write` only, and which writer runs is the session's choice
(`CompactSettings.background`). One summary is written at a time, so a summarizer need not be thread-safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from .archive import user_messages
from .budget import threshold_of
from .context import summary_tokens_of
from .errors import CtxkeepError, SummaryError
from .live import Live
from .pairing import safe_cuts
from .plan import Plan, plan
from .settings import CHARS_PER_TOKEN, EngineSettings
from .split import Split
from .step import Failure, Step, Usage
from .store import Store
from .summarize import ExtractiveSummarizer, Summarizer, SummaryRequest, why_rejected, with_originals
from .summarize.verbatim import with_recalled
from .tokens import Counter

log = logging.getLogger("ctxkeep")

# The summary of a compaction that archives only what a provider's compaction block (kept live) summarized.
PROVIDER_SUMMARIZED = (
    "The archived messages came before the provider's own compaction in the conversation below; its summary"
    " covers them."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Written:
    """What the summarizer answered for `plan`: the summary to apply (or why there is none) and its cost.

    `plan` is the one to apply: the plan asked, with the ends of the saved originals in its request, or a
    draft's plan cut again on the live context.
    """

    plan: Plan
    summary: str | Failure
    usage: Usage


class SummaryWriter(Protocol):
    """Where the engine gets the summary of a planned compaction."""

    def write(self, plan: Plan, live: Live) -> Written | None:
        """The summary of `plan`, made on `live`; None when it is still being written and the step may go without
        it (the context is not yet over `CompactSettings.wait_threshold`). Never raises for the summarizer's
        errors: they are the `Failure` in `Written.summary`."""
        ...

    def after_step(self, step: Step, now: datetime) -> None:
        """Told each step the session kept, so that a writer can work ahead of the next compaction."""
        ...

    def close(self) -> None:
        """Stop what is being written; nothing on disk depends on it."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteNow:
    """Asks `summarizer` for the summary when the compaction is due, and waits for it."""

    summarizer: Summarizer
    store: Store

    def write(self, plan: Plan, live: Live) -> Written | None:
        """The summary of `plan`, written now (the saved originals' ends read from `store`)."""
        return write(self.summarizer, with_saved_originals(plan, self.store))

    def after_step(self, step: Step, now: datetime) -> None:
        """Nothing is written ahead."""

    def close(self) -> None:
        """Nothing runs between steps."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Draft:
    """A compaction planned past the soft threshold (`plan(..., ahead=True)`) whose summary is being written in the
    background (`future`), to be applied at the threshold if it still fits the live context (`fit`)."""

    plan: Plan
    future: Future[Written]
    # The summary body of the live context it was planned on: a compaction since makes it stale (with the
    # "frozen" layout the request's `previous` is not that body).
    summary_body: str | None


class WriteAhead:
    """Writes each summary ahead, in a thread of its own, from the step the context passes
    `CompactSettings.soft_threshold`; at the threshold the draft is applied if it still fits and frees enough,
    waited for only past `CompactSettings.wait_threshold`. Else the summary is written now, as `WriteNow`."""

    def __init__(self, summarizer: Summarizer, store: Store, *, settings: EngineSettings, counter: Counter) -> None:
        """A writer for one session's workspace `store`; its thread starts with the first draft."""
        self._now = WriteNow(summarizer=summarizer, store=store)
        self._settings = settings
        self._counter = counter
        # The summary being written ahead, and the thread that writes it: nothing on disk depends on either,
        # so a crash or a close loses only the work.
        self._draft: Draft | None = None
        self._pool: ThreadPoolExecutor | None = None

    @property
    def draft(self) -> Draft | None:
        """The summary being written ahead, if any."""
        return self._draft

    def write(self, plan: Plan, live: Live) -> Written | None:
        """The draft's summary when it still fits `live` and frees enough; None while it is being written and the
        context is under the wait threshold. A written draft that frees too little is extended: its summary
        is the previous one of the rest of `plan`'s messages. Else the summary of `plan` is written now."""
        draft = self._draft
        ahead = fit(draft, live) if draft is not None and plan.reason != "manual" else None
        if ahead is not None and draft is not None:
            if not draft.future.done() and self._may_wait(ahead, live, plan):
                return None
            drafted = _outcome(draft)
            if drafted is not None and _frees_enough(ahead, live, drafted, self._settings, self._counter):
                return replace(drafted, plan=replace(ahead, reason=plan.reason, tokens=plan.tokens, at=plan.at))
            if drafted is not None:
                whole = with_saved_originals(plan, self._now.store)
                rest = extended(ahead, drafted, whole)
                if rest is not None:
                    return _after(write(self._now.summarizer, rest), whole, drafted)
        elif draft is not None:
            _outcome(draft)  # one summary at a time: a summarizer need not be thread-safe
        return self._now.write(plan, live)

    def _may_wait(self, ahead: Plan, live: Live, plan: Plan) -> bool:
        """Whether the step may go without the draft still being written: the context is under the wait threshold,
        and the draft, applied when it comes, would still bring it under the soft threshold. Past that, putting it
        off only lets the context outgrow it, and the step after would wait for the draft and then for its
        extension: two summaries where waiting now costs the one already under way (an agent that never waits
        would block longer than without background)."""
        compact = self._settings.compact
        # The new summary reckoned at the most it may take (its request's cap): what it replaces may be none.
        summary = max(live.summary_tokens, ahead.request.max_chars // CHARS_PER_TOKEN)
        after = live.tokens - _freed(ahead, live) - live.summary_tokens + summary
        return plan.tokens <= compact.wait_threshold and after <= compact.soft_threshold

    def after_step(self, step: Step, now: datetime) -> None:
        """Drop the draft a compaction used or made stale; start one past the soft threshold. A written draft the
        context outgrew is extended by the next one (its summary the previous one of the messages since)."""
        done = step.compaction is not None or step.failure is not None
        draft = self._draft
        outgrew = not done and draft is not None and outgrown(draft, step.live, self._settings)
        earlier = draft if outgrew and draft is not None and draft.summary_body == step.live.summary_body else None
        if done or outgrew:
            self._drop()
        if self._draft is not None:
            return
        try:
            ahead = plan(step.live, self._settings, now=now, ahead=True)
        except CtxkeepError as exc:  # pins over budget, say: the threshold's own pass will say so
            log.debug("no summary written ahead: %s", exc)
            return
        if isinstance(ahead, Plan):
            ahead = with_saved_originals(ahead, self._now.store)
            drafted = _outcome(earlier) if earlier is not None else None
            rest = extended(earlier.plan, drafted, ahead) if earlier is not None and drafted is not None else None
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="ctxkeep-summary")
            if rest is not None and drafted is not None:
                future = self._pool.submit(_extend, self._now.summarizer, rest, ahead, drafted)
            else:
                future = self._pool.submit(write, self._now.summarizer, ahead)
            self._draft = Draft(plan=ahead, future=future, summary_body=step.live.summary_body)

    def close(self) -> None:
        """Drop the draft; a summary still being written is left to finish on its own (nothing waits for it)."""
        self._drop()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _drop(self) -> None:
        draft, self._draft = self._draft, None
        if draft is not None:
            draft.future.cancel()


def writer_for(summarizer: Summarizer, store: Store, *, settings: EngineSettings, counter: Counter) -> SummaryWriter:
    """The writer `settings` ask for: `WriteAhead` with `CompactSettings.background`, else `WriteNow`."""
    if settings.compact.background:
        return WriteAhead(summarizer, store, settings=settings, counter=counter)
    return WriteNow(summarizer=summarizer, store=store)


def write(summarizer: Summarizer, plan: Plan) -> Written:
    """Ask `summarizer` for the summary of `plan`'s request: the text to apply, or the `Failure`, and what it spent.

    Never raises for the summarizer's errors (they become the `Failure`); safe to run in another thread
    as long as the summarizer is not used elsewhere meanwhile.
    """
    if not plan.request.messages:
        # All it archives came before a provider's compaction block, which stays live and summarizes them
        # (`ctxkeep.plan`): there is nothing to ask, and a summary of them would say it twice.
        usage = Usage(summarizer=type(summarizer).__name__, calls=0, input_tokens=0, output_tokens=0)
        return Written(plan=plan, summary=PROVIDER_SUMMARIZED, usage=usage)
    began = time.perf_counter()
    summary = _summarize(summarizer, plan.request)
    # Even with no room to send it (`Plan.minimal`), the summarizer is asked: its summary is the one the next
    # compaction builds on, and `ctxkeep.engine.apply` sends a smaller one in its place when it must.
    return Written(plan=plan, summary=summary, usage=usage_of(summarizer, seconds=time.perf_counter() - began))


def extended(earlier: Plan, written: Written, plan: Plan) -> Plan | None:
    """`plan` asking only for the messages after `earlier`'s, with `written` (the summary of `earlier`) as their
    previous summary: what was written ahead is built on, not written again. None when `written` is no summary,
    `plan` does not begin with exactly `earlier`'s messages and add some, or the two lay their summary out
    differently (a new part of a "frozen" summary, or the whole)."""
    if not isinstance(written.summary, str) or earlier.append != plan.append:
        return None
    done = [m.id for m in earlier.cut.to_compact]
    messages = plan.cut.to_compact
    if len(messages) <= len(done) or [m.id for m in messages[: len(done)]] != done:
        return None
    asked = {m.id for m in plan.request.messages}  # not what a provider's compaction summarized (`ctxkeep.plan`)
    rest = tuple(m for m in messages[len(done) :] if m.id in asked)
    request = replace(plan.request, messages=rest, previous=written.summary)
    return replace(plan, request=request)


def _extend(summarizer: Summarizer, rest: Plan, whole: Plan, earlier: Written) -> Written:
    """The summary of `rest` (an `extended` plan), written, as the summary of `whole`."""
    return _after(write(summarizer, rest), whole, earlier)


def _after(written: Written, whole: Plan, earlier: Written) -> Written:
    """`written`, the summary of what came after `earlier`'s messages, as the summary of `whole`; it cost both."""
    return replace(written, plan=whole, usage=_sum(earlier.usage, written.usage))


def _sum(a: Usage, b: Usage) -> Usage:
    """What two summarizer runs spent together; a count either did not report stays unknown (None)."""

    def add(x: int | None, y: int | None) -> int | None:
        return None if x is None or y is None else x + y

    return replace(
        b,
        seconds=a.seconds + b.seconds,
        calls=add(a.calls, b.calls),
        input_tokens=add(a.input_tokens, b.input_tokens),
        output_tokens=add(a.output_tokens, b.output_tokens),
        retries=add(a.retries, b.retries),
        attempts=add(a.attempts, b.attempts),
        parts=add(a.parts, b.parts),
        identifiers_checked=add(a.identifiers_checked, b.identifiers_checked),
        identifiers_restored=add(a.identifiers_restored, b.identifiers_restored),
    )


def with_saved_originals(plan: Plan, store: Store) -> Plan:
    """`plan` with the end of each offloaded output's saved original in its request: the summarizer reads no
    file. (`read_original` is optional for a store: one without it leaves the kept heads alone, as does a
    file that cannot be read: the summary is not worth failing the compaction for.) When the previous summary
    was squeezed, the user's archived messages ride along too (`with_recalled`): what it left out comes back."""
    read_original = getattr(store, "read_original", None)
    if not callable(read_original):
        return replace(plan, request=_with_archived_words(plan.request, store))

    def read(name: str) -> bytes | None:
        try:
            data = read_original(name)
        except CtxkeepError as exc:
            log.warning("the summary judges %s by its kept head: %s", name, exc)
            return None
        return data if isinstance(data, bytes) else None

    return replace(plan, request=_with_archived_words(with_originals(plan.request, read), store))


def _with_archived_words(request: SummaryRequest, store: Store) -> SummaryRequest:
    """`request` with the user's archived messages when its previous summary left words out (`with_recalled`); an
    archive the store cannot read leaves it as it is: the summary is not worth failing the compaction for."""
    try:
        return with_recalled(request, lambda: list(user_messages(store)))
    except CtxkeepError as exc:
        log.warning("the user's words a squeezed summary left out stay out for now: %s", exc)
        return request


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
    return live.tokens - _freed(draft.plan, live) > compact.soft_threshold


def _freed(ahead: Plan, live: Live) -> int:
    """The tokens of `live` that applying `ahead` archives (its unpinned messages up to its cut); the summary is
    reckoned at the size of the one it replaces."""
    pinned = {m.id for m in ahead.cut.pinned}
    end = ahead.cut.cut
    return sum(n for m, n in zip(live.messages[:end], live.counts[:end], strict=True) if m.id not in pinned)


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
    return after <= threshold_of(live, settings.compact)


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


def usage_of(summarizer: object, *, seconds: float) -> Usage:
    """What `summarizer` says its latest `summarize` spent: its `last_run` (calls, tokens, ...) when it has one."""
    name = type(summarizer).__name__
    model = getattr(getattr(summarizer, "model", None), "name", None)
    model = model if isinstance(model, str) else None
    run = getattr(summarizer, "last_run", None)
    if run is None:
        if isinstance(summarizer, ExtractiveSummarizer):
            return Usage(summarizer=name, seconds=seconds, calls=0, input_tokens=0, output_tokens=0, retries=0)
        return Usage(summarizer=name, model=model, seconds=seconds)
    audit = getattr(run, "audit", ())
    return Usage(
        summarizer=name,
        model=model,
        seconds=seconds,
        calls=_count(run, "calls"),
        input_tokens=_count(run, "input_tokens"),
        output_tokens=_count(run, "output_tokens"),
        retries=_count(run, "retries"),
        attempts=_count(run, "attempts"),
        parts=_count(run, "parts"),
        audit=tuple(str(a) for a in audit) if isinstance(audit, Sequence) and not isinstance(audit, str) else (),
        identifiers_checked=_count(run, "identifiers"),
        identifiers_restored=_count(run, "restored"),
    )


def _count(run: object, name: str) -> int | None:
    value = getattr(run, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
