"""Phase 2 of the extractive summary: a previous summary read back and merged with the new draft, and
everything said once (what the verbatim part quotes is not repeated in the lists).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ctxkeep.messages import Message
from ctxkeep.summarize.extractive.draft import (
    Draft,
    command_of_item,
    first_code,
    has_prefix,
    strip_prefix,
    without_files,
)
from ctxkeep.summarize.facts.collect import RULE_CHARS, Facts, rules_in, unique, unique_keep_last
from ctxkeep.summarize.facts.ledger import Jobs, merge_jobs, merge_todos, parse_job, parse_todo
from ctxkeep.summarize.facts.superseded import SUPERSEDED, mark_superseded, restates
from ctxkeep.summarize.request import Language
from ctxkeep.summarize.sections.markdown import (
    CONTINUE_TITLE,
    JOBS_TITLE,
    PHRASES,
    PLAN_TITLE,
    SECTIONS,
    clip,
    code_span,
    missing_sections,
    omission_note,
    omitted_count,
    parse_sections,
    phrase,
    unquote,
)
from ctxkeep.summarize.verbatim import (
    LEFT_OUT_NOTES,
    listed_lines,
    read_carried,
    recalled_rules,
)

_QUOTED_CHARS = 20  # an item this long or longer that the verbatim part quotes is not said again
_QUOTED_HEAD = 120  # the overall goal or latest ask whose head this long the verbatim part quotes points to it


def _label_keys() -> dict[str, str]:
    keys = {}
    for key in ("files_read", "files_modified", "commands_run", "identifiers"):
        for text in PHRASES[key].values():
            keys[text.lower()] = key
    return keys


_LABEL_KEYS = _label_keys()
_KNOWN_TITLES = frozenset(SECTIONS)


def parse_draft(previous: str) -> Draft:
    """The lists of a previous summary (ours or a model's), read back for merging."""
    for note in LEFT_OUT_NOTES.values():  # a minimal summary's note says what it lacks, not what was done
        previous = previous.replace(note, "")
    parsed = parse_sections(previous)
    draft = Draft()
    goal = parsed.get("Goal", {})
    latest: str | None = None
    for item in _flat(goal):
        if has_prefix(item, "focus"):
            continue  # a focus is for the compaction that asked for it
        if has_prefix(item, "latest_ask"):
            latest = strip_prefix(item, "latest_ask")
        else:
            draft.goal.append(item)
    if latest:
        draft.goal.append(latest)
        draft.has_latest = True
    draft.constraints = _flat(parsed.get("Constraints & Preferences", {}))
    progress = parsed.get("Progress", {})
    draft.done = progress.get("", []) + progress.get("Done", [])
    draft.in_progress = list(progress.get("In Progress", []))
    draft.blocked = list(progress.get("Blocked", []))
    draft.plan = tuple(t for i in progress.get(PLAN_TITLE, []) if (t := parse_todo(i)) is not None)
    draft.jobs = Jobs(running=tuple(j for i in progress.get(JOBS_TITLE, []) if (j := parse_job(i)) is not None))
    for sub, items in progress.items():
        if sub not in ("", "Done", "In Progress", "Blocked", PLAN_TITLE, JOBS_TITLE):
            draft.done.extend(f"{sub}: {i}" for i in items)
    draft.decisions = _flat(parsed.get("Key Decisions", {}))
    draft.next_steps = _flat(parsed.get("Next Steps", {}))
    for sub, all_items in parsed.get("Critical Context", {}).items():
        key = _LABEL_KEYS.get(sub.strip().lower())
        items = [i for i in all_items if omitted_count(i) is None]
        if key is not None:
            draft.omitted[key] = sum(omitted_count(i) or 0 for i in all_items)
            if key != "commands_run":  # a path or an identifier is one line; anything else is a note
                draft.notes.extend(f"{sub}: {i}" for i in items if "\n" in i)
                items = [i for i in items if "\n" not in i]
        else:
            items = all_items
        if key == "files_read":
            draft.files_read = [unquote(i) for i in items]
        elif key == "files_modified":
            draft.files_modified = [unquote(i) for i in items]
        elif key == "commands_run":
            draft.commands = [(command_of_item(i) or i, i) for i in items]
        elif key == "identifiers":
            draft.identifiers = [unquote(i) for i in items]
        else:
            draft.notes.extend(f"{sub}: {i}" if sub else i for i in items)
    for title, subs in parsed.items():
        if title and title not in _KNOWN_TITLES and title != CONTINUE_TITLE:  # how to go on is written anew
            draft.notes.extend(f"{title}: {i}" for i in _flat(subs))
    if missing_sections(previous):  # a host's own summary: its opening text as notes, its rules as rules
        draft.notes = [i for i in _flat(parsed.get("", {})) if not i.startswith("#")] + draft.notes
        draft.constraints = unique([*draft.constraints, *(clip(r, RULE_CHARS) for r in rules_in(previous))])
    return draft


def _named_split(draft: Draft) -> tuple[list[str], list[str]]:
    """A previous summary's identifiers: those named outside tool results, and the others.

    A summary does not write down where each came from, but ours lists those named outside tool
    results first; so all up to the last one the rest of the summary names (asks, rules, progress,
    decisions, commands; not Blocked, whose error lines come from tool results) were, near enough.
    """
    lists = (draft.goal, draft.constraints, draft.done, draft.in_progress, draft.decisions, draft.next_steps)
    prose = "\n".join([*(i for items in lists for i in items), *draft.notes, *dict(draft.commands), draft.quoted])
    ids = draft.identifiers
    named = [j for j, i in enumerate(ids) if i in prose and _names(prose, i)]
    end = named[-1] + 1 if named else 0
    return ids[:end], ids[end:]


def _names(text: str, identifier: str) -> bool:
    """True when `identifier` stands on its own in `text`, not as part of a longer name."""
    return re.search(rf"(?<![\w./\\-]){re.escape(identifier)}(?![\w/\\-]|\.\w)", text) is not None


def _flat(subs: Mapping[str, Sequence[str]]) -> list[str]:
    return [f"{k}: {i}" if k else i for k, items in subs.items() for i in items]


def merge(old: Draft, new: Draft, facts: Facts, language: Language) -> Draft:
    """One draft from the previous summary's and the new messages' (the rules: docs/summarize.md)."""
    goal = _merge_goal(old.goal, new.goal)
    merged = Draft(goal=goal, has_latest=sum(omitted_count(g) is None for g in goal) > 1)
    merged.constraints = mark_superseded(unique_keep_last(old.constraints + new.constraints))
    # a newer In Progress item replaces an older one, which is not moved to Done: that it was in progress is no
    # evidence that it was finished (the Done items of the new messages say what was)
    merged.done = unique_keep_last(old.done + new.done)
    merged.in_progress = new.in_progress or old.in_progress
    merged.plan = merge_todos(old.plan, new.plan)  # the ledger: each item's newest state, a finished one stays so
    merged.jobs = Jobs(running=merge_jobs(old.jobs.running, new.jobs))  # ... and the jobs not seen to end
    merged.blocked = _merge_blocked(old.blocked, new.blocked, facts, language)
    merged.decisions = unique(new.decisions + old.decisions)
    if facts.asks or new.next_steps:
        merged.next_steps = new.next_steps
    else:
        keep = [s for s in old.next_steps if not (facts.answered and has_prefix(s, "pending_ask"))]
        merged.next_steps = keep
    merged.notes = old.notes + new.notes
    merged.files_modified = unique(new.files_modified + old.files_modified)
    modified = set(merged.files_modified)
    merged.files_read = [p for p in unique(new.files_read + old.files_read) if p not in modified]
    seen = {c for c, _ in new.commands}
    merged.commands = new.commands + [(c, i) for c, i in old.commands if c not in seen]
    # named outside tool results before found in them only, each newest first (nothing new: as they were)
    old_named, old_found = _named_split(old) if new.identifiers else ([], old.identifiers)
    identifiers = new.identifiers[: new.named] + old_named + new.identifiers[new.named :] + old_found
    merged.identifiers = without_files(identifiers, merged.files_modified + merged.files_read)
    merged.omitted = dict(old.omitted)
    return merged


def with_recovered_rules(draft: Draft, previous: str | None, recalled: Sequence[Message] = ()) -> Draft:
    """`draft` (the previous summary's, read back) with the rules of the user's messages that summary carried
    verbatim, in the order they were said: the first message's before its Constraints, the newest messages'
    after (`carried_rules`); and, before all, those of the user's archived messages `recalled` (a squeezed
    summary dropped some: they come back)."""
    old = read_carried(previous) if previous else None
    first = rules_in(old.first) if old is not None and old.first else []
    newest = [r for text in (old.newest if old is not None else ()) for r in rules_in(text)]
    if recalled:  # the rules a squeezed summary said it left out are back: its note no longer holds
        draft.constraints = [c for c in draft.constraints if omitted_count(c) is None]
    ordered = [*recalled_rules(recalled), *first, *draft.constraints, *newest]
    draft.constraints = mark_superseded(unique_keep_last(clip(r, RULE_CHARS) for r in ordered))
    return draft


def said_once(draft: Draft, appendix: str, language: Language) -> Draft:
    """`draft` without what it would say twice.

    What the verbatim part (`appendix`) quotes is not said again: an ask it quotes is left out of Goal
    (the overall goal and the latest ask become pointers to it), and an item of the other lists it
    quotes is left out. A rule leaves Constraints only when this very appendix shows it whole (a message
    cut to its head and tail may not): when its message leaves the verbatim part, the next summary takes
    the rule from this one's verbatim texts (`with_recovered_rules`), and a squeezed one that cuts it says so,
    so that the one after restores it from the archive (`with_recalled`). A superseded rule stays, and
    so does the newest statement beside it. A rule another one contains is dropped too, and an item a
    list already holds is not listed again in a later one.
    """
    draft = replace(draft)  # a new draft (its lists replaced, not changed): the caller's stays as it was
    quoted = " ".join(appendix.split())
    lines = listed_lines(appendix)

    def said(item: str, head: bool = False) -> bool:
        """True when the verbatim part quotes `item` (with `head`: its first `_QUOTED_HEAD` characters, an
        ask the verbatim part cut to its head and tail, the archive having the rest)."""
        bare = " ".join(item.removesuffix("…").split())
        for key in ("latest_ask", "pending_ask"):
            bare = strip_prefix(bare, key) if has_prefix(bare, key) else bare
        if head and len(bare) > _QUOTED_HEAD:
            bare = bare[:_QUOTED_HEAD]
        return item in lines or (len(bare) >= _QUOTED_CHARS and bare in quoted)

    # a rule another one contains says nothing more (a superseded statement contains its rule: not that)
    superseded = [o.removesuffix(SUPERSEDED).rstrip() for o in draft.constraints if o.endswith(SUPERSEDED)]
    rules = [
        c
        for c in draft.constraints
        if not any(c != o and c in o and not o.endswith(SUPERSEDED) for o in draft.constraints)
        and (c.endswith(SUPERSEDED) or c not in appendix or any(restates(old, c) for old in superseded))
    ]
    listed = set(draft.constraints)
    pointers = {phrase(k, lang) for k in ("first_quoted", "newest_quoted") for lang in ("en", "zh")}
    last = len(draft.goal) - 1 if draft.has_latest else len(draft.goal)
    goal: list[str] = []
    for j, ask in enumerate(draft.goal):
        if j == 0:
            goal.append(phrase("first_quoted", language) if said(ask, head=True) else ask)
        elif j >= last:
            goal.append(phrase("newest_quoted", language) if said(ask, head=True) else ask)
        elif ask not in listed and ask not in pointers and not said(ask):
            goal.append(ask)
    draft.goal = goal
    draft.has_latest = draft.has_latest and sum(omitted_count(g) is None for g in draft.goal) > 1
    draft.constraints = rules
    seen = set(draft.goal) | set(rules)
    for name in ("done", "in_progress", "blocked", "decisions", "next_steps", "notes"):
        kept = []
        for item in getattr(draft, name):
            if has_prefix(item, "pending_ask") and said(item):  # the latest ask is quoted: say only that it is open
                item = phrase("latest_unanswered", language)
            elif item in seen or (name != "blocked" and said(item)):
                continue
            seen.add(item)
            kept.append(item)
        setattr(draft, name, kept)
    return draft


def _merge_goal(old: list[str], new: list[str]) -> list[str]:
    """Overall goal first (the oldest), then the asks, each once, in the order last asked.

    A note of asks omitted before stays right after the overall goal.
    """
    combined = [g for g in old + new if omitted_count(g) is None]
    if not combined:
        return []
    omitted = sum(omitted_count(g) or 0 for g in old)
    overall = combined[0]
    rest = unique_keep_last(g for g in combined[1:] if g != overall)
    return [overall, *([omission_note(omitted, "en")] if omitted else []), *rest]


def _merge_blocked(old: list[str], new: list[str], facts: Facts, language: Language) -> list[str]:
    resolved_mark = phrase("resolved", language)
    kept: list[str] = []
    notes = [item for item in old if omitted_count(item) is not None]
    for item in old:
        if omitted_count(item) is not None:
            continue
        # "Bash (exit 1): `command` — error", as `failure_item` wrote it
        target = first_code(item) or ""
        if target and _cut_after(item, target):
            target += "…"  # the head of a longer command (`failure_item`): what is left of it is judged
        tool = item.split(" (", 1)[0] if " (" in item else ""
        if not _has_mark(item, "resolved") and target and facts.fixes(tool, target):
            item = f"{item} {resolved_mark}"
        kept.append(item)
    items = unique(new + kept)
    open_ = [i for i in items if not _has_mark(i, "resolved")]
    return open_ + [i for i in items if _has_mark(i, "resolved")] + notes


def _cut_after(item: str, shown: str) -> bool:
    """True when the code span `shown` of `item` is followed by a "[N more characters ...]" note."""
    after = item.split(code_span(shown), 1)[-1].lstrip(" …")
    return any(after.startswith(p.split("{", 1)[0]) for p in PHRASES["truncated"].values())


def _has_mark(item: str, key: str) -> bool:
    return any(item.endswith(p) for p in PHRASES[key].values())
