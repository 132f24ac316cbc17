"""Phase one of a compaction: decide, touching no file and no model, whether one is due and what it cuts.

    live:   [ m0 m1 m2 m3 m4 m5 m6 m7 m8 m9 ]      over the threshold
              └──── to_compact ────┘└ to_keep ┘    kept tail <= reserve, pairs never split

    with a provider's compaction block in m3 (Anthropic's server-side compaction summarized m0-m2):
              └ archived ┘└ summarized ┘           the request holds m3 (its summary is the earlier one) on

`plan` is the one computation of "what a compaction cuts": the engine applies its `Plan`, the summary
writers write its request (now, or ahead in a thread), and the hooks of the pass (the memory flush)
receive it as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from . import archive as archive_mod
from .budget import SUMMARY_FLOOR_TOKENS, check_pins, threshold_of
from .live import Live
from .messages import Message
from .offload import arguments_excess, is_output
from .origin import provider_summary
from .settings import CHARS_PER_TOKEN, EngineSettings, OffloadSettings
from .split import Split, split
from .summarize import MIN_SUMMARY_CHARS, SummaryRequest

# What the note of a result cut to its older size takes at the most, in tokens (its path and sizes).
_CUT_NOTE_TOKENS = 60
_PART_DIVISOR = 4  # a part of a "frozen" summary gets at most this share of the cap
# Between two parts of a summary in the "frozen" layout: each part is what one compaction archived.
PART_BREAK = "\n\n<!-- context-summary: the next part covers the messages compacted after the part above -->\n\n"


@dataclass(frozen=True, kw_only=True, slots=True)
class Manual:
    """A compaction asked for by hand (a `/compact`): it runs whatever the size, on what `focus` names first."""

    focus: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """A compaction decided on: where to cut, what to ask the summarizer, and why."""

    cut: Split
    request: SummaryRequest
    reason: str  # "threshold", "overflow" (over the model's window) or "manual"
    tokens: int  # the context's tokens before
    at: datetime
    background: bool = False  # the summary was written ahead, before the threshold
    # The summary is a new part after the earlier ones, left as they were ("frozen" layout): the request
    # covers only the messages compacted now.
    append: bool = False
    # The characters left for the summary when a summarizer's floor (`MIN_SUMMARY_CHARS`) would take the context
    # over the window: if the summarizer's summary does (`ctxkeep.engine.apply` measures it), the smallest summary
    # (`ctxkeep.summarize.minimal`) in at most these is sent in its place, while the summarizer's is kept for the
    # next compaction to build on. None: the room under the threshold is its floor at the least.
    minimal: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Skip:
    """No compaction this step: `failure` says why when one was due but cannot free anything."""

    failure: str | None = None


def plan(
    live: Live,
    settings: EngineSettings,
    *,
    now: datetime,
    force: bool = False,
    focus: str | None = None,
    ahead: bool = False,
) -> Plan | Skip:
    """Decide, touching no file and no model: is a compaction due, and if so where to cut and what to ask.

    `ahead` plans the compaction the threshold will call for as soon as the soft threshold is passed
    (`CompactSettings.soft_threshold`), so that its summary can be written in the background
    (`ctxkeep.writer.WriteAhead`); the summary's size is then planned for the kept tail the threshold will find.

    The threshold is `ctxkeep.budget.threshold_of`'s: a compaction is never skipped because the system prompt,
    tools and summary fill it, the summary's cap and the kept tail shrink to the room they leave instead.

    `live.system_tokens` must be the system prompt's (`prepare` sets it). Raises `PinnedOverBudgetError`
    when the pins alone leave no room.
    """
    tokens = live.tokens
    threshold = threshold_of(live, settings.compact)
    due = int(threshold * settings.compact.soft_ratio) if ahead else threshold
    if not force and (tokens <= due or not _retry_allowed(live, tokens, settings)):
        return Skip()
    check_pins(live, live.pinned, threshold)
    reserve = settings.compact.reserve
    if threshold > settings.compact.compact_threshold:
        # The system prompt and tools crowd the threshold: the kept tail gets what they and the smallest summary
        # leave, up to `reserve`, so a large system prompt keeps fewer recent messages rather than stopping
        # compaction (the newest group is kept whatever it costs, `split`).
        reserve = min(reserve, max(0, threshold - live.fixed_tokens - SUMMARY_FLOOR_TOKENS))
    if force:
        # A manual compaction always frees something: keep at most half of what is live.
        reserve = min(reserve, live.total // 2)
    summarized = _provider_summarized(live.messages)
    cut = _with_summarized(split(live.messages, live.counts, reserve=reserve, pinned=live.pinned), summarized, live)
    if not cut.to_compact:
        return Skip(
            failure=f"nothing can be compacted: the newest message group ({sum(live.counts[-len(cut.to_keep) :])}"
            " tokens) must stay whole, and nothing older is unpinned"
        )
    # The summary shares the threshold with what stays: when the kept messages leave it less room than
    # its cap, it gets that room (never less than the sections need), so a huge newest message still fits.
    staying = {id(m) for m in cut.pinned + cut.to_keep}
    kept = live.fixed_tokens + sum(
        n for m, n in zip(live.messages, live.counts, strict=True) if id(m) in staying and m.id not in live.pinned
    )
    if ahead:
        kept += max(0, threshold - tokens)  # what will have come by the threshold stays too
    cap = min(settings.summary_max_chars, (threshold - kept) * CHARS_PER_TOKEN)
    # The cap covers the whole summary: leave room for the archive guide that will open it.
    # (Estimated in English, the longer of the two.)
    next_archive = archive_mod.projected(live.archive, len(cut.to_compact), now.date())
    guide_chars = len(archive_mod.with_guide("", next_archive, "en"))
    previous, room = live.summary_body, cap - guide_chars
    to_summarize = tuple(m for m in cut.to_compact if m.id not in summarized)
    if summarized:
        previous = None  # it came before the provider's block, whose summary covers it too
    append = False
    # Below the summarizer's floor the summary may still go over the threshold, as long as the window holds it
    # (with the kept results at their older cut, which `apply` gives them past the threshold); past that, the
    # smallest summary fits what is left rather than the compaction failing, or the context going over the window.
    least = kept - sum(
        n - _least(m, n, settings.offload)
        for m, n in zip(live.messages, live.counts, strict=True)
        if id(m) in staying and m.id not in live.pinned
    )
    window_room = (settings.compact.max_input_length - least) * CHARS_PER_TOKEN - guide_chars
    # The summarizer still writes a summary of its floor, the one the next compaction builds on (so no list is lost
    # for good); when it does not fit the window, the smallest summary is what is sent (`ctxkeep.engine.apply`).
    minimal = max(0, room) if room < MIN_SUMMARY_CHARS and window_room < MIN_SUMMARY_CHARS else None
    if settings.summary_layout == "frozen":
        # The earlier parts stay as sent; a new part gets a quarter of the cap (or what they leave of it).
        # When that is too little, or the smallest summary replaces them all, they are consolidated: one summary
        # of them all and of the new messages, in half the cap, so that parts can follow it again.
        left = room - len(live.summary or "") - len(PART_BREAK)
        if minimal is None and live.summary and previous and left >= MIN_SUMMARY_CHARS:
            previous, room, append = None, min(left, room // _PART_DIVISOR), True
        else:
            previous = previous.replace(PART_BREAK, "\n\n") if previous else previous
            room //= 2
    first, last = archive_mod.lines_added(live.archive, next_archive, now.date())
    request = SummaryRequest(
        messages=to_summarize,
        previous=previous,
        focus=focus,
        language=settings.language,
        max_chars=max(MIN_SUMMARY_CHARS, room),
        # where the messages will be in the archive: each item of the summary names its lines there
        source=f"{archive_mod.archive_name(now.date())}:{first}-{last}" if first else None,
    )
    reason = "manual" if force else "overflow" if tokens > settings.compact.max_input_length else "threshold"
    return Plan(
        cut=cut, request=request, reason=reason, tokens=tokens, at=now, background=ahead, append=append, minimal=minimal
    )


def _least(message: Message, tokens: int, settings: OffloadSettings) -> int:
    """About the tokens of a kept `message` once a compaction's last resort cut it (`ctxkeep.aging.age_all`, applied
    when the kept tail passes the threshold): a result or command output, and a call's arguments, to
    `old_max_bytes`; any other text over `recent_max_bytes` to its head and tail. Reckoned by the share of its bytes
    that stays, and at 3 bytes a token at the least (the low end), with the cut's note."""
    result = message.tool_result
    if result is not None or is_output(message):
        text = result.text if result is not None else message.text
        freed, limit = _over(text, settings.old_max_bytes), settings.old_max_bytes
    elif message.role in ("user", "assistant"):
        freed, limit = _over(message.text, settings.recent_max_bytes), settings.recent_max_bytes
        if message.role == "assistant" and (args := arguments_excess(message, settings.old_max_bytes)):
            freed, limit = freed + args, min(limit, settings.old_max_bytes)
    else:
        return tokens
    if not freed:
        return tokens
    whole = len(message.text.encode("utf-8", "surrogatepass")) + sum(len(c.arguments) for c in message.tool_calls)
    if result is not None:
        whole += len(result.text.encode("utf-8", "surrogatepass"))
    share = -(-tokens * max(0, whole - freed) // max(whole, freed))
    return min(tokens, max(share, limit // CHARS_PER_TOKEN) + _CUT_NOTE_TOKENS)


def _over(text: str, limit: int) -> int:
    """The bytes of `text` past `limit` (0: none)."""
    if len(text) * 4 <= limit:  # a character takes at most 4 bytes
        return 0
    return max(0, len(text.encode("utf-8", "surrogatepass")) - limit)


def _provider_summarized(messages: Sequence[Message]) -> frozenset[str]:
    """The ids of the messages a provider's own compaction summarized: those before the newest message holding its
    compaction block with a summary (Anthropic's server-side compaction covers everything before the block,
    which the API then leaves out of what the model reads). A compaction archives them but never summarizes
    them again: the block's readable text is the earlier summary the new one builds on."""
    for at in range(len(messages) - 1, -1, -1):
        if provider_summary(messages[at]) is not None:
            return frozenset(m.id for m in messages[:at])
    return frozenset()


def _with_summarized(cut: Split, summarized: frozenset[str], live: Live) -> Split:
    """`cut` with the kept messages a provider's compaction summarized compacted too (the pinned set apart): the
    API leaves them out of what the model reads, so keeping them would only cost the window. They are the
    head of the kept tail, up to the assistant reply holding the block, so no tool call leaves its result."""
    moved = [m for m in cut.to_keep if m.id in summarized]
    if not moved:
        return cut
    return replace(
        cut,
        to_compact=cut.to_compact + tuple(m for m in moved if m.id not in live.pinned),
        pinned=cut.pinned + tuple(m for m in moved if m.id in live.pinned),
        to_keep=cut.to_keep[len(moved) :],
    )


def _retry_allowed(live: Live, tokens: int, settings: EngineSettings) -> bool:
    """After a compaction that failed, the next try waits for the context to grow by `retry_growth` of the window;
    over the window, for it to grow at all: a request that size is refused anyway, so a new try is worth it."""
    if live.failed_at is None:
        return True
    if tokens > settings.compact.max_input_length:
        return tokens > live.failed_at
    return tokens >= live.failed_at + settings.retry_growth * settings.compact.max_input_length
