"""The context sent for a live state with calls that never got their result: repaired from the first of them on,
exactly as a repair of the whole history would make it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkeep import context
from ctxkeep.live import Live, add
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.pairing import repair
from ctxkeep.tokens import get_counter

COUNTER = get_counter("o200k_base")

# A turn: how many calls the assistant makes, and how many of them get their result before the next turn.
TURNS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=8)


def _history(turns: list[tuple[int, int]]) -> list[list[Message]]:
    """The batches a host adds: each turn's user message and assistant message, then each result alone."""
    batches: list[list[Message]] = []
    for t, (calls, answered) in enumerate(turns):
        made = [ToolCall(id=f"c{t}_{k}", name="bash", arguments='{"command": "ls"}') for k in range(calls)]
        batches.append(
            [
                Message.of("user", f"ask {t}", id=f"u{t}"),
                Message(role="assistant", content=(TextBlock(text=f"step {t}"), *made), id=f"a{t}"),
            ]
        )
        for k in range(min(calls, answered)):
            result = ToolResult(call_id=f"c{t}_{k}", content=f"out {t} {k}")
            batches.append([Message(role="tool", content=(result,), id=f"r{t}_{k}")])
    return batches


@settings(max_examples=200, deadline=None)
@given(TURNS)
def test_the_context_repairs_from_the_first_unanswered_call_as_the_whole_history_would(
    turns: list[tuple[int, int]],
) -> None:
    live = Live()
    for batch in _history(turns):
        live = add(live, batch, COUNTER)
    sent = context.of(live, COUNTER)
    whole, _ = repair(live.messages)
    assert list(sent.messages) == whole
    kept = {id(m) for m in live.messages}
    assert sent.tokens == live.tokens + sum(COUNTER.count_each([m for m in whole if id(m) not in kept]))
