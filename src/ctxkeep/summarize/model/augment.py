"""What a model-written summary gets appended, deterministically, whatever the model wrote.

    model text ─► fit to max_chars − appended ─► + Exact identifiers it lacks (under Critical Context)
                                                 + the caller's notes (Not summarized)
                                                 + Tool failures, Files read, Files modified
                                                 + the Session Startup and Red Lines of AGENTS.md
                                                 + the user's rules and the ledger (Plan, Background jobs) it lacks

The cap trims the model's text first; when the appended parts alone are too long, the identifier
list loses its lowest-ranked items, then the file lists, each with a note of how many it no longer
names. The notes, tool failures and AGENTS.md rules are never cut. In detail: docs/summarize.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from ctxkeep.summarize.agents_md import agents_rules
from ctxkeep.summarize.facts.collect import Facts, collect_facts, unique, unique_keep_last
from ctxkeep.summarize.facts.ledger import COMPLETED, merge_jobs, merge_todos, parse_job, parse_todo

# the same failure items (tool, outcome, command, error line; 240 characters) and cap as the extractive summary
from ctxkeep.summarize.facts.runs import MAX_FAILURES, failure_item
from ctxkeep.summarize.facts.superseded import mark_superseded
from ctxkeep.summarize.request import Language, SummaryRequest, resolve_language, source_of
from ctxkeep.summarize.sections.fit import Drop, fit_sections
from ctxkeep.summarize.sections.markdown import (
    HEADING,
    JOBS_TITLE,
    PHRASES,
    PLAN_TITLE,
    canonical_title,
    code_span,
    headings,
    is_placeholder,
    omitted_count,
    parse_sections,
    render_item,
    render_sections,
    unfenced,
    unquote,
)
from ctxkeep.summarize.verbatim import listed_lines

# The model's text keeps at least this much room (or all it needs, when less): its six headings and an omission
# note each.
MODEL_FLOOR_CHARS = 1_000

_MORE = {"en": "({n} more identifiers in the archive)", "zh": "（另有 {n} 个标识符，详见归档）"}
_MORE_FILES = {"en": "({n} more files in the archive)", "zh": "（另有 {n} 个文件，详见归档）"}
_MORE_NOTE = re.compile(
    r"^\(\d+ more (?:identifiers|files) in the archive\)$|^（另有 \d+ 个(?:标识符|文件)，详见归档）$"
)
_FAILURES = {"en": "Tool failures", "zh": "工具调用失败"}
_STATED = {"en": "Rules the user stated", "zh": "用户提出的规则"}
_MORE_FAILURES = {"en": "({n} more failed calls in the archive)", "zh": "（另有 {n} 个失败的调用，详见归档）"}
_NOTES = {"en": "Not summarized", "zh": "未能摘要"}
_RULES_TITLE = "Workspace rules (AGENTS.md)"
_IDENTIFIER_TITLES = frozenset(t.lower() for t in PHRASES["identifiers"].values())
_FENCED_ITEM = re.compile(r"\n?(`{3,})\n(.*)\n\1", re.DOTALL)
_BULLET_TEXT = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+(.*)$")

# The appended lists, in the order they lose items to the cap: identifiers, files read, files modified.
_Lists = tuple[Sequence[str], Sequence[str], Sequence[str]]
_Counts = tuple[int, int, int]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Uncut:
    """The appended parts no cap cuts."""

    notes: tuple[str, ...]
    failures: tuple[str, ...]
    rules: Mapping[str, str]
    stated: tuple[str, ...] = ()  # the user's rules the model's text does not carry verbatim
    plan: tuple[str, ...] = ()  # the ledger's todo items with their states, when the model's text lacks them
    jobs: tuple[str, ...] = ()  # the ledger's background jobs still running, those the model's text lacks

    def text(self) -> str:
        return "\n".join([*self.notes, *self.failures, *self.stated, *self.plan, *self.jobs, *self.rules.values()])


@dataclass(frozen=True, slots=True)
class Verbatim:
    """The verbatim parts, as `augment` needs them: `text` is what is appended after all of it (a rule the
    user wrote as a list item there is not stated again); `recovered` are the rules of the user's messages
    the previous summary carried verbatim (`verbatim.carried_rules`), stated when the model's text lacks
    them and they are no longer carried. `rules_room` is what the stated rules may take, newest first: None
    for all of them, as the extractive summary lists every rule unless its cap is squeezed (then the newest
    within the user's budget, `verbatim.budgets`; the archive gives the rest back when room returns)."""

    text: str = ""
    recovered: tuple[str, ...] = ()
    rules_room: int | None = None


NO_VERBATIM = Verbatim()


def augment(
    text: str,
    request: SummaryRequest,
    *,
    agents_md: str | None = None,
    notes: Sequence[str] = (),
    verbatim: Verbatim = NO_VERBATIM,
    max_chars: int | None = None,
) -> str:
    """The model's summary `text` fitted to ``request.max_chars`` with the appended parts.

    The identifiers are all those `collect_facts` ranks (no cap) and those of the previous summary's
    Exact identifiers, each that nothing else in the summary names verbatim; they go into one Exact
    identifiers subsection, the last of Critical Context. The file lists merge the previous summary's.

    `notes` are items the summary must carry whole (the parts of the history the model could not
    summarize, say). `verbatim` is what the verbatim parts appended after all of it say (`Verbatim`).
    `max_chars` (default ``request.max_chars``) is the size to fit when the cap leaves the summary less
    than a request may ask for (the verbatim parts took the rest). Raises ValueError when the notes,
    tool failures and AGENTS.md rules alone leave the model's text too little room.
    """
    if isinstance(notes, str) or not all(isinstance(n, str) for n in notes):
        raise TypeError(f"notes must be a sequence of texts, got {notes!r}")
    language = resolve_language(request)
    limit = request.max_chars if max_chars is None else max_chars
    # every identifier, not the built-in summarizer's first 300: the list's note counts those it cannot fit
    facts = collect_facts(request.messages, identifier_limit=None, originals=request.originals)
    old = _previous_lists(request.previous)
    modified = unique([*facts.files_modified, *old["files_modified"]])
    read = [p for p in unique([*facts.files_read, *old["files_read"]]) if p not in set(modified)]
    uncut = _Uncut(
        notes=tuple(notes),
        failures=_failure_items(facts, language, room=limit // 5, where=partial(source_of, request)),
        rules=agents_rules(agents_md) if agents_md is not None else {},
    )
    uncut = replace(
        uncut,
        plan=_plan_items(facts, request.previous, text, room=limit // 10),
        jobs=_job_items(facts, request.previous, text),
    )
    # every rule the model's text lacks, as far as the model's text keeps its floor beside the other fixed parts
    fixed = _appended_len(([], [], []), (0, 0, 0), uncut, language) + len(_STATED[language]) + 6
    room = max(0, limit - min(MODEL_FLOOR_CHARS, len(text), limit // 3) - fixed)
    stated = _stated(
        mark_superseded(unique_keep_last([*verbatim.recovered, *facts.constraints])),
        text,
        room=room if verbatim.rules_room is None else min(room, verbatim.rules_room),
        said=listed_lines(verbatim.text),
        quoted=verbatim.text,
    )
    uncut = replace(uncut, stated=stated)
    whole = uncut.text()  # what these name needs no listing
    listed = set(read) | set(modified)
    ranked = [i for i in unique([*facts.identifiers, *old["identifiers"]]) if i not in listed and i not in whole]

    text = _without_lines(text, {render_item(_listed(p)) for p in listed})  # the file lists below name them
    missing = [i for i in ranked if i not in text]
    slack = 0  # what moving the model's sections around added beyond the estimate
    while True:
        room = limit - slack
        full: _Lists = (missing, read, modified)
        # the model's text keeps at least MODEL_FLOOR_CHARS, or a third of a squeezed size (its headings fit)
        floor = min(MODEL_FLOOR_CHARS, len(text), limit // 3)
        kept = _shrink(full, uncut, room=room, floor=floor, language=language)
        budget = room - _appended_len(full, kept, uncut, language)
        fitted = fit_text(text, max_chars=budget, language=language)
        absent = set(missing)
        cut = {i for i in ranked if i not in absent and i not in fitted}
        if cut:  # fitting dropped identifiers the model had named: list them too
            missing = [i for i in ranked if i in absent or i in cut]
            continue
        out = _assemble(fitted, full, kept, uncut, language)
        if len(out) <= limit:
            return out
        slack += len(out) - limit


def _stated(
    rules: Sequence[str], text: str, *, room: int | None, said: frozenset[str] = frozenset(), quoted: str = ""
) -> tuple[str, ...]:
    """The user's rules `text` lacks verbatim and the verbatim part neither lists (`said`) nor shows whole
    (`quoted`, its text: a rule said there is said once), in the order stated: all of them (`room` None), or the
    newest while they fit `room` characters."""
    missing = [r for r in rules if r not in text and r not in said and r not in quoted]
    if room is None:
        return tuple(missing)
    kept: list[str] = []
    for rule in reversed(missing):
        if sum(len(r) + 3 for r in kept) + len(rule) + 3 > room:
            break
        kept.append(rule)
    return tuple(reversed(kept))


def _plan_items(facts: Facts, previous: str | None, text: str, *, room: int) -> tuple[str, ...]:
    """The ledger the extractive summary keeps (the previous summary's Plan, wherever it stands, updated by the
    new messages' todo calls), when the model's `text` does not list it: every open item, and the newest
    finished ones while they fit `room`. The extractive result is the floor a model's summary is held to."""
    old = [t for subs in parse_sections(previous or "").values() for t in map(parse_todo, subs.get(PLAN_TITLE, []))]
    plan = merge_todos([t for t in old if t is not None], facts.plan)
    items = [t.render() for t in plan]
    if not items or all(i in text for i in items):
        return ()
    finished = {t.render() for t in plan if t.status == COMPLETED}
    left = room - sum(len(i) + 3 for i in items if i not in finished)
    kept_finished: set[str] = set()
    for item in reversed([i for i in items if i in finished]):
        left -= len(item) + 3
        if left < 0:
            break
        kept_finished.add(item)
    return tuple(i for i in items if i not in finished or i in kept_finished)


def _job_items(facts: Facts, previous: str | None, text: str) -> tuple[str, ...]:
    """The background jobs the extractive summary keeps (the previous summary's, less those the new messages saw
    end, and those they started) that the model's `text` does not name by their id in a code span."""
    old = [j for subs in parse_sections(previous or "").values() for j in map(parse_job, subs.get(JOBS_TITLE, []))]
    running = merge_jobs([j for j in old if j is not None], facts.jobs)
    return tuple(j.render() for j in running if code_span(j.id) not in text)


def _failure_items(
    facts: Facts, language: Language, *, room: int, where: Callable[[int, int], str | None]
) -> tuple[str, ...]:
    """Every failed call: the first `MAX_FAILURES` (newest, unresolved first) with their error lines, the
    others as their command or file alone, while they fit `room` characters; a note counts the rest. Each names
    its line in the archive (`where`), as the extractive summary's Blocked items do."""
    failures = facts.failures
    items = unique(
        failure_item(r, facts.resolved(r), language, source=where(r.index, r.index)) for r in failures[:MAX_FAILURES]
    )
    used = sum(len(i) + 3 for i in items)
    for k, run in enumerate(failures[MAX_FAILURES:]):
        source = where(run.index, run.index)
        item = failure_item(replace(run, error_line=""), facts.resolved(run), language, source=source)
        if item in items:  # the same call failing the same way again: said once
            continue
        if used + len(item) + 3 > room:
            items.append(_MORE_FAILURES[language].format(n=len(failures) - MAX_FAILURES - k))
            break
        items.append(item)
        used += len(item) + 3
    return tuple(items)


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


def _previous_lists(previous: str | None) -> dict[str, list[str]]:
    """Files read, files modified and exact identifiers listed under the previous summary's Critical Context."""
    out: dict[str, list[str]] = {"files_read": [], "files_modified": [], "identifiers": []}
    if not previous:
        return out
    labels = {text.lower(): key for key in out for text in PHRASES[key].values()}
    for sub, items in parse_sections(previous).get("Critical Context", {}).items():
        key = labels.get(sub.strip().lower())
        if key is not None:
            texts = (_unlisted(i) for i in items if omitted_count(i) is None and not _MORE_NOTE.match(i))
            out[key] = [t for t in texts if t is not None]
    return out


def _shrink(full: _Lists, uncut: _Uncut, *, room: int, floor: int, language: Language) -> _Counts:
    """How many of the first items of each list to append: all that fit in `room` beside `floor` characters
    of the model's text, cut lowest rank first (identifiers, then files read, then files modified)."""
    max_chars, room = room, room - floor

    def size(kept: Sequence[int]) -> int:
        return _appended_len(full, (kept[0], kept[1], kept[2]), uncut, language)

    kept = [len(items) for items in full]
    if size([0, 0, 0]) > room:
        raise ValueError(
            f"the notes, tool failures and AGENTS.md rules need {size([0, 0, 0])} characters, more than max_chars"
            f" ({max_chars}) leaves beside the model's summary; raise max_chars or shorten those"
            " AGENTS.md sections"
        )
    for j in range(len(full)):
        if size(kept) <= room:
            break
        # the whole list does not fit: the most items that do, beside a note of the rest
        low, high = 0, len(full[j]) - 1
        while low < high:
            kept[j] = mid = (low + high + 1) // 2
            low, high = (mid, high) if size(kept) <= room else (low, mid - 1)
        kept[j] = max(low, 0)
    return kept[0], kept[1], kept[2]


def _appended_len(full: _Lists, kept: _Counts, uncut: _Uncut, language: Language) -> int:
    """The most characters the appended parts take: a new heading, and notes counting every dropped item."""
    omitted = [len(items) - n for items, n in zip(full, kept, strict=True)]
    ids = _identifier_items(full[0][: kept[0]], omitted[0], language)
    heading = f"### {PHRASES['identifiers'][language]}\n" if ids else ""
    files = _appendix(full[1][: kept[1]], full[2][: kept[2]], (omitted[1], omitted[2]), uncut, language)
    return len(heading) + len(ids) + len(files)


def _assemble(fitted: str, full: _Lists, kept: _Counts, uncut: _Uncut, language: Language) -> str:
    """`fitted` with the appended parts; each note counts the dropped items the summary names nowhere else."""

    def build(omitted: tuple[int, int, int]) -> str:
        ids = _identifier_items(full[0][: kept[0]], omitted[0], language)
        files = _appendix(full[1][: kept[1]], full[2][: kept[2]], omitted[1:], uncut, language)
        return _insert_identifiers(fitted, ids, language) + files

    bare = build((0, 0, 0))
    omitted = [sum(i not in bare for i in items[n:]) for items, n in zip(full, kept, strict=True)]
    return build((omitted[0], omitted[1], omitted[2]))


def _identifier_items(ids: Sequence[str], omitted: int, language: Language) -> str:
    """The list items of `ids`, and a note counting `omitted` more when there are any."""
    notes = [_MORE[language].format(n=omitted)] if omitted else []
    return "".join(render_item(i) + "\n" for i in [*map(_listed, ids), *notes])


def _appendix(
    read: Sequence[str],
    modified: Sequence[str],
    omitted: tuple[int, int],
    uncut: _Uncut,
    language: Language,
) -> str:
    """The parts after the model's text: notes, failures and file lists under Critical Context, then the rules."""
    blocks: list[str] = []
    for title, items, dropped in (
        (_NOTES[language], list(uncut.notes), 0),
        (_STATED[language], list(uncut.stated), 0),
        (PLAN_TITLE, list(uncut.plan), 0),
        (JOBS_TITLE, list(uncut.jobs), 0),
        (_FAILURES[language], list(uncut.failures), 0),
        (PHRASES["files_read"][language], [_listed(p) for p in read], omitted[0]),
        (PHRASES["files_modified"][language], [_listed(p) for p in modified], omitted[1]),
    ):
        notes = [_MORE_FILES[language].format(n=dropped)] if dropped else []
        if items or notes:
            blocks.append(f"\n### {title}\n" + "".join(render_item(i) + "\n" for i in [*items, *notes]))
    if uncut.rules:
        blocks.append(f"\n## {_RULES_TITLE}\n")
        blocks.extend(f"\n### {name}\n{body}\n" for name, body in uncut.rules.items())
    return "".join(blocks)


def _listed(text: str) -> str:
    """`text` as a list item that keeps it verbatim: a code span, or a fenced block when it spans lines."""
    if "\n" not in text:
        return code_span(text)
    ticks = "`" * max([3, *(len(run) + 1 for run in re.findall(r"`+", text))])
    return f"\n{ticks}\n{text}\n{ticks}"


def _unlisted(item: str) -> str | None:
    """The text `_listed` made `item` of; None for an item of several lines it did not make."""
    fenced = _FENCED_ITEM.fullmatch(item)
    if fenced:
        return fenced.group(2)
    return unquote(item) if "\n" not in item else None


def _insert_identifiers(text: str, items: str, language: Language) -> str:
    """`text` with its Critical Context made last and one Exact identifiers subsection made last in it,
    holding the model's own identifier items (wherever it wrote them) and then `items`, so that the
    lists appended below stay in Critical Context."""
    lines = text.splitlines()
    heads = headings(lines, HEADING)
    ends = [h[0] for h in heads[1:]] + [len(lines)]
    sections = [  # (start, end) of each ## section, with its title
        (at, next((j for j, level, _ in heads[k + 1 :] if level == 2), len(lines)), title)
        for k, (at, level, title) in enumerate(heads)
        if level == 2
    ]
    critical = next(((a, b) for a, b, title in sections if canonical_title(title) == "Critical Context"), None)
    own = [  # (start, end) of each identifier subsection the model wrote, those in Critical Context first
        (at, end)
        for (at, level, title), end in zip(heads, ends, strict=True)
        if level == 3 and title.strip().lower() in _IDENTIFIER_TITLES
    ]
    own.sort(key=lambda span: critical is None or not critical[0] < span[0] < critical[1])
    if not own and not items:
        subsection: list[str] = []
    else:
        heading = lines[own[0][0]] if own else f"### {PHRASES['identifiers'][language]}"
        body = [line for a, b in own for line in _trimmed(lines[a + 1 : b])] + items.splitlines()
        body = _items_once(body)  # an item the model wrote in two of its subsections is listed once
        subsection = [heading, *_without_placeholders(body)]
    # a subsection moved out of the end of a section leaves the blank line before the next section
    ends_section = {at for at, level, _ in heads if level == 2}
    moved = {j for a, b in own for j in range(a, a + 1 + len(_trimmed(lines[a + 1 : b])) if b in ends_section else b)}
    if critical is None:  # not possible for a valid summary; kept whole anyway
        critical = (len(lines), len(lines))
        lines = [*lines, "## Critical Context"]
    a, b = critical
    before = [line for j, line in enumerate(lines[:a]) if j not in moved]
    after = [line for j, line in enumerate(lines[b:], start=b) if j not in moved]
    section = _trimmed([line for j, line in enumerate(lines[a:b], start=a) if j not in moved])
    rest = _trimmed([*_trimmed(before), "", *after]) if before and after else _trimmed(before or after)
    return "\n".join([*rest, "", *section, *subsection] if rest else [*section, *subsection]) + "\n"


def _items_once(lines: Sequence[str]) -> list[str]:
    """`lines` without a one-line list item ("- ...") that an earlier line already is."""
    seen: set[str] = set()
    out: list[str] = []
    for line in lines:
        if line.startswith("- ") and line in seen:
            continue
        seen.add(line)
        out.append(line)
    return out


def _without_lines(text: str, drop: set[str]) -> str:
    """`text` without its lines (outside code fences) that are one of `drop`, exactly, once stripped."""
    lines = text.splitlines()
    outside = set(unfenced(lines))
    kept = [line for j, line in enumerate(lines) if j not in outside or line.strip() not in drop]
    return "\n".join(kept) + ("\n" if text.endswith("\n") else "") if len(kept) < len(lines) else text


def _without_placeholders(lines: Sequence[str]) -> list[str]:
    """`lines` without their "(none)" items (outside code fences), when they hold anything else."""
    outside = unfenced(lines)
    empty = {j for j in outside if _is_placeholder_line(lines[j])}
    if all(j in empty or not lines[j].strip() for j in outside) and len(outside) == len(lines):
        return list(lines)
    return [line for j, line in enumerate(lines) if j not in empty]


def _trimmed(lines: Sequence[str]) -> list[str]:
    """`lines` without blank lines at the end."""
    out = list(lines)
    while out and not out[-1].strip():
        out.pop()
    return out


def _is_placeholder_line(line: str) -> bool:
    m = _BULLET_TEXT.match(line)
    return bool(line.strip()) and is_placeholder(m.group(1) if m else line)
