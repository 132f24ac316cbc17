"""Tool runs: each tool call with its files and outcome, which failures later runs fixed, and how a failure
is listed in a summary; no model, no I/O.

`tool_run` reads one call and its result into a `ToolRun`; `is_resolved` and `fixes` say whether
later runs fixed a failure; `failure_item` is the list item of a failure, the same in the
extractive summary (Blocked) and after a model's (Tool failures). The rules: docs/summarize.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from ctxkeep.messages import ToolCall, ToolResult
from ctxkeep.store import OFFLOAD_KEY
from ctxkeep.summarize.facts.identifiers import find_identifiers
from ctxkeep.summarize.facts.shell import asks_yes_or_no, command_head, command_paths, command_targets
from ctxkeep.summarize.request import Language
from ctxkeep.summarize.sections.markdown import ITEM_CHARS, clip, code_span, phrase

# Failed calls a summary lists (Blocked in the extractive summary, Tool failures after a model's text).
MAX_FAILURES = 8
# Argument keys whose value is a file path, in the tools agents use.
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file_name", "notebook_path", "target_file")

_SHELL_TOOL = re.compile(r"(?i)bash|shell|exec|terminal|powershell|run_?command|^sh$|^cmd$|^run$")
_COMMAND_KEYS = ("command", "cmd", "script")
_TODO_TOOL = re.compile(r"(?i)todo|update_plan|^plan$")
_READ_TOOL = re.compile(
    r"(?i)^(?:get|search|list|find|read|view|open|fetch|lookup|check|calculate|think|glob|grep|ls|cat|web_?search"
    r"|web_?fetch|task_?output|bash_?output|kill_?bash|kill_?shell|write_stdin|ask_?user|enter_?plan|exit_?plan"
    r"|skill)"
)
_MODIFY_TOOL = re.compile(r"(?i)edit|write|str_replace|replace|create|insert|patch|delete|remove|rename|move|append")
_EDITOR_VIEW = frozenset({"view"})
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$", re.MULTILINE)
_SKIPPED_FAILURES = ("Sibling tool call errored",)  # Claude Code: the call never ran
_ERROR_CHARS = 120  # the least room a failure item gives its error line, however long its command

# The line that says what went wrong, by how much it says, strongest first: a test runner's summary
# line, an exception ("KeyError: 'x'", pytest's "E   AssertionError: ..."), a tool's error line
# ("error: ...", "fatal: ...", "src/a.py:3:1: E501 ..."), a count ("Total errors: 2", "1 failed"), then
# weaker words ("cannot", "does not exist").
_ERROR_LINES = (
    re.compile(r"^FAILED\s+\S+.*\s-\s+\S"),
    re.compile(r"^(?:E\s+)?(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)"),
    re.compile(
        r"(?i)(?:^|\s|\]\s?)(?:error|fatal|panic)(?:\[[\w-]+\])?:|^\*\* \(\w+|^ERROR\b|^FAILED\b|No such file"
        r"|command not found|permission denied|^[\w./-]+\.\w+:\d+:\d+:\s*\w|错误|异常"
    ),
    re.compile(r"(?i)\b(?:errors?|failures?|failed)\b:?\s*[1-9]|\b[1-9]\d*\s+(?:errors?|failures?|failed)\b"),
    re.compile(
        r"(?i)\b(?:errors?|exception|traceback|fail(?:ed|ure|s)?|cannot|can't|denied|invalid|refused|timed? ?out"
        r"|abort(?:ed)?|not found|does not exist)\b|失败|找不到|无法"
    ),
)
_NOISE_LINE = re.compile(
    r"(?i)^(?:exit code \d+|\[the command completed with exit code -?\d+\.?\]|chunk id:.*|wall time:.*"
    r"|process exited with code -?\d+|original token count:.*|output:|\[ctxkeep:.*)$"
)
# a stack frame or source line quoted in a traceback: where, not what
_FRAME_LINE = re.compile(r"^(?:\s|>|File \"|\S+:\d+: in \S+$|at \S+ \()")
# How an unflagged result is judged from its end (`judged`): an exit-code line, else a failure line.
_TAIL_LINES = 5
_EXIT_LINE = re.compile(
    r"(?i)^(?:\[?the command completed with )?(?:exit(?:ed)?(?: with)?(?: code| status)?|process exited with code"
    r"|return(?:ed)? code|exit_code)[:=]?\s*(-?\d+)\.?\]?$"
)
_FAILED_LINE = re.compile(
    r"^Traceback \(most recent call last\)|^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception):\s|^FAILED\b"
    r"|^=+ .*\b\d+ (?:failed|errors?)\b.* =+$|(?i:^(?:error|fatal)(?:\[[\w-]+\])?:\s)|^npm ERR!|^make: \*\*\*"
)
_OWN_NOTICE = re.compile(r"\n?\[ctxkeep: [^\n]*\]\s*$")  # the notice ctxkeep.offload puts after a kept head
_TRUNCATED_NOTICE = re.compile(r"\[ctxkeep: output (?:truncated|offloaded)")
_SAVED_IN = re.compile(r"(?:full output is in|offloaded \([^)]*\) to) (\S+?)[,;]")
# what an assistant says after a failure it meant to see (a probe: "port 8081 is free")
_EXPECTED = re.compile(
    r"(?i)\b(?:as expected|expected(?:ly)?|is free|not (?:running|listening|in use)"
    r"|nothing (?:is )?(?:listening|running)|as intended|deliberate(?:ly)?|confirm(?:s|ed)?)\b|符合预期|预期"
)
# a markup tag, as harnesses wrap text in (``<system-reminder>``, ``</command-name>``)
TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s[^<>]*)?>")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolRun:
    """One tool call and what came of it.

    `kind` is "shell" (it ran `command`), "modify" (it changed files), "read", "todo" or "other".
    `has_result` is false for a call with no result, or one that never ran ("Sibling tool call
    errored"); `failed` is true for an error result or a non-zero exit code, except the exit 1 of a
    question answered "no" (`no_match`: a grep that matched nothing, a false ``test``, see
    `shell.asks_yes_or_no`) when its output names no error; `error_line` is the
    line of the result that says best what went wrong; `expected` is true for a failure the
    assistant's next words call expected (a probe: "port 8081 is free"); `index` is the message's
    position.
    """

    tool: str
    kind: str
    arguments: Mapping[str, Any] = field(hash=False)
    command: str | None = None
    paths_read: tuple[str, ...] = ()
    paths_modified: tuple[str, ...] = ()
    has_result: bool = False
    exit_code: int | None = None
    failed: bool = False
    error_line: str = ""
    expected: bool = False
    index: int = 0
    commit: str | None = None  # "abc1234 (main): message" of a successful git commit
    call_id: str = ""  # the call's id: where the archive has it, the evidence a summary points to
    no_match: bool = False  # exit 1 of a question answered "no" (grep found nothing): an answer, not a failure

    @property
    def key(self) -> str:
        """What a later run must match to count as the same call (to resolve a failure)."""
        if self.command is not None:
            return self.command
        paths = self.paths_modified or self.paths_read
        return paths[0] if paths else f"{self.tool}({compact_json(self.arguments)})"


def tool_run(
    call: ToolCall, result: ToolResult | None, index: int, *, originals: Mapping[str, str] | None = None
) -> ToolRun:
    """The run of `call` with its `result` (None when it has none), `index` the position of its message.

    `originals` maps the saved file of an offloaded result to the end of its full text
    (`SummaryRequest.originals`): an offloaded result is judged, and its error line taken, from
    that end rather than from the head it keeps.
    """
    args = call.input_object()
    command = _command_of(call.name, args)
    kind = _kind_of(call.name, args, command)
    read: list[str] = []
    modified: list[str] = []
    values = [v.strip() for k in PATH_KEYS if isinstance(v := args.get(k), str)]
    paths = [v for v in values if v and "\n" not in v]  # a path is one line
    if kind == "modify":
        modified.extend(paths)
        patch = args.get("input") or args.get("patch")
        if isinstance(patch, str):
            modified.extend(m.group(1) or m.group(2) for m in _PATCH_FILE.finditer(patch))
    else:
        read.extend(paths)
    if command is not None:
        cmd_read, cmd_written = command_paths(command)
        read.extend(cmd_read)
        modified.extend(cmd_written)
    failed = no_match = False
    error = ""
    exit_code = None
    if result is not None and TAG.sub("", result.text).strip() in _SKIPPED_FAILURES:
        result = None  # it never ran: no outcome to report
    if result is not None:
        exit_code = result.exit_code
        failed = result.is_error or (exit_code is not None and exit_code != 0)
        end = _original_end(result, originals)  # the end of the full text, when only the head is here
        if not failed and exit_code is None:  # no flag (OpenAI chat, many harnesses): judged from its last lines
            exit_code, failed = judged(end if end is not None else result.text)
        if failed and exit_code == 1 and command is not None and asks_yes_or_no(command):
            # grep's "no line matched", test's "false": unless the output says something went wrong
            no_match = not _says_what(error_line(end if end is not None else result.text))
            failed = not no_match
        if failed:
            error = error_line(result.text)
            saved = _SAVED_IN.search(result.text) if _TRUNCATED_NOTICE.search(result.text) else None
            said = error_line(end) if end is not None else ""
            if said and (_says_what(said) or not _says_what(error)):
                error = said  # what the end of the full output says went wrong, not the head's first line
            elif saved and not _says_what(error):
                # only the head is here, and it says nothing that went wrong: point to where the error is
                error = f"(the error is near the end of {saved.group(1)})"
    run = ToolRun(
        tool=call.name,
        kind=kind,
        arguments=args,
        command=command,
        paths_read=tuple(dict.fromkeys(read)),
        paths_modified=tuple(dict.fromkeys(modified)),
        has_result=result is not None,
        exit_code=exit_code,
        failed=failed,
        error_line=error,
        index=index,
        call_id=call.id,
        no_match=no_match,
    )
    committed = commit_of(run, result.text[:2_000]) if result is not None else None
    return replace(run, commit=committed) if committed else run


# Checks whose success is worth telling (tests, linters, type checkers, builds), by program or first operand.
_CHECK = re.compile(
    r"^(?:pytest|py\.test|tox|nox|jest|vitest|mocha|rspec|phpunit|mypy|pyright|eslint|tsc|flake8|pylint|ruff check"
    r"|mix (?:test|compile|credo|format)|go (?:test|vet|build)|cargo (?:test|check|clippy|build)|make(?: \S+)?"
    r"|npm (?:test|run \S*(?:test|lint|check|build)\S*)|yarn (?:test|lint|build)|pnpm (?:test|lint|build)"
    r"|dotnet (?:test|build)|gradle \S*test|mvn \S*test|bundle exec rspec)$"
)
_COMMIT = re.compile(r"^\[([^\]\s]+)(?: \(root-commit\))? ([0-9a-f]{7,40})\] (.+)$", re.MULTILINE)


def checks_passed(run: ToolRun) -> list[str]:
    """The checks a successful shell `run` ran (``pytest``, ``ruff check``, ``mix test``), by name; else []."""
    if run.command is None or run.failed or not run.has_result:
        return []
    names = []
    for program, operands in _targets(run.command):
        # `python -m pytest`, `uv run pytest`, `npx vitest`: the runner is an operand or the second word
        words = sorted(operands)
        candidates = [program, *(f"{program} {o}" for o in words), *words, program.split(" ", 1)[-1]]
        name = next((c for c in candidates if _CHECK.match(c)), None)
        if name is not None and name not in names:
            names.append(name)
    return names


def commit_of(run: ToolRun, output: str) -> str | None:
    """``abc1234 (main): message`` for a successful ``git commit`` `run` whose `output` names the commit; else None."""
    if run.command is None or run.failed or "git commit" not in run.command:
        return None
    m = _COMMIT.search(output)
    return f"{m.group(2)} ({m.group(1)}): {m.group(3).strip()}" if m else None


def _original_end(result: ToolResult, originals: Mapping[str, str] | None) -> str | None:
    """The end of an offloaded `result`'s saved original, when `originals` has it; else None."""
    record = result.extra.get(OFFLOAD_KEY)
    name = record.get("file") if isinstance(record, Mapping) else None
    return originals.get(name) if originals and isinstance(name, str) else None


def _says_what(line: str) -> bool:
    """True for a line of the strong kinds of `_ERROR_LINES`: a test's FAILED line, an exception, an error line."""
    return any(p.search(line) for p in _ERROR_LINES[:3])


def _command_of(tool: str, args: Mapping[str, Any]) -> str | None:
    if not _SHELL_TOOL.search(tool):
        return None
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return " ".join(value)
    return None


def _kind_of(tool: str, args: Mapping[str, Any], command: str | None) -> str:
    if command is not None:
        return "shell"
    if todo_items(args):
        return "todo"
    if _TODO_TOOL.search(tool):
        return "todo"
    sub = args.get("command")
    if isinstance(sub, str) and "editor" in tool.lower():
        return "read" if sub in _EDITOR_VIEW else "modify"
    if _READ_TOOL.search(tool):
        return "read"
    if _MODIFY_TOOL.search(tool):
        return "modify"
    return "other"


def todo_items(arguments: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(status, text) of the todo list in a call's `arguments` (Claude Code ``todos``, Codex ``plan``), or ()."""
    for key in ("todos", "plan"):
        value = arguments.get(key)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out = []
            for item in value:
                text = item.get("content") or item.get("step") or item.get("title") or item.get("task")
                status = str(item.get("status", "pending")).lower()
                if isinstance(text, str) and text.strip():
                    out.append((status, text))
            return tuple(out)
    return ()


def judged(text: str) -> tuple[int | None, bool]:
    """The exit code and whether a result that carries no error flag failed, from the end of its text.

    An exit-code line among the last lines ("exit code: 1", "Process exited with code 2", Codex's
    "Exit code: 0") decides; else a ``Traceback``, an exception, a ``FAILED`` line or an ``error:``
    line among the last `_TAIL_LINES` lines says it failed. The kept head of an offloaded output
    is not judged: its end is in the saved original.
    """
    body = _OWN_NOTICE.sub("", text).rstrip()
    if len(body) < len(text.rstrip()) and _TRUNCATED_NOTICE.search(text):
        return None, False  # only the head is here: its end, where errors are, is in the saved file
    lines = [TAG.sub("", line).strip() for line in body.splitlines() if line.strip()][-_TAIL_LINES:]
    for line in reversed(lines):
        m = _EXIT_LINE.search(line)
        if m:
            code = int(m.group(1))
            return code, code != 0
    return None, any(_FAILED_LINE.search(line) for line in lines)


def error_line(text: str) -> str:
    """The line of a failed call's output that says best what went wrong (see `_ERROR_LINES`).

    Stack frames and quoted source lines say where, not what, and are passed over; of several
    exception lines after a "Traceback", the last one (the error raised) is taken; else the first
    line of the strongest kind, one that does not end in ":" (a lead-in) if there is one; else the
    first line.
    """
    if "\\n\\n" in text:
        text = text.replace("\\n", "\n")  # output passed on escaped, as one line
    raw = [TAG.sub("", line).rstrip() for line in text.splitlines()]
    lines = [line for line in raw if line.strip() and not _NOISE_LINE.match(line.strip())]
    said = [line.strip() for line in lines if not _FRAME_LINE.match(line) or line.startswith("E ")]
    traceback = any(line.startswith("Traceback (most recent call last)") for line in said)
    for pattern in _ERROR_LINES:
        hits = [line for line in said if pattern.search(line)]
        # "Pre-commit validation failed:" only leads in to what went wrong
        hits = [line for line in hits if not line.endswith(":")] or hits
        if hits:
            line = hits[-1] if traceback and pattern is _ERROR_LINES[1] else hits[0]
            return re.sub(r"^E\s+", "", line)  # pytest's mark for the lines of an error
    return lines[0].strip() if lines else ""


def is_resolved(run: ToolRun, runs: Sequence[ToolRun]) -> bool:
    """True when calls of `runs` after the failed `run` fixed it.

    A shell command is fixed when each of its commands (`command_targets`) later succeeded with
    the same program on at least its operands, in one run or several (``pytest -x`` by ``pytest
    -x -q``; ``ruff check a && ruff format a`` by the same with ``&& mypy a`` after it; ``git add
    a b`` by ``git add a`` and ``git add -f b``); a command with no operands by one whose
    operands name no file (``git push`` by ``git push -u origin main``). Another tool's call is
    fixed by a later call of the same kind on the same file (or with the same arguments). An
    `expected` failure (a probe) is resolved by any later success of the same program or tool.
    """
    later = [r for r in runs if r.index > run.index and r.has_result and not r.failed]
    if run.expected and any(_program(r) == _program(run) for r in later):
        return True
    return _fixed_by(run, later)


def fixes(runs: Sequence[ToolRun], tool: str, target: str) -> bool:
    """True when a successful call of `runs` fixes an older failure of `tool` on `target`.

    `target` is the command or file a previous summary shows for the failure; when it was cut
    (it ends with "…"), a call whose command or file starts with what is left counts, and so do
    later commands that fixed the whole words left of a cut command.
    """
    ok = [r for r in runs if r.has_result and not r.failed]
    shell = _SHELL_TOOL.search(tool) is not None
    if target.endswith("…"):
        head = target.removesuffix("…")
        if any(r.key.startswith(head) for r in ok if head):
            return True
        # a command cut to its head: judged on its whole words (the last may be cut mid-way), less an option
        # left at the end whose value was cut (`git commit -m` of a message cut away)
        words = _before_open_quote(head.split()[:-1]) if shell else []
        while words and words[-1].startswith("-"):
            words.pop()
        target = " ".join(words)
        if not target:
            return False
    old = ToolRun(tool=tool, kind="shell" if shell else "", arguments={}, command=target if shell else None)
    if not shell:
        return any(r.key == target for r in ok)
    return _fixed_by(old, ok)


def _before_open_quote(words: list[str]) -> list[str]:
    """`words` up to the one that opens a quote the cut left unclosed (the rest is part of a cut value)."""
    quote = ""
    opened = len(words)
    for i, word in enumerate(words):
        for ch in word:
            if quote and ch == quote:
                quote = ""
            elif not quote and ch in "\"'":
                quote, opened = ch, i
    return words[:opened] if quote else words


def _program(run: ToolRun) -> str:
    """The program a shell run ran first (``git push``), else the tool's name."""
    if run.command is not None:
        targets = _targets(run.command)
        return targets[0][0] if targets else run.command.split(maxsplit=1)[0]
    return run.tool


# Each failure is checked against every later run, more than once: parse each command once.
@lru_cache(maxsize=4096)
def _targets(command: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """(program, targets) of each command of `command`: its operands without quoted texts with spaces in them
    (a commit message, a PR title: what a retry changes, not what it runs on)."""
    return tuple(
        (p, frozenset(o for o in ops if not any(c.isspace() for c in o))) for p, ops in command_targets(command)
    )


@lru_cache(maxsize=4096)
def _names_file(word: str) -> bool:
    return any(i.kind in ("path", "url") for i in find_identifiers(word))


def _fixed_by(run: ToolRun, later: Sequence[ToolRun]) -> bool:
    """True when the successful runs `later` fixed the failed `run` (see `is_resolved`)."""
    if run.command is None:
        return any(r.command is None and r.kind == run.kind and r.key == run.key for r in later)
    if any(r.command == run.command for r in later):
        return True
    steps = _targets(run.command)
    if not steps:
        return False
    done = [step for r in later if r.command is not None for step in _targets(r.command)]
    for program, operands in steps:
        same = [ops for p, ops in done if p == program]
        if operands:
            if not same or not operands <= frozenset().union(*same):
                return False
        elif not any(not any(_names_file(o) for o in ops) for ops in same):
            return False
    return True


def mark_expected(runs: Sequence[ToolRun], said: Sequence[tuple[int, str]]) -> list[ToolRun]:
    """The runs, a failure marked `expected` when the assistant's next words say it meant to see it.

    `said` holds (index, opening words) of the assistant messages with text, oldest first: the
    first sentences of each, enough to say "as expected".
    """
    out = []
    for run in runs:
        if run.failed:
            after = next((words for j, words in said if j > run.index), "")
            if _EXPECTED.search(after):
                run = replace(run, expected=True)
        out.append(run)
    return out


def compact_json(value: Any) -> str:
    """`value` as JSON on one line, without spaces, for a call's arguments in an item."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False, default=str)


def outcome(run: ToolRun, language: Language) -> str:
    """How `run` ended, in `language`: "exit 1", "error", "ok", "no match" or "no result"."""
    if not run.has_result:
        return phrase("no_result", language)
    if run.no_match:
        return phrase("no_match", language)
    if run.exit_code is not None:
        return phrase("exit", language, code=run.exit_code)
    return phrase("error" if run.failed else "ok", language)


def call_text(run: ToolRun) -> str:
    """A call as one short line, ``tool(key=value, ...)``: each value cut to 60 characters, all to 160."""
    parts = []
    for key, value in run.arguments.items():
        shown = value if isinstance(value, str) else compact_json(value)
        parts.append(f"{key}={clip(' '.join(str(shown).split()), 60)}")
    return clip(f"{run.tool}({', '.join(parts)})", 160)


def failure_item(run: ToolRun, resolved: bool, language: Language, *, source: str | None = None) -> str:
    """The list item of a failed `run`: tool, outcome (and its `source` in the archive), command or file, and its
    error line.

    A command is kept whole when it is one line of at most `COMMAND_HEAD_CHARS` characters, else as
    its `command_head` (the documented short form) with how many characters the archive has
    beyond it; the error line gets what is left of `ITEM_CHARS` (at least `_ERROR_CHARS`).
    """
    if run.command is not None:
        head_text = command_head(run.command)
        more = len(run.command.strip()) - len(head_text)
        shown = code_span(head_text) + (f" … {phrase('truncated', language, n=more)}" if more > 0 else "")
    else:
        target = run.key if run.paths_read or run.paths_modified else call_text(run)
        shown = code_span(clip(" ".join(target.split()), 100))
    head = f"{run.tool} ({outcome(run, language)}{f', {source}' if source else ''}): {shown}"
    tail = f" {phrase('resolved', language)}" if resolved else ""
    room = max(_ERROR_CHARS, ITEM_CHARS - len(head) - len(tail) - 3)
    error = f" — {clip(run.error_line, room)}" if run.error_line else ""
    return head + error + tail
