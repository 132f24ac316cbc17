"""What a pass returns: the `Step` (the next live context, the context to send), and what happened in it: a
`Compaction` or a `Failure`, with what the summarizer spent (`Usage`). Values for whoever reads them (the
session, the workspace's records, the hosts), and what a prompt cache holds of a step (`cached_tokens`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .context import Context
from .live import Live
from .messages import Message

if TYPE_CHECKING:
    from anthropic.types import MessageParam
    from openai.types.chat import ChatCompletionMessageParam


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """What the summarizer spent on one compaction, as far as it says (`ModelSummarizer.last_run`).

    None means not reported (a summarizer of your own without `last_run`); the extractive summarizer
    calls no model, so its calls and tokens are 0.
    """

    summarizer: str  # the summarizer's class name
    model: str | None = None  # the compaction model's name ("openai:gpt-4o-mini"), when there is one
    seconds: float = 0.0  # how long the summarizer took
    calls: int | None = None  # model calls, the provider's own retries not counted
    input_tokens: int | None = None  # prompt tokens, as the server reported them (else counted)
    output_tokens: int | None = None
    retries: int | None = None  # calls the provider made again after a timeout, 429 or 5xx
    attempts: int | None = None  # times the final summary was asked (audit re-asks included)
    parts: int | None = None  # parts the history was cut into for the model
    audit: tuple[str, ...] = ()  # audit checks the kept summary still fails
    identifiers_checked: int | None = None  # identifiers of the compacted messages the summary was checked for
    identifiers_restored: int | None = None  # of those, the ones the model left out and ctxkeep appended


@dataclass(frozen=True, kw_only=True, slots=True)
class Billed:
    """A step's request as the model's API counted it (the usage of its answer), when it said: every input token,
    those its prompt cache served, and those written to it (Anthropic says; OpenAI does not: None)."""

    input: int
    cached: int
    written: int | None = None

    def __post_init__(self) -> None:
        for name in ("input", "cached", "written"):
            value = getattr(self, name)
            if value is None and name == "written":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Billed.{name} must be a count of tokens, 0 or more; got {value!r}")

    def to_dict(self) -> dict[str, int | None]:
        """The record's form: ``{"input", "cached", "written"}``."""
        return {"input": self.input, "cached": self.cached, "written": self.written}


@dataclass(frozen=True, kw_only=True, slots=True)
class Compaction:
    """What one compaction did."""

    at: datetime
    reason: str
    focus: str | None
    tokens_before: int
    tokens_after: int
    compacted: int
    kept: int
    pinned: int
    boundary_moved: int
    summary_chars: int
    archive_file: str
    seconds: float
    # The lines of `archive_file` the compacted messages went to: first and last, counted from 1.
    archive_lines: tuple[int, int] = (0, 0)
    # What the summarizer spent (model calls, tokens, retries, ...).
    usage: Usage | None = None
    # The summary was written in the background before the threshold (`ctxkeep.writer.WriteAhead`): `seconds`
    # is then what this step waited, `usage.seconds` what the summarizer took.
    background: bool = False
    # The context with the summarizer's summary was over the window: a smaller form of it was sent
    # (`ctxkeep.engine._fitted`), `summary_chars` is its size; the summarizer's stays the one built on.
    smallest: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """A compaction that was not applied, and why. The live context is unchanged.

    `request` and `response` are what the summarizer was asked and answered, when known, so the
    failure can be saved and debugged (a session writes them to ``failed/``).
    """

    at: datetime
    reason: str
    tokens: int
    request: Mapping[str, Any] | None = None
    response: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """What `prepare` returns: the next live state, the context, and what happened."""

    live: Live
    context: Context
    compaction: Compaction | None = None
    failure: Failure | None = None
    archived: tuple[Message, ...] = ()
    warnings: tuple[str, ...] = ()
    # A compaction was due, but its summary is still being written in the background and the context is
    # not yet over `CompactSettings.wait_threshold`: this step sends the context as it is.
    deferred: bool = False
    # Tokens of `context` that are the unchanged start of the previous step's (what a prompt cache serves
    # again, read at its price); the rest is sent anew. 0 at a session's first step and after a compaction
    # (but for the system prompt and tools), a cold cache or a new system prompt.
    cached: int = 0

    def to_openai(self, *, system: bool = True) -> list[ChatCompletionMessageParam]:
        """The context to send, as the openai SDK's ``messages=`` (see `Context.to_openai`)."""
        return self.context.to_openai(system=system)

    def to_anthropic(self) -> tuple[str | None, list[MessageParam]]:
        """The context to send, as the anthropic SDK's ``system=`` and ``messages=``."""
        return self.context.to_anthropic()


def cached_tokens(before: Live, step: Step) -> int:
    """The tokens of `step`'s context that are the unchanged start of the previous step's: `before` as the previous
    pass left it (its first `checked` messages were sent then), less what this pass rewrote from its first change.

    Counted from what changed, so a step costs what it rewrote, not the history.
    """
    after = step.live
    sent = before.checked
    if not sent or after.system_tokens != before.system_tokens or after.system != before.system:
        return 0
    if step.compaction is not None or (after.aging is not None and after.aging.kind == "cold"):
        return after.fixed_tokens if step.compaction is not None else 0
    first = min((p for p in after.offloaded if p < sent), default=sent)
    counts = before.counts
    # What the previous request held, less its messages from the first one rewritten on.
    return (
        before.fixed_tokens + before.summary_tokens + before.total - sum(counts[p] for p in range(first, len(counts)))
    )
