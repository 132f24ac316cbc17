"""Where to cut the history (seed name ``context_check``): what to compact, what to keep verbatim.

`split` walks from the newest message backwards while the tail fits in `reserve`::

    index   0    1    2        3    4    5         6
           user asst tool ... user asst tool      user
           └───── to_compact ─────┘ └──── to_keep ────┘
                                   ▲ cut: messages[cut:] is kept

A cut never falls inside a tool call's pair group (`ctxkeep.pairing.safe_cuts`); pinned messages and their groups
stay live. The rules (moving the boundary, the newest message, pins, broken pairing) are in
docs/engine.md.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ctxkeep.messages import Message
from ctxkeep.pairing import pair_groups, safe_from_groups


@dataclass(frozen=True, kw_only=True, slots=True)
class Split:
    """The result of `split`. ``to_compact + pinned + to_keep`` holds every input message once.

    `to_compact` and `pinned` are the older part (in input order, pinned ones set apart);
    `to_keep` is the contiguous newest tail. `is_valid` is False when the first cut tried
    would have broken a pair group and the boundary had to move, by `moved` messages.
    """

    to_compact: tuple[Message, ...]
    pinned: tuple[Message, ...]
    to_keep: tuple[Message, ...]
    is_valid: bool
    moved: int

    @property
    def cut(self) -> int:
        """Index in the input of the first kept message (the input's length when none is kept)."""
        return len(self.to_compact) + len(self.pinned)


def split(
    messages: Sequence[Message], counts: Sequence[int], *, reserve: int, pinned: Collection[str] = frozenset()
) -> Split:
    """Split `messages` into the part to compact and the newest tail to keep within `reserve` tokens.

    `counts[i]` is the token count of ``messages[i]``. `pinned` holds ids of messages never to
    compact (ids not in `messages` are ignored). Whether to compact at all (total over the
    threshold) is the caller's decision; this only says where. See docs/engine.md for how
    pairs, pins and the newest message are protected.
    """
    n = len(messages)
    if len(counts) != n:
        raise ValueError(f"split needs one token count per message: got {len(counts)} counts for {n} messages")
    if reserve < 0:
        raise ValueError(f"split needs reserve >= 0 tokens, got {reserve}")
    if any(c < 0 for c in counts):
        bad = next(i for i, c in enumerate(counts) if c < 0)
        raise ValueError(f"token counts must be >= 0, got {counts[bad]} for message {bad}")
    if n == 0:
        return Split(to_compact=(), pinned=(), to_keep=(), is_valid=True, moved=0)

    roots = pair_groups(messages)
    safe = safe_from_groups(roots)
    pinned_roots = {roots[i] for i, msg in enumerate(messages) if msg.id in pinned}
    is_pinned = [root in pinned_roots for root in roots]

    first = _first_cut(counts, is_pinned, reserve)
    cut = first
    if not safe[cut]:
        newer = next((c for c in range(cut + 1, n) if safe[c]), None)
        # cut 0 is always safe, so moving older always ends somewhere
        cut = newer if newer is not None else next(c for c in range(cut - 1, -1, -1) if safe[c])

    older = range(cut)
    return Split(
        to_compact=tuple(messages[i] for i in older if not is_pinned[i]),
        pinned=tuple(messages[i] for i in older if is_pinned[i]),
        to_keep=tuple(messages[cut:]),
        is_valid=cut == first,
        moved=abs(cut - first),
    )


def _first_cut(counts: Sequence[int], is_pinned: Sequence[bool], reserve: int) -> int:
    """The oldest cut whose tail fits `reserve` (pinned messages free), keeping at least the newest message."""
    cut = len(counts) - 1
    used = 0 if is_pinned[cut] else counts[cut]
    while cut > 0:
        cost = 0 if is_pinned[cut - 1] else counts[cut - 1]
        if used + cost > reserve:
            break
        used += cost
        cut -= 1
    return cut
