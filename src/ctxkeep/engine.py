"""The pre-reasoning pass: trigger -> gate -> offload -> split -> summarize -> archive -> context.

An agent framework calls `prepare` before every reasoning step. It returns the three layers to
send to the model (system prompt, the living summary, the recent messages verbatim):

    live:      [ m0 m1 m2 m3 m4 m5 m6 m7 m8 m9 ]         over the threshold
                 └──── to_compact ────┘└ to_keep ┘       kept tail <= reserve, pairs never split
    archive:   dialog/2026-12-03.jsonl  += m0..m5         flushed to disk first
    context:   [system] [summary(m0..m5 + older)] [m6 m7 m8 m9]

`Live` is the state between steps. It is an immutable value that carries what makes a step cheap:
the token count of every live message, the running total, the call-id -> tool-name map and the
positions of tool results, so a step without compaction only counts and offloads what changed.
Files (tool results, the archive) go through a `Folder`; the caller commits the returned `Live`
(see `ctxkeep.session` for a workspace that survives a crash at any point).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from . import archive as archive_mod
from .archive import Archive, ArchiveFile
from .errors import MessageError, PinnedOverBudgetError, SummaryError
from .folder import Folder
from .messages import Message, repair
from .offload import offload
from .settings import CompactSettings, OffloadSettings
from .split import split
from .summarize import MIN_SUMMARY_CHARS, Summarizer, SummaryRequest, missing_sections, resolve_language
from .tokens import Counter

__all__ = [
    "SUMMARY_TAG",
    "Compaction",
    "Context",
    "EngineSettings",
    "Failure",
    "Live",
    "Step",
    "add",
    "compact",
    "prepare",
    "summary_message_text",
    "summary_tokens_of",
    "system_tokens_of",
]

log = logging.getLogger("ctxkeep")

SUMMARY_TAG = "context-summary"
_EMPTY_NAMES: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSettings:
    """Everything the pass needs to decide: compaction, offloading, retry after a failure, language."""

    compact: CompactSettings = field(default_factory=CompactSettings)
    offload: OffloadSettings = field(default_factory=OffloadSettings)
    retry_growth: float = 0.05
    language: str = "auto"
    summary_max_chars: int = 16_000

    def __post_init__(self) -> None:
        if not isinstance(self.compact, CompactSettings):
            raise TypeError(f"EngineSettings.compact must be a CompactSettings; got {self.compact!r}")
        if not isinstance(self.offload, OffloadSettings):
            raise TypeError(f"EngineSettings.offload must be an OffloadSettings; got {self.offload!r}")
        if not isinstance(self.retry_growth, int | float) or not 0 <= self.retry_growth < 1:
            raise ValueError(
                "retry_growth (share of the window the context must grow by before a failed compaction is"
                f" tried again) must be in [0, 1); got {self.retry_growth!r}"
            )
        if not isinstance(self.summary_max_chars, int) or self.summary_max_chars < 2_500:
            raise ValueError(
                f"summary_max_chars must be a whole number of at least 2,500 (room for the six sections and the"
                f" archive guide); got {self.summary_max_chars!r}"
            )
        if self.language not in ("auto", "en", "zh"):
            raise ValueError(f"language must be 'auto', 'en' or 'zh'; got {self.language!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Live:
    """The live context between steps. Build it with `add`; `prepare` returns the next one."""

    messages: tuple[Message, ...] = ()
    counts: tuple[int, ...] = ()
    total: int = 0
    summary: str | None = None
    summary_body: str | None = None
    summary_tokens: int = 0
    archive: Archive = field(default_factory=Archive)
    pinned: frozenset[str] = frozenset()
    # Calls of the newest assistant turn still waiting for their result (call id -> tool name).
    open_calls: Mapping[str, str] = field(default_factory=lambda: _EMPTY_NAMES)
    # Calls that never got a result before the conversation moved on (an aborted tool).
    abandoned: frozenset[str] = frozenset()
    # Tool names of the results that may still be offloaded (at or after `settled`), by call id.
    result_tools: Mapping[str, str] = field(default_factory=lambda: _EMPTY_NAMES)
    tool_positions: tuple[int, ...] = ()
    # Results before this index were already offloaded as "old"; they are never looked at again.
    settled: int = 0
    system: str | None = None
    system_tokens: int = 0
    # Total tokens when the last compaction failed or freed nothing; no retry until the context grows.
    failed_at: int | None = None
    # Positions of the messages the last `prepare` offloaded (what a store must rewrite).
    offloaded: tuple[int, ...] = ()


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


@dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """The three layers to send to the model, and their token count."""

    system: str | None
    summary: str | None
    messages: tuple[Message, ...]
    tokens: int

    def as_messages(self) -> list[Message]:
        """System prompt, summary (as a user message) and the recent messages, ready for an exporter."""
        out: list[Message] = []
        if self.system:
            out.append(_system_message(self.system))
        if self.summary:
            out.append(_summary_message(self.summary))
        out.extend(self.messages)
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """What `prepare` returns: the next live state, the context, and what happened."""

    live: Live
    context: Context
    compaction: Compaction | None = None
    failure: Failure | None = None
    archived: tuple[Message, ...] = ()
    warnings: tuple[str, ...] = ()


def summary_message_text(summary: str) -> str:
    """The summary as the model sees it: wrapped in a tag so it is never mistaken for a user request."""
    return f"<{SUMMARY_TAG}>\n{summary}\n</{SUMMARY_TAG}>"


def _system_message(system: str) -> Message:
    return Message.of("system", system, id="ctxkeep-system")


def _summary_message(summary: str) -> Message:
    return Message.of("user", summary_message_text(summary), id="ctxkeep-summary")


def system_tokens_of(system: str | None, counter: Counter) -> int:
    """Tokens the system prompt adds to the context, message overhead included."""
    return counter.count_message(_system_message(system)) if system else 0


def summary_tokens_of(summary: str | None, counter: Counter) -> int:
    """Tokens the summary adds to the context as the message `Context.as_messages` sends."""
    return counter.count_message(_summary_message(summary)) if summary else 0


def add(live: Live, messages: Sequence[Message], counter: Counter) -> Live:
    """`live` with `messages` appended, counted once. Raises `MessageError` (and changes nothing) when a result
    answers no open call (its call is not live, or was answered already) or a call id is still open.

    A result must follow its call (it may come in the same batch); anything else would be sent to
    the provider as an orphan and refused. The cost is proportional to the batch, not the history.
    """
    if not messages:
        return live
    open_calls = dict(live.open_calls)
    abandoned = live.abandoned
    names = dict(live.result_tools)
    positions: list[int] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, Message):
            raise MessageError(f"expected a Message at position {i}, got {type(msg).__name__}", index=i)
        if msg.role != "tool" and open_calls:
            # The conversation moved on: these calls will never get a result in a form a provider accepts.
            abandoned = abandoned | open_calls.keys()
            open_calls = {}
        for call in msg.tool_calls:
            if call.id in open_calls or call.id in names or call.id in abandoned:
                raise MessageError(f"the tool call id {call.id!r} at position {i} is already live", index=i)
            open_calls[call.id] = call.name
        result = msg.tool_result
        if result is not None:
            if result.call_id in abandoned:
                raise MessageError(
                    f"the tool result at position {i} answers call {result.call_id!r}, but other messages came after"
                    " that call; providers refuse a result that does not directly follow its call. Add results"
                    " right after their call (or `ctxkeep.messages.repair` the list first)",
                    index=i,
                )
            if result.call_id not in open_calls:
                raise MessageError(
                    f"the tool result at position {i} answers call {result.call_id!r}, which is not waiting for a"
                    " result in the live context (never added, or answered already); add the assistant message with"
                    " that call first (or `ctxkeep.messages.repair` the list)",
                    index=i,
                )
            names[result.call_id] = open_calls.pop(result.call_id)
            positions.append(len(live.messages) + i)
    counts = counter.count_each(messages)
    return replace(
        live,
        messages=live.messages + tuple(messages),
        counts=live.counts + tuple(counts),
        total=live.total + sum(counts),
        open_calls=MappingProxyType(open_calls),
        abandoned=abandoned,
        result_tools=MappingProxyType(names),
        tool_positions=live.tool_positions + tuple(positions),
    )


def prepare(
    live: Live,
    *,
    system: str | None,
    counter: Counter,
    summarizer: Summarizer,
    folder: Folder,
    settings: EngineSettings,
    now: datetime,
    force: bool = False,
    focus: str | None = None,
) -> Step:
    """Run the pre-reasoning pass once. `force` compacts now (a manual `/compact`), with an optional `focus`.

    Files are written through `folder` (offloaded results, then the archive, always before the
    messages leave the returned `Live`). A summarizer that fails or returns an invalid summary leaves
    the live messages and the previous summary exactly as they were (`Step.failure`).
    """
    if live.offloaded:
        live = replace(live, offloaded=())
    live = _offload_recent(live, settings.offload, folder, counter)
    if system != live.system:
        live = replace(live, system=system, system_tokens=system_tokens_of(system, counter))
    system_tokens = live.system_tokens
    threshold = settings.compact.compact_threshold
    tokens = system_tokens + live.summary_tokens + live.total
    warnings: list[str] = []

    due = force or (tokens > threshold and _retry_allowed(live, tokens, settings))
    if not due:
        return Step(live=live, context=_context(live, system, tokens, counter))
    budget = threshold - system_tokens - live.summary_tokens
    if budget <= 0 and not force:
        warnings.append(
            f"the system prompt ({system_tokens} tokens) and summary ({live.summary_tokens}) alone reach the"
            f" compaction threshold ({threshold}); compaction skipped. Raise max_input_length or shorten them."
        )
        log.warning(warnings[-1])
        return Step(
            live=replace(live, failed_at=tokens),
            context=_context(live, system, tokens, counter),
            warnings=tuple(warnings),
        )
    return _compact(
        live, system, system_tokens, tokens, budget, counter, summarizer, folder, settings, now, force, focus
    )


def compact(
    live: Live,
    *,
    system: str | None,
    counter: Counter,
    summarizer: Summarizer,
    folder: Folder,
    settings: EngineSettings,
    now: datetime,
    focus: str | None = None,
) -> Step:
    """Compact now, whatever the size (a manual `/compact`)."""
    return prepare(
        live,
        system=system,
        counter=counter,
        summarizer=summarizer,
        folder=folder,
        settings=settings,
        now=now,
        force=True,
        focus=focus,
    )


def _retry_allowed(live: Live, tokens: int, settings: EngineSettings) -> bool:
    if live.failed_at is None:
        return True
    return tokens >= live.failed_at + settings.retry_growth * settings.compact.max_input_length


def _context(live: Live, system: str | None, tokens: int, counter: Counter) -> Context:
    messages = live.messages
    if live.open_calls or live.abandoned:
        # A call that never got its result (an aborted tool) would make the provider refuse the request:
        # the model sees an explicit "[no result recorded]" error result instead. The live state keeps the
        # call open, so a result that arrives later still pairs with it.
        repaired, _ = repair(messages)
        live_ids = {id(m) for m in messages}
        tokens += sum(counter.count_each([m for m in repaired if id(m) not in live_ids]))
        messages = tuple(repaired)
    return Context(system=system, summary=live.summary, messages=messages, tokens=tokens)


def _offload_recent(live: Live, settings: OffloadSettings, folder: Folder, counter: Counter) -> Live:
    """Offload only the results that can change: the new ones and the ones that just aged past `recent_n`."""
    positions = live.tool_positions
    first = bisect.bisect_left(positions, live.settled)
    if first == len(positions):
        return live
    start = positions[first]
    part = live.messages[start:]
    done = offload(part, settings, folder, tool_names=live.result_tools)
    changed = [
        i
        for i, (a, b) in enumerate(zip(part, done, strict=True))
        if a is not b and a.id not in live.pinned  # pinned messages are never offloaded
    ]
    settled = _settled(positions, settings.recent_n, len(live.messages), live.settled)
    names = live.result_tools
    if settled != live.settled:
        # Results that just became final need no tool name any more: keep the map as small as the recent part.
        still = positions[bisect.bisect_left(positions, settled) :]
        names = MappingProxyType({c: names[c] for p in still if (c := _call_id(live.messages[p])) in names})
    if not changed:
        return replace(live, settled=settled, result_tools=names) if settled != live.settled else live
    messages = list(live.messages)
    counts = list(live.counts)
    fresh = counter.count_each([done[i] for i in changed])
    total = live.total
    for i, n in zip(changed, fresh, strict=True):
        messages[start + i] = done[i]
        total += n - counts[start + i]
        counts[start + i] = n
    return replace(
        live,
        messages=tuple(messages),
        counts=tuple(counts),
        total=total,
        settled=settled,
        result_tools=names,
        offloaded=tuple(start + i for i in changed),
    )


def _age_all(live: Live, settings: OffloadSettings, folder: Folder, counter: Counter) -> Live:
    aged = _offload_recent(replace(live, settled=0), replace(settings, recent_n=0), folder, counter)
    return replace(aged, settled=len(aged.messages), result_tools=_EMPTY_NAMES, offloaded=())


def _call_id(msg: Message) -> str:
    result = msg.tool_result
    return result.call_id if result is not None else ""


def _compact(
    live: Live,
    system: str | None,
    system_tokens: int,
    tokens: int,
    budget: int,
    counter: Counter,
    summarizer: Summarizer,
    folder: Folder,
    settings: EngineSettings,
    now: datetime,
    force: bool,
    focus: str | None,
) -> Step:
    started = time.perf_counter()
    if live.pinned:
        pinned_tokens = sum(n for m, n in zip(live.messages, live.counts, strict=True) if m.id in live.pinned)
        if pinned_tokens > budget:
            raise PinnedOverBudgetError(
                f"pinned messages take {pinned_tokens} tokens, more than the {budget} the compaction budget leaves"
                " after the system prompt and summary; unpin some or raise max_input_length",
                pinned=pinned_tokens,
                budget=budget,
            )
    reserve = settings.compact.reserve
    if force:
        # A manual compaction always frees something: keep at most half of what is live.
        reserve = min(reserve, live.total // 2)
    cut = split(live.messages, live.counts, reserve=reserve, pinned=live.pinned)
    reason = "manual" if force else "threshold"
    if not cut.to_compact:
        return _failed(
            live,
            system,
            tokens,
            counter,
            now,
            f"nothing can be compacted: the newest message group ({sum(live.counts[-len(cut.to_keep) :])} tokens)"
            f" must stay whole, and nothing older is unpinned",
        )
    # The cap covers the whole summary: leave room for the archive guide that will open it.
    # (Estimated in English, the longer of the two.)
    guide_chars = len(_with_guide("", _next_archive(live.archive, len(cut.to_compact), now), "en"))
    request = SummaryRequest(
        messages=cut.to_compact,
        previous=live.summary_body,
        focus=focus,
        language=settings.language,
        max_chars=max(MIN_SUMMARY_CHARS, settings.summary_max_chars - guide_chars),
    )
    try:
        body = summarizer.summarize(request)
    except SummaryError as exc:
        asked = getattr(exc, "request", None) or _describe(request, summarizer)
        answered = getattr(exc, "response", None)
        return _failed(live, system, tokens, counter, now, f"the summarizer failed: {exc}", asked, answered)
    except Exception as exc:  # a user's summarizer may raise anything; the context must survive it
        log.exception("summarizer raised")
        reason = f"the summarizer raised {type(exc).__name__}: {exc}"
        return _failed(live, system, tokens, counter, now, reason, _describe(request, summarizer), None)
    if not isinstance(body, str) or not body.strip():
        reason = "the summarizer returned an empty summary"
        return _failed(live, system, tokens, counter, now, reason, _describe(request, summarizer), repr(body))
    missing = missing_sections(body)
    if missing:
        reason = f"the summary lacks the sections {', '.join(missing)}"
        return _failed(live, system, tokens, counter, now, reason, _describe(request, summarizer), body)

    # Archive first: the compacted messages are on disk before they leave the live context.
    archive = archive_mod.append(folder, live.archive, cut.to_compact, now.date())
    summary = _with_guide(body, archive, resolve_language(request))
    kept = cut.pinned + cut.to_keep
    live_after = _rebuild(live, kept, settings.offload.recent_n)
    live_after = replace(
        live_after,
        summary=summary,
        summary_body=body,
        summary_tokens=summary_tokens_of(summary, counter),
        archive=archive,
    )
    after = system_tokens + live_after.summary_tokens + live_after.total
    if after > settings.compact.compact_threshold:
        # The kept tail is too big (a group of huge parallel results, say): age its results now rather than
        # send a context over the threshold. This is the same second cut they would get later, only earlier.
        live_after = _age_all(live_after, settings.offload, folder, counter)
        after = system_tokens + live_after.summary_tokens + live_after.total
    compaction = Compaction(
        at=now,
        reason=reason,
        focus=focus,
        tokens_before=tokens,
        tokens_after=after,
        compacted=len(cut.to_compact),
        kept=len(cut.to_keep),
        pinned=len(cut.pinned),
        boundary_moved=cut.moved,
        summary_chars=len(summary),
        archive_file=archive_mod.archive_name(now.date()),
        seconds=time.perf_counter() - started,
    )
    log.info("compacted %d -> %d tokens in %.2f s", tokens, after, compaction.seconds)
    warnings: tuple[str, ...] = ()
    if after > settings.compact.compact_threshold:
        warnings = (
            f"after compaction the context still has {after} tokens, over the threshold"
            f" ({settings.compact.compact_threshold}); the kept messages are too large to shrink further",
        )
        live_after = replace(live_after, failed_at=after)
    return Step(
        live=live_after,
        context=_context(live_after, system, after, counter),
        compaction=compaction,
        archived=cut.to_compact,
        warnings=warnings,
    )


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


def _failed(
    live: Live,
    system: str | None,
    tokens: int,
    counter: Counter,
    now: datetime,
    reason: str,
    request: Mapping[str, Any] | None = None,
    response: str | None = None,
) -> Step:
    log.warning("compaction not applied: %s", reason)
    return Step(
        live=replace(live, failed_at=tokens),
        context=_context(live, system, tokens, counter),
        failure=Failure(at=now, reason=reason, tokens=tokens, request=request, response=response),
        warnings=(f"compaction not applied: {reason}",),
    )


def _settled(positions: Sequence[int], recent_n: int, length: int, current: int) -> int:
    """Where the results that may still change start: results older than the `recent_n` newest are final."""
    if recent_n == 0:
        return length
    if len(positions) >= recent_n:
        return max(positions[-recent_n], current)
    return current


def _next_archive(archive: Archive, added: int, now: datetime) -> Archive:
    """The archive index after `added` more lines today (sizes left as they are: the guide shows lines only)."""
    files = dict(archive.files)
    name = archive_mod.archive_name(now.date())
    known = files.get(name, ArchiveFile(0, 0))
    files[name] = ArchiveFile(known.bytes, known.lines + added)
    return Archive(MappingProxyType(dict(sorted(files.items()))))


def _with_guide(body: str, archive: Archive, language: str) -> str:
    lead = archive_mod.guide(archive, language="zh" if language == "zh" else "en")
    return f"{lead}\n\n{body}" if lead else body


def _rebuild(live: Live, kept: tuple[Message, ...], recent_n: int) -> Live:
    """A fresh `Live` holding `kept`, counts carried over by object identity (nothing is recounted)."""
    count_of = {id(m): n for m, n in zip(live.messages, live.counts, strict=True)}
    counts = tuple(count_of[id(m)] for m in kept)
    open_calls: dict[str, str] = {}
    abandoned: set[str] = set()
    names: dict[str, str] = {}
    positions: list[int] = []
    for i, msg in enumerate(kept):
        if msg.role != "tool" and open_calls:
            abandoned |= open_calls.keys()
            open_calls = {}
        for call in msg.tool_calls:
            open_calls[call.id] = call.name
        result = msg.tool_result
        if result is not None:
            positions.append(i)
            names[result.call_id] = open_calls.pop(result.call_id, "")
    settled = _settled(positions, recent_n, len(kept), 0)
    still = {_call_id(kept[p]) for p in positions[bisect.bisect_left(positions, settled) :]}
    kept_ids = {m.id for m in kept}
    return Live(
        messages=kept,
        counts=counts,
        total=sum(counts),
        pinned=frozenset(p for p in live.pinned if p in kept_ids),
        open_calls=MappingProxyType(open_calls),
        abandoned=frozenset(abandoned),
        result_tools=MappingProxyType({c: n for c, n in names.items() if c in still}),
        tool_positions=tuple(positions),
        settled=settled,
        system=live.system,
        system_tokens=live.system_tokens,
    )
