"""The built-in summarizer: the summary filled in from the messages themselves, with no model.

    messages ─► collect_facts ─► Facts ─► draft ─► merge with the previous summary ─► lay out and fit ─► Markdown

In three phases, one module each: `draft` (facts to the summary's lists, each Done item with its
evidence), `merge` (with the previous summary, and what the verbatim part quotes said once) and
`layout` (the lists as sections, with the caps and the order things are dropped in to fit the
size). File paths and the identifying part of failing commands stay verbatim whatever the size.
Where each section comes from, how a merge works and what is dropped first: docs/summarize.md.
"""

from __future__ import annotations

from functools import partial

from ctxkeep.settings import MIN_SUMMARY_CHARS
from ctxkeep.summarize.extractive.draft import draft_of
from ctxkeep.summarize.extractive.layout import distinct_notes, focus_terms, sections_of
from ctxkeep.summarize.extractive.merge import merge, parse_draft, said_once, with_recovered_rules
from ctxkeep.summarize.facts.collect import collect_facts
from ctxkeep.summarize.request import SummaryRequest, resolve_language, source_of
from ctxkeep.summarize.sections.fit import fit_sections
from ctxkeep.summarize.sections.markdown import RULES_TITLE, framed, framing_chars, render_sections
from ctxkeep.summarize.verbatim import (
    SECTIONS_SKELETON,
    budgets,
    carried,
    earlier_summaries,
    newest_within,
    render_carried,
    render_within,
    restored,
    split_carried,
)

__all__ = ["ExtractiveSummarizer"]

_SHORT_FRAMING_BELOW = 2 * MIN_SUMMARY_CHARS
# The share of the cap the verbatim parts keep when nothing else lets the sections fit (the last resort).
_LAST_RESORT_SHARE = 0.4


class ExtractiveSummarizer:
    """The model-free `Summarizer`: extracts the summary from the messages; deterministic, no I/O."""

    def summarize(self, request: SummaryRequest) -> str:
        """The summary of ``request.messages``, merged into ``request.previous`` when given."""
        language = resolve_language(request)
        facts = collect_facts(request.messages, originals=request.originals)
        draft = draft_of(facts, language, partial(source_of, request) if request.source else None)
        parts = restored(carried(request.messages, request.previous), request.recalled)
        # the previous summary, then the host's own when it compacted too (before us, or since our last summary)
        base = None
        for j, text in enumerate(earlier_summaries(request)):
            earlier = parse_draft(text)
            if j == 0 and request.previous:  # with the rules its verbatim part quoted, and any it had to drop
                earlier = with_recovered_rules(earlier, request.previous, request.recalled)
            if base is not None:
                # a host's summary restates the rules of what it covers: older than the previous summary's own
                rules = [r for r in earlier.constraints if r not in base.constraints]
                base = merge(base, earlier, facts, language)
                base.constraints = rules + [r for r in base.constraints if r not in rules]
            else:
                base = earlier
        if base is not None:
            base.quoted = split_carried(request.previous)[1] if request.previous else ""
            draft = merge(base, draft, facts, language)
        terms = focus_terms(request.focus) if request.focus else ()

        def protect(item: str) -> bool:
            low = item.lower()
            return any(t in low for t in terms)

        short = request.max_chars < _SHORT_FRAMING_BELOW  # near the floor, the framing's words cost the lists
        # The user's words and the rules come first in a squeezed cap; should the sections' own minimum
        # (the goal, the files) and the newest rules within the user's budget need more than the room they
        # leave, the verbatim parts give some back (down to their floors).
        rules = newest_within(draft.constraints, budgets(request.max_chars)[0])
        cap = request.max_chars
        appendices = [
            partial(render_carried, parts, max_chars=cap, sections=n)
            for n in (SECTIONS_SKELETON, 2 * SECTIONS_SKELETON, cap)
        ]
        # The last resort: many standing instructions, each kept to its head and tail at least, can leave the
        # sections less than their headings need; then the verbatim parts get a share of the cap, and the
        # instructions that do not fit in it are left out (the archive has them) rather than the summary failing.
        appendices.append(partial(render_within, parts, int(cap * _LAST_RESORT_SHARE)))
        for k, appendix_of in enumerate(appendices):
            last = k == len(appendices) - 1
            appendix = appendix_of()
            sections, plan = sections_of(said_once(draft, appendix, language), language, request.focus, terms, rules)
            room = cap - len(appendix) - framing_chars(language, short=short)
            try:
                fitted = fit_sections(
                    sections, max_chars=room, plan=plan, language=language, protect=protect if terms else None
                )
            except ValueError:
                if last:
                    raise
                continue
            listed = set(fitted[RULES_TITLE].get("", []))
            if k >= len(appendices) - 2 or all(r in listed or r in appendix for r in rules):
                break
        named = distinct_notes(fitted, language)
        if len(render_sections(named, language=language)) <= room:  # naming the list costs a few characters
            fitted = named
        return framed(render_sections(fitted, language=language), appendix, language=language, short=short)
