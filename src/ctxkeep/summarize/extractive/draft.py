"""Phase 1 of the extractive summary: the facts as the summary's lists (`Draft`), before any merge.

Done is an account per task, each item ending with its evidence in the archive; the text tools the
later phases share to read items back (their labels, commands, outcomes) live here too.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from ctxkeep.summarize.facts.collect import (
    Facts,
    newest_first,
    unique,
    unique_keep_last,
)
from ctxkeep.summarize.facts.identifiers import without_redundant
from ctxkeep.summarize.facts.ledger import Jobs, Todo
from ctxkeep.summarize.facts.runs import (
    ToolRun,
    call_text,
    checks_passed,
    failure_item,
    outcome,
)
from ctxkeep.summarize.request import Language
from ctxkeep.summarize.sections.markdown import (
    PHRASES,
    clip,
    code_span,
    phrase,
    unquote,
)

_MAX_COMMAND_CHARS = 2_000  # of a command in Commands run
# Where messages `first` to `last` of the request are in the archive ("dialog/2026-12-05.jsonl:120-134"), or None.
Where: TypeAlias = Callable[[int, int], str | None]
ASK_CHARS = 200  # of an ask in Goal and Next Steps
_LABEL_CHARS = 60  # of a multi-line command's first line, named above its fence
_TASK_CHARS = 80  # of the ask that heads a task's Done item
_TASK_FILES = 5  # files a task's Done item names (the newest); Files modified lists them all
_EVIDENCE_REFS = 3  # calls a Done item points to as its evidence, the newest
# a finding that says checks pass: written as done only after a check that passed (`checks_passed`)
_CLAIMS_CHECKS = re.compile(
    r"(?i)\b(?:tests?|specs?|checks?|suite|build|lint\w*|type ?checks?|ci|e2e|end-to-end)\b.{0,60}"
    r"\b(?:pass(?:es|ed|ing)?|succeed(?:s|ed)?|green|clean)\b|\ball (?:\d+ )?(?:tests?|checks?)\b|测试.{0,10}通过"
)


@dataclass(kw_only=True, slots=True)
class Draft:
    """The summary's lists before they become Markdown; items are final text unless said otherwise."""

    goal: list[str] = field(default_factory=list)  # overall goal first, latest ask last (no labels)
    has_latest: bool = False  # the last goal item is the latest ask
    constraints: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    plan: tuple[Todo, ...] = ()  # the ledger: the agent's todo items with their states, carried exactly
    jobs: Jobs = field(default_factory=Jobs)  # the ledger: background jobs running, and those seen to end
    notes: list[str] = field(default_factory=list)  # free items of Critical Context
    files_read: list[str] = field(default_factory=list)  # bare paths
    files_modified: list[str] = field(default_factory=list)  # bare paths
    commands: list[tuple[str, str]] = field(default_factory=list)  # (command, item)
    identifiers: list[str] = field(default_factory=list)  # bare identifiers
    named: int = 0  # how many of the first identifiers were named outside tool results (new messages only)
    quoted: str = ""  # the verbatim part that went with a previous summary: the user's words it names things in
    omitted: dict[str, int] = field(default_factory=dict)  # Critical Context list -> items dropped before


def draft_of(facts: Facts, language: Language, where: Where | None = None) -> Draft:
    """The summary's lists made from `facts` alone, in `language` (the merge with a previous summary comes after).

    With `where` (the archive lines of messages `first` to `last`, `source_of`), each Done and Blocked item names
    its lines in the archive, in the form `ctxkeep recall` accepts.
    """
    runs = facts.runs
    draft = Draft(
        goal=list(facts.asks),
        has_latest=len(facts.asks) > 1,
        constraints=list(facts.constraints),
        decisions=list(facts.decisions),
        files_read=facts.files_read,
        files_modified=facts.files_modified,
        commands=_commands(runs, language),
    )
    # the todo items are said once, in the ledger (Progress / Plan), each with its state
    draft.plan = facts.plan
    draft.jobs = facts.jobs
    draft.done = _done(facts, language, where)
    draft.in_progress = list(facts.intents)
    draft.blocked = unique(
        failure_item(r, facts.resolved(r), language, source=where(r.index, r.index) if where else None)
        for r in facts.failures
    )
    draft.next_steps = list(facts.plans)
    if facts.asks and not facts.answered:
        draft.next_steps.append(labeled("pending_ask", clip(facts.asks[-1], ASK_CHARS), language))
    draft.identifiers = without_files(facts.identifiers, draft.files_read + draft.files_modified)
    named = set(facts.identifiers[: facts.named])
    draft.named = sum(i in named for i in draft.identifiers)
    return draft


def without_files(identifiers: Sequence[str], files: Sequence[str]) -> list[str]:
    """`identifiers` without the files listed on their own and without those a longer one names."""
    listed = set(files)
    return without_redundant((i for i in identifiers if i not in listed), known=files)


def _done(facts: Facts, language: Language, where: Where | None) -> list[str]:
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

    spans: dict[int, list[int]] = {}  # the indexes of the messages of each task's evidence

    def part(task: int, key: str, said: Sequence[str], run: ToolRun) -> None:
        groups.setdefault(task, {}).setdefault(key, []).extend(said)
        proof.setdefault(task, []).append(_evidence(run, language))
        spans.setdefault(task, []).append(run.index)

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
        source = where(min(spans[task]), max(spans[task])) if where else None
        refs = f"{refs}; {source}" if source else refs
        items.append(f"{label} {'; '.join(pieces)} {phrase('evidence', language, refs=refs)}")
    return items


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


def command_of_item(item: str) -> str | None:
    """The command an item of Commands run shows (fenced or inline), as `_command_item` wrote it."""
    lines = item.split("\n")
    if len(lines) >= 3 and re.fullmatch(r"`{3,}|~{3,}", lines[1].strip()):
        end = len(lines) - 1 if lines[-1].strip() == lines[1].strip() else len(lines)
        return "\n".join(lines[2:end])
    return first_code(item)


def first_code(item: str) -> str | None:
    """The text of the first code span of `item`, or None."""
    m = re.search(r"(`+)(.+?)\1", item)
    return unquote(m.group(0)) if m else None


_FAILED_OUTCOME = re.compile(r"(?:exit|退出码) -?[1-9]\d*|\berror\b|出错")


def failed_command(item: str) -> bool:
    """True when an item of Commands run ends in a failing outcome ("(exit 1)", "(ok → error)")."""
    first = item.split("\n", 1)[0]
    last = first.rsplit("(", 1)[-1] if "(" in first else ""
    return bool(_FAILED_OUTCOME.search(last))


def has_prefix(item: str, key: str) -> bool:
    """True when `item` starts with the fixed phrase `key` in either language ("Latest ask:")."""
    return any(item.startswith(p) for p in PHRASES[key].values())


def strip_prefix(item: str, key: str) -> str:
    """`item` without its leading fixed phrase `key` (either language)."""
    for p in PHRASES[key].values():
        if item.startswith(p):
            return item[len(p) :].strip()
    return item


def labeled(key: str, text: str, language: Language) -> str:
    """`text` after the fixed phrase `key` ("Latest ask: ...", "最新请求：...")."""
    label = phrase(key, language)
    return f"{label}{text}" if label.endswith("：") else f"{label} {text}"
