"""A model's summary held to the log: what it says is done must be shown done, what it cites must be archived.

    model text ─► cited line ranges outside the archived span dropped  (dialog/DATE.jsonl:FROM-TO)
              ─► Done items the log does not back moved to In Progress, flagged

The model sees each message labelled with its lines in the archive and each tool result with its call id
(`prompts.cite_rendered`), and is asked to end every Done item with its evidence. A Done item is backed when it
names a call id of a tool call that succeeded, the hash of a commit a tool made, or cites lines of the archive
that hold a successful tool result; an item the previous summary already listed as done keeps its place (it was
checked then). Anything else is not written as done: a plan the assistant wrote is not a result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxkeep.summarize.facts.collect import Facts
from ctxkeep.summarize.request import Language, SummaryRequest
from ctxkeep.summarize.sections.markdown import parse_sections, render_sections

_CITE = re.compile(r"dialog/(?P<date>\d{4}-\d{2}-\d{2})\.jsonl:(?P<first>\d+)(?:-(?P<last>\d+))?")
_SOURCE = re.compile(r"dialog/(?P<date>\d{4}-\d{2}-\d{2})\.jsonl:(?P<first>\d+)-(?P<last>\d+)")
_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
_WORD = re.compile(r"[\w.:-]+")  # a call id is one of these, whole
# what a dropped citation leaves behind: empty brackets, a dangling separator
_LEFTOVERS = (
    (re.compile(r"\[(?:evidence: |依据：)\s*\]"), ""),
    (re.compile(r"\s+\(\s*[;,]?\s*\)"), ""),  # "item ()", not a call's "f()"
    (re.compile(r"\s*[;,]\s*(?=[\])])"), ""),
    (re.compile(r"(?<=[(\[])\s*[;,]\s*"), ""),
    (re.compile(r"(?<=: )\s*[;,]\s*"), ""),
    (re.compile(r"[ \t]+$"), ""),
)
_UNSHOWN = {"en": "(not shown done in the log)", "zh": "（日志中未见完成）"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Span:
    """The messages a request compacts, as the archive has them: their dialog file's date and lines."""

    date: str
    first: int
    last: int

    def holds(self, date: str, first: int, last: int) -> bool:
        """True when lines `first`-`last` of the dialog file of `date` are archived by the end of this span."""
        if first < 1 or last < first:
            return False
        return date < self.date or (date == self.date and last <= self.last)


def span_of(request: SummaryRequest) -> Span | None:
    """Where the request's messages are archived (`SummaryRequest.source`), or None when it does not say."""
    found = _SOURCE.fullmatch(request.source) if request.source else None
    if found is None:
        return None
    return Span(date=found["date"], first=int(found["first"]), last=int(found["last"]))


def without_unarchived(text: str, span: Span | None) -> tuple[str, int]:
    """`text` without the line ranges it cites that `span` has not archived (lines past it, a later dialog file,
    a range ending before it starts), and how many it dropped; `text` itself when `span` is None (no place known)."""
    if span is None:
        return text, 0
    dropped = 0

    def check(m: re.Match[str]) -> str:
        nonlocal dropped
        first = int(m["first"])
        last = int(m["last"]) if m["last"] else first
        if span.holds(m["date"], first, last):
            return m.group(0)
        dropped += 1
        return ""

    lines = text.split("\n")
    for j, line in enumerate(lines):
        before = dropped
        line = _CITE.sub(check, line)
        if dropped > before:  # only the lines a citation left are tidied
            for pattern, replacement in _LEFTOVERS:
                line = pattern.sub(replacement, line)
            lines[j] = line
    return ("\n".join(lines), dropped) if dropped else (text, 0)


def backed_done(text: str, facts: Facts, *, request: SummaryRequest, language: Language) -> str:
    """`text` with each Done item the log does not back (see the module's docstring) moved to In Progress,
    flagged as not shown done; `text` itself when every Done item is backed. `facts` are the request's messages'."""
    sections = parse_sections(text)
    progress = sections.get("Progress", {})
    done = progress.get("Done", [])
    earlier = {" ".join(i.split()) for i in parse_sections(request.previous or "").get("Progress", {}).get("Done", [])}
    proof = _Proof.of(facts, request)
    unbacked = [i for i in done if " ".join(i.split()) not in earlier and not proof.backs(i)]
    if not unbacked:
        return text
    progress["Done"] = [i for i in done if i not in unbacked]
    moved = [f"{i} {_UNSHOWN[language]}" for i in unbacked]  # parse_sections took the "[x]" off
    progress["In Progress"] = [*progress.get("In Progress", []), *moved]
    return render_sections(sections, language=language)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Proof:
    """What the log shows done: the ids of the calls that succeeded, the hashes of commits made, and the archive
    lines of those calls and their results."""

    ids: frozenset[str]
    hashes: frozenset[str]
    lines: frozenset[int]
    span: Span | None

    @classmethod
    def of(cls, facts: Facts, request: SummaryRequest) -> _Proof:
        succeeded = [r for r in facts.runs if r.has_result and not r.failed]
        ids = frozenset(r.call_id for r in succeeded if r.call_id)
        span = span_of(request)
        at = {m.tool_result.call_id: k for k, m in enumerate(request.messages) if m.tool_result is not None}
        indexes = {r.index for r in succeeded} | {at[r.call_id] for r in succeeded if r.call_id in at}
        return cls(
            ids=ids,
            hashes=frozenset(r.commit.split()[0] for r in succeeded if r.commit),
            lines=frozenset(span.first + k for k in indexes) if span is not None else frozenset(),
            span=span,
        )

    def backs(self, item: str) -> bool:
        """True when `item` names a successful call, a commit's hash, or cites lines holding a successful call."""
        if set(_WORD.findall(item)) & self.ids:
            return True
        if any(h.startswith(w) or w.startswith(h) for w in _HEX.findall(item) for h in self.hashes):
            return True
        if self.span is None:
            return False
        for m in _CITE.finditer(item):
            first = int(m["first"])
            last = int(m["last"]) if m["last"] else first
            if m["date"] == self.span.date and any(first <= line <= last for line in self.lines):
                return True
        return False


def unbacked(text: str, facts: Facts) -> list[str]:
    """The Done items of `text` that name no successful call's id or commit hash of `facts` and cite no lines:
    what the audit asks the model to back or move (the lines cited are checked after, by `backed_done`)."""
    proof = _Proof(
        ids=frozenset(r.call_id for r in facts.runs if r.has_result and not r.failed and r.call_id),
        hashes=frozenset(r.commit.split()[0] for r in facts.runs if r.has_result and not r.failed and r.commit),
        lines=frozenset(),
        span=None,
    )
    done = parse_sections(text).get("Progress", {}).get("Done", [])
    return [i for i in done if not proof.backs(i) and not _CITE.search(i)]
