"""The built-in summarizer: the summary filled in from the messages themselves, with no model.

    messages ─► collect_facts ─► Facts ─► draft ─► merge with the previous summary ─► fit ─► Markdown

`collect_facts` is the reusable half: what the user asked and required, what the assistant
decided and was about to do, every tool call with its files and outcome, and the exact
identifiers. A model-based summarizer can append the same facts to what its model wrote.

Where each section comes from:

    Goal             the first real user request (the overall goal), later distinct requests, the
                     latest one marked "Latest ask:", and the focus of a manual compaction
    Constraints      user sentences with must / never / don't / always / only / prefer / should /
                     please use / 必须 / 不要 / 只 / 禁止 / 务必 / 请使用 ...
    Progress         Done: successful tool calls (files modified, commands and their exit codes,
                     other actions) and completed todo items; In Progress: what the assistant last
                     said it was doing; Blocked: the latest failed calls (at most 8, 240 characters
                     each; unresolved first, "resolved later" when the same call later succeeded)
    Key Decisions    assistant sentences with decided / instead / I'll / let's / going to / 决定 /
                     改为 / 我将 ..., newest first, the explicit ones preferred
    Next Steps       todo items still pending, what the latest assistant text says comes next,
                     and the latest user request when no final answer followed it
    Critical Context files read and modified (from path arguments, edit tools, ``cat``/``sed``
                     commands), every command run, verbatim, with its exit codes, and the exact
                     identifiers of all messages (tool results count less)

User text that no human typed is not taken for a request (see `human_text`): harness tags
(``<system-reminder>``, ``<command-...>``, ``<task-notification>``), the prompt a slash command
expands to, messages the source marks as injected (Claude Code's ``isMeta``), other tools'
compaction summaries, pasted shell sessions and JSON, and acknowledgements ("ok", "continue", "继续").

With a previous summary the two are merged into one: the overall goal stays, the older latest
ask becomes an ordinary one, an older "In Progress" moves to Done when there is a newer one, the
files, commands and identifiers are the union (newest first), and Next Steps are replaced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.summarize import Language, SummaryRequest, resolve_language
from ctxkeep.summarize.identifiers import (
    Identifier,
    command_paths,
    find_identifiers,
    rank_identifiers,
    value_identifiers,
)
from ctxkeep.summarize.sections import (
    PHRASES,
    SECTIONS,
    Drop,
    Sections,
    code_span,
    fit_sections,
    is_placeholder,
    missing_sections,
    omission_note,
    omitted_count,
    parse_sections,
    phrase,
    render_sections,
    unquote,
)

__all__ = [
    "PATH_KEYS",
    "ExtractiveSummarizer",
    "Facts",
    "ToolRun",
    "collect_facts",
    "human_text",
]

# Argument keys whose value is a file path, in the tools agents use.
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file_name", "notebook_path", "target_file")

# Caps before fitting to size: enough to be useful, few enough that one section cannot crowd out the rest.
_MAX_ASKS = 12
_MAX_CONSTRAINTS = 20
_MAX_DECISIONS = 12
_MAX_BLOCKED = 8
_MAX_NEXT = 8
_MAX_IN_PROGRESS = 4
_MAX_DONE = 300
_MAX_IDENTIFIERS = 300
_MAX_COMMAND_CHARS = 2_000
_ITEM_CHARS = 240
_GOAL_CHARS = 300
_ASK_CHARS = 200
# Tool results are scanned only this far for identifiers: by compaction time step 1 has cut old
# results to 3,000 bytes anyway, and past the head a result is mostly data.
_RESULT_SCAN_CHARS = 3_000
_TEXT_SCAN_CHARS = 20_000

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

# The line that says what went wrong: a strong word first ("AssertionError"), then a weaker one ("1 failed").
_ERROR_WORDS = (
    re.compile(r"(?i)error|exception|fatal|traceback|panic|错误|异常"),
    re.compile(r"(?i)fail|not found|no such|cannot|can't|denied|invalid|refused|timed? ?out|abort|失败|找不到|无法"),
)
_NOISE_LINE = re.compile(
    r"(?i)^(?:exit code \d+|\[the command completed with exit code -?\d+\.?\]|chunk id:.*|wall time:.*"
    r"|process exited with code -?\d+|original token count:.*|output:)$"
)
_TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s[^<>]*)?>")

_CONSTRAINT = re.compile(
    r"(?i)\b(?:must|mustn't|never|don't|do not|always|only|prefer|preferably|should|shouldn't|please use"
    r"|make sure|ensure|avoid|not allowed|forbidden|required)\b"
    r"|必须|不要|不能|不得|禁止|务必|只(?!是)|仅|一定要|请(?:使用|用|勿|务必|保持|确保|不要|只|一定|别)|应该|尽量|避免|优先|别(?!的|人)"
)
_DECISION_STRONG = re.compile(
    r"(?i)\b(?:decided|decision|instead|rather than|switch(?:ed|ing)? to|going with|chose|opt(?:ed)? (?:for|to)"
    r"|the (?:plan|approach|fix|solution) is|we(?:'ll| will) use)\b|决定|改为|改用|采用|选择了|方案是|不再"
)
_DECISION_WEAK = re.compile(r"(?i)\b(?:I'll|I will|let's|going to|we'll|we will)\b|我将|我会|我们将|我们会")
_INTENT = re.compile(
    r"(?i)\b(?:let me|let's|I'll|I will|I'm going to|I am going to|now I|I'm now|next,? I|I need to|I'm)\b"
    r"|让我|我将|我会|接下来|现在|正在|下面|我先|首先"
)
_PLAN = re.compile(
    r"(?i)\b(?:next(?: step|,|:| I| we)|then I|then we|I'll|I will|we'll|we will|need to|remaining|todo|to do"
    r"|going to|after that|afterwards)\b|接下来|然后|下一步|需要|还要|准备|之后"
)
# "Let me check X" says what happens next, not what was decided
_PROCEDURAL = re.compile(
    r"(?i)\b(?:I'll|I will|let's|let me|going to|we'll|we will)\s+(?:now\s+|first\s+|also\s+|then\s+)?"
    r"(?:read|look|check|run|start|examine|search|explore|verify|investigate|see|try|view|open|inspect|find|review"
    r"|test|analy[sz]e|get|fetch|need|begin|continue|commit|push|wait|summari[sz]e|help|assist)\b"
    r"|我[将会](?:先)?(?:查看|检查|读取|阅读|运行|看看|看一下|搜索|确认)"
)
_PLAN_HEADER = re.compile(r"(?i)next steps?|to ?do|remaining|下一步|待办|接下来|后续")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)]|#{1,6}|>)\s+")

_INJECTED_PREFIXES = (
    "Caveat: The messages below were generated by the user while running local commands",
    "This session is being continued from a previous conversation",
    "[Summary of the earlier conversation",
    "# AGENTS.md instructions",
    "[Request interrupted by user",
    "[tool result for call",
    "Here is a demonstration of how to correctly accomplish this task",
)
_INJECTED_START = re.compile(
    r"^(?:Parameter '[^']+' is expected|OBSERVATION:|EXECUTION RESULT|Your command ran successfully"
    r"|Please continue working on the task|\$ \S)"
)
_INJECTED_TAGS = re.compile(
    r"<(system-reminder|local-command-stdout|local-command-stderr|local-command-caveat|task-notification"
    r"|user-prompt-submit-hook|environment_context|user_instructions|INSTRUCTIONS|permissions instructions)"
    r"(?:\s[^<>]*)?>.*?</\1>",
    re.DOTALL,
)
_WHOLE_TAG = re.compile(r"^<([A-Za-z][\w:-]*)(?:\s[^<>]*)?>.*</\1>$", re.DOTALL)
_COMMAND_NAME = re.compile(r"<command-name>\s*/?(.*?)\s*</command-name>", re.DOTALL)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
# fmt: off
_CONTROL_COMMANDS = frozenset({
    "clear", "compact", "resume", "continue", "exit", "quit", "model", "cost", "help", "config", "login", "logout",
    "status", "context", "doctor", "permissions", "vim", "theme", "usage",
})
_ACKS = frozenset({
    "yes", "yep", "yeah", "ok", "okay", "sure", "continue", "proceed", "thanks", "thx", "wow", "great", "nice",
    "cool", "lgtm", "good", "done", "no", "go on", "go ahead", "thank you", "keep going",
    "好", "好的", "继续", "可以", "是", "是的", "对", "谢谢", "嗯", "行", "没问题", "确认",
})
_STOPWORDS = frozenset({
    "the", "and", "for", "with", "about", "from", "into", "that", "this", "what", "when", "where", "which", "focus",
})
# fmt: on


# --- facts ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolRun:
    """One tool call and what came of it.

    `kind` is "shell" (it ran `command`), "modify" (it changed files), "read", "todo" or "other".
    `has_result` is false for a call with no result, or one that never ran ("Sibling tool call
    errored"); `failed` is true for an error result or a non-zero exit code; `error_line` is the
    first line of the result that looks like an error; `index` is the message's position.
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
    index: int = 0

    @property
    def key(self) -> str:
        """What a later run must match to count as the same call (to resolve a failure)."""
        if self.command is not None:
            return self.command
        paths = self.paths_modified or self.paths_read
        return paths[0] if paths else f"{self.tool}({_compact_json(self.arguments)})"


@dataclass(frozen=True, kw_only=True, slots=True)
class Facts:
    """What `collect_facts` found in the messages; lists oldest first unless said otherwise."""

    asks: tuple[str, ...] = ()  # what the user asked, shortened
    answered: bool = False  # the latest ask got a final answer (assistant text without tool calls)
    constraints: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()  # newest first
    intents: tuple[str, ...] = ()  # what the assistant last said it was doing or about to do
    plans: tuple[str, ...] = ()  # what the latest assistant text says comes next
    todos: tuple[tuple[str, str], ...] = ()  # (status, text) from the latest todo or plan tool call
    runs: tuple[ToolRun, ...] = ()
    identifiers: tuple[str, ...] = ()  # most important first

    @property
    def files_read(self) -> list[str]:
        """Files read (or tried), most recent first, without those also modified."""
        modified = set(self.files_modified)
        return [p for p in _newest_first(p for r in self.runs for p in r.paths_read) if p not in modified]

    @property
    def files_modified(self) -> list[str]:
        """Files modified (or tried), most recent first."""
        return _newest_first(p for r in self.runs for p in r.paths_modified)

    @property
    def failures(self) -> list[ToolRun]:
        """Failed calls, newest first, those no later call fixed before those it did."""
        failed = [r for r in self.runs if r.failed]
        open_ = [r for r in reversed(failed) if not self.resolved(r)]
        fixed = [r for r in reversed(failed) if self.resolved(r)]
        return open_ + fixed

    def resolved(self, run: ToolRun) -> bool:
        """True when a later call with the same key succeeded."""
        return any(r.index > run.index and r.has_result and not r.failed and r.key == run.key for r in self.runs)


def collect_facts(messages: Sequence[Message]) -> Facts:
    """The facts of `messages` (oldest first) that the summary is made of; no I/O."""
    results: dict[str, ToolResult] = {}
    for msg in messages:
        result = msg.tool_result
        if result is not None:
            results.setdefault(result.call_id, result)

    asks: list[tuple[int, str]] = []
    constraints: list[str] = []
    decisions: list[str] = []
    found: list[tuple[Identifier, float]] = []
    runs: list[ToolRun] = []
    todos: tuple[tuple[str, str], ...] = ()
    last_text = ""
    last_answer = -1
    after_command = False
    for i, msg in enumerate(messages):
        if msg.role == "user":
            text, is_command = human_text(msg.text)
            if (after_command and not is_command) or _is_meta(msg):
                text = None  # the prompt a slash command or a skill expanded to, not typed by the user
            after_command = is_command
            _scan_text(msg.text, 3.0 if text is not None else 0.5, found)
            if text is None:
                continue
            constraints.extend(s for s in _sentences(text) if _CONSTRAINT.search(s))
            if not _is_ack(text) and not is_placeholder(text):
                asks.append((i, _shorten(text, _GOAL_CHARS)))
        elif msg.role == "assistant":
            after_command = False
            text = msg.text.strip()
            if text:
                _scan_text(text, 2.0, found)
                last_text = text
                decisions.extend(s for s in _sentences(text) if _DECISION_STRONG.search(s) or _DECISION_WEAK.search(s))
                # a reply that only announces work ("I'll do X next") leaves the ask open
                if not msg.tool_calls and not _announces(text):
                    last_answer = i
            for call in msg.tool_calls:
                run = _tool_run(call, results.get(call.id), i)
                runs.append(run)
                found.extend((ident, 2.0 if short else 0.5) for ident, short in value_identifiers(run.arguments))
                todos = _todos(run.arguments) or todos
        elif msg.role == "tool" and msg.tool_result is not None:
            _scan_text(msg.tool_result.text[:_RESULT_SCAN_CHARS], 0.5, found)

    intents = [s for s in _sentences(last_text) if _INTENT.search(s)][:1] or _sentences(last_text)[:1]
    plans = [p for p in _plans(last_text) if p not in intents]
    decisions = [d for d in decisions if d not in intents and d not in plans]
    return Facts(
        asks=tuple(_unique_keep_last(a for _, a in asks)),
        answered=bool(asks) and last_answer > asks[-1][0],
        constraints=tuple(_unique(_clip(c, _ITEM_CHARS) for c in constraints)),
        decisions=tuple(_pick_decisions(decisions)),
        intents=tuple(_clip(s, _ITEM_CHARS) for s in intents),
        plans=tuple(_clip(p, _ITEM_CHARS) for p in plans),
        todos=todos,
        runs=tuple(runs),
        identifiers=tuple(rank_identifiers(found, limit=_MAX_IDENTIFIERS)),
    )


def human_text(text: str) -> tuple[str | None, bool]:
    """The part of a user message a human typed (None if none), and whether it is a slash command.

    Heuristics: known harness prefixes ("Caveat: The messages below...", "This session is being
    continued...", "[Request interrupted by user"), tool feedback (``Parameter 'x' is expected``,
    ``OBSERVATION:``), a pasted shell session (``$ ls``), JSON, a message that is one tag block, and
    blocks of harness tags (``<system-reminder>`` ...) are not human. A ``<command-name>`` message is
    the command with its arguments ("/review src"), except session controls like /clear; our own
    summary format is never taken for a request.
    """
    stripped = text.strip()
    if not stripped or stripped.startswith(_INJECTED_PREFIXES) or _INJECTED_START.match(stripped):
        return None, False
    name = _COMMAND_NAME.search(stripped)
    if name:
        command = name.group(1).strip()
        args = _COMMAND_ARGS.search(stripped)
        arg_text = args.group(1).strip() if args else ""
        if command.split(":")[0] in _CONTROL_COMMANDS and not arg_text:
            return None, True
        return f"/{command} {arg_text}".strip(), True
    stripped = _INJECTED_TAGS.sub("", stripped).strip()
    if not stripped or _WHOLE_TAG.match(stripped) or _is_json(stripped) or not missing_sections(stripped):
        return None, False
    return stripped, False


def _is_meta(msg: Message) -> bool:
    """True when the source marked the message as injected (Claude Code's ``isMeta``)."""
    return any(isinstance(v, Mapping) and v.get("isMeta") is True for v in (msg.extra, *msg.extra.values()))


def _is_json(text: str) -> bool:
    if text[0] not in "{[":
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _announces(text: str) -> bool:
    """True when the last sentence of `text` says what the assistant will do, not what it did."""
    sentences = _sentences(text)
    return bool(sentences) and bool(_INTENT.search(sentences[-1]) or _PLAN.search(sentences[-1]))


def _is_ack(text: str) -> bool:
    norm = re.sub(r"[\W_]+", " ", text.lower()).strip()
    if norm in _ACKS or (len(norm) <= 2 and norm.isascii()):
        return True
    return norm.startswith(("thank", "谢谢")) and len(norm) < 80


def _scan_text(text: str, weight: float, found: list[tuple[Identifier, float]]) -> None:
    found.extend((ident, weight) for ident in find_identifiers(text[:_TEXT_SCAN_CHARS]))


def _tool_run(call: ToolCall, result: ToolResult | None, index: int) -> ToolRun:
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
    failed = False
    error_line = ""
    exit_code = None
    if result is not None and _TAG.sub("", result.text).strip() in _SKIPPED_FAILURES:
        result = None  # it never ran: no outcome to report
    if result is not None:
        exit_code = result.exit_code
        failed = result.is_error or (exit_code is not None and exit_code != 0)
        if failed:
            error_line = _error_line(result.text)
    return ToolRun(
        tool=call.name,
        kind=kind,
        arguments=args,
        command=command,
        paths_read=tuple(_unique(read)),
        paths_modified=tuple(_unique(modified)),
        has_result=result is not None,
        exit_code=exit_code,
        failed=failed,
        error_line=error_line,
        index=index,
    )


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
    if _todos(args):
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


def _todos(args: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(status, text) of a todo list (Claude Code ``todos``, Codex ``plan``), or () when there is none."""
    for key in ("todos", "plan"):
        value = args.get(key)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out = []
            for item in value:
                text = item.get("content") or item.get("step") or item.get("title") or item.get("task")
                status = str(item.get("status", "pending")).lower()
                if isinstance(text, str) and text.strip():
                    out.append((status, _clip(text, _ITEM_CHARS)))
            return tuple(out)
    return ()


def _error_line(text: str) -> str:
    lines = [_TAG.sub("", line).strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not _NOISE_LINE.match(line)]
    for words in _ERROR_WORDS:
        for line in lines:
            if words.search(line):
                return line
    return lines[0] if lines else ""


def _sentences(text: str) -> list[str]:
    """Sentences of prose in `text`: code blocks left out, list marks and emphasis taken off."""
    out: list[str] = []
    fenced = False
    for line in text.replace("’", "'").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") or line.lstrip().startswith("|"):
            continue
        line = _LIST_MARK.sub("", line).replace("**", "").strip()
        for part in _SENTENCE_END.split(line):
            part = " ".join(part.split())
            if len(part) >= 4:
                out.append(part)
    return out


def _plans(text: str) -> list[str]:
    """Next steps in `text`: list items under a "Next steps" line, then sentences that look ahead."""
    items: list[str] = []
    under = False
    for line in text.splitlines():
        bare = line.strip()
        if not bare:
            continue
        is_item = bool(_LIST_MARK.match(line)) and not bare.startswith("#")
        if not is_item:
            under = bool(_PLAN_HEADER.search(bare)) and len(bare) < 80
            continue
        if under:
            items.extend(_sentences(bare)[:1])
    items.extend(s for s in _sentences(text) if _PLAN.search(s) and s not in items)
    return _unique(items)[:_MAX_NEXT]


def _is_procedural(sentence: str) -> bool:
    return bool(_PROCEDURAL.search(sentence)) and not _DECISION_STRONG.search(sentence)


def _pick_decisions(sentences: list[str]) -> list[str]:
    """Newest first, at most `_MAX_DECISIONS`, explicit ones ("decided", "instead") chosen before "I'll".

    A sentence that only introduces what follows ("The fix is:") or says what the assistant will
    look at next ("Let me check the tests") is not a decision.
    """
    kept = [s for s in sentences if not s.rstrip().endswith((":", "：")) and not _is_procedural(s)]
    newest = _unique(_clip(s, _ITEM_CHARS) for s in reversed(kept))
    strong = [s for s in newest if _DECISION_STRONG.search(s)]
    weak = [s for s in newest if not _DECISION_STRONG.search(s)]
    chosen = set(strong[:_MAX_DECISIONS] + weak[: max(0, _MAX_DECISIONS - len(strong))])
    return [s for s in newest if s in chosen]


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
    omitted: dict[str, int] = field(default_factory=dict)  # Critical Context list -> items dropped before


class ExtractiveSummarizer:
    """The model-free `Summarizer`: extracts the summary from the messages; deterministic, no I/O."""

    def summarize(self, request: SummaryRequest) -> str:
        """The summary of ``request.messages``, merged into ``request.previous`` when given."""
        language = resolve_language(request)
        facts = collect_facts(request.messages)
        draft = _draft(facts, language)
        if request.previous is not None and request.previous.strip():
            draft = _merge(_parse_draft(request.previous), draft, facts, language)
        terms = _focus_terms(request.focus) if request.focus else ()
        sections, plan = _sections(draft, language, request.focus, terms)

        def protect(item: str) -> bool:
            low = item.lower()
            return any(t in low for t in terms)

        fitted = fit_sections(
            sections, max_chars=request.max_chars, plan=plan, language=language, protect=protect if terms else None
        )
        return render_sections(fitted, language=language)


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
    draft.done = _done(runs, language) + [t for s, t in facts.todos if s in ("completed", "done")]
    draft.in_progress = [t for s, t in facts.todos if s == "in_progress"] + list(facts.intents)
    draft.blocked = _unique(_blocked_item(r, facts.resolved(r), language) for r in facts.failures)
    draft.next_steps = [t for s, t in facts.todos if s == "pending"] + list(facts.plans)
    if facts.asks and not facts.answered:
        draft.next_steps.append(_labeled("pending_ask", _clip(facts.asks[-1], _ASK_CHARS), language))
    listed = set(draft.files_read) | set(draft.files_modified)
    draft.identifiers = [i for i in facts.identifiers if i not in listed]
    return draft


def _done(runs: Sequence[ToolRun], language: Language) -> list[str]:
    items: list[str] = []
    for run in runs:
        if not run.has_result or run.failed:
            continue
        if run.kind == "shell" and run.command is not None:
            short = _clip(" ".join(run.command.split()), 120)
            items.append(f"{phrase('ran', language)} {code_span(short)} ({_outcome(run, language)})")
        elif run.kind == "modify":
            items.extend(f"{phrase('modified', language)} {code_span(p)}" for p in run.paths_modified)
        elif run.kind == "other":
            items.append(f"{phrase('called', language)} {code_span(_call_text(run))}")
        if run.kind == "shell":
            items.extend(f"{phrase('modified', language)} {code_span(p)}" for p in run.paths_modified)
    return _unique_keep_last(items)


def _call_text(run: ToolRun) -> str:
    parts = []
    for key, value in run.arguments.items():
        shown = value if isinstance(value, str) else _compact_json(value)
        parts.append(f"{key}={_clip(' '.join(str(shown).split()), 60)}")
    return _clip(f"{run.tool}({', '.join(parts)})", 160)


def _commands(runs: Sequence[ToolRun], language: Language) -> list[tuple[str, str]]:
    """(command, item) for every distinct command, newest first, with its outcomes in order."""
    outcomes: dict[str, list[str]] = {}
    for run in runs:
        if run.command is not None:
            outcomes.setdefault(run.command, []).append(_outcome(run, language))
    newest = _newest_first(r.command for r in runs if r.command is not None)
    return [(c, _command_item(c, outcomes[c])) for c in newest]


def _command_item(command: str, outcomes: Sequence[str]) -> str:
    steps = [o for j, o in enumerate(outcomes) if j == 0 or o != outcomes[j - 1]][-4:]
    outcome = f"({' → '.join(steps)})"
    if len(command) > _MAX_COMMAND_CHARS:
        command = f"{command[:_MAX_COMMAND_CHARS]}… [+{len(command) - _MAX_COMMAND_CHARS} chars]"
    if "\n" not in command:
        return f"{code_span(command)} {outcome}"
    longest = max((len(run) for run in re.findall(r"`+", command)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{outcome}\n{fence}\n{command}\n{fence}"


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


def _outcome(run: ToolRun, language: Language) -> str:
    if not run.has_result:
        return phrase("no_result", language)
    if run.exit_code is not None:
        return phrase("exit", language, code=run.exit_code)
    return phrase("error" if run.failed else "ok", language)


_FAILED_OUTCOME = re.compile(r"(?:exit|退出码) -?[1-9]\d*|\berror\b|出错")


def _failed_command(item: str) -> bool:
    first = item.split("\n", 1)[0]
    last = first.rsplit("(", 1)[-1] if "(" in first else ""
    return bool(_FAILED_OUTCOME.search(last))


def _blocked_item(run: ToolRun, resolved: bool, language: Language) -> str:
    target = run.key if run.command is not None or run.paths_read or run.paths_modified else _call_text(run)
    head = f"{run.tool} ({_outcome(run, language)}): {code_span(_clip(' '.join(target.split()), 100))}"
    tail = f" {phrase('resolved', language)}" if resolved else ""
    room = _ITEM_CHARS - len(head) - len(tail) - 3
    error = f" — {_clip(run.error_line, room)}" if run.error_line and room > 10 else ""
    return head + error + tail


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
        if title and title not in _KNOWN_TITLES:
            draft.notes.extend(f"{title}: {i}" for i in _flat(subs))
    return draft


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
    """One draft from the previous summary's and the new messages' (see the module docstring)."""
    goal = _merge_goal(old.goal, new.goal)
    merged = _Draft(goal=goal, has_latest=sum(omitted_count(g) is None for g in goal) > 1)
    merged.constraints = _unique(old.constraints + new.constraints)
    moved = old.in_progress if new.in_progress else []
    merged.done = _unique_keep_last(old.done + moved + new.done)
    merged.in_progress = new.in_progress or old.in_progress
    merged.blocked = _merge_blocked(old.blocked, new.blocked, facts, language)
    merged.decisions = _unique(new.decisions + old.decisions)
    if facts.asks or new.next_steps:
        merged.next_steps = new.next_steps
    else:
        keep = [s for s in old.next_steps if not (facts.answered and _has_prefix(s, "pending_ask"))]
        merged.next_steps = keep
    merged.notes = old.notes + new.notes
    merged.files_modified = _unique(new.files_modified + old.files_modified)
    modified = set(merged.files_modified)
    merged.files_read = [p for p in _unique(new.files_read + old.files_read) if p not in modified]
    seen = {c for c, _ in new.commands}
    merged.commands = new.commands + [(c, i) for c, i in old.commands if c not in seen]
    listed = modified | set(merged.files_read)
    merged.identifiers = [i for i in _unique(new.identifiers + old.identifiers) if i not in listed]
    merged.omitted = dict(old.omitted)
    return merged


def _merge_goal(old: list[str], new: list[str]) -> list[str]:
    """Overall goal first (the oldest), then the asks, each once, in the order last asked.

    A note of asks omitted before stays right after the overall goal.
    """
    combined = [g for g in old + new if omitted_count(g) is None]
    if not combined:
        return []
    omitted = sum(omitted_count(g) or 0 for g in old)
    overall = combined[0]
    rest = _unique_keep_last(g for g in combined[1:] if g != overall)
    return [overall, *([omission_note(omitted, "en")] if omitted else []), *rest]


def _merge_blocked(old: list[str], new: list[str], facts: Facts, language: Language) -> list[str]:
    fixed = [r.key for r in facts.runs if r.has_result and not r.failed]
    resolved_mark = phrase("resolved", language)
    kept: list[str] = []
    notes = [item for item in old if omitted_count(item) is not None]
    for item in old:
        if omitted_count(item) is not None:
            continue
        # a long command shows clipped, so a later run of it matches on the shown prefix
        target = (_first_code(item) or "").removesuffix("…")
        if not _has_mark(item, "resolved") and target and any(k.startswith(target) for k in fixed):
            item = f"{item} {resolved_mark}"
        kept.append(item)
    items = _unique(new + kept)
    open_ = [i for i in items if not _has_mark(i, "resolved")]
    return open_ + [i for i in items if _has_mark(i, "resolved")] + notes


def _has_mark(item: str, key: str) -> bool:
    return any(item.endswith(p) for p in PHRASES[key].values())


# --- to sections, with the order things are dropped in when the summary is too long --------------


def _sections(
    draft: _Draft, language: Language, focus: str | None, terms: Sequence[str]
) -> tuple[Sections, list[Drop]]:
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
        goal_items.append(_labeled("focus", _clip(" ".join(focus.split()), _ASK_CHARS), language))
    asks = [a for a in draft.goal if omitted_count(a) is None]
    notes = [a for a in draft.goal if omitted_count(a) is not None]
    protected = set(goal_items)
    if asks:
        overall = _clip(asks[0], _GOAL_CHARS)
        middle = [_clip(a, _ASK_CHARS) for a in (asks[1:-1] if draft.has_latest else asks[1:])]
        omitted = sum(omitted_count(n) or 0 for n in notes) + max(0, len(middle) - _MAX_ASKS)
        middle = middle[max(0, len(middle) - _MAX_ASKS) :]
        note = [omission_note(omitted, language)] if omitted else []
        latest = [_labeled("latest_ask", _clip(asks[-1], _GOAL_CHARS), language)] if draft.has_latest else []
        goal_items += [overall, *note, *first(middle), *latest]
        protected |= {overall, *latest}

    ctx: dict[str, list[str]] = {"": first(draft.notes)}
    for key, items in (
        ("files_read", [code_span(p) for p in draft.files_read]),
        ("files_modified", [code_span(p) for p in draft.files_modified]),
        ("commands_run", [i for _, i in draft.commands]),
        ("identifiers", [code_span(i) for i in draft.identifiers]),
    ):
        items = _cap(first(items), _MAX_IDENTIFIERS if key == "identifiers" else len(items), "tail", language)
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
            "Blocked": _cap(draft.blocked, _MAX_BLOCKED, "tail", language),
        },
        "Key Decisions": {"": first(_cap(draft.decisions, _MAX_DECISIONS, "tail", language))},
        "Next Steps": {"": first(_cap(draft.next_steps, _MAX_NEXT, "tail", language))},
        "Critical Context": ctx,
    }
    cc = "Critical Context"
    commands = phrase("commands_run", language)
    plan = [
        Drop(section="Progress", subsection="Done", end="head"),
        Drop(section=cc, subsection=phrase("identifiers", language)),
        Drop(section=cc, subsection=commands, only=lambda i: not _failed_command(i)),
        Drop(section="Key Decisions"),
        Drop(section=cc),
        Drop(section="Goal", end="head", only=lambda i: i not in protected),
        Drop(section="Constraints & Preferences", end="head"),
        Drop(section=cc, subsection=phrase("files_read", language)),
        Drop(section="Progress", subsection="Blocked"),
        Drop(section="Next Steps"),
        Drop(section="Progress", subsection="In Progress"),
        Drop(section=cc, subsection=commands),
        Drop(section=cc, subsection=phrase("files_modified", language)),
    ]
    return sections, plan


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
    return tuple(_unique(terms))


# --- small text tools ----------------------------------------------------------------------------


def _labeled(key: str, text: str, language: Language) -> str:
    label = phrase(key, language)
    return f"{label}{text}" if label.endswith("：") else f"{label} {text}"


def _shorten(text: str, limit: int) -> str:
    """`text` on one line, cut at a sentence end (or a space) within `limit` characters."""
    flat = " ".join(_TAG.sub(" ", text).split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 1]
    ends = [m.end() for m in re.finditer(r"[.!?。！？](?=\s|$)|[。！？]", head)]
    if ends and ends[-1] >= limit // 2:
        return head[: ends[-1]].rstrip()
    space = head.rfind(" ")
    return (head[:space] if space >= limit // 2 else head).rstrip() + "…"


def _clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False, default=str)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _unique_keep_last(items: Iterable[str]) -> list[str]:
    """Each item once, where it last occurs."""
    listed = list(items)
    last = {item: j for j, item in enumerate(listed)}
    return [item for j, item in enumerate(listed) if last[item] == j]


def _newest_first(items: Iterable[str]) -> list[str]:
    return list(reversed(_unique_keep_last(items)))
