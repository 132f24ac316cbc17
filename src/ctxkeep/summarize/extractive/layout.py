"""Phase 3 of the extractive summary: the draft laid out as sections, with the caps and the plan of steps
(`Shorten`, `Drop`) that `fit_sections` follows when the summary is too long.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import partial

from ctxkeep.summarize.extractive.draft import ASK_CHARS, Draft, command_of_item, failed_command, labeled
from ctxkeep.summarize.facts.collect import (
    GOAL_CHARS,
    MAX_IDENTIFIERS,
    MAX_NEXT,
    unique,
)
from ctxkeep.summarize.facts.decisions import MAX_DECISIONS
from ctxkeep.summarize.facts.identifiers import find_identifiers
from ctxkeep.summarize.facts.ledger import COMPLETED, Todo, parse_todo
from ctxkeep.summarize.facts.runs import MAX_FAILURES
from ctxkeep.summarize.facts.shell import command_head, command_paths
from ctxkeep.summarize.request import Language
from ctxkeep.summarize.sections.fit import Drop, Shorten, Step
from ctxkeep.summarize.sections.markdown import (
    ITEM_CHARS,
    JOBS_TITLE,
    PLAN_TITLE,
    RULES_TITLE,
    Sections,
    clip,
    code_span,
    evidence_tail,
    head_of,
    is_placeholder,
    omission_note,
    omitted_count,
    phrase,
)

# Caps before fitting to size: enough to be useful, few enough that one section cannot crowd out the rest.
_MAX_ASKS = 12
_MAX_CONSTRAINTS = 40
_MAX_IN_PROGRESS = 4
_MAX_DONE = 300
_MAX_PLAN = 40  # todo items in the ledger; past it the oldest finished ones go first
_LONGITEM_CHARS = 300  # an item longer than this (or of several lines) has a short form for tight room
_NAMES_CHARS = 160  # identifiers named in the cut-off part of a shortened command
_LAST_KEPT = 3  # the newest files modified and failing commands that outlast the others of both

# fmt: off
_STOPWORDS = frozenset({
    "the", "and", "for", "with", "about", "from", "into", "that", "this", "what", "when", "where", "which", "focus",
})
# fmt: on


def sections_of(
    draft: Draft, language: Language, focus: str | None, terms: Sequence[str], rules: Sequence[str] = ()
) -> tuple[Sections, list[Step]]:
    """The draft as sections (items ranked by the focus `terms` first), and the plan `fit_sections` follows.

    The `rules` of Constraints (the newest, within the user's budget) are the last items dropped; the other
    rules go after the state of the work but before the newest files modified and failing commands.
    """

    def first(items: list[str]) -> list[str]:
        if not terms:
            return items
        hit = [i for i in items if any(t in i.lower() for t in terms)]
        return hit + [i for i in items if i not in hit]

    # an item reading "(none)" would vanish when the summary is read back, and say nothing anyway
    for name in ("constraints", "done", "in_progress", "blocked", "decisions", "next_steps", "notes"):
        setattr(draft, name, [i for i in getattr(draft, name) if not is_placeholder(i)])

    goal_items: list[str] = []
    if focus:
        goal_items.append(labeled("focus", clip(" ".join(focus.split()), ASK_CHARS), language))
    asks = [a for a in draft.goal if omitted_count(a) is None]
    notes = [a for a in draft.goal if omitted_count(a) is not None]
    protected = set(goal_items)
    if asks:
        overall = clip(asks[0], GOAL_CHARS)
        middle = [clip(a, ASK_CHARS) for a in (asks[1:-1] if draft.has_latest else asks[1:])]
        omitted = sum(omitted_count(n) or 0 for n in notes) + max(0, len(middle) - _MAX_ASKS)
        middle = middle[max(0, len(middle) - _MAX_ASKS) :]
        note = [omission_note(omitted, language)] if omitted else []
        latest = [labeled("latest_ask", clip(asks[-1], GOAL_CHARS), language)] if draft.has_latest else []
        goal_items += [overall, *note, *first(middle), *latest]
        protected |= {overall, *latest}

    ctx: dict[str, list[str]] = {"": first(draft.notes)}
    for key, items in (
        ("files_read", [code_span(p) for p in draft.files_read]),
        ("files_modified", [code_span(p) for p in draft.files_modified]),
        ("commands_run", _commands_once(draft.commands, language)),
        ("identifiers", [code_span(i) for i in draft.identifiers]),
    ):
        items = _cap(first(items), MAX_IDENTIFIERS if key == "identifiers" else len(items), "tail", language)
        if draft.omitted.get(key):
            items.append(omission_note(draft.omitted[key], language))
        if items:
            ctx[phrase(key, language)] = items
    if not ctx[""]:
        del ctx[""]

    sections: Sections = {
        "Goal": {"": goal_items},
        RULES_TITLE: {"": first(_cap(draft.constraints, _MAX_CONSTRAINTS, "head", language))},
        "Progress": {
            "Done": _cap(draft.done, _MAX_DONE, "head", language),
            "In Progress": _cap(draft.in_progress, _MAX_IN_PROGRESS, "tail", language),
            "Blocked": _cap(draft.blocked, MAX_FAILURES, "tail", language),
            # the ledger, only when the agent keeps a todo list (an empty one would read "(none)" in every summary)
            **({PLAN_TITLE: _plan_items(draft.plan, language)} if draft.plan else {}),
            **({JOBS_TITLE: [j.render() for j in draft.jobs.running]} if draft.jobs.running else {}),
        },
        "Key Decisions": {"": first(_cap(draft.decisions, MAX_DECISIONS, "tail", language))},
        "Next Steps": {"": first(_cap(draft.next_steps, MAX_NEXT, "tail", language))},
        "Critical Context": ctx,
    }
    cc = "Critical Context"
    kept_rules = set(rules)
    commands = phrase("commands_run", language)
    modified = phrase("files_modified", language)
    failing = [i for i in ctx.get(commands, []) if failed_command(i)]
    newest = set(ctx.get(modified, [])[:_LAST_KEPT] + failing[:_LAST_KEPT])
    plan: list[Step] = [Shorten(section=cc, subsection=commands, form=partial(_short_command, language=language))]
    plan += [
        Shorten(section=title, subsection=sub, form=partial(_short_item, language=language))
        for title, subs in sections.items()
        for sub in subs
        # goal items are clipped already; a rule is the user's words, whole or left out, never cut
        if title not in ("Goal", RULES_TITLE) and (title, sub) != (cc, commands)
    ]
    plan += [
        Drop(section="Progress", subsection="Done", end="head"),
        Drop(section=cc, subsection=phrase("identifiers", language)),
        Drop(section=cc, subsection=commands, only=lambda i: not failed_command(i)),
        Drop(section="Key Decisions"),
        Drop(section=cc),
        Drop(section="Goal", end="head", only=lambda i: i not in protected),
        Drop(section=cc, subsection=phrase("files_read", language), final=True),
        # the ledger is the state of the work: its finished items go late, its open ones after In Progress
        Drop(section="Progress", subsection=PLAN_TITLE, end="head", only=_finished),
        Drop(section="Progress", subsection="Blocked"),
        Drop(section="Next Steps"),
        Drop(section="Progress", subsection="In Progress"),
        Drop(section="Progress", subsection=PLAN_TITLE, end="head"),
        Drop(section="Progress", subsection=JOBS_TITLE, end="head"),
        Drop(section=RULES_TITLE, end="head", final=True, only=lambda i: i not in kept_rules),
        # the newest few files modified and failing commands outlast the older ones of both
        Drop(section=cc, subsection=modified, final=True, only=lambda i: i not in newest),
        Drop(section=cc, subsection=commands, final=True, only=lambda i: i not in newest),
        Drop(section=cc, subsection=modified, final=True),
        Drop(section=cc, subsection=commands, final=True),
        # the newest of the user's rules go last: budget order
        Drop(section=RULES_TITLE, end="head", final=True),
    ]
    return sections, plan


def _plan_items(plan: Sequence[Todo], language: Language) -> list[str]:
    """The ledger's items as the Plan list shows them, at most `_MAX_PLAN`: past it, the oldest finished
    items are left out first (one note says how many), so every open item stays."""
    extra = max(0, len(plan) - _MAX_PLAN)
    finished = [j for j, t in enumerate(plan) if t.status == COMPLETED][:extra]
    left = set(finished)
    kept = [t.render() for j, t in enumerate(plan) if j not in left]
    return ([omission_note(len(left), language)] if left else []) + kept


def _finished(item: str) -> bool:
    todo = parse_todo(item)
    return todo is not None and todo.status == COMPLETED


def _commands_once(commands: Sequence[tuple[str, str]], language: Language) -> list[str]:
    """The items of Commands run (newest first), a multi-line command that would repeat lines a newer one
    already shows in its short form: its `command_head` and how many characters the archive has beyond it,
    with its outcomes. A failing one when it repeats half its lines or more (a commit retried with the same
    message, a script run again with a line changed); a successful one when it repeats any (a heredoc's
    terminator, a commit's trailer: what it did is in Done, its text in the archive)."""
    shown: set[str] = set()
    items: list[str] = []
    for command, item in commands:
        body = [line.strip() for line in command.splitlines()[1:] if line.strip()]
        repeats = sum(line in shown for line in body)
        failing = failed_command(item)
        if "\n" in item and body and repeats and (not failing or 2 * repeats >= len(body)):
            head = command_head(command)
            more = phrase("truncated", language, n=len(command.strip()) - len(head))
            item = f"{code_span(head)} … {more} {_outcomes(item)}"
        elif "\n" in item:
            shown.update(line.strip() for line in command.splitlines())
        items.append(item)
    return items


def _outcomes(item: str) -> str:
    """The outcomes an item of Commands run ends its first line with: "(exit 1 → ok)"."""
    first = item.split("\n", 1)[0]
    return first[first.rindex("(") :] if "(" in first else ""


def _short_item(item: str, language: Language) -> str:
    """A long or multi-line item as its first line, cut to `ITEM_CHARS`, saying how much the archive has."""
    if "\n" not in item and len(item) <= _LONGITEM_CHARS:
        return item
    tail = evidence_tail(item)  # a Done item's evidence outlasts its words
    body = item.removesuffix(tail)
    first = body.split("\n", 1)[0].rstrip()
    shown = head_of(clip(first, max(ITEM_CHARS - len(tail), ITEM_CHARS // 2)).removesuffix("…"), len(first))
    return f"{shown}… {phrase('truncated', language, n=len(body) - len(shown))}{tail}"


def _short_command(item: str, language: Language) -> str:
    """An item of Commands run with its command cut to `command_head`, followed by how many characters the
    archive has beyond it, the paths and identifiers named in the part cut off, and its outcome."""
    command = command_of_item(item)
    if command is None:
        return _short_item(item, language)
    head = command_head(command)
    if head == command.strip():
        return item
    lines = item.split("\n")
    if len(lines) >= 3 and re.fullmatch(r"`{3,}|~{3,}", lines[1].strip()):
        ending = _outcomes(item)  # "(exit 1)" above a fenced command
    else:
        span = re.match(r"(`+).+?\1", item)
        ending = lines[0][span.end() :].strip() if span else ""  # "`command` (exit 1)"
    names: list[str] = []
    room = _NAMES_CHARS
    read, written = command_paths(command)
    for name in unique([*read, *written, *(i.text for i in find_identifiers(command))]):
        if name not in head and len(code_span(name)) + 2 <= room:
            names.append(code_span(name))
            room -= len(names[-1]) + 2
    n = len(command) - len(head)
    if names:
        more = phrase("truncated_naming", language, n=n, names=", ".join(names))
    else:
        more = phrase("truncated", language, n=n)
    return f"{code_span(head)} … {more} {ending}".rstrip()


def _cap(items: list[str], limit: int, end: str, language: Language) -> list[str]:
    """At most `limit` items, dropping from `end`; what was dropped (and older notes) becomes one note."""
    real = [i for i in items if omitted_count(i) is None]
    dropped = sum(omitted_count(i) or 0 for i in items) + max(0, len(real) - limit)
    kept = real[-limit:] if end == "head" else real[:limit]
    if not dropped:
        return kept
    note = omission_note(dropped, language)
    return [note, *kept] if end == "head" else [*kept, note]


def focus_terms(focus: str) -> tuple[str, ...]:
    """Words of the focus to look for: Latin words of 3+ letters, and each pair of CJK characters."""
    terms: list[str] = []
    for word in re.findall(r"[A-Za-z0-9_./-]{3,}", focus.lower()):
        if word not in _STOPWORDS:
            terms.append(word)
    for run in re.findall(r"[\u3400-\u4dbf\u4e00-\u9fff]+", focus):
        terms.extend(run[j : j + 2] for j in range(max(1, len(run) - 1)))
    return tuple(unique(terms))


def distinct_notes(sections: Sections, language: Language) -> Sections:
    """`sections` with an omission note that reads the same as an earlier list's naming its own list."""
    seen: set[str] = set()
    out: Sections = {}
    for title, subs in sections.items():
        out[title] = {}
        for sub, items in subs.items():
            kept = []
            for item in items:
                count = omitted_count(item)
                if count is not None and item in seen:
                    item = omission_note(count, language, where=sub or title)
                seen.add(item)
                kept.append(item)
            out[title][sub] = kept
    return out
