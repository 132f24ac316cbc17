"""Step 3 of the pre-reasoning pass: one living Markdown summary of the messages being compacted.

    request = SummaryRequest(messages=tuple(to_compact), previous=summary)
    summary = ExtractiveSummarizer().summarize(request)       # or ModelSummarizer(model)
    assert why_rejected(summary) is None                      # the check the engine applies

    sections/   the summary's format: Markdown parse, render and fit to a size; its JSON form
    facts/      what a summary is made of: identifiers, shell commands, tool runs, asks and rules
    verbatim    what both append word for word: the user's messages, the standing instructions
    voices      whose words a message carries: a real ask, a slash command, a standing instruction
    extractive  the model-free summarizer: facts -> sections, merged with the previous summary
    model/      the model-written summary: prompts, parts, audit, augmentation
    testing     `fixed_summary_model()`: a `DeterministicModel` that answers with a fixed, valid summary

The format and the rules of each part: docs/summarize.md.
"""

from __future__ import annotations

from ctxkeep.settings import LANGUAGES, MIN_SUMMARY_CHARS
from ctxkeep.summarize.extractive import ExtractiveSummarizer
from ctxkeep.summarize.model.summarizer import ModelSummarizer
from ctxkeep.summarize.request import (
    Language,
    Summarizer,
    SummaryRequest,
    detect_language,
    resolve_language,
    with_originals,
)
from ctxkeep.summarize.sections.markdown import PROGRESS_SUBSECTIONS, SECTIONS, missing_sections, why_rejected

__all__ = [
    "LANGUAGES",
    "MIN_SUMMARY_CHARS",
    "PROGRESS_SUBSECTIONS",
    "SECTIONS",
    "ExtractiveSummarizer",
    "Language",
    "ModelSummarizer",
    "Summarizer",
    "SummaryRequest",
    "detect_language",
    "missing_sections",
    "resolve_language",
    "why_rejected",
    "with_originals",
]
