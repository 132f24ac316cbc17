"""`DeterministicModel`: a `Model` that makes no calls, for tests (yours and ours).

It answers with the replies queued by `enqueue`, in order; a queued `ProviderError` is raised
instead, to test the failure paths. With nothing queued it answers with a fixed, valid summary
built from the request: every section of `ctxkeep.summarize.SECTIONS`, the goal taken from the
last user turn and the exact identifiers of the turns under Critical Context. Every request is
kept in `requests`.

    model = DeterministicModel()
    model.enqueue("## Goal\\n- ship it\\n...", ProviderError("overloaded", provider="test", retryable=True))
    summarizer = ModelSummarizer(model)
"""

from __future__ import annotations

from collections import deque

from ctxkeep.errors import ProviderError
from ctxkeep.providers import Completion, Reply
from ctxkeep.summarize.identifiers import find_identifiers
from ctxkeep.summarize.sections import code_span, render_sections

__all__ = ["GOAL_CHARS", "MAX_IDENTIFIERS", "DeterministicModel", "fixed_summary"]

GOAL_CHARS = 200
MAX_IDENTIFIERS = 50


class DeterministicModel:
    """Queued replies in order, else `fixed_summary` of the request; `name` is ``"deterministic"``."""

    def __init__(self) -> None:
        self.requests: list[Completion] = []
        self._queue: deque[str | ProviderError] = deque()

    def __repr__(self) -> str:
        return f"DeterministicModel(queued={len(self._queue)}, requests={len(self.requests)})"

    @property
    def name(self) -> str:
        """``"deterministic"``."""
        return "deterministic"

    def enqueue(self, *replies: str | ProviderError) -> None:
        """Answer the next requests with `replies`, in order; a `ProviderError` among them is raised."""
        for reply in replies:
            if not isinstance(reply, str | ProviderError):
                raise TypeError(f"enqueue takes reply texts or ProviderErrors; got {type(reply).__name__}")
        self._queue.extend(replies)

    def complete(self, request: Completion) -> Reply:
        """The next queued reply, or `fixed_summary(request)` when none is queued."""
        self.requests.append(request)
        reply = self._queue.popleft() if self._queue else fixed_summary(request)
        if isinstance(reply, ProviderError):
            raise reply
        return Reply(text=reply, model="deterministic")


def fixed_summary(request: Completion) -> str:
    """A valid summary of `request`, the same for the same request: all the sections, the goal from the
    last user turn's first line, and up to `MAX_IDENTIFIERS` exact identifiers of the turns."""
    asks = [turn.text for turn in request.turns if turn.role == "user" and turn.text.strip()]
    goal: list[str] = []
    if asks:
        first = next(line.strip() for line in asks[-1].splitlines() if line.strip())
        goal.append(first if len(first) <= GOAL_CHARS else first[: GOAL_CHARS - 1] + "…")
    seen: dict[str, None] = {}
    for turn in request.turns:
        for found in find_identifiers(turn.text):
            seen.setdefault(found.text, None)
    identifiers = [code_span(text) for text in list(seen)[:MAX_IDENTIFIERS]]
    return render_sections({"Goal": {"": goal}, "Critical Context": {"": identifiers}})
