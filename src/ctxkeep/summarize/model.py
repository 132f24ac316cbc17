"""The model-written summary: one call to the compaction model, and the checks its reply must pass.

    SummaryRequest ─► summary_prompt ─► Completion ─► model.complete ─► Reply
                                                                          │
        summary ◄─ augment, fit ◄─ missing_sections == [] ◄─ unwrap ◄─┘
                                               │ otherwise
                                               └─► SummaryError(.request, .response)

`unwrap` takes off what models wrap a summary in: a ``<think>`` block, a preamble ("Here is the
summary:"), a code fence around the whole. A reply that is empty or lacks a required ``##``
section, and a `ProviderError`, raise `SummaryError` carrying the request (as JSON) and the raw
reply or the error text, for the workspace to save; nothing is ever passed off as a summary.

    summarizer = ModelSummarizer(get_model("openai:gpt-4o-mini"))
    summary = summarizer.summarize(SummaryRequest(messages=tuple(to_compact), previous=summary))
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ctxkeep.errors import ProviderError, SummaryError
from ctxkeep.providers import Completion, Model, Turn
from ctxkeep.summarize import SummaryRequest
from ctxkeep.summarize.augment import augment
from ctxkeep.summarize.prompts import ARGUMENTS_CHARS, RESULT_CHARS, summary_prompt
from ctxkeep.summarize.sections import missing_sections

__all__ = ["MAX_TOKENS", "ModelSummarizer", "unwrap"]

# A 16,000-character summary is about 4,000 tokens of English; Chinese needs more, and says so by failing.
MAX_TOKENS = 4_096

_THINK = re.compile(r"<(think|thinking)>.*?</\1>\s*", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


class ModelSummarizer:
    """A `Summarizer` that asks a compaction `model` for the summary and checks the reply.

    `max_tokens` bounds the reply; `result_chars` and `arguments_chars` bound each tool result and
    each string argument of a tool call in the prompt (see `ctxkeep.summarize.prompts`); `agents_md`
    is the workspace's AGENTS.md text (the caller reads it), whose Session Startup and Red Lines
    sections every summary carries (see `ctxkeep.summarize.augment`).
    """

    def __init__(
        self,
        model: Model,
        *,
        max_tokens: int = MAX_TOKENS,
        result_chars: int = RESULT_CHARS,
        arguments_chars: int = ARGUMENTS_CHARS,
        agents_md: str | None = None,
    ) -> None:
        for name, value in (
            ("max_tokens", max_tokens),
            ("result_chars", result_chars),
            ("arguments_chars", arguments_chars),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number, at least 1; got {value!r}")
        self.model = model
        self.max_tokens = max_tokens
        self.result_chars = result_chars
        self.arguments_chars = arguments_chars
        if agents_md is not None and not isinstance(agents_md, str):
            raise TypeError(f"agents_md must be the text of AGENTS.md or None, got {type(agents_md).__name__}")
        self.agents_md = agents_md

    def __repr__(self) -> str:
        return f"ModelSummarizer({self.model.name!r}, max_tokens={self.max_tokens})"

    def completion(self, request: SummaryRequest) -> Completion:
        """The request to the model for `request`: the system prompt and one user turn."""
        prompt = summary_prompt(request, result_chars=self.result_chars, arguments_chars=self.arguments_chars)
        return Completion(
            system=prompt.system,
            turns=(Turn(role="user", text=prompt.user),),
            max_tokens=self.max_tokens,
        )

    def summarize(self, request: SummaryRequest) -> str:
        """The model's summary of `request`, unwrapped, augmented and at most ``request.max_chars`` characters.

        Raises `SummaryError` (with ``.request`` and ``.response``) when the model fails or its
        reply is not a summary with every required section.
        """
        completion = self.completion(request)
        asked = _as_json(completion, self.model.name)
        try:
            reply = self.model.complete(completion)
        except ProviderError as exc:
            raise SummaryError(
                f"the compaction model {self.model.name} failed: {exc}", request=asked, response=str(exc)
            ) from exc
        text = unwrap(reply.text)
        if not text:
            raise SummaryError(
                f"the compaction model {self.model.name} returned no summary (an empty reply)",
                request=asked,
                response=reply.text,
            )
        missing = missing_sections(text)
        if missing:
            raise SummaryError(
                f"the compaction model {self.model.name} returned a summary without the sections"
                f" {', '.join(missing)}; try a larger model, or raise max_tokens if the reply was cut off",
                request=asked,
                response=reply.text,
            )
        try:
            return augment(text, request, agents_md=self.agents_md)
        except ValueError as exc:
            raise SummaryError(str(exc), request=asked, response=reply.text) from exc


def unwrap(text: str) -> str:
    """The summary inside a reply: from its first ``## `` heading, without a think block or an enclosing fence.

    "" when there is no ``## `` heading at all.
    """
    text = _THINK.sub("", text)
    lines = text.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("## ")), None)
    if start is None:
        return ""
    fenced = any(_FENCE.match(line) for line in lines[:start])
    body = lines[start:]
    if fenced:
        fences = [i for i, line in enumerate(body) if _FENCE.match(line)]
        if len(fences) % 2 == 1:  # the fences inside the summary come in pairs; the odd one closes the wrapper
            body = body[: fences[-1]]
    return "\n".join(body).strip() + "\n"


def _as_json(completion: Completion, model: str) -> dict[str, Any]:
    """The request as the workspace saves it: the model's name and every field of the completion."""
    return {"model": model, **dataclasses.asdict(completion)}
