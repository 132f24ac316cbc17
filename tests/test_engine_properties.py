"""Property tests of the whole pass: whatever the conversation and settings, nothing is lost or unpaired."""

from __future__ import annotations

import os
from dataclasses import replace

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkeep import engine
from ctxkeep.codec import message_from_dict
from ctxkeep.errors import PinnedOverBudgetError
from ctxkeep.folder import MemoryFolder
from ctxkeep.live import Live, add
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.offload import OFFLOAD_KEY
from ctxkeep.pairing import validate
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.summarize.extractive import ExtractiveSummarizer
from ctxkeep.tokens import get_counter
from test_engine import NOW

COUNTER = get_counter("o200k_base")
PAIRING = {"orphan_result", "missing_result", "separated_result", "result_before_call"}


@st.composite
def sessions(draw: st.DrawFn) -> list[list[Message]]:
    """Turns of an agent session: a user ask, then assistant steps with 0-3 parallel calls and their results."""
    turns: list[list[Message]] = []
    n = 0
    for t in range(draw(st.integers(1, 10))):
        batch = [Message.of("user", f"ask {t}: " + "word " * draw(st.integers(0, 300)), id=f"m{n}")]
        n += 1
        for _ in range(draw(st.integers(1, 3))):
            turns.append(batch)
            calls = [
                ToolCall(id=f"c{n}_{k}", name=draw(st.sampled_from(["bash", "read", "browser_view"])), arguments="{}")
                for k in range(draw(st.integers(0, 3)))
            ]
            said = TextBlock(text="thinking " * draw(st.integers(0, 50)))
            batch = [Message(role="assistant", content=(said, *calls), id=f"m{n}")]
            n += 1
            for call in calls:
                if draw(st.integers(0, 9)) == 0:
                    continue  # an aborted tool: no result ever comes
                size = draw(st.sampled_from([10, 500, 5_000, 12_000]))
                text = "\n".join(f"line {i} 数据" for i in range(size // 12))
                batch.append(Message(role="tool", content=(ToolResult(call_id=call.id, content=text),), id=f"m{n}"))
                n += 1
        turns.append(batch)
    return turns


@settings(
    max_examples=int(os.environ.get("CTXKEEP_ENGINE_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    turns=sessions(),
    window=st.sampled_from([1_500, 4_000, 12_000]),
    recent_n=st.integers(0, 4),
    pin=st.integers(0, 40),
)
def test_nothing_lost_nothing_unpaired(turns: list[list[Message]], window: int, recent_n: int, pin: int) -> None:
    cfg = EngineSettings(
        compact=CompactSettings(max_input_length=window),
        offload=OffloadSettings(recent_n=recent_n, recent_max_bytes=4_000, old_max_bytes=800),
    )
    folder = MemoryFolder()
    live = Live()
    added: list[Message] = []
    changes: dict[str, int] = {}
    last_text: dict[str, str] = {}
    for batch in turns:
        live = add(live, batch, COUNTER)
        added += batch
        for m, n in zip(batch, COUNTER.count_each(batch), strict=True):
            if m.id == f"m{pin}" and m.role == "user" and n < window // 10:
                live = replace(live, pinned=live.pinned | {m.id})
        try:
            setup = engine.Setup(settings=cfg, counter=COUNTER, summarizer=ExtractiveSummarizer(), store=folder)
            step = engine.prepare(live, setup, system="sys", now=NOW)
        except PinnedOverBudgetError:
            # The summary grew until the pins no longer fit: the documented error, raised before any change.
            assert live.pinned
            return
        live = step.live
        assert not [p for p in validate(step.context.as_messages()) if p.kind in PAIRING]
        assert live.total == sum(COUNTER.count_each(live.messages))
        assert step.context.tokens == sum(COUNTER.count_each(step.context.as_messages()))
        for m in live.messages:
            if m.role == "tool":
                text = m.tool_result.text  # type: ignore[union-attr]
                if m.id in last_text and last_text[m.id] != text:
                    changes[m.id] = changes.get(m.id, 0) + 1
                last_text[m.id] = text
    archived = [
        message_from_dict(orjson.loads(x))
        for info in folder.list("dialog/")
        for x in (folder.read(info.name) or b"").splitlines()
    ]
    order = {m.id: i for i, m in enumerate(added)}
    ids = [m.id for m in archived + list(live.messages)]
    assert sorted(ids, key=order.__getitem__) == [m.id for m in added], "a message was lost or repeated"
    for part in (archived, live.messages):
        positions = [order[m.id] for m in part]
        assert positions == sorted(positions), "order changed"
    if not live.pinned:
        assert ids == [m.id for m in added]
    # A result's visible text changes at most twice: once when first offloaded (not seen here), once when aged.
    assert all(n <= 1 for n in changes.values()), changes
    for m in archived + list(live.messages):
        record = m.tool_result.extra.get(OFFLOAD_KEY) if m.tool_result else None
        if record:
            original = next(a for a in added if a.id == m.id)
            saved = folder.read(record["file"])
            assert saved is not None and saved.decode("utf-8", "surrogatepass") == original.tool_result.text  # type: ignore[union-attr]
    assert f"m{pin}" not in {m.id for m in archived} or f"m{pin}" not in live.pinned
