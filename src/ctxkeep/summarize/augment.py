"""What a model-written summary gets appended, deterministically, whatever the model wrote.

    model text ─► fit to max_chars − appended ─► + Exact identifiers it lacks (under Critical Context)
                                                 + Tool failures, Files read, Files modified
                                                 + the Session Startup and Red Lines of AGENTS.md

The identifiers are those `collect_facts` ranks over all compacted messages, plus those of the
previous summary's Exact identifiers; each the model's (fitted) text or a file list does not name
verbatim is listed. The files are merged with the previous summary's lists, so they carry across
compactions. The cap trims the model's text only; when the appended parts alone are too long the
identifier list loses its lowest-ranked items first (with a note), then the file lists; the
AGENTS.md rules are never cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxkeep.summarize import Language, SummaryRequest, resolve_language

# the same failure items (tool, outcome, command, error line; 240 characters) and caps as the built-in summarizer
from ctxkeep.summarize.extractive import _MAX_BLOCKED, _blocked_item
from ctxkeep.summarize.facts import _unique, collect_facts
from ctxkeep.summarize.sections import (
    _FENCE,
    _HEADING,
    PHRASES,
    Drop,
    canonical_title,
    code_span,
    fit_sections,
    omitted_count,
    parse_sections,
    render_item,
    render_sections,
    unquote,
)

__all__ = ["MODEL_FLOOR_CHARS", "RULE_SECTIONS", "agents_rules", "augment", "fit_text"]

RULE_SECTIONS = ("Session Startup", "Red Lines")
# The model's text keeps at least this much room: its six headings and an omission note each.
MODEL_FLOOR_CHARS = 1_000

_MORE = {"en": "({n} more identifiers in the archive)", "zh": "（另有 {n} 个标识符，详见归档）"}
_MORE_FILES = {"en": "({n} more files in the archive)", "zh": "（另有 {n} 个文件，详见归档）"}
_MORE_NOTE = re.compile(
    r"^\(\d+ more (?:identifiers|files) in the archive\)$|^（另有 \d+ 个(?:标识符|文件)，详见归档）$"
)
_FAILURES = {"en": "Tool failures", "zh": "工具调用失败"}
_RULES_TITLE = "Workspace rules (AGENTS.md)"
_MD_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")


def augment(text: str, request: SummaryRequest, *, agents_md: str | None = None) -> str:
    """The model's summary `text` fitted to ``request.max_chars`` with the appended parts (see the module).

    Raises ValueError when the AGENTS.md rules alone leave the model's text too little room.
    """
    language = resolve_language(request)
    facts = collect_facts(request.messages)
    old = _previous_lists(request.previous)
    modified = _unique([*facts.files_modified, *old["files_modified"]])
    read = [p for p in _unique([*facts.files_read, *old["files_read"]]) if p not in set(modified)]
    failures = [_blocked_item(r, facts.resolved(r), language) for r in facts.failures][:_MAX_BLOCKED]
    rules = agents_rules(agents_md) if agents_md is not None else {}
    listed = set(read) | set(modified)
    ranked = [i for i in _unique([*facts.identifiers, *old["identifiers"]]) if i not in listed]

    missing: list[str] = [i for i in ranked if i not in text]
    while True:
        ids, read_kept, modified_kept = _shrink(missing, read, modified, failures, rules, request.max_chars, language)
        budget = request.max_chars - len(_appendix(read_kept, modified_kept, failures, rules, language))
        budget -= len(_identifier_block(ids, language, header=True))
        fitted = fit_text(text, max_chars=budget, language=language)
        now = {i for i in ranked if i not in fitted} - set(missing)
        if not now:
            break
        missing = [i for i in ranked if i in now or i in set(missing)]
    return _insert_identifiers(fitted, ids, language) + _appendix(read_kept, modified_kept, failures, rules, language)


def fit_text(text: str, *, max_chars: int, language: Language) -> str:
    """`text` if it fits `max_chars`, else its sections cut to fit (the newest Done items kept)."""
    if len(text) <= max_chars:
        return text
    sections = parse_sections(text)
    plan = [
        Drop(section=title, subsection=sub, end="head" if sub == "Done" else "tail")
        for title, subs in sections.items()
        for sub in subs
    ]
    fitted = fit_sections(sections, max_chars=max_chars, plan=plan, language=language)
    return render_sections(fitted, language=language)


def agents_rules(agents_md: str) -> dict[str, str]:
    """The bodies of the `RULE_SECTIONS` of an AGENTS.md text, verbatim, by section name.

    A heading matches case-insensitively at any ``#`` level; its body runs to the next heading of
    the same or a higher level (``#`` lines inside code fences are not headings).
    """
    lines = agents_md.splitlines()
    headings: list[tuple[int, int, str]] = []  # (line, level, title)
    fence: str | None = None
    for j, line in enumerate(lines):
        m = _FENCE.match(line)
        if m and (fence is None or line.strip().startswith(fence)):
            fence = None if fence is not None else m.group(1)
            continue
        h = _MD_HEADING.match(line) if fence is None else None
        if h:
            headings.append((j, len(h.group(1)), h.group(2).strip().lower()))
    out: dict[str, str] = {}
    for name in RULE_SECTIONS:
        for k, (at, level, title) in enumerate(headings):
            if title == name.lower():
                end = next((j for j, lv, _ in headings[k + 1 :] if lv <= level), len(lines))
                body = "\n".join(lines[at + 1 : end]).strip("\n")
                if body.strip():
                    out[name] = body
                break
    return out


def _previous_lists(previous: str | None) -> dict[str, list[str]]:
    """Files read, files modified and exact identifiers listed under the previous summary's Critical Context."""
    out: dict[str, list[str]] = {"files_read": [], "files_modified": [], "identifiers": []}
    if not previous:
        return out
    labels = {text.lower(): key for key in out for text in PHRASES[key].values()}
    for sub, items in parse_sections(previous).get("Critical Context", {}).items():
        key = labels.get(sub.strip().lower())
        if key is not None:
            out[key] = [
                unquote(i) for i in items if "\n" not in i and omitted_count(i) is None and not _MORE_NOTE.match(i)
            ]
    return out


def _shrink(
    ids: list[str],
    read: list[str],
    modified: list[str],
    failures: list[str],
    rules: dict[str, str],
    max_chars: int,
    language: Language,
) -> tuple[list[str], list[str], list[str]]:
    """The identifiers and files to append, cut (lowest rank first, then files read, then modified) to leave
    the model's text `MODEL_FLOOR_CHARS`."""
    room = max_chars - MODEL_FLOOR_CHARS

    def size(i: Sequence[str], r: Sequence[str], m: Sequence[str]) -> int:
        return len(_identifier_block(list(i), language, header=True)) + len(
            _appendix(list(r), list(m), failures, rules, language)
        )

    if size([], [], []) > room:
        raise ValueError(
            f"the AGENTS.md rules and tool failures need {size([], [], [])} characters, more than max_chars"
            f" ({max_chars}) leaves beside the model's summary; raise max_chars or shorten those AGENTS.md sections"
        )
    kept_ids, kept_read, kept_modified = list(ids), list(read), list(modified)
    for target in (kept_ids, kept_read, kept_modified):
        low, high = 0, len(target)
        full = list(target)
        if size(kept_ids, kept_read, kept_modified) <= room:
            break
        while low < high:  # the most items of this list that fit
            mid = (low + high + 1) // 2
            target[:] = full[:mid]
            low, high = (mid, high) if size(kept_ids, kept_read, kept_modified) <= room else (low, mid - 1)
        target[:] = full[:low]
        dropped = len(full) - low
        if dropped:
            note = (_MORE if target is kept_ids else _MORE_FILES)[language].format(n=dropped)
            target.append(note)
            while size(kept_ids, kept_read, kept_modified) > room and len(target) > 1:
                target.pop(-2)
                target[-1] = note = (_MORE if target is kept_ids else _MORE_FILES)[language].format(
                    n=len(full) - len(target) + 1
                )
    return kept_ids, kept_read, kept_modified


def _item(entry: str) -> str:
    return entry if _MORE_NOTE.match(entry) else code_span(entry)


def _identifier_block(ids: list[str], language: Language, *, header: bool) -> str:
    if not ids:
        return ""
    items = "".join(render_item(_item(i)) + "\n" for i in ids)
    return f"### {PHRASES['identifiers'][language]}\n{items}" if header else items


def _appendix(
    read: list[str],
    modified: list[str],
    failures: list[str],
    rules: dict[str, str],
    language: Language,
) -> str:
    """The parts after the model's text: failures and file lists under Critical Context, then the rules."""
    blocks: list[str] = []
    for title, items in (
        (_FAILURES[language], failures),
        (PHRASES["files_read"][language], [_item(p) for p in read]),
        (PHRASES["files_modified"][language], [_item(p) for p in modified]),
    ):
        if items:
            blocks.append(f"\n### {title}\n" + "".join(render_item(i) + "\n" for i in items))
    if rules:
        blocks.append(f"\n## {_RULES_TITLE}\n")
        blocks.extend(f"\n### {name}\n{body}\n" for name, body in rules.items())
    return "".join(blocks)


def _insert_identifiers(text: str, ids: list[str], language: Language) -> str:
    """`text` with `ids` listed under its Critical Context's Exact identifiers, made last, so that the
    appended lists below it stay in that section."""
    if not text.endswith("\n"):
        text += "\n"
    lines = text.splitlines()
    sections: list[tuple[int, int, str]] = []  # (start line, end line, title) of each ## section
    fence: str | None = None
    for j, line in enumerate(lines):
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                fence = None
            continue
        m = _FENCE.match(line)
        if m:
            fence = m.group(1)
            continue
        h = _HEADING.match(line)
        if h and len(h.group(1)) == 2:
            if sections:
                sections[-1] = (sections[-1][0], j, sections[-1][2])
            sections.append((j, len(lines), h.group(2)))
    critical = next((s for s in sections if canonical_title(s[2]) == "Critical Context"), None)
    if critical is None:  # not possible for a valid summary; kept whole anyway
        body, before, after = ["## Critical Context"], lines, []
    else:
        before, body, after = lines[: critical[0]], lines[critical[0] : critical[1]], lines[critical[1] :]
    while body and not body[-1].strip():
        body.pop()
    new = _identifier_block(ids, language, header=True).rstrip("\n")
    moved = [*before, *after]
    if before and after and before[-1].strip() != "":
        moved = [*before, "", *after]
    out = "\n".join(moved).rstrip("\n")
    section = "\n".join(body) + (f"\n{new}" if new else "")
    return (f"{out}\n\n" if out else "") + section + "\n"
