"""The compaction budget of a live context: the threshold it is held to (`threshold_of`), what a compaction would
keep of it (`kept_tokens`), and its pins (`pin`, `unpin`) with the one rule for how many tokens they may take
(`check_pins`)."""

from __future__ import annotations

from dataclasses import replace

from .errors import MessageError, PinnedOverBudgetError
from .live import Live
from .pairing import pair_groups
from .settings import CHARS_PER_TOKEN, GUIDE_CHARS, MIN_SUMMARY_CHARS, CompactSettings
from .split import split

# --- the threshold this context is held to ------------------------------------------------

# The smallest summary a compaction writes, in tokens: the sections' floor and the archive guide.
SUMMARY_FLOOR_TOKENS = (MIN_SUMMARY_CHARS + GUIDE_CHARS) // CHARS_PER_TOKEN


def threshold_of(live: Live, compact: CompactSettings) -> int:
    """The compaction threshold `live` is held to: `compact.compact_threshold`, raised when the system prompt and
    tool schemas leave under it less than the smallest summary and the kept tail (`reserve`) need (or half the
    threshold, when that is less), but never past the window less the reserve.

    Past the threshold a compaction is due and brings the context back under it. A fixed threshold cannot hold
    5,450 tokens of system prompt at an 8,192 window (threshold 5,734) beside any summary: compaction would stop
    for good while 2,700 tokens of the window are free. Raised, the headroom above it shrinks to the reserve
    instead, and the summary and kept tail share what is left (`ctxkeep.plan.plan` squeezes both).
    """
    threshold = compact.compact_threshold
    # The room asked for is never more than half the threshold: at a window so small that the summary's floor
    # (counted at 3 characters a token, the low end) passes it, that is the window's size, not the prompt's.
    needed = live.fixed_tokens + min(SUMMARY_FLOOR_TOKENS + compact.reserve, threshold // 2)
    return max(threshold, min(needed, compact.max_input_length - compact.reserve))


def kept_tokens(live: Live, reserve: int) -> int:
    """The live tokens a compaction now would keep: the tail `ctxkeep.split.split` keeps within `reserve` (the newest
    group whole, whatever it costs) and the pinned messages. At a small window the newest group passes the reserve,
    and what a compaction costs and leaves free follows it, not the reserve."""
    messages, counts = live.messages, live.counts
    cut = split(messages, counts, reserve=reserve, pinned=live.pinned).cut
    pinned = sum(counts[i] for i in range(cut) if messages[i].id in live.pinned) if live.pinned else 0
    return live.total - sum(counts[:cut]) + pinned


# --- pins -------------------------------------------------------------------------------


def check_pins(live: Live, pinned: frozenset[str], threshold: int) -> None:
    """Raise `PinnedOverBudgetError` when `pinned` would take more than the compaction budget.

    The budget is what the threshold leaves after the system prompt (as of the last step) and the
    summary: the one rule for `Session.pin` and for every compaction, so a pin accepted now is not
    refused later by the same context.
    """
    if not pinned:
        return
    budget = threshold - live.fixed_tokens - live.summary_tokens
    tokens = sum(n for m, n in zip(live.messages, live.counts, strict=True) if m.id in pinned)
    if tokens > budget:
        raise PinnedOverBudgetError(
            f"pinned messages take {tokens} tokens, more than the {budget} the compaction budget leaves"
            " after the system prompt, tool schemas and summary; unpin some or raise max_input_length",
            pinned=tokens,
            budget=budget,
        )


def pin(live: Live, message_id: str, threshold: int) -> Live:
    """`live` with this message, and the rest of its tool-call group, pinned: never offloaded nor compacted."""
    messages = live.messages
    index = next((i for i, m in enumerate(messages) if m.id == message_id), None)
    if index is None:
        raise MessageError(f"no live message has the id {message_id!r}")
    roots = pair_groups(messages)
    pinned = live.pinned | {m.id for m, r in zip(messages, roots, strict=True) if r == roots[index]}
    check_pins(live, pinned, threshold)
    return replace(live, pinned=pinned)


def unpin(live: Live, message_id: str) -> Live:
    """`live` with this message and its tool-call group free to be offloaded and compacted again."""
    messages = live.messages
    roots = pair_groups(messages)
    group = {roots[i] for i, m in enumerate(messages) if m.id == message_id}
    unpinned = {message_id} | {m.id for m, r in zip(messages, roots, strict=True) if r in group}
    return replace(live, pinned=live.pinned - unpinned)
