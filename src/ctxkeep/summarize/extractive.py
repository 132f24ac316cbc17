"""The built-in summarizer: the summary filled in from the messages themselves, with no model.

    messages ─► collect_facts ─► Facts ─► draft ─► merge with the previous summary ─► fit ─► Markdown

This module turns facts (and a previous summary) into sections: the draft, the merge, the caps
and the order things are dropped in to fit the size. File paths and the identifying part of
failing commands stay verbatim whatever the size. Where each section comes from, how a merge
works and what is dropped first: docs/summarize.md.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from ctxkeep.settings import MIN_SUMMARY_CHARS
from ctxkeep.summarize.facts.collect import (
    GOAL_CHARS,
    MAX_DECISIONS,
    MAX_IDENTIFIERS,
    MAX_NEXT,
    SUPERSEDED,
    Facts,
    collect_facts,
    mark_superseded,
    newest_first,
    restates,
    rules_in,
    unique,
    unique_keep_last,
)
from ctxkeep.summarize.facts.identifiers import find_identifiers, without_redundant
from ctxkeep.summarize.facts.runs import (
    MAX_FAILURES,
    ToolRun,
    call_text,
    checks_passed,
    failure_item,
    outcome,
    todo_items,
)
from ctxkeep.summarize.facts.shell import command_head, command_paths
from ctxkeep.summarize.request import Language, SummaryRequest, resolve_language
from ctxkeep.summarize.sections.fit import Drop, Shorten, Step, fit_sections
from ctxkeep.summarize.sections.markdown import (
    CONTINUE_TITLE,
    ITEM_CHARS,
    PHRASES,
    SECTIONS,
    Sections,
    clip,
    code_span,
    evidence_tail,
    framed,
    framing_chars,
    head_of,
    is_placeholder,
    missing_sections,
    omission_note,
    omitted_count,
    parse_sections,
    phrase,
    render_sections,
    unquote,
)
from ctxkeep.summarize.verbatim import (
    carried,
    carried_rules,
    host_summary,
    listed_lines,
    render_carried,
    split_carried,
)

# Caps before fitting to size: enough to be useful, few enough that one section cannot crowd out the rest.
_MAX_ASKS = 12
_MAX_CONSTRAINTS = 20
_MAX_IN_PROGRESS = 4
_MAX_DONE = 300
_MAX_COMMAND_CHARS = 2_000
_LONGITEM_CHARS = 300  # an item longer than this (or of several lines) has a short form for tight room
_NAMES_CHARS = 160  # identifiers named in the cut-off part of a shortened command
_ASK_CHARS = 200
_LABEL_CHARS = 60  # of a multi-line command's first line, named above its fence
_TASK_CHARS = 80  # of the ask that heads a task's Done item
_LAST_KEPT = 3  # the newest files modified and failing commands that outlast the others of both
_TASK_FILES = 5  # files a task's Done item names (the newest); Files modified lists them all
_SHORT_FRAMING_BELOW = 2 * MIN_SUMMARY_CHARS
_QUOTED_CHARS = 20  # an item this long or longer that the verbatim part quotes is not said again
_QUOTED_HEAD = 120  # the overall goal or latest ask whose head this long the verbatim part quotes points to it
_EVIDENCE_REFS = 3  # calls a Done item points to as its evidence, the newest
# a finding that says checks pass: written as done only after a check that passed (`checks_passed`)
_CLAIMS_CHECKS = re.compile(
    r"(?i)\b(?:tests?|specs?|checks?|suite|build|lint\w*|type ?checks?|ci|e2e|end-to-end)\b.{0,60}"
    r"\b(?:pass(?:es|ed|ing)?|succeed(?:s|ed)?|green|clean)\b|\ball (?:\d+ )?(?:tests?|checks?)\b|测试.{0,10}通过"
)

# fmt: off
_STOPWORDS = frozenset({
    "the", "and", "for", "with", "about", "from", "into", "that", "this", "what", "when", "where", "which", "focus",
})
# fmt: on


# --- the summary -----------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Draft:
    """The summary's lists before they become Markdown; items are final text unless said otherwise."""

    goal: list[str] = field(default_factory=list)  # overall goal first, latest ask last (no labels)
    has_latest: bool = False  # the last goal item is the latest ask
    constraints: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # free items of Critical Context
    files_read: list[str] = field(default_factory=list)  # bare paths
    files_modified: list[str] = field(default_factory=list)  # bare paths
    commands: list[tuple[str, str]] = field(default_factory=list)  # (command, item)
    identifiers: list[str] = field(default_factory=list)  # bare identifiers
    named: int = 0  # how many of the first identifiers were named outside tool results (new messages only)
    quoted: str = ""  # the verbatim part that went with a previous summary: the user's words it names things in
    omitted: dict[str, int] = field(default_factory=dict)  # Critical Context list -> items dropped before


class ExtractiveSummarizer:
    """The model-free `Summarizer`: extracts the summary from the messages; deterministic, no I/O."""

    def summarize(self, request: SummaryRequest) -> str:
        """The summary of ``request.messages``, merged into ``request.previous`` when given."""
        language = resolve_language(request)
        facts = collect_facts(request.messages, originals=request.originals)
        draft = _draft(facts, language)
        appendix = render_carried(carried(request.messages, request.previous), max_chars=request.max_chars)
        if request.previous:
            previous: str | None = split_carried(request.previous)[0]
        else:  # the host's own summary, when it compacted before us
            previous = host_summary(request.messages, max_chars=request.max_chars)
        if previous is not None and previous.strip():
            old = _parse_draft(previous)
            old.quoted = split_carried(request.previous)[1] if request.previous else ""
            draft = _merge(old, draft, facts, language)
        if request.previous:
            draft = _with_recovered_rules(draft, request.previous)
        draft = _said_once(draft, appendix, language)
        terms = _focus_terms(request.focus) if request.focus else ()
        sections, plan = _sections(draft, language, request.focus, terms)

        def protect(item: str) -> bool:
            low = item.lower()
            return any(t in low for t in terms)

        short = request.max_chars < _SHORT_FRAMING_BELOW  # near the floor, the framing's words cost the lists
        room = request.max_chars - len(appendix) - framing_chars(language, short=short)
        fitted = fit_sections(
            sections, max_chars=room, plan=plan, language=language, protect=protect if terms else None
        )
        named = _distinct_notes(fitted, language)
        if len(render_sections(named, language=language)) <= room:  # naming the list costs a few characters
            fitted = named
        return framed(render_sections(fitted, language=language), appendix, language=language, short=short)


def _draft(facts: Facts, language: Language) -> _Draft:
    runs = facts.runs
    draft = _Draft(
        goal=list(facts.asks),
        has_latest=len(facts.asks) > 1,
        constraints=list(facts.constraints),
        decisions=list(facts.decisions),
        files_read=facts.files_read,
        files_modified=facts.files_modified,
        commands=_commands(runs, language),
    )
    draft.done = _done(facts, language) + _done_todos(facts, language)
    draft.in_progress = [t for s, t in facts.todos if s == "in_progress"] + list(facts.intents)
    draft.blocked = unique(failure_item(r, facts.resolved(r), language) for r in facts.failures)
    draft.next_steps = [t for s, t in facts.todos if s == "pending"] + list(facts.plans)
    if facts.asks and not facts.answered:
        draft.next_steps.append(_labeled("pending_ask", clip(facts.asks[-1], _ASK_CHARS), language))
    draft.identifiers = _identifiers(facts.identifiers, draft.files_read + draft.files_modified)
    named = set(facts.identifiers[: facts.named])
    draft.named = sum(i in named for i in draft.identifiers)
    return draft


def _identifiers(identifiers: Sequence[str], files: Sequence[str]) -> list[str]:
    """`identifiers` without the files listed on their own and without those a longer one names."""
    listed = set(files)
    return without_redundant((i for i in identifiers if i not in listed), known=files)


def _done(facts: Facts, language: Language) -> list[str]:
    """What was done, one item per task (the user's ask the work followed), oldest first, each ending with
    its evidence: the tool calls of the archive that show it (id and outcome; a commit by its hash).

    Each says what changed (files modified by edit tools and commands, other actions, commits), which
    checks passed (tests, linters: by name; the commands themselves are listed once, under Commands
    run) and what the assistant found or concluded. Work before the first ask of these messages
    continues the task of the previous summary. Announced work ("Let me run the tests") is not done,
    and neither is a claim with no call behind it: a finding counts only after a successful call of
    its task (the newest before it is its evidence), and one that says checks pass ("all tests pass")
    only after a check that passed, so a plan's "all tests pass" is never written as done.
    """
    starts = [i for i, _ in facts.tasks]
    groups: dict[int, dict[str, list[str]]] = {}
    proof: dict[int, list[str]] = {}
    done_runs = [r for r in facts.runs if r.has_result and not r.failed]

    def task_of(index: int) -> int:
        return bisect_right(starts, index) - 1

    def part(task: int, key: str, said: Sequence[str], run: ToolRun) -> None:
        groups.setdefault(task, {}).setdefault(key, []).extend(said)
        proof.setdefault(task, []).append(_evidence(run, language))

    for run in done_runs:
        task = task_of(run.index)
        if run.paths_modified:
            part(task, "modified", run.paths_modified, run)
        if run.kind == "other":
            part(task, "called", [code_span(call_text(run))], run)
        if run.commit:
            part(task, "committed", [code_span(run.commit)], run)
        if passed := checks_passed(run):
            part(task, "passed", [code_span(c) for c in passed], run)
    for index, sentence in facts.findings:
        if sentence in facts.intents:  # In Progress says it already
            continue
        task = task_of(index)
        before = [r for r in done_runs if r.index < index and task_of(r.index) == task]
        if _CLAIMS_CHECKS.search(sentence):
            before = [r for r in before if checks_passed(r)]
        if before:
            part(task, "found", [sentence], before[-1])
    items = []
    for task in sorted(groups):
        said = {k: unique_keep_last(v) for k, v in groups[task].items() if v}
        if "modified" in said:  # by file name (Files modified has the paths), the newest `_TASK_FILES`
            files = said["modified"]
            shown = [code_span(_file_name(p, files)) for p in files[-_TASK_FILES:]]
            more = [phrase("more_files", language, n=len(files) - _TASK_FILES)] if len(files) > _TASK_FILES else []
            said["modified"] = shown + more
        pieces = [
            f"{phrase(key, language)} {', '.join(said[key]) if key != 'found' else ' '.join(said[key])}"
            for key in ("modified", "committed", "called", "passed", "found")
            if key in said
        ]
        label = (
            phrase("task", language, ask=clip(facts.tasks[task][1], _TASK_CHARS))
            if task >= 0
            else phrase("earlier_task", language)
        )
        refs = ", ".join(unique_keep_last(proof[task])[-_EVIDENCE_REFS:])
        items.append(f"{label} {'; '.join(pieces)} {phrase('evidence', language, refs=refs)}")
    return items


def _done_todos(facts: Facts, language: Language) -> list[str]:
    """The todo items the agent's newest todo call marks completed, each pointing to that call."""
    marked = [r for r in facts.runs if r.kind == "todo" and todo_items(r.arguments)]
    if not marked:
        return []
    ref = phrase("evidence", language, refs=f"{code_span(marked[-1].call_id)} {phrase('todo_list', language)}")
    return [f"{t} {ref}" for s, t in facts.todos if s in ("completed", "done")]


def _evidence(run: ToolRun, language: Language) -> str:
    """A pointer to `run` in the archive: its call id and outcome ("`toolu_01…` exit 0")."""
    return f"{code_span(run.call_id)} {outcome(run, language)}"


def _file_name(path: str, paths: Sequence[str]) -> str:
    """`path`'s file name, or the whole path when another of `paths` has the same name."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    same = sum(p.rstrip("/").rsplit("/", 1)[-1] == name for p in paths)
    return name if name and same == 1 else path


def _commands(runs: Sequence[ToolRun], language: Language) -> list[tuple[str, str]]:
    """(command, item) for every distinct command, newest first, with its outcomes in order."""
    outcomes: dict[str, list[str]] = {}
    for run in runs:
        if run.command is not None:
            outcomes.setdefault(run.command, []).append(outcome(run, language))
    newest = newest_first(r.command for r in runs if r.command is not None)
    return [(c, _command_item(c, outcomes[c])) for c in newest]


def _command_item(command: str, outcomes: Sequence[str]) -> str:
    steps = [o for j, o in enumerate(outcomes) if j == 0 or o != outcomes[j - 1]][-4:]
    ending = f"({' → '.join(steps)})"
    if len(command) > _MAX_COMMAND_CHARS:
        command = f"{command[:_MAX_COMMAND_CHARS]}… [+{len(command) - _MAX_COMMAND_CHARS} chars]"
    if "\n" not in command:
        return f"{code_span(command)} {ending}"
    longest = max((len(run) for run in re.findall(r"`+", command)), default=0)
    fence = "`" * max(3, longest + 1)
    # its first line named above the fence, so two multi-line commands never share an item line
    first = clip(command.split("\n", 1)[0].strip(), _LABEL_CHARS)
    return f"{code_span(first)} {ending}\n{fence}\n{command}\n{fence}"


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
        failing = _failed_command(item)
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


def _command_of_item(item: str) -> str | None:
    """The command an item of Commands run shows (fenced or inline), as `_command_item` wrote it."""
    lines = item.split("\n")
    if len(lines) >= 3 and re.fullmatch(r"`{3,}|~{3,}", lines[1].strip()):
        end = len(lines) - 1 if lines[-1].strip() == lines[1].strip() else len(lines)
        return "\n".join(lines[2:end])
    return _first_code(item)


def _first_code(item: str) -> str | None:
    m = re.search(r"(`+)(.+?)\1", item)
    return unquote(m.group(0)) if m else None


_FAILED_OUTCOME = re.compile(r"(?:exit|退出码) -?[1-9]\d*|\berror\b|出错")


def _failed_command(item: str) -> bool:
    first = item.split("\n", 1)[0]
    last = first.rsplit("(", 1)[-1] if "(" in first else ""
    return bool(_FAILED_OUTCOME.search(last))


# --- merging with the previous summary ----------------------------------------------------------


def _label_keys() -> dict[str, str]:
    keys = {}
    for key in ("files_read", "files_modified", "commands_run", "identifiers"):
        for text in PHRASES[key].values():
            keys[text.lower()] = key
    return keys


_LABEL_KEYS = _label_keys()


def _parse_draft(previous: str) -> _Draft:
    """The lists of a previous summary (ours or a model's), read back for merging."""
    parsed = parse_sections(previous)
    draft = _Draft()
    goal = parsed.get("Goal", {})
    latest: str | None = None
    for item in _flat(goal):
        if _has_prefix(item, "focus"):
            continue  # a focus is for the compaction that asked for it
        if _has_prefix(item, "latest_ask"):
            latest = _strip_prefix(item, "latest_ask")
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
    for sub, items in progress.items():
        if sub not in ("", "Done", "In Progress", "Blocked"):
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
            draft.commands = [(_command_of_item(i) or i, i) for i in items]
        elif key == "identifiers":
            draft.identifiers = [unquote(i) for i in items]
        else:
            draft.notes.extend(f"{sub}: {i}" if sub else i for i in items)
    for title, subs in parsed.items():
        if title and title not in _KNOWN_TITLES and title != CONTINUE_TITLE:  # how to go on is written anew
            draft.notes.extend(f"{title}: {i}" for i in _flat(subs))
    if missing_sections(previous):  # a host's own summary: its opening text as notes, its rules as rules
        draft.notes = [i for i in _flat(parsed.get("", {})) if not i.startswith("#")] + draft.notes
        draft.constraints = unique([*draft.constraints, *(clip(r, ITEM_CHARS) for r in rules_in(previous))])
    return draft


def _named_split(draft: _Draft) -> tuple[list[str], list[str]]:
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


_KNOWN_TITLES = frozenset(SECTIONS)


def _flat(subs: Mapping[str, Sequence[str]]) -> list[str]:
    return [f"{k}: {i}" if k else i for k, items in subs.items() for i in items]


def _has_prefix(item: str, key: str) -> bool:
    return any(item.startswith(p) for p in PHRASES[key].values())


def _strip_prefix(item: str, key: str) -> str:
    for p in PHRASES[key].values():
        if item.startswith(p):
            return item[len(p) :].strip()
    return item


def _merge(old: _Draft, new: _Draft, facts: Facts, language: Language) -> _Draft:
    """One draft from the previous summary's and the new messages' (the rules: docs/summarize.md)."""
    goal = _merge_goal(old.goal, new.goal)
    merged = _Draft(goal=goal, has_latest=sum(omitted_count(g) is None for g in goal) > 1)
    merged.constraints = mark_superseded(unique_keep_last(old.constraints + new.constraints))
    # a newer In Progress item replaces an older one, which is not moved to Done: that it was in progress is no
    # evidence that it was finished (the Done items of the new messages say what was)
    merged.done = unique_keep_last(old.done + new.done)
    merged.in_progress = new.in_progress or old.in_progress
    merged.blocked = _merge_blocked(old.blocked, new.blocked, facts, language)
    merged.decisions = unique(new.decisions + old.decisions)
    if facts.asks or new.next_steps:
        merged.next_steps = new.next_steps
    else:
        keep = [s for s in old.next_steps if not (facts.answered and _has_prefix(s, "pending_ask"))]
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
    merged.identifiers = _identifiers(identifiers, merged.files_modified + merged.files_read)
    merged.omitted = dict(old.omitted)
    return merged


def _distinct_notes(sections: Sections, language: Language) -> Sections:
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


def _with_recovered_rules(draft: _Draft, previous: str) -> _Draft:
    """`draft` with the rules of the user's messages the previous summary carried verbatim (`carried_rules`)."""
    recovered = [clip(r, ITEM_CHARS) for r in carried_rules(previous)]
    if recovered:
        draft.constraints = mark_superseded(unique_keep_last(recovered + draft.constraints))
    return draft


def _said_once(draft: _Draft, appendix: str, language: Language) -> _Draft:
    """`draft` without what it would say twice.

    What the verbatim part (`appendix`) quotes is not said again: an ask it quotes is left out of Goal
    (the overall goal and the latest ask become pointers to it), a rule it quotes out of Constraints
    (a superseded one stays: its mark is news), and an item of the other lists it quotes is left out. A
    rule another one contains is dropped too, and an item a list already holds is not listed again in a
    later one.
    """
    quoted = " ".join(appendix.split())
    lines = listed_lines(appendix)

    def said(item: str, head: bool = False) -> bool:
        """True when the verbatim part quotes `item` (with `head`: its first `_QUOTED_HEAD` characters, an
        ask the verbatim part cut to its head and tail, the archive having the rest)."""
        bare = " ".join(item.removesuffix("…").split())
        for key in ("latest_ask", "pending_ask"):
            bare = _strip_prefix(bare, key) if _has_prefix(bare, key) else bare
        if head and len(bare) > _QUOTED_HEAD:
            bare = bare[:_QUOTED_HEAD]
        return item in lines or (len(bare) >= _QUOTED_CHARS and bare in quoted)

    old = [c for c in draft.constraints if c.endswith(SUPERSEDED)]
    # a quoted rule stays when it is the newest value of one marked superseded: the two read together
    rules = [c for c in draft.constraints if c in old or not said(c) or any(restates(o, c) for o in old)]
    # a rule another one contains says nothing more (a superseded statement contains its rule: not that)
    rules = [c for c in rules if not any(c != o and c in o and not o.endswith(SUPERSEDED) for o in rules)]
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
            if _has_prefix(item, "pending_ask") and said(item):  # the latest ask is quoted: say only that it is open
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
        target = _first_code(item) or ""
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


# --- to sections, with the order things are dropped in when the summary is too long --------------


def _sections(
    draft: _Draft, language: Language, focus: str | None, terms: Sequence[str]
) -> tuple[Sections, list[Step]]:
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
        goal_items.append(_labeled("focus", clip(" ".join(focus.split()), _ASK_CHARS), language))
    asks = [a for a in draft.goal if omitted_count(a) is None]
    notes = [a for a in draft.goal if omitted_count(a) is not None]
    protected = set(goal_items)
    if asks:
        overall = clip(asks[0], GOAL_CHARS)
        middle = [clip(a, _ASK_CHARS) for a in (asks[1:-1] if draft.has_latest else asks[1:])]
        omitted = sum(omitted_count(n) or 0 for n in notes) + max(0, len(middle) - _MAX_ASKS)
        middle = middle[max(0, len(middle) - _MAX_ASKS) :]
        note = [omission_note(omitted, language)] if omitted else []
        latest = [_labeled("latest_ask", clip(asks[-1], GOAL_CHARS), language)] if draft.has_latest else []
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
        "Constraints & Preferences": {"": first(_cap(draft.constraints, _MAX_CONSTRAINTS, "head", language))},
        "Progress": {
            "Done": _cap(draft.done, _MAX_DONE, "head", language),
            "In Progress": _cap(draft.in_progress, _MAX_IN_PROGRESS, "tail", language),
            "Blocked": _cap(draft.blocked, MAX_FAILURES, "tail", language),
        },
        "Key Decisions": {"": first(_cap(draft.decisions, MAX_DECISIONS, "tail", language))},
        "Next Steps": {"": first(_cap(draft.next_steps, MAX_NEXT, "tail", language))},
        "Critical Context": ctx,
    }
    cc = "Critical Context"
    commands = phrase("commands_run", language)
    modified = phrase("files_modified", language)
    failing = [i for i in ctx.get(commands, []) if _failed_command(i)]
    newest = set(ctx.get(modified, [])[:_LAST_KEPT] + failing[:_LAST_KEPT])
    plan: list[Step] = [Shorten(section=cc, subsection=commands, form=partial(_short_command, language=language))]
    plan += [
        Shorten(section=title, subsection=sub, form=partial(_short_item, language=language))
        for title, subs in sections.items()
        for sub in subs
        if title != "Goal" and (title, sub) != (cc, commands)  # goal items are clipped already
    ]
    plan += [
        Drop(section="Progress", subsection="Done", end="head"),
        Drop(section=cc, subsection=phrase("identifiers", language)),
        Drop(section=cc, subsection=commands, only=lambda i: not _failed_command(i)),
        Drop(section="Key Decisions"),
        Drop(section=cc),
        Drop(section="Goal", end="head", only=lambda i: i not in protected),
        Drop(section="Constraints & Preferences", end="head"),
        Drop(section=cc, subsection=phrase("files_read", language), final=True),
        Drop(section="Progress", subsection="Blocked"),
        Drop(section="Next Steps"),
        Drop(section="Progress", subsection="In Progress"),
        # the newest few files modified and failing commands outlast the older ones of both
        Drop(section=cc, subsection=modified, final=True, only=lambda i: i not in newest),
        Drop(section=cc, subsection=commands, final=True, only=lambda i: i not in newest),
        Drop(section=cc, subsection=modified, final=True),
        Drop(section=cc, subsection=commands, final=True),
    ]
    return sections, plan


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
    command = _command_of_item(item)
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


def _focus_terms(focus: str) -> tuple[str, ...]:
    """Words of the focus to look for: Latin words of 3+ letters, and each pair of CJK characters."""
    terms: list[str] = []
    for word in re.findall(r"[A-Za-z0-9_./-]{3,}", focus.lower()):
        if word not in _STOPWORDS:
            terms.append(word)
    for run in re.findall(r"[\u3400-\u4dbf\u4e00-\u9fff]+", focus):
        terms.extend(run[j : j + 2] for j in range(max(1, len(run) - 1)))
    return tuple(unique(terms))


# --- small text tools ----------------------------------------------------------------------------


def _labeled(key: str, text: str, language: Language) -> str:
    label = phrase(key, language)
    return f"{label}{text}" if label.endswith("：") else f"{label} {text}"
