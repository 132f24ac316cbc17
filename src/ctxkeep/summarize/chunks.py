"""Long histories in parts: how much one call to the compaction model may carry, and where to cut.

    rendered messages + their tokens ─► chunk_limit ─► plan_chunks ─► [Chunk, Chunk, ...]

A request to the compaction model is its prompt (system text, task, previous summary), the
conversation, and room for the reply; it must never exceed the model's window. Our counter is not
the model's tokenizer, so every count is multiplied by `SAFETY_MARGIN`, and the prompt is given
at least `PROMPT_RESERVE` tokens. One part carries at most `CHUNK_RATIO` of the window, lowered
when messages are large (`chunk_ratio`, never below `MIN_CHUNK_RATIO`), so that a part still holds
several of them.

Parts end only at safe cuts (`ctxkeep.split.safe_cuts`): a tool call and its results are in the
same part. A message larger than `OVERSIZED_SHARE` of the window, or than one part, is sent in a
truncated form (head and tail around an omission marker) with a note saying so, and the part
records its index; a call group too large for one part has each of its messages shortened in
proportion to its size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxkeep.summarize.prompts import join_rendered, shorten

__all__ = [
    "CHUNK_RATIO",
    "MIN_CHUNK_RATIO",
    "MIN_CHUNK_TOKENS",
    "OVERSIZED_SHARE",
    "PROMPT_RESERVE",
    "SAFETY_MARGIN",
    "Chunk",
    "chunk_limit",
    "chunk_ratio",
    "plan_chunks",
    "truncated_note",
]

CHUNK_RATIO = 0.4
MIN_CHUNK_RATIO = 0.15
SAFETY_MARGIN = 1.2
PROMPT_RESERVE = 4_096
OVERSIZED_SHARE = 0.5
# Below this a part holds too little conversation to summarize: the window is too small for the reply.
MIN_CHUNK_TOKENS = 256
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
    texts, counts = list(texts), list(counts)
    shortened: set[int] = set()
    oversized = min(limit, math.floor(window * OVERSIZED_SHARE / SAFETY_MARGIN))
    for i, tokens in enumerate(counts):
        if tokens > oversized:
            texts[i], counts[i] = _truncate(texts[i], i, tokens, oversized, count)
            shortened.add(i)
    points = [i for i, ok in enumerate(cuts) if ok]
    units = list(itertools.pairwise(points))
    for start, end in units:
        if _size(counts[start:end]) > limit:
            _fit_group(texts, counts, start, end, limit, count, shortened)
    chunks: list[Chunk] = []
    start = end = 0
    for unit_start, unit_end in units:
        if end > start and _size(counts[start:unit_end]) > limit:
            chunks.append(_chunk(texts, counts, start, end, shortened))
            start = unit_start
        end = unit_end
    if end > start or not chunks:
        chunks.append(_chunk(texts, counts, start, end, shortened))
    return chunks


def _size(counts: Sequence[int]) -> int:
    """Tokens of rendered messages joined: their counts, plus one for each blank line between them."""
    return sum(counts) + max(0, sum(1 for c in counts if c) - 1)


def _chunk(texts: list[str], counts: list[int], start: int, end: int, shortened: set[int]) -> Chunk:
    return Chunk(
        start=start,
        end=end,
        text=join_rendered(texts[start:end]),
        tokens=_size(counts[start:end]),
        shortened=tuple(sorted(i for i in shortened if start <= i < end)),
    )


def _fit_group(
    texts: list[str],
    counts: list[int],
    start: int,
    end: int,
    limit: int,
    count: Callable[[str], int],
    shortened: set[int],
) -> None:
    """Shorten the messages ``[start, end)`` (a call and its results) in proportion to their size to fit `limit`."""
    members = [i for i in range(start, end) if counts[i]]
    room = limit - (len(members) - 1)
    total = sum(counts[i] for i in members)
    floor = max(1, room // (4 * len(members)))  # each keeps a little, however small
    for i in members:
        target = max(floor, room * counts[i] // total)
        if counts[i] > target:
            texts[i], counts[i] = _truncate(texts[i], i, counts[i], target, count)
            shortened.add(i)
    while _size(counts[start:end]) > limit:  # the floors overshot: take it from the largest
        i = max(members, key=lambda j: counts[j])
        before = counts[i]
        texts[i], counts[i] = _truncate(texts[i], i, before, before - (_size(counts[start:end]) - limit), count)
        shortened.add(i)
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
