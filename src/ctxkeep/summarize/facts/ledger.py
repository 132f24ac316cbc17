"""The ledger: the state of the work as data, carried exactly across every cut: the agent's own plan, each
item with its state, and the background jobs it started that have not ended.

    todo calls (TodoWrite, update_plan, TaskCreate/TaskUpdate) ─► ledger_of ─► the Plan list
    previous summary's Plan list ─► parse_todo ─┘ (merge_todos: the newest state wins, done stays done)
    "running in background with ID: X" ─► jobs_of ─► the Background jobs list (merge_jobs: ended ones leave)

A list tool (Claude Code ``TodoWrite`` {todos}, Codex ``update_plan`` {plan}) sends the whole list each
time; a task tool (``TaskCreate`` then ``TaskUpdate`` {taskId, status}) changes one item, named by its id.
Each call updates the ledger; an item finished once stays finished, and one the newer list leaves
out stays only if it was finished (the agent replaced the rest of its plan). The rules: docs/summarize.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxkeep.messages import Message
from ctxkeep.summarize.facts.runs import todo_items
from ctxkeep.summarize.sections.markdown import ITEM_CHARS, clip, code_span, unquote

COMPLETED = "completed"
# how tools spell a state, as the ledger writes it (Claude Code and Codex already write these three)
_STATES = {"done": COMPLETED, "complete": COMPLETED, "finished": COMPLETED, "todo": "pending", "active": "in_progress"}
_CREATE_TOOL = re.compile(r"(?i)^(?:task_?create|create_?task|add_?task)$")
_UPDATE_TOOL = re.compile(r"(?i)^(?:task_?update|update_?task)$")
_CREATED_ID = re.compile(r"#(\w+)")  # "Task #3 created successfully: ..."
# a tool result that says a job runs on (Claude Code's Bash and Task with run_in_background), and where to
_STARTED = re.compile(r"(?i)running in (?:the )?background with ID:? ([\w.-]*\w)(?:.*?written to:? (\S*[^\s.]))?", re.S)
# a job's end reported: Claude Code's <task-notification> and TaskOutput/BashOutput results
_STATUS = re.compile(r"<task[-_]id>([\w.-]+)</task[-_]id>.*?<status>(\w+)</status>", re.S)
_NOTICE_CHARS = 600  # of a result, where a tool says it started a job and where its output goes
_READ_TOOL = re.compile(r"(?i)^(?:bash_?output|task_?output)$")
_KILL_TOOL = re.compile(r"(?i)^(?:kill_?(?:bash|shell)|task_?stop)$")
_HANDLE_KEYS = ("bash_id", "shell_id", "task_id")
_STILL = frozenset({"running", "pending", "in_progress"})
_WHAT_KEYS = ("command", "cmd", "description", "prompt")
_JOB = re.compile(r"^(`+)(.+?)\1 (`+)(.+?)\3(?: → (`+)(.+?)\5)?$")  # "`id` `what` → `output`"
_ITEM = re.compile(r"^\[([a-z_]+)\] (?:#(\w+)(?: |$))?(.*)$", re.DOTALL)  # "[pending] #3 Write the tests"


@dataclass(frozen=True, kw_only=True, slots=True)
class Todo:
    """One item of the agent's plan."""

    text: str  # one line, at most ITEM_CHARS
    status: str  # "pending", "in_progress", "completed", or the tool's own word (lower case)
    id: str = ""  # the task tool's id, which later updates name it by; "" for a list tool's items

    @property
    def key(self) -> str:
        """What a newer state of the same item matches: its id, else its text."""
        return f"#{self.id}" if self.id else self.text

    def render(self) -> str:
        """The item as the summary lists it: "[status] #id text" (`parse_todo` reads it back)."""
        return f"[{self.status}] {'#' + self.id + ' ' if self.id else ''}{self.text}"


def parse_todo(item: str) -> Todo | None:
    """The `Todo` an item of the summary's Plan list shows (`Todo.render`), or None for any other text."""
    m = _ITEM.match(item.strip())
    if not m or "\n" in m.group(3):
        return None
    return Todo(status=m.group(1), id=m.group(2) or "", text=m.group(3).strip())


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """A background job (a shell or a subagent) started and not seen to end."""

    id: str  # what later calls name it by (BashOutput, KillShell, TaskOutput)
    what: str  # its command or description, one line
    output: str = ""  # the file its output is written to, when the tool says

    def render(self) -> str:
        """The item as the summary lists it: "`id` `what` → `output`" (`parse_job` reads it back)."""
        where = f" → {code_span(self.output)}" if self.output else ""
        return f"{code_span(self.id)} {code_span(self.what)}{where}"


def parse_job(item: str) -> Job | None:
    """The `Job` an item of the summary's Background jobs list shows (`Job.render`), or None."""
    m = _JOB.match(item.strip())
    if not m:
        return None
    values = [unquote(m.group(k) + m.group(k + 1) + m.group(k)) for k in (1, 3, 5) if m.group(k)]
    return Job(id=values[0], what=values[1], output=values[2] if len(values) > 2 else "")


@dataclass(frozen=True, kw_only=True, slots=True)
class Jobs:
    """The background jobs of some messages: those still running, and the ids of all seen to end."""

    running: tuple[Job, ...] = ()
    ended: frozenset[str] = frozenset()  # started in these messages or before them


def jobs_of(messages: Sequence[Message]) -> Jobs:
    """The jobs `messages` start and end: a result saying a job runs in the background starts it; a task
    notification or an output read with a final status, or a kill call that did not fail, ends it."""
    calls = {c.id: c for m in messages if m.role == "assistant" for c in m.tool_calls}
    started: dict[str, Job] = {}
    ended: set[str] = set()
    for msg in messages:
        result = msg.tool_result
        text = result.text if result is not None else msg.text if msg.role == "user" else ""
        call = calls.get(result.call_id) if result is not None else None
        if call is not None and result is not None and not result.is_error:
            args = call.input_object()
            handle = next((str(args[k]) for k in _HANDLE_KEYS if args.get(k)), "")
            # the tool's own words open its result; a file that quotes them further down starts nothing
            if (m := _STARTED.search(text[:_NOTICE_CHARS])) and m.start() < 100 and not _READ_TOOL.match(call.name):
                started[m.group(1)] = Job(id=m.group(1), what=_what(call.name, args), output=m.group(2) or "")
                ended.discard(m.group(1))
            elif handle and (_KILL_TOOL.match(call.name) or _ended(text)):
                ended.add(handle)
        ended.update(m.group(1) for m in _STATUS.finditer(text) if m.group(2) not in _STILL)
    running = tuple(j for j in started.values() if j.id not in ended)
    return Jobs(running=running, ended=frozenset(ended))


def merge_jobs(old: Sequence[Job], new: Jobs) -> tuple[Job, ...]:
    """The jobs running after `old` and the newer messages' `new`: the older ones they did not see end, then theirs."""
    fresh = {j.id for j in new.running}
    return tuple(j for j in old if j.id not in new.ended and j.id not in fresh) + new.running


def _ended(text: str) -> bool:
    """True when an output read (BashOutput, TaskOutput) says its job is over ("<status>completed</status>")."""
    status = re.search(r"<status>(\w+)</status>", text)
    return status is not None and status.group(1) not in _STILL


def _what(tool: str, args: Mapping[str, Any]) -> str:
    for key in _WHAT_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            first = value.strip().split("\n", 1)
            return clip(first[0], ITEM_CHARS // 2) + (
                "…" if len(first) > 1 and len(first[0]) <= ITEM_CHARS // 2 else ""
            )
    return tool


def ledger_of(messages: Sequence[Message]) -> tuple[Todo, ...]:
    """The plan the agent's todo and task tool calls in `messages` leave, oldest item first."""
    results = {m.tool_result.call_id: m.tool_result.text for m in messages if m.tool_result is not None}
    todos: tuple[Todo, ...] = ()
    created = 0
    for msg in messages:
        for call in msg.tool_calls if msg.role == "assistant" else ():
            args = call.input_object()
            if listed := todo_items(args):
                todos = merge_todos(todos, [Todo(text=_line(t), status=_state(s)) for s, t in listed])
            elif _CREATE_TOOL.match(call.name) and (text := _task_text(args)):
                created += 1
                # the id later updates name it by: the one its result gives ("Task #3 created"), else its number
                m = _CREATED_ID.search(results.get(call.id, ""))
                task_id = m.group(1) if m else str(created)
                todos = _updated(todos, [Todo(text=_line(text), status=_state(args.get("status", "")), id=task_id)])
            elif _UPDATE_TOOL.match(call.name) and (task := args.get("taskId") or args.get("id")):
                text = _task_text(args) or ""
                status = _state(args["status"]) if isinstance(args.get("status"), str) else ""
                todos = _updated(todos, [Todo(text=_line(text), status=status, id=str(task))])
    return tuple(t for t in todos if t.status != "deleted")


def merge_todos(old: Sequence[Todo], newer: Sequence[Todo]) -> tuple[Todo, ...]:
    """`old` updated by the whole list `newer`: the newer state of each item wins, except that a finished
    item stays finished; an item `newer` leaves out stays only when finished, before the newer ones."""
    if not newer:
        return tuple(old)
    named = {t.key for t in newer}
    finished = [t for t in old if t.key not in named and t.status == COMPLETED]
    return _updated(finished, newer, old=old)


def _updated(todos: Sequence[Todo], changes: Sequence[Todo], old: Sequence[Todo] | None = None) -> tuple[Todo, ...]:
    """`todos` with each of `changes` replacing the item of the same key in place (added at the end when new); the
    state and text a change lacks are the earlier one's, and a state already completed stays so. `old`:
    where the earlier states are, when not `todos` itself."""
    before = {t.key: t for t in (todos if old is None else old)}
    out = {t.key: t for t in todos}
    for change in changes:
        was = before.get(change.key)
        status = change.status or (was.status if was else "pending")
        if was is not None and was.status == COMPLETED:
            status = COMPLETED
        out[change.key] = Todo(text=change.text or (was.text if was else ""), status=status, id=change.id)
    return tuple(out.values())


def _task_text(args: Mapping[str, Any]) -> str | None:
    for key in ("subject", "title", "content", "task", "description"):
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _state(status: object) -> str:
    word = re.sub(r"[\s-]+", "_", str(status).strip().lower())
    return _STATES.get(word, word)


def _line(text: str) -> str:
    return clip(" ".join(text.split()), ITEM_CHARS)
