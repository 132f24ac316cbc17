"""Long histories in parts: how much one call to the compaction model may carry, and where to cut.

    rendered messages + their tokens ─► chunk_limit ─► plan_chunks ─► [Chunk, Chunk, ...]

A request (prompt, conversation, room for the reply) never exceeds the model's window; parts end
only at safe cuts, so a tool call and its results stay together; a message too large for a part
is sent as its head and tail with a note. The budget, in numbers: docs/summarize.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ctxkeep.settings import MIN_CHUNK_TOKENS, PROMPT_RESERVE, SAFETY_MARGIN
from ctxkeep.summarize.model.prompts import join_rendered, shorten

# One part carries at most this share of the window, lowered when messages are large (never below the minimum).
CHUNK_RATIO = 0.4
MIN_CHUNK_RATIO = 0.15
# A message above this share of the window is sent truncated.
OVERSIZED_SHARE = 0.5
# Messages above this share of the window, on average, lower the chunk ratio (twice their share, see chunk_ratio).
_LARGE_SHARE = 0.1


@dataclass(frozen=True, kw_only=True, slots=True)
class Chunk:
    """Messages ``[start, end)`` of the history to summarize, rendered; `shortened` are the indexes of
    messages sent in truncated form."""

    start: int
    end: int
    text: str
    tokens: int
    shortened: tuple[int, ...] = ()


def chunk_ratio(counts: Sequence[int], window: int) -> float:
    """The share of `window` one part may carry: `CHUNK_RATIO`, lowered by twice the average message's share
    of the window (with the safety margin) once that passes 10%, never below `MIN_CHUNK_RATIO`."""
    if not counts:
        return CHUNK_RATIO
    share = sum(counts) / len(counts) * SAFETY_MARGIN / window
    if share <= _LARGE_SHARE:
        return CHUNK_RATIO
    return max(MIN_CHUNK_RATIO, CHUNK_RATIO - 2 * share)


def chunk_limit(counts: Sequence[int], *, window: int, max_tokens: int, overhead: int) -> int:
    """The most tokens (by our counter) of conversation one request may carry.

    `window` is the compaction model's context window, `max_tokens` the room kept for its reply,
    `overhead` our count of the rest of the prompt (system text, task, previous summary). Raises
    ValueError when fewer than `MIN_CHUNK_TOKENS` would be left.
    """
    prompt = max(PROMPT_RESERVE, math.ceil(overhead * SAFETY_MARGIN))
    room = min(window * chunk_ratio(counts, window), window - max_tokens - prompt)
    limit = math.floor(room / SAFETY_MARGIN)
    if limit < MIN_CHUNK_TOKENS:
        raise ValueError(
            f"the compaction model's window ({window:,} tokens) is too small: after {max_tokens:,} for the reply"
            f" and {prompt:,} for the prompt, fewer than {MIN_CHUNK_TOKENS} tokens are left for the conversation;"
            " give the real window of the model, lower max_tokens, or choose a model with a larger window"
        )
    return limit


def truncated_note(index: int, tokens: int) -> str:
    """The line that opens a message sent in truncated form."""
    return f"[message {index + 1} is {tokens:,} tokens, too large to send whole: only its head and tail are shown]\n"


def plan_chunks(
    texts: Sequence[str],
    counts: Sequence[int],
    cuts: Sequence[bool],
    *,
    limit: int,
    window: int,
    count: Callable[[str], int],
) -> list[Chunk]:
    """The rendered messages `texts` (with their token `counts`) in consecutive parts of at most `limit` tokens.

    `cuts` has one flag per cut point ``0..len(texts)`` (see `ctxkeep.split.safe_cuts`): a part ends
    only where it is True. `count` counts a text's tokens, to check the truncated forms. Always at
    least one part (an empty one for no messages).
    """
    if len(counts) != len(texts) or len(cuts) != len(texts) + 1:
        raise ValueError("texts, counts and cuts must describe the same messages (one cut flag more than messages)")
    rendered = _Rendered(texts=list(texts), counts=list(counts), count=count)
    oversized = min(limit, math.floor(window * OVERSIZED_SHARE / SAFETY_MARGIN))
    for i, tokens in enumerate(rendered.counts):
        if tokens > oversized:
            rendered.truncate(i, oversized)
    points = [i for i, ok in enumerate(cuts) if ok]
    units = list(itertools.pairwise(points))
    for start, end in units:
        if rendered.size(start, end) > limit:
            _fit_group(rendered, start, end, limit)
    chunks: list[Chunk] = []
    start = end = 0
    for unit_start, unit_end in units:
        if end > start and rendered.size(start, unit_end) > limit:
            chunks.append(rendered.chunk(start, end))
            start = unit_start
        end = unit_end
    if end > start or not chunks:
        chunks.append(rendered.chunk(start, end))
    return chunks


def _size(counts: Sequence[int]) -> int:
    """Tokens of rendered messages joined: their counts, plus one for each blank line between them."""
    return sum(counts) + max(0, sum(1 for c in counts if c) - 1)


@dataclass(kw_only=True, slots=True)
class _Rendered:
    """The messages being planned; a message truncated to fit changes its text and count in place."""

    texts: list[str]
    counts: list[int]
    count: Callable[[str], int]
    shortened: set[int] = field(default_factory=set)  # indexes of the messages sent truncated

    def size(self, start: int, end: int) -> int:
        """Tokens of messages ``[start, end)`` joined (see `_size`)."""
        return _size(self.counts[start:end])

    def truncate(self, i: int, target: int) -> None:
        """Message `i` cut to at most `target` tokens (see `_truncate`)."""
        self.texts[i], self.counts[i] = _truncate(self.texts[i], i, self.counts[i], target, self.count)
        self.shortened.add(i)

    def chunk(self, start: int, end: int) -> Chunk:
        return Chunk(
            start=start,
            end=end,
            text=join_rendered(self.texts[start:end]),
            tokens=self.size(start, end),
            shortened=tuple(sorted(i for i in self.shortened if start <= i < end)),
        )


def _fit_group(rendered: _Rendered, start: int, end: int, limit: int) -> None:
    """Shorten the messages ``[start, end)`` (a call and its results) in proportion to their size to fit `limit`."""
    counts = rendered.counts
    members = [i for i in range(start, end) if counts[i]]
    room = limit - (len(members) - 1)
    total = sum(counts[i] for i in members)
    floor = max(1, room // (4 * len(members)))  # each keeps a little, however small
    for i in members:
        target = max(floor, room * counts[i] // total)
        if counts[i] > target:
            rendered.truncate(i, target)
    while rendered.size(start, end) > limit:  # the floors overshot: take it from the largest
        i = max(members, key=lambda j: counts[j])
        before = counts[i]
        rendered.truncate(i, before - (rendered.size(start, end) - limit))
        if counts[i] >= before:
            break  # only the notes are left (a call with very many results): the safety margin covers the rest


def _truncate(text: str, index: int, tokens: int, target: int, count: Callable[[str], int]) -> tuple[str, int]:
    """`text` cut to its head and tail (with `truncated_note` first) so that it counts at most `target` tokens."""
    note = truncated_note(index, tokens)
    room = max(0, target - count(note) - 12)  # the omission marker's tokens
    chars = len(text)
    current = tokens
    while True:
        chars = min(chars - 1, int(chars * room / max(current, 1) * 0.95)) if current > room else chars
        chars = max(chars, 0)
        body = shorten(text, chars)
        current = count(body)
        if current <= room or chars == 0:
            out = note + body if chars else note.rstrip("\n")
            return out, count(out)
