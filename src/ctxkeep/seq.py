"""`Seq`: the immutable sequence behind `Live.messages` and `Live.counts`, cheap to grow and to change.

A step appends a few messages and may rewrite a few (their offloaded form). With tuples each step
copied, and freed, the whole history: at 50,000 messages that was most of a step. A `Seq` keeps its
items in blocks of `BLOCK`: appending copies only the last, partial block, and changing an item copies
only its block, so a step costs its new items, whatever the history. It reads like a tuple (indexing,
slices, which return tuples, iteration, ``len``, equality with a tuple holding the same items, ``+``)
and, like a tuple, never changes: `extended` and `replaced` return a new `Seq` sharing the blocks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar, overload

T = TypeVar("T")
Blocks: TypeAlias = tuple[tuple[T, ...], ...]

BLOCK = 512


class Seq(Sequence[T]):
    """An immutable sequence stored as full blocks of `BLOCK` items and one partial tail block."""

    __slots__ = ("_blocks", "_len", "_tail")

    _blocks: Blocks[T]
    _tail: tuple[T, ...]
    _len: int

    def __init__(self, items: Iterable[T] = ()) -> None:
        blocks, tail = _blocks_of((), tuple(items))
        self._set(blocks, tail)

    def _set(self, blocks: Blocks[T], tail: tuple[T, ...]) -> None:
        self._blocks = blocks
        self._tail = tail
        self._len = len(blocks) * BLOCK + len(tail)

    @classmethod
    def of(cls, items: Iterable[T]) -> Seq[T]:
        """`items` as a `Seq`: itself when it is one already (nothing copied)."""
        return items if isinstance(items, Seq) else cls(items)

    def _new(self, blocks: Blocks[T], tail: tuple[T, ...]) -> Seq[T]:
        out: Seq[T] = Seq.__new__(Seq)
        out._set(blocks, tail)
        return out

    def extended(self, items: Iterable[T]) -> Seq[T]:
        """This sequence with `items` after its own: costs the new items and one block, not the length."""
        more = tuple(items)
        if not more:
            return self
        blocks, tail = _blocks_of(self._blocks, self._tail + more)
        return self._new(blocks, tail)

    def replaced(self, changes: Mapping[int, T]) -> Seq[T]:
        """This sequence with the item at each position of `changes` replaced: costs the blocks touched.

        Raises `IndexError` for a position outside the sequence (negative ones count from the end).
        """
        if not changes:
            return self
        by_block: dict[int, dict[int, T]] = {}
        for at, item in changes.items():
            i = self._index(at)
            by_block.setdefault(i // BLOCK, {})[i % BLOCK] = item
        blocks = list(self._blocks)
        tail = self._tail
        for b, edits in by_block.items():
            block = list(tail if b == len(blocks) else blocks[b])
            for r, item in edits.items():
                block[r] = item
            if b == len(blocks):
                tail = tuple(block)
            else:
                blocks[b] = tuple(block)
        return self._new(tuple(blocks), tail)

    def _index(self, at: int) -> int:
        i = at + self._len if at < 0 else at
        if not 0 <= i < self._len:
            raise IndexError(f"Seq index {at} out of range for {self._len} items")
        return i

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, at: int) -> T: ...

    @overload
    def __getitem__(self, at: slice) -> tuple[T, ...]: ...

    def __getitem__(self, at: int | slice) -> T | tuple[T, ...]:
        if type(at) is int and 0 <= at < self._len:  # the common case, first: a step indexes a few dozen times
            b, r = divmod(at, BLOCK)
            blocks = self._blocks
            return self._tail[r] if b == len(blocks) else blocks[b][r]
        if isinstance(at, slice):
            return self._slice(at)
        i = self._index(at)
        b, r = divmod(i, BLOCK)
        return self._tail[r] if b == len(self._blocks) else self._blocks[b][r]

    def _slice(self, at: slice) -> tuple[T, ...]:
        start, stop, step = at.indices(self._len)
        if step != 1:
            return tuple(self)[at]
        if stop <= start:
            return ()
        first, last = start // BLOCK, (stop - 1) // BLOCK
        parts = [*self._blocks, self._tail][first : last + 1]
        if len(parts) == 1:
            return parts[0][start - first * BLOCK : stop - first * BLOCK]
        joined = tuple(itertools.chain.from_iterable(parts))
        return joined[start - first * BLOCK : stop - first * BLOCK]

    def __iter__(self) -> Iterator[T]:
        return itertools.chain(itertools.chain.from_iterable(self._blocks), self._tail)

    def __reversed__(self) -> Iterator[T]:
        for block in (self._tail, *reversed(self._blocks)):
            yield from reversed(block)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Seq):
            return self._len == other._len and (
                (self._blocks == other._blocks and self._tail == other._tail) or tuple(self) == tuple(other)
            )
        if isinstance(other, tuple):
            return self._len == len(other) and tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Any) -> Seq[T]:
        if isinstance(other, Seq | tuple):
            return self.extended(other)
        return NotImplemented

    def __radd__(self, other: Any) -> tuple[T, ...]:
        if isinstance(other, tuple):
            return other + tuple(self)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Seq({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Seq, (tuple(self),))


def _blocks_of(blocks: Blocks[T], tail: tuple[T, ...]) -> tuple[Blocks[T], tuple[T, ...]]:
    """`blocks` followed by `tail` cut into full blocks, and what is left: the new tail (shorter than a block)."""
    if len(tail) < BLOCK:
        return blocks, tail
    full = len(tail) - len(tail) % BLOCK
    return blocks + tuple(tail[i : i + BLOCK] for i in range(0, full, BLOCK)), tail[full:]
