"""A model for testing (and benchmarking) a model summarizer without a model: `fixed_summary_model()`
makes a `DeterministicModel` that answers, when nothing is queued, with `fixed_summary`, a valid
summary that is the same for the same request.

    summarizer = ModelSummarizer(fixed_summary_model())

Made explicitly, so a `DeterministicModel()` answers the same whatever was imported before it.
"""

from __future__ import annotations

import json
import re

from ctxkeep.providers import Completion, Model, get_model
from ctxkeep.providers.deterministic import DeterministicModel
from ctxkeep.summarize.facts.identifiers import find_identifiers
from ctxkeep.summarize.model.prompts import uncite
from ctxkeep.summarize.sections.markdown import code_span, phrase, render_sections

GOAL_CHARS = 200
MAX_IDENTIFIERS = 50
_USER_MARK = "[user]\n"  # how ctxkeep.summarize.model.prompts shows a user message of the conversation
_GOAL_MARK = "## Goal\n- "  # and a summary's goal
_TAG = re.compile(r"^</?[A-Za-z][\w-]*(?:\s[^<>]*)?>$")
_ROLE_MARK = re.compile(r"^\[(?:assistant|user|system|developer|tool[^\]]*)\]")  # the next turn of the conversation


def fixed_summary(request: Completion) -> str:
    """A valid summary of `request`, the same for the same request: all the sections; the goal and the
    pending ask ("Pending user ask: ...") from the latest user message of the conversation shown (else
    the latest goal of the summaries shown, else the last user turn's first line that is not a tag); up
    to `MAX_IDENTIFIERS`
    exact identifiers of the turns, newest first, under Critical Context. With a `schema`, the same
    as a JSON object of the schema's required fields (those it does not fill empty)."""
    # the conversation without the labels of each message's place in the archive, which name nothing to keep
    turns = [uncite(turn.text) for turn in request.turns if turn.role == "user" and turn.text.strip()]
    goal: list[str] = []
    if turns:
        last = turns[-1]
        if _USER_MARK in last:
            lines = last.rsplit(_USER_MARK, 1)[1].splitlines()
            ends = [j for j, line in enumerate(lines) if _ROLE_MARK.match(line)]
            lines = lines[: ends[0]] if ends else lines  # an empty user turn has no goal, not "[assistant]"
        elif _GOAL_MARK in last:
            # The prompt is not a summary (its conversation may hold unclosed fences), so no parser reads it:
            # the last goal shown is the newest summary's.
            lines = [last.rsplit(_GOAL_MARK, 1)[1].splitlines()[0]]
        else:
            lines = [line for line in last.splitlines() if not _TAG.match(line.strip())]
        first = next((line.strip() for line in lines if line.strip()), "")
        if first:
            goal.append(first if len(first) <= GOAL_CHARS else first[: GOAL_CHARS - 1] + "…")
    seen: dict[str, None] = {}
    for turn in reversed(request.turns):  # the newest first: the feedback of a retry comes last
        for found in reversed(find_identifiers(uncite(turn.text))):
            seen.setdefault(found.text, None)
    identifiers = [code_span(text) for text in list(seen)[:MAX_IDENTIFIERS]]
    pending = [f"{phrase('pending_ask', 'en')} {g}" for g in goal]  # not the goal's line again
    if request.schema is not None:  # the JSON form of ctxkeep.summarize.sections.structured
        fields: dict[str, list[str]] = {key: [] for key in request.schema.get("required", ())}
        fields.update(goal=goal, pending_user_asks=pending, exact_identifiers=identifiers)
        return json.dumps(fields, ensure_ascii=False)
    return render_sections(
        {
            "Goal": {"": goal},
            "Next Steps": {"": [], "Pending user asks": pending},
            "Critical Context": {"": [], "Exact identifiers": identifiers},
        }
    )


def fixed_summary_model() -> DeterministicModel:
    """A `DeterministicModel` that answers `fixed_summary(request)` when nothing is queued."""
    return DeterministicModel(default=fixed_summary)


def host_model(spec: str | None, *, base_url: str | None = None) -> Model:
    """The model `spec` names for a command or the proxy: `get_model(spec, base_url=...)`, except that
    ``"deterministic"`` answers with `fixed_summary` (``--model deterministic`` summarizes with no model)."""
    if spec is not None and spec.strip() == "deterministic" and base_url is None:
        return fixed_summary_model()
    return get_model(spec, base_url=base_url)
