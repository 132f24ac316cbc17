"""Replay a recorded conversation through a session as the agent would have run it.

The messages are added in order and `Session.prepare` runs once before each assistant turn (a run
of assistant messages counts as one turn), the way an agent framework calls ctxkeep before every
reasoning step. A leading system message is the system prompt (layer 1), not a live message.
Each step runs at the time its messages were recorded (when they carry one), so the archive is
named after the day the conversation happened.
Pairing is repaired first, so a transcript with aborted calls still replays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .context import system_tokens_of
from .messages import Message
from .pairing import repair
from .session import Session
from .step import Compaction, Failure


@dataclass(kw_only=True, slots=True)
class Replay:
    """What a replay did: tokens before and after, steps, compactions, and the time each step took."""

    messages: int = 0
    steps: int = 0
    tokens_full: int = 0  # the whole conversation, as if nothing were compacted
    tokens_final: int = 0  # the last context sent to the model
    peak_tokens: int = 0  # the largest context sent
    compactions: list[Compaction] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    repairs: int = 0
    step_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0


def split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """The leading system message's text (the system prompt), and the other messages."""
    if messages and messages[0].role == "system":
        return messages[0].text, list(messages[1:])
    return None, list(messages)


def turns(messages: Sequence[Message]) -> list[list[Message]]:
    """The messages grouped as the agent sees them: each group ends right before an assistant turn."""
    out: list[list[Message]] = [[]]
    for msg in messages:
        if msg.role == "assistant" and out[-1] and out[-1][-1].role != "assistant":
            out.append([])
        out[-1].append(msg)
    return [t for t in out if t]


def replay(
    session: Session,
    messages: Sequence[Message],
    *,
    system: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Replay:
    """Add `messages` to `session` turn by turn, preparing before each assistant turn; returns the figures."""
    started = time.perf_counter()
    fixed, changes = repair(messages)
    report = Replay(messages=len(fixed), repairs=len(changes))
    report.tokens_full = system_tokens_of(system, session.counter) + sum(session.counter.count_each(fixed))
    done = 0
    for batch in turns(fixed):
        _step(session, batch, system, report)
        done += len(batch)
        if progress:
            progress(done, len(fixed))
    report.seconds = time.perf_counter() - started
    return report


def _step(session: Session, batch: list[Message], system: str | None, report: Replay) -> None:
    session.add(batch)
    # The recorded time, when there is one: a replay archives into the day the conversation happened.
    when = next((m.timestamp for m in reversed(batch) if m.timestamp is not None), None)
    t = time.perf_counter()
    step = session.prepare(system, now=when)
    report.step_seconds.append(time.perf_counter() - t)
    report.steps += 1
    report.tokens_final = step.context.tokens
    report.peak_tokens = max(report.peak_tokens, step.context.tokens)
    if step.compaction:
        report.compactions.append(step.compaction)
    if step.failure:
        report.failures.append(step.failure)
    report.warnings.extend(step.warnings)
