"""The cost model of a context edit: what rewriting messages a prompt cache holds costs, and what it saves.

Prices are multiples of the uncached input price (`ctxkeep.settings.CacheSettings`). Rewriting the live
context at a message makes the provider write everything sent after it again (`resent` tokens, at `write`
instead of `read`), once; the tokens the rewrite takes out (`freed`) are then not read at each of the next
`horizon` steps:

    saving = freed * read * horizon  -  resent * (write - read)

A rewrite is made only when that is positive: what it frees pays for re-sending the tail within the next
steps. When the cache is lost anyway (a pause longer than it lives, a compaction) nothing is re-sent for
the rewrite, and the saving is all of what the freed tokens would have cost: written once, then read.

`ctxkeep.aging.offload_recent` asks this module whether a cut pays, and notes what it decided (`Decision`)
in the step's record, with the expected saving; `ctxkeep show` and `ctxkeep report` price the tokens sent
with it (`billed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .settings import CacheSettings

# What a model's output token costs, in uncached input tokens: Anthropic and OpenAI bill output at 4 to 8 times
# input (December 2026). A model summarizer's summary is output, and is most of what its call costs.
OUTPUT_PRICE = 5.0

# What a step did with the results (and calls) waiting for their older cut:
#   cut    the cheap ones now: the cut pays for itself (`pays`)
#   batch  all of them: together they passed `OffloadSettings.age_batch_bytes`
#   all    all of them, as the pass asked: over the threshold, where aging is cheaper than a compaction
#   cold   all of them: the cache has expired since the previous request, nothing is re-sent for them
#   wait   none: no cut within reach pays yet (its numbers are the nearest one looked at)
Kind: TypeAlias = Literal["cut", "batch", "all", "cold", "wait"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """What one step decided about the waiting results, and its expected saving (`saving`)."""

    kind: Kind
    freed: int  # tokens the rewrite takes out of every later request
    resent: int  # tokens a provider writes again for it (0 when the cache was lost anyway)
    saving: float  # expected, in tokens at the uncached input price, over the cache's horizon

    def to_dict(self) -> dict[str, object]:
        """As plain data, for the step records."""
        return {"kind": self.kind, "freed": self.freed, "resent": self.resent, "saving": round(self.saving, 1)}


def saving(freed: int, resent: int, cache: CacheSettings, *, lost: bool = False) -> float:
    """The expected saving of a rewrite that takes `freed` tokens out and makes `resent` tokens be written again,
    in tokens at the uncached input price over `cache.horizon` steps; `lost`: the cache is gone anyway."""
    if lost:
        return freed * (cache.write + cache.read * (cache.horizon - 1))
    return freed * cache.read * cache.horizon - resent * (cache.write - cache.read)


def pays(freed: int, resent: int, cache: CacheSettings) -> bool:
    """True when a rewrite freeing `freed` tokens pays for the `resent` tokens it re-sends within the horizon."""
    return freed > 0 and saving(freed, resent, cache) >= 0


def decided(kind: Kind, freed: int, resent: int, cache: CacheSettings) -> Decision:
    """The `Decision` of `kind` with its expected saving (`resent` left out when the cache was lost anyway)."""
    lost = kind == "cold"
    return Decision(
        kind=kind, freed=freed, resent=0 if lost else resent, saving=saving(freed, resent, cache, lost=lost)
    )


def rewrite_cost(resent: int, cache: CacheSettings) -> float:
    """What re-sending `resent` tokens a cache held costs beyond reading them, in tokens at the uncached input
    price: what cutting the waiting results costs."""
    return resent * (cache.write - cache.read)


def compaction_cost(kept: int, cache: CacheSettings, *, read: int = 0, written: int = 0) -> float:
    """What a compaction costs, in tokens at the uncached input price: the `kept` tokens it sends after the system
    prompt (the new summary and the kept tail), which the provider writes to its cache again, and, with a model
    summarizer, its call: the `read` tokens it reads (uncached) and the `written` tokens of the summary (output, at
    `OUTPUT_PRICE`)."""
    return rewrite_cost(kept, cache) + read + written * OUTPUT_PRICE


def room_cost(cost: float, room: int) -> float:
    """What a rewrite costing `cost` pays per token of `room` it leaves under the threshold: the measure aging
    and compaction are compared by over the threshold (the cheaper room wins; no room, no use)."""
    if room <= 0:
        return float("inf")
    return cost / room


def billed(sent: Sequence[int], cached: Sequence[int], cache: CacheSettings) -> float:
    """What requests of `sent` tokens cost, `cached` of each served by the prompt cache (read) and the rest sent
    anew (written), in tokens at the uncached input price."""
    return sum(c * cache.read + (t - c) * cache.write for t, c in zip(sent, cached, strict=True))
