"""Long histories in parts: the budget of one request, cuts only at safe points, oversized messages truncated."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.conftest import raw_params

from ctxkeep.formats import load
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.pairing import safe_cuts
from ctxkeep.settings import PROMPT_RESERVE, SAFETY_MARGIN
from ctxkeep.summarize.model.chunks import (
    CHUNK_RATIO,
    MIN_CHUNK_RATIO,
    OVERSIZED_SHARE,
    chunk_limit,
    chunk_ratio,
    plan_chunks,
)
from ctxkeep.summarize.model.prompts import render_messages
from ctxkeep.tokens import get_counter

COUNTER = get_counter("o200k_base")
T0 = datetime(2026, 5, 1, tzinfo=UTC)


def say(role: str, text: str, n: int) -> Message:
    return Message(id=f"m{n}", role=role, content=(TextBlock(text=text),), timestamp=T0)  # type: ignore[arg-type]


def call(n: int, *ids: str) -> Message:
    calls = tuple(ToolCall(id=i, name="bash", arguments=json.dumps({"command": f"cat f{i}.txt"})) for i in ids)
    return Message(id=f"m{n}", role="assistant", content=calls, timestamp=T0)


def result(n: int, call_id: str, text: str) -> Message:
    return Message(id=f"m{n}", role="tool", content=(ToolResult(call_id=call_id, content=text),), timestamp=T0)


def plan(messages: list[Message], *, window: int, max_tokens: int = 1_024, overhead: int = 1_000) -> tuple[list, int]:
    texts = render_messages(messages, result_chars=1_000_000)
    counts = COUNTER.count_texts(texts)
    limit = chunk_limit(counts, window=window, max_tokens=max_tokens, overhead=overhead)
    chunks = plan_chunks(texts, counts, safe_cuts(messages), limit=limit, window=window, count=COUNTER.count_text)
    return chunks, limit


def test_the_ratio_is_lowered_for_large_messages_but_never_below_the_floor() -> None:
    assert chunk_ratio([100] * 50, 128_000) == CHUNK_RATIO
    assert chunk_ratio([], 128_000) == CHUNK_RATIO
    lowered = chunk_ratio([12_000] * 5, 128_000)
    assert MIN_CHUNK_RATIO < lowered < CHUNK_RATIO
    assert chunk_ratio([200_000] * 5, 128_000) == MIN_CHUNK_RATIO
    ratios = [chunk_ratio([size], 100_000) for size in range(0, 200_000, 5_000)]
    assert ratios == sorted(ratios, reverse=True)


def test_the_limit_leaves_room_for_the_prompt_and_the_reply() -> None:
    limit = chunk_limit([100] * 10, window=128_000, max_tokens=4_096, overhead=1_000)
    assert limit == int(128_000 * CHUNK_RATIO / SAFETY_MARGIN)
    small = chunk_limit([100] * 10, window=8_192, max_tokens=1_024, overhead=1_000)
    assert small == int((8_192 - 1_024 - PROMPT_RESERVE) / SAFETY_MARGIN)
    big_prompt = chunk_limit([100] * 10, window=16_000, max_tokens=1_024, overhead=6_000)
    assert (6_000 + big_prompt) * SAFETY_MARGIN + 1_024 <= 16_000 + 1
    with pytest.raises(ValueError, match="too small"):
        chunk_limit([100], window=6_000, max_tokens=2_000, overhead=500)


def test_a_short_history_is_one_part() -> None:
    messages = [say("user", "Fix the bug in src/app.py", 0), say("assistant", "Done.", 1)]
    chunks, _ = plan(messages, window=128_000)
    assert len(chunks) == 1
    assert (chunks[0].start, chunks[0].end, chunks[0].shortened) == (0, 2, ())
    assert "src/app.py" in chunks[0].text


def test_no_messages_is_one_empty_part() -> None:
    chunks = plan_chunks([], [], [True], limit=1_000, window=8_192, count=COUNTER.count_text)
    assert [(c.start, c.end, c.text) for c in chunks] == [(0, 0, "")]


def test_a_message_over_half_the_window_is_sent_truncated_and_marked() -> None:
    huge = "\n".join(f"line {i}: some log output of the build" for i in range(20_000))
    messages = [say("user", "Look at this log", 0), say("user", huge, 1), say("assistant", "It fails at line 7.", 2)]
    window = 128_000
    chunks, _ = plan(messages, window=window)
    shortened = [i for c in chunks for i in c.shortened]
    assert shortened == [1]
    text = next(c.text for c in chunks if 1 in c.shortened)
    assert "[message 2 is" in text and "too large to send whole" in text and "characters omitted" in text
    assert "line 0:" in text and "line 19999:" in text  # head and tail
    for chunk in chunks:
        assert COUNTER.count_text(chunk.text) <= window * OVERSIZED_SHARE


def test_parallel_results_too_large_for_a_part_stay_together_and_are_shortened() -> None:
    big = "x = 1\n" * 3_000
    messages = [
        say("user", "read them all", 0),
        call(1, "a", "b", "c"),
        *(result(2 + k, i, big) for k, i in enumerate("abc")),
    ]
    messages.append(say("assistant", "All three read.", 5))
    chunks, limit = plan(messages, window=8_192)
    group = next(c for c in chunks if c.start <= 1 < c.end)
    assert group.start <= 1 and group.end >= 5  # the call and its three results in one part
    assert set(group.shortened) == {2, 3, 4}
    assert COUNTER.count_text(group.text) <= limit * 1.02


@pytest.mark.parametrize("path", raw_params())
def test_every_transcript_splits_at_safe_cuts_within_the_limit(path: Path) -> None:
    for conversation in load(path).conversations:
        messages = list(conversation.messages)
        if len(messages) < 2:
            continue
        chunks, limit = plan(messages, window=8_192)
        cuts = safe_cuts(messages)
        assert chunks[0].start == 0 and chunks[-1].end == len(messages)
        for before, after in itertools.pairwise(chunks):
            assert before.end == after.start
            assert cuts[after.start], f"a part starts inside a call group at {after.start}"
        for chunk in chunks:
            assert chunk.tokens <= limit
            # the join's real count differs from the sum by a few merges at most
            assert COUNTER.count_text(chunk.text) <= limit * 1.02 + 8
