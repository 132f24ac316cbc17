"""Step 2, split: where to cut, with tool-call pairs, pins and the newest message protected.

The property tests check `split` against a brute-force reference written here: the kept tail
starts at the oldest *safe* cut (no call/result pair on both sides) whose tail fits `reserve`,
or, when none fits, at the newest safe cut that still keeps a message.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import raw_params

from ctxkeep.formats import load
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.pairing import pair_groups, repair, safe_cuts, validate
from ctxkeep.split import Split, split
from ctxkeep.tokens import get_counter

PAIRING_KINDS = {"orphan_result", "missing_result", "separated_result", "result_before_call"}


def call(mid: str, *ids: str) -> Message:
    return Message(role="assistant", id=mid, content=tuple(ToolCall(id=i, name="run", arguments="{}") for i in ids))


def result(mid: str, call_id: str) -> Message:
    return Message(role="tool", id=mid, content=(ToolResult(call_id=call_id, content="out"),))


def text(mid: str, role: str = "user") -> Message:
    return Message(role="user" if role == "user" else "assistant", id=mid, content=(TextBlock(text=mid),))


def ids(messages: Sequence[Message]) -> list[str]:
    return [m.id for m in messages]


# --- a brute-force reference ---------------------------------------------------------------


def call_spans(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """(first, last) index of every call id's call and results (call ids are unique here)."""
    where: dict[str, list[int]] = {}
    for i, msg in enumerate(messages):
        for c in msg.tool_calls:
            where.setdefault(c.id, []).append(i)
        res = msg.tool_result
        if res is not None:
            where.setdefault(res.call_id, []).append(i)
    # the results of sibling calls share the call message, so spans of one group overlap there
    return [(min(v), max(v)) for v in where.values()]


def reference_safe(messages: Sequence[Message]) -> list[bool]:
    """Cut c is safe when every span starting before c also ends before c (a running max, O(n))."""
    reach = [-1] * (len(messages) + 1)  # reach[c]: the furthest end of a span starting before c
    for lo, hi in call_spans(messages):
        reach[lo + 1] = max(reach[lo + 1], hi)
    safe = []
    furthest = -1
    for c in range(len(messages) + 1):
        furthest = max(furthest, reach[c])
        safe.append(furthest < c)
    return safe


def reference_pinned(messages: Sequence[Message], pins: Collection[str]) -> list[bool]:
    """Pinned messages and every message sharing a call id with them, or with their call message's calls."""
    call_at = {c.id: i for i, m in enumerate(messages) for c in m.tool_calls}
    results_of: dict[int, list[int]] = {}
    for j, m in enumerate(messages):
        res = m.tool_result
        if res is not None and res.call_id in call_at:
            results_of.setdefault(call_at[res.call_id], []).append(j)
    out = [False] * len(messages)
    for i, m in enumerate(messages):
        if m.id not in pins:
            continue
        res = m.tool_result
        owner = call_at.get(res.call_id, i) if res is not None else i
        for j in [owner, i, *results_of.get(owner, [])]:
            out[j] = True
    return out


def check(
    messages: Sequence[Message], counts: Sequence[int], reserve: int, pins: Collection[str], got: Split
) -> list[bool]:
    """Assert every invariant of `got`; return the reference safe cuts for further checks."""
    n = len(messages)
    cut = got.cut
    safe = reference_safe(messages)
    assert safe_cuts(messages) == safe
    pinned = reference_pinned(messages, pins)
    cost = [0 if p else c for p, c in zip(pinned, counts, strict=True)]

    # nothing lost, order kept, the kept part one contiguous tail holding the newest message
    assert list(got.to_keep) == list(messages[cut:])
    assert list(got.to_compact) == [m for i, m in enumerate(messages[:cut]) if not pinned[i]]
    assert list(got.pinned) == [m for i, m in enumerate(messages[:cut]) if pinned[i]]
    assert (n == 0) == (not got.to_keep)
    # pairs are never cut apart, and pinned groups never reach to_compact
    assert safe[cut]
    for lo, hi in call_spans(messages):
        assert hi < cut or lo >= cut, f"a pair spans the cut {cut}: {lo}..{hi}"
    assert not set(ids(got.to_compact)) & set(pins)
    if n == 0:
        assert got.is_valid and got.moved == 0
        return safe

    tail = list(itertools.accumulate(reversed(cost), initial=0))[::-1]  # tail[c] = sum(cost[c:])
    fits = [t <= reserve for t in tail]
    first = min([c for c in range(n) if fits[c]], default=n - 1)
    fitting_safe = [c for c in range(n) if safe[c] and fits[c]]
    expected = fitting_safe[0] if fitting_safe else max(c for c in range(n) if safe[c])
    assert cut == expected
    assert got.is_valid == (cut == first)
    assert got.moved == abs(cut - first)
    newest_group = max(c for c in range(n) if safe[c])
    if fits[newest_group]:
        assert tail[cut] <= reserve
    return safe


# --- hand-built cases ----------------------------------------------------------------------


def test_empty() -> None:
    got = split([], [], reserve=100)
    assert got == Split(to_compact=(), pinned=(), to_keep=(), is_valid=True, moved=0)
    assert got.cut == 0
    assert safe_cuts([]) == [True]


def test_plain_chat_keeps_what_fits() -> None:
    msgs = [text(f"m{i}", "user" if i % 2 == 0 else "assistant") for i in range(5)]
    got = split(msgs, [10] * 5, reserve=25)
    assert ids(got.to_keep) == ["m3", "m4"]
    assert ids(got.to_compact) == ["m0", "m1", "m2"]
    assert got.is_valid and got.moved == 0 and got.cut == 3
    check(msgs, [10] * 5, 25, (), got)


def test_everything_fits_keeps_everything() -> None:
    msgs = [text("u0"), call("a1", "x"), result("t2", "x"), text("a3", "assistant")]
    got = split(msgs, [5, 5, 5, 5], reserve=20)
    assert got.to_compact == () and ids(got.to_keep) == ids(msgs) and got.is_valid


PARALLEL = [text("u0"), call("a1", "x", "y", "z"), result("t2", "x"), result("t3", "y"), result("t4", "z")]


def test_parallel_calls_move_together_newer() -> None:
    msgs = [*PARALLEL, text("u5")]
    counts = [1, 1, 1, 1, 1, 1]
    got = split(msgs, counts, reserve=2)  # u5 + t4 fit, but t4 needs a1, t2, t3
    assert ids(got.to_keep) == ["u5"]
    assert not got.is_valid and got.moved == 1
    check(msgs, counts, 2, (), got)


def test_parallel_calls_move_together_older_when_newest_is_a_result() -> None:
    got = split(PARALLEL, [1] * 5, reserve=1)
    assert ids(got.to_keep) == ["a1", "t2", "t3", "t4"]
    assert ids(got.to_compact) == ["u0"]
    assert not got.is_valid and got.moved == 3
    assert validate(got.to_keep) == []


def test_separated_results_keep_everything_between() -> None:
    msgs = [text("u0"), call("a1", "x", "y"), result("t2", "x"), text("u3"), result("t4", "y")]
    counts = [1] * 5
    assert safe_cuts(msgs) == [True, True, False, False, False, True]
    got = split(msgs, counts, reserve=2)
    assert ids(got.to_keep) == ["a1", "t2", "u3", "t4"]
    assert not got.is_valid and got.moved == 2
    check(msgs, counts, 2, (), got)


def test_interleaved_groups_are_one_span() -> None:
    msgs = [text("u0"), call("a1", "x"), call("a2", "y"), result("t3", "x"), result("t4", "y"), text("u5")]
    assert safe_cuts(msgs) == [True, True, False, False, False, True, True]
    got = split(msgs, [1] * 6, reserve=3)
    assert ids(got.to_keep) == ["u5"] and got.moved == 2


def test_huge_newest_message_is_kept_alone() -> None:
    msgs = [text("u0"), text("a1", "assistant"), text("u2")]
    got = split(msgs, [1, 1, 1_000_000], reserve=100)
    assert ids(got.to_keep) == ["u2"]
    assert got.is_valid and got.moved == 0


def test_huge_newest_result_keeps_its_whole_group() -> None:
    msgs = [text("u0"), call("a1", "x", "y"), result("t2", "x"), result("t3", "y")]
    got = split(msgs, [1, 1, 1, 1_000_000], reserve=100)
    assert ids(got.to_keep) == ["a1", "t2", "t3"]
    assert not got.is_valid and got.moved == 2


def test_reserve_zero_keeps_only_the_newest_group() -> None:
    msgs = [*PARALLEL, text("u5"), text("a6", "assistant")]
    got = split(msgs, [3] * 7, reserve=0)
    assert ids(got.to_keep) == ["a6"] and got.is_valid
    got = split(PARALLEL, [3] * 5, reserve=0)
    assert ids(got.to_keep) == ["a1", "t2", "t3", "t4"]


def test_zero_count_messages_ride_along() -> None:
    msgs = [text("u0"), text("a1", "assistant"), text("u2")]
    got = split(msgs, [5, 0, 0], reserve=0)
    assert ids(got.to_keep) == ["a1", "u2"]


def test_all_pinned_keeps_everything_for_free() -> None:
    msgs = [*PARALLEL, text("u5")]
    got = split(msgs, [100] * 6, reserve=0, pinned=frozenset(ids(msgs)))
    assert got.to_compact == () and got.pinned == () and ids(got.to_keep) == ids(msgs)
    assert got.is_valid


def test_pinned_result_keeps_its_call_and_siblings() -> None:
    msgs = [text("u0"), *PARALLEL[1:], text("a5", "assistant"), text("u6"), text("a7", "assistant")]
    counts = [1] * 8
    got = split(msgs, counts, reserve=2, pinned={"t3"})
    assert ids(got.pinned) == ["a1", "t2", "t3", "t4"]
    assert ids(got.to_compact) == ["u0", "a5"]
    assert ids(got.to_keep) == ["u6", "a7"]
    assert validate([*got.pinned, *got.to_keep]) == []
    check(msgs, counts, 2, {"t3"}, got)


def test_pinned_call_keeps_its_results_and_costs_nothing() -> None:
    msgs = [text("u0"), call("a1", "x"), result("t2", "x"), text("u3")]
    got = split(msgs, [50, 50, 50, 1], reserve=1, pinned=["a1"])
    assert ids(got.pinned) == [] and ids(got.to_keep) == ["a1", "t2", "u3"]
    assert ids(got.to_compact) == ["u0"]
    got = split(msgs, [50, 50, 50, 1], reserve=1, pinned=["a1", "nowhere"])
    assert ids(got.to_keep) == ["a1", "t2", "u3"]


def test_orphans_do_not_crash() -> None:
    msgs = [text("u0"), result("t1", "gone"), call("a2", "x", "lost"), result("t3", "x"), text("u4")]
    assert validate(msgs) != []
    assert pair_groups(msgs) == [0, 1, 2, 2, 4]
    assert safe_cuts(msgs) == [True, True, True, False, True, True]
    for reserve in range(6):
        check(msgs, [1] * 5, reserve, (), split(msgs, [1] * 5, reserve=reserve))
    got = split(msgs, [1] * 5, reserve=2)
    assert ids(got.to_keep) == ["u4"] and got.moved == 1


def test_result_before_its_call_spans_between() -> None:
    msgs = [text("u0"), result("t1", "x"), text("u2"), call("a3", "x"), text("u4")]
    assert pair_groups(msgs) == [0, 3, 2, 3, 4]
    assert safe_cuts(msgs) == [True, True, False, False, True, True]
    got = split(msgs, [1] * 5, reserve=3)  # u2 a3 u4 would fit, but a3's result is t1
    assert ids(got.to_keep) == ["u4"] and got.moved == 2
    got = split([*msgs[:4]], [1] * 4, reserve=0)
    assert ids(got.to_keep) == ["t1", "u2", "a3"] and got.moved == 2


def test_repeated_call_id_pairs_with_the_nearest_call() -> None:
    msgs = [call("a0", "x"), result("t1", "x"), call("a2", "x"), result("t3", "x")]
    assert pair_groups(msgs) == [0, 0, 2, 2]
    assert safe_cuts(msgs) == [True, False, True, False, True]


@pytest.mark.parametrize(
    ("counts", "reserve", "fragment"),
    [
        ([1, 1], 5, "one token count per message: got 2 counts for 3 messages"),
        ([1, 1, 1], -1, "reserve >= 0"),
        ([1, -2, 1], 5, "must be >= 0, got -2 for message 1"),
    ],
)
def test_bad_input_is_rejected(counts: list[int], reserve: int, fragment: str) -> None:
    msgs = [text("u0"), text("a1", "assistant"), text("u2")]
    with pytest.raises(ValueError, match=fragment):
        split(msgs, counts, reserve=reserve)


# --- properties over random conversations --------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn, *, interleave: bool, broken: bool) -> list[Message]:
    """Random conversations with parallel calls; results right after their calls (in any order),
    or, with `interleave`, later and mixed with other messages and other calls' results; with
    `broken`, also results with no call, calls with no result and results before their call."""
    serial = itertools.count()
    msgs: list[Message] = []
    pending: list[str] = []  # calls still waiting for their result
    early: list[str] = []  # results already given, their call still to come

    def mid() -> str:
        return f"m{next(serial)}"

    steps = (
        ["user", "assistant", "calls"] + (["result"] if interleave else []) + (["orphan", "early"] if broken else [])
    )
    for _ in range(draw(st.integers(0, 20))):
        step = draw(st.sampled_from(steps))
        if step in ("user", "assistant"):
            msgs.append(text(mid(), step))
        elif step == "calls":
            cids = [f"c{next(serial)}" for _ in range(draw(st.integers(1, 4)))]
            if early and draw(st.booleans()):
                cids[0] = early.pop()
            else:
                pending.append(cids[0])
            pending.extend(cids[1:])
            msgs.append(call(mid(), *cids))
            if not interleave:
                for cid in draw(st.permutations(pending)):
                    msgs.append(result(mid(), cid))
                pending.clear()
        elif step == "result" and pending:
            msgs.append(result(mid(), pending.pop(draw(st.integers(0, len(pending) - 1)))))
        elif step == "orphan":
            msgs.append(result(mid(), f"c{next(serial)}"))
        elif step == "early":
            early.append(f"c{next(serial)}")
            msgs.append(result(mid(), early[-1]))
    for cid in draw(st.permutations(pending)):
        if not broken or draw(st.booleans()):
            msgs.append(result(mid(), cid))
    return msgs


def _split_case(data: st.DataObject, messages: list[Message]) -> None:
    n = len(messages)
    counts = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n), label="counts")
    reserve = data.draw(st.integers(0, 200), label="reserve")
    pins = {m.id for m in messages if data.draw(st.integers(0, 9), label="pin") == 0}
    got = split(messages, counts, reserve=reserve, pinned=pins)
    check(messages, counts, reserve, pins, got)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_split_of_valid_conversations(data: st.DataObject) -> None:
    msgs = data.draw(conversations(interleave=False, broken=False), label="messages")
    assert validate(msgs) == []
    _split_case(data, msgs)
    got = split(msgs, [1] * len(msgs), reserve=data.draw(st.integers(0, 25)), pinned=set())
    assert validate(got.to_keep) == []


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_split_of_interleaved_conversations(data: st.DataObject) -> None:
    _split_case(data, data.draw(conversations(interleave=True, broken=False), label="messages"))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_split_of_broken_conversations(data: st.DataObject) -> None:
    _split_case(data, data.draw(conversations(interleave=True, broken=True), label="messages"))


# --- every shared transcript ---------------------------------------------------------------


@pytest.mark.parametrize("path", raw_params())
def test_split_real_transcripts(path: Path) -> None:
    counter = get_counter("o200k_base")
    for conv in load(path).conversations:
        msgs, _ = repair(conv.messages)
        counts = counter.count_each(msgs)
        total = sum(counts)
        for k in range(21):
            reserve = total * k // 20
            pins = {m.id for m in msgs[k % 7 :: 23]} if k % 2 else set()
            got = split(msgs, counts, reserve=reserve, pinned=pins)
            check(msgs, counts, reserve, pins, got)
            problems = [p for p in validate(got.to_keep) if p.kind in PAIRING_KINDS]
            assert problems == [], f"{path.name}, reserve {reserve}: {problems[:3]}"
            assert [p for p in validate([*got.pinned, *got.to_keep]) if p.kind in PAIRING_KINDS] == []
            if reserve == total and not pins:
                assert got.to_compact == ()
