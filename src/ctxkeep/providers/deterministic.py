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

import json
import re
from collections import deque

from ctxkeep.errors import ProviderError
from ctxkeep.providers import Completion, Reply
from ctxkeep.summarize.identifiers import find_identifiers
from ctxkeep.summarize.sections import code_span, render_sections

__all__ = ["GOAL_CHARS", "MAX_IDENTIFIERS", "DeterministicModel", "fixed_summary"]

GOAL_CHARS = 200
MAX_IDENTIFIERS = 50
_USER_MARK = "[user]\n"  # how ctxkeep.summarize.prompts shows a user message of the conversation
_GOAL_MARK = "## Goal\n- "  # and a summary's goal
_TAG = re.compile(r"^</?[A-Za-z][\w-]*(?:\s[^<>]*)?>$")


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
    """A valid summary of `request`, the same for the same request: all the sections; the goal and the
    pending ask from the latest user message of the conversation shown (else the latest goal of the
    summaries shown, else the last user turn's first line that is not a tag); up to `MAX_IDENTIFIERS`
    exact identifiers of the turns, newest first, under Critical Context. With a `schema`, the same
    as a JSON object of the schema's required fields (those it does not fill empty)."""
    turns = [turn.text for turn in request.turns if turn.role == "user" and turn.text.strip()]
    goal: list[str] = []
    if turns:
        last = turns[-1]
        if _USER_MARK in last:
            lines = last.rsplit(_USER_MARK, 1)[1].splitlines()
        elif _GOAL_MARK in last:
            lines = [last.rsplit(_GOAL_MARK, 1)[1].splitlines()[0]]
        else:
            lines = [line for line in last.splitlines() if not _TAG.match(line.strip())]
        first = next((line.strip() for line in lines if line.strip()), "")
        if first:
            goal.append(first if len(first) <= GOAL_CHARS else first[: GOAL_CHARS - 1] + "…")
    seen: dict[str, None] = {}
    for turn in reversed(request.turns):  # the newest first: the feedback of a retry comes last
        for found in reversed(find_identifiers(turn.text)):
            seen.setdefault(found.text, None)
    identifiers = [code_span(text) for text in list(seen)[:MAX_IDENTIFIERS]]
    if request.schema is not None:  # the JSON form of ctxkeep.summarize.structured
        fields: dict[str, list[str]] = {key: [] for key in request.schema.get("required", ())}
        fields.update(goal=goal, pending_user_asks=goal, exact_identifiers=identifiers)
        return json.dumps(fields, ensure_ascii=False)
    return render_sections(
        {
            "Goal": {"": goal},
            "Next Steps": {"": [], "Pending user asks": goal},
            "Critical Context": {"": [], "Exact identifiers": identifiers},
        }
    )
