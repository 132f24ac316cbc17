"""`Seq` behaves as the tuple of its items, whatever was appended and replaced, and never changes."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkeep.seq import BLOCK, Seq

# Sizes around the block boundaries, where `extended` and `replaced` change which block holds an item.
_SIZES = st.sampled_from([0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK - 1, 2 * BLOCK, 3 * BLOCK + 7])


@st.composite
def _ops(draw: st.DrawFn) -> list[tuple[str, object]]:
    ops: list[tuple[str, object]] = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            ops.append(("extend", draw(_SIZES)))
        else:
            ops.append(("replace", draw(st.lists(st.integers(-5 * BLOCK, 5 * BLOCK), max_size=6))))
    return ops


@settings(max_examples=60, deadline=None)
@given(start=_SIZES, ops=_ops(), cut=st.tuples(st.integers(-4 * BLOCK, 4 * BLOCK), st.integers(-4 * BLOCK, 4 * BLOCK)))
def test_a_seq_reads_as_the_tuple_of_its_items(start: int, ops: list[tuple[str, object]], cut: tuple[int, int]) -> None:
    model = tuple(range(start))
    seq = Seq(model)
    history = [(seq, model)]
    n = start
    for op, arg in ops:
        if op == "extend":
            assert isinstance(arg, int)
            more = tuple(range(n, n + arg))
            n += arg
            seq, model = seq.extended(more), model + more
        else:
            assert isinstance(arg, list)
            valid = {at: -at - 1 for at in arg if -len(model) <= at < len(model)}
            as_list = list(model)
            for at, v in valid.items():
                as_list[at] = v
            seq, model = seq.replaced(valid), tuple(as_list)
        history.append((seq, model))
    for s, m in history:  # every earlier value is unchanged by what came after it
        assert len(s) == len(m)
        assert tuple(s) == m and list(reversed(s)) == list(reversed(m))
        assert s == m and m == s and s == Seq(m) and hash(s) == hash(m)
        assert s[cut[0] : cut[1]] == m[cut[0] : cut[1]]
        assert s[cut[0] :] == m[cut[0] :] and s[: cut[1]] == m[: cut[1]] and s[::3] == m[::3]
        for at in {0, len(m) - 1, -1, -len(m), cut[0], BLOCK, BLOCK - 1} - {None}:
            if -len(m) <= at < len(m):
                assert s[at] == m[at]
            else:
                with pytest.raises(IndexError):
                    s[at]


def test_a_seq_replaces_and_extends_without_touching_the_blocks_it_shares() -> None:
    seq = Seq(range(3 * BLOCK + 5))
    grown = seq.extended([-1, -2])
    changed = grown.replaced({BLOCK + 3: "x"})
    assert seq[BLOCK + 3] == BLOCK + 3 and grown[BLOCK + 3] == BLOCK + 3 and changed[BLOCK + 3] == "x"
    assert changed._blocks[0] is seq._blocks[0] and changed._blocks[2] is seq._blocks[2]
    assert grown._blocks == seq._blocks  # appending copies only the partial last block
    with pytest.raises(IndexError):
        seq.replaced({len(seq): 0})
    assert seq.extended(()) is seq and seq.replaced({}) is seq and Seq.of(seq) is seq


def test_a_seq_adds_compares_copies_and_pickles_like_a_tuple() -> None:
    seq = Seq("abc")
    more, before = seq + ("d",), ("z",) + seq  # noqa: RUF005 (the operators themselves are tested)
    assert more == ("a", "b", "c", "d") and isinstance(more, Seq)
    assert before == ("z", "a", "b", "c") and isinstance(before, tuple)
    assert seq != ["a", "b", "c"]  # as a tuple is not equal to a list
    assert seq != ("a", "b") and seq != Seq("abd")
    assert "b" in seq and seq.index("c") == 2 and seq.count("a") == 1
    assert pickle.loads(pickle.dumps(seq)) == seq and copy.deepcopy(seq) == seq
    assert repr(Seq([1, 2])) == "Seq([1, 2])"
    assert Seq() == () and not Seq() and len(Seq(range(BLOCK * 2))) == 2 * BLOCK
