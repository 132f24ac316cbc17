"""The "frozen" summary layout: earlier parts sent unchanged after the system prompt, the newest appended,
consolidated into one when the next part would pass the cap; "single" (the default) rewrites one summary."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

import pytest

from ctxkeep.context import SUMMARY_ID, summary_message_text
from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message
from ctxkeep.plan import PART_BREAK
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings
from ctxkeep.summarize import SECTIONS, SummaryRequest

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
WINDOW = CompactSettings(max_input_length=6_000, compact_ratio=0.7, reserve_ratio=0.1)
FROZEN = EngineSettings(compact=WINDOW, summary_max_chars=6_000, summary_layout="frozen")


class Numbered:
    """A valid summary naming its call and the first message it summarized; keeps every request."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        n = len(self.requests)
        body = "\n\n".join(f"## {s}\n- call {n}: from {request.messages[0].id}" for s in SECTIONS)
        return body.replace("## Progress\n", "## Progress\n### Done\n### In Progress\n### Blocked\n")


def turn(i: int) -> list[Message]:
    return [
        Message.of("user", f"request {i}: " + "word " * 120, id=f"u{i}"),
        Message.of("assistant", f"answer {i}: " + "done " * 120, id=f"a{i}"),
    ]


def replay(
    settings: EngineSettings, turns: int, agents_md: str | None = None
) -> tuple[list[tuple[bool, str | None, list[Message]]], Numbered]:
    """Each step: whether it compacted, the summary sent, the context's messages."""
    summarizer = Numbered()
    steps = []
    folder = MemoryFolder()
    if agents_md is not None:
        folder.write("AGENTS.md", agents_md.encode())
    with Session(folder, settings=settings, summarizer=summarizer) as session:
        for i in range(turns):
            session.add(turn(i))
            step = session.prepare("system prompt", now=NOW)
            steps.append((step.compaction is not None, step.context.summary, step.context.as_messages()))
    return steps, summarizer


def test_frozen_parts_come_right_after_the_system_prompt_and_stay_byte_for_byte() -> None:
    steps, summarizer = replay(FROZEN, 80)
    compacted = [k for k, (c, _, _) in enumerate(steps) if c]
    assert len(compacted) >= 3
    appended = 0
    for k in range(1, len(steps)):
        request = summarizer.requests[sum(c for c, _, _ in steps[: k + 1]) - 1]
        was, now = steps[k - 1][1], steps[k][1]
        if was is None:
            continue
        assert now is not None
        messages = steps[k][2]
        assert [m.role for m in messages[:2]] == ["system", "user"] and messages[1].id == SUMMARY_ID
        assert messages[1].text == summary_message_text(now)
        if not steps[k][0]:
            assert now == was  # between compactions the summary does not change at all
        elif now.startswith(was + PART_BREAK):
            appended += 1
            # The new part summarizes only the messages compacted now: the summarizer got no previous summary.
            assert request.previous is None
            # So the context sent before is, to the end of its summary's text, the start of the new one.
            before = summary_message_text(was)
            assert summary_message_text(now).startswith(before.removesuffix("\n</context-summary>"))
    assert appended >= 2


def test_parts_are_consolidated_when_the_next_would_pass_the_cap() -> None:
    steps, summarizer = replay(FROZEN, 120)
    parts = [s.count(PART_BREAK) + 1 for c, s, _ in steps if c and s is not None]
    assert max(parts) >= 3
    consolidated = [k for k in range(1, len(parts)) if parts[k] < parts[k - 1]]
    assert consolidated, parts
    # The consolidation asked for one summary of every part (no part break left in it) and the new messages.
    for request in summarizer.requests:
        assert request.previous is None or PART_BREAK not in request.previous
    merged = [r for r in summarizer.requests if r.previous is not None]
    assert merged and all("call 1:" in r.previous for r in merged[:1])
    # Every summary, parts included, stays within the cap.
    assert all(len(s) <= FROZEN.summary_max_chars for c, s, _ in steps if s is not None)


def test_the_agents_md_rules_end_the_summary_once_and_the_parts_before_them_stay() -> None:
    rules_md = "# Project\n\n## Red Lines\n\n- Never push to main.\n"
    steps, _ = replay(FROZEN, 80, agents_md=rules_md)
    summaries = [s for c, s, _ in steps if c and s is not None]
    assert len(summaries) >= 3
    for was, now in pairwise(summaries):
        assert now.count("<workspace-rules") == 1 and now.endswith("</workspace-rules>")
        if now.count(PART_BREAK) > was.count(PART_BREAK):
            # The parts sent before, up to the rules that ended them, are the start of the new summary.
            assert now.startswith(was[: was.index("\n\n<workspace-rules")] + PART_BREAK)


def test_single_layout_rewrites_one_summary_from_the_previous_one() -> None:
    single = EngineSettings(compact=WINDOW, summary_max_chars=12_000)
    assert single.summary_layout == "single"
    steps, summarizer = replay(single, 40)
    assert all(PART_BREAK not in (s or "") for _, s, _ in steps)
    assert summarizer.requests[0].previous is None
    assert all(r.previous is not None for r in summarizer.requests[1:])


def test_the_layout_is_checked() -> None:
    with pytest.raises(ValueError, match="summary_layout"):
        EngineSettings(summary_layout="layered")  # type: ignore[arg-type]


class Dense(Numbered):
    """A valid summary; an appended part (no previous summary, after the first) as long as it may be in characters,
    of characters that take three tokens each where the plan reckons about four characters a token: the new part
    costs twelve times what was planned."""

    def summarize(self, request: SummaryRequest) -> str:
        summary = super().summarize(request)
        if request.previous is not None or len(self.requests) == 1:
            return summary
        return summary + "\n- " + "🀄" * max(0, request.max_chars - len(summary) - 3)


def test_a_new_part_that_takes_the_context_over_the_window_sends_a_smaller_summary() -> None:
    # The plan gave the new part a room reckoned in characters; its text took ~4x the tokens: the parts sent before
    # cannot all stay (the cache is lost either way), so the smallest summary of them all is sent, and the one built
    # on keeps every part.
    summarizer = Dense()
    window = FROZEN.compact.max_input_length
    appended = 0
    with Session(MemoryFolder(), settings=FROZEN, summarizer=summarizer) as session:
        for i in range(60):
            session.add(turn(i))
            step = session.prepare("system prompt", now=NOW)
            assert step.context.tokens <= window, (i, step.context.tokens)
            body = step.live.summary_body or ""
            if step.compaction is not None and PART_BREAK in body:  # a part was appended
                appended += 1
                assert step.compaction.smallest and PART_BREAK not in (step.live.summary or "")
    assert appended >= 1
