"""The facts a summary is made of, read from the messages themselves; no model, no I/O.

`collect_facts` is the half of a summary both summarizers share: what the user asked and
required, what the assistant decided and was about to do, every tool run with its files and
outcome, and the exact identifiers, ranked. The extractive summarizer turns the facts into
sections; the model summarizer audits the model's text against them and appends what it lacks.
What counts as what (an ask, a constraint, a decision): docs/summarize.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ctxkeep.messages import Message, ToolResult
from ctxkeep.summarize.facts.decisions import confirmed, confirms, pick_decisions, proposes, rejected, rejects
from ctxkeep.summarize.facts.human import human_text, is_ack, is_meta
from ctxkeep.summarize.facts.identifiers import (
    Identifier,
    find_identifiers,
    rank_identifiers,
    value_identifiers,
    without_redundant,
)
from ctxkeep.summarize.facts.ledger import Jobs, Todo, jobs_of, ledger_of
from ctxkeep.summarize.facts.runs import TAG, ToolRun, fixes, is_resolved, mark_expected, todo_items, tool_run
from ctxkeep.summarize.facts.sentences import CONSTRAINT as _CONSTRAINT
from ctxkeep.summarize.facts.sentences import LIST_MARK as _LIST_MARK
from ctxkeep.summarize.facts.sentences import is_constraint as _is_constraint
from ctxkeep.summarize.facts.sentences import split_sentences as _sentences
from ctxkeep.summarize.facts.superseded import mark_superseded
from ctxkeep.summarize.sections.markdown import ITEM_CHARS, clip, is_placeholder

# Caps the extractive summary's sections apply too (it imports them), so facts and sections agree.
MAX_NEXT = 8
MAX_IDENTIFIERS = 300
# A rule is the user's words and stays whole in Constraints up to this many characters (the longest on the
# shared transcripts is about 350); a longer "rule" is a pasted block, cut like any other item.
RULE_CHARS = 1_000
GOAL_CHARS = 300

# Tool results are scanned only this far for identifiers: by compaction time step 1 has cut old
# results to 3,000 bytes anyway, and past the head a result is mostly data.
_RESULT_SCAN_CHARS = 3_000
_TEXT_SCAN_CHARS = 20_000
# Where an identifier is named, as the weight `rank_identifiers` ranks it by: what the user typed and
# what the assistant passed to a tool first, then what the assistant said, then file text it wrote,
# then tool results (and user messages no human typed).
_FROM_USER = 3.0
_FROM_ASSISTANT = 2.0
_FROM_CONTENT = 1.0
_FROM_RESULT = 0.5
_LINE_SUFFIX = re.compile(r"(?::\d+)+$")
_EPHEMERAL_PORT = re.compile(r":(?:3[2-9]\d{3}|[4-6]\d{4})$")
_OWN_NOTICE = re.compile(r"^\[ctxkeep: .*$", re.MULTILINE)  # see ctxkeep.offload
_GIT_COMMAND = re.compile(r"(?:^|[\s;&|(])git\s")
_RESULT_NOISE = frozenset({"date", "version", "symbol"})

# Claude Code's handles of background shells: what a later call reads from, not an identifier
_HANDLE_TOOL = re.compile(r"(?i)^(?:bash_?output|kill_?(?:bash|shell)|task_?output|task_?stop)$")
# paths inside installed packages, named by tracebacks and build output
_VENDORED = re.compile(r"(?:^|/)(?:site-packages|dist-packages|node_modules|\.venv|_build|\.tox)/")

# A question asks, it does not rule; a pasted log line is data.
_QUESTION = re.compile(r"[?？]\s*$")
_LOG_LINE = re.compile(
    r"^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|^\[?\d{2}:\d{2}:\d{2}|^(?:ERROR|WARN(?:ING)?|INFO|DEBUG|TRACE)\b"
    r"|^(?:[A-Z]\w*)?Error:\s"  # an error message ("Error: ENOENT: no such file", "TypeError: x is not ...")
    r"|Traceback \(most recent|^\s*at [\w.$<>]+\(|^\s*File \"[^\"]+\", line \d+"
)
# Pasted data is not a rule either: text with escaped line breaks or JSON's punctuation (a log line copied
# from a session file: `No fixes applied.\n\n> check ... "}],"isError":false}`).
_PASTED = re.compile(r"(?:\\n.*){2}|\"\s*[}\]],|[{,]\s*\"\w+\"\s*:")
# A rule that points back ("Never exceed it") takes the sentence before it when that one holds the value.
_POINTS_BACK = re.compile(r"(?i)\b(?:it|this|that|these|those|them|the same)\b|这个|那个|它")
_VALUE = re.compile(r"\d|`")
# A lead-in that asks the agent to do what follows ("I want you to:", "Please do the following:"): the items or
# the sentence after it are rules, whatever their own wording.
_DIRECTIVE = re.compile(
    r"(?i)\b(?:(?:want|need|would like|'d like|asking|ask) (?:you|u) to|do (?:the following|as follows)"
    r"|follow(?:ing)? (?:these|this|the following|my)"
    r"|(?:these|the following) (?:rules|instructions|steps|requirements))\b"
    r"|请(?:你)?(?:按照|遵守|做到)|我(?:希望|需要|要)你"
)
_INTENT = re.compile(
    r"(?i)\b(?:let me|let's|I'll|I will|I'm going to|I am going to|now I|I'm now|next,? I|I need to|I'm)\b"
    r"|让我|我将|我会|接下来|现在|正在|下面|我先|首先"
)
_PLAN = re.compile(
    r"(?i)\b(?:next(?: step|,|:| I| we)|then I|then we|I'll|I will|we'll|we will|need to|remaining|todo|to do"
    r"|going to|after that|afterwards)\b|接下来|然后|下一步|需要|还要|准备|之后"
)
# what the assistant found or concluded: a cause, a result, a check that passed ("the cause is ...", "all 12
# tests pass"); what it will do next or decided are intents and decisions, not findings
_FINDING = re.compile(
    r"(?i)\b(?:found|root cause|the cause|caused by|turns out|the (?:issue|problem|bug|error|failure) (?:is|was)"
    r"|because|confirmed|the reason|(?:all )?(?:\d+ )?tests? (?:now )?pass(?:es|ed)?|now (?:works|passes)"
    r"|(?:is|are|was) (?:now )?fixed|works now|conclusion|in summary|verified)\b"
    r"|发现|原因是|根本原因|问题是|问题在于|已修复|测试通过|已通过|验证"
)
_MAX_FINDINGS = 3  # of each message
_CONCLUSION_WORDS = 5  # a final answer's opening sentence with fewer words says nothing found ("Fixed.")
_PLAN_HEADER = re.compile(r"(?i)next steps?|to ?do|remaining|下一步|待办|接下来|后续")
_ITEM_MARK = re.compile(r"^\s{0,3}(?:[-*+•]|\d{1,3}[.)])\s+(?:\[[ xX]\]\s+)?")


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
    plan: tuple[Todo, ...] = ()  # the ledger of every todo and task call (`ledger_of`), oldest item first
    jobs: Jobs = field(default_factory=Jobs)  # background jobs started and ended (`jobs_of`)
    runs: tuple[ToolRun, ...] = ()
    tasks: tuple[tuple[int, str], ...] = ()  # (message index, ask shortened) of every ask, oldest first
    findings: tuple[tuple[int, str], ...] = ()  # (message index, sentence): what the assistant found or concluded
    identifiers: tuple[str, ...] = ()  # most important first
    named: int = 0  # how many of the first identifiers the user, the assistant or a short tool argument named

    @property
    def files_read(self) -> list[str]:
        """Files read (or tried), most recent first, without those also modified."""
        modified = set(self.files_modified)
        return [p for p in newest_first(p for r in self.runs for p in r.paths_read) if p not in modified]

    @property
    def files_modified(self) -> list[str]:
        """Files modified (or tried), most recent first."""
        return newest_first(p for r in self.runs for p in r.paths_modified)

    @property
    def failures(self) -> list[ToolRun]:
        """Failed calls, newest first, those no later call fixed before those it did."""
        failed = [r for r in self.runs if r.failed]
        open_ = [r for r in reversed(failed) if not self.resolved(r)]
        fixed = [r for r in reversed(failed) if self.resolved(r)]
        return open_ + fixed

    def resolved(self, run: ToolRun) -> bool:
        """True when later calls fixed the failed `run` (see `runs.is_resolved`)."""
        return is_resolved(run, self.runs)

    def fixes(self, tool: str, target: str) -> bool:
        """True when a successful call of these facts fixes an older failure of `tool` on `target`.

        `target` is the command or file a previous summary shows for the failure (see `runs.fixes`).
        """
        return fixes(self.runs, tool, target)


def collect_facts(
    messages: Sequence[Message],
    *,
    identifier_limit: int | None = MAX_IDENTIFIERS,
    originals: Mapping[str, str] | None = None,
) -> Facts:
    """The facts of `messages` (oldest first) that the summary is made of; no I/O.

    `identifier_limit` caps `Facts.identifiers` (the highest-ranked kept); None keeps them all.
    `originals` (`SummaryRequest.originals`) gives the end of offloaded results' saved originals, from
    which their failures are judged and quoted.
    """
    if identifier_limit is not None and (
        not isinstance(identifier_limit, int) or isinstance(identifier_limit, bool) or identifier_limit < 0
    ):
        raise ValueError(f"identifier_limit must be a whole number >= 0 or None; got {identifier_limit!r}")
    results: dict[str, ToolResult] = {}
    for msg in messages:
        result = msg.tool_result
        if result is not None:
            results.setdefault(result.call_id, result)

    asks: list[tuple[int, str]] = []
    constraints: list[str] = []
    decisions: list[tuple[int, str]] = []  # (index, sentence)
    findings: list[tuple[int, str]] = []  # (index, sentence)
    last_user = -1
    found: list[tuple[Identifier, float]] = []
    runs: list[ToolRun] = []
    commands: dict[str, str] = {}  # call id -> the shell command it ran
    said: list[tuple[int, str]] = []  # (index, first two sentences) of assistant messages with text
    todos: tuple[tuple[str, str], ...] = ()
    last_text = ""
    last_answer = -1
    after_command = False
    for i, msg in enumerate(messages):
        if msg.role == "user":
            text, is_command = human_text(msg.text)
            if (after_command and not is_command) or is_meta(msg):
                text = None  # the prompt a slash command or a skill expanded to, not typed by the user
            after_command = is_command
            _scan_text(msg.text, _FROM_USER if text is not None else _FROM_RESULT, found)
            if text is None:
                continue
            constraints.extend(rules_in(text))
            if rejects(text):  # the user turned down what the assistant decided since their last message
                decisions = [(j, rejected(d) if j > last_user else d) for j, d in decisions]
            elif confirms(text):  # ... or confirmed it: an approach the user agreed to is decided
                decisions = [(j, confirmed(d) if j > last_user else d) for j, d in decisions]
            last_user = i
            if not is_ack(text) and not is_placeholder(text):
                asks.append((i, _shorten(text, GOAL_CHARS)))
        elif msg.role == "assistant":
            after_command = False
            text = msg.text.strip()
            if text:
                _scan_text(text, _FROM_ASSISTANT, found)
                sentences = _sentences(text)
                said.append((i, " ".join(sentences[:2])))  # enough to call a failure expected
                last_text = text
                decided = [s for s in sentences if proposes(s)]
                decisions.extend((i, s) for s in decided)
                found_here = [s for s in sentences if _FINDING.search(s) and s not in decided and not _INTENT.search(s)]
                if not msg.tool_calls and not found_here and sentences and not _announces(text):
                    # a final answer's opening sentence is its conclusion, unless it only says "Done." or "Good idea."
                    found_here = [s for s in sentences[:1] if len(s.split()) >= _CONCLUSION_WORDS]
                findings.extend((i, clip(s, ITEM_CHARS)) for s in found_here[-_MAX_FINDINGS:])
                # a reply that only announces work ("I'll do X next") leaves the ask open
                if not msg.tool_calls and not _announces(text):
                    last_answer = i
            for call in msg.tool_calls:
                run = tool_run(call, results.get(call.id), i, originals=originals)
                runs.append(run)
                if run.command is not None:
                    commands[call.id] = run.command
                if not _HANDLE_TOOL.match(call.name):
                    found.extend(
                        (ident, _FROM_USER if short else _FROM_CONTENT)
                        for ident, short in value_identifiers(run.arguments)
                    )
                todos = tuple((s, clip(t, ITEM_CHARS)) for s, t in todo_items(run.arguments)) or todos
        elif msg.role == "tool" and msg.tool_result is not None:
            command = commands.get(msg.tool_result.call_id, "")
            _scan_result(_head(msg.tool_result.text, _RESULT_SCAN_CHARS), bool(_GIT_COMMAND.search(command)), found)

    identifiers = without_redundant(rank_identifiers(found))[:identifier_limit]
    named = {ident.text for ident, weight in found if weight >= _FROM_ASSISTANT}
    intents = [s for s in _sentences(last_text) if _INTENT.search(s)][:1] or _sentences(last_text)[:1]
    plans = [p for p in _plans(last_text) if p not in intents]
    chosen = [d for _, d in decisions if d not in intents and d not in plans]
    return Facts(
        asks=tuple(unique_keep_last(a for _, a in asks)),
        answered=bool(asks) and last_answer > asks[-1][0],
        constraints=tuple(mark_superseded(unique_keep_last(clip(c, RULE_CHARS) for c in constraints))),
        decisions=tuple(pick_decisions(chosen)),
        intents=tuple(clip(s, ITEM_CHARS) for s in intents),
        plans=tuple(clip(p, ITEM_CHARS) for p in plans),
        todos=todos,
        plan=ledger_of(messages),
        jobs=jobs_of(messages),
        runs=tuple(mark_expected(runs, said)),
        tasks=tuple(asks),
        findings=tuple(findings),
        identifiers=tuple(identifiers),
        named=sum(i in named for i in identifiers),
    )


def _announces(text: str) -> bool:
    """True when the last sentence of `text` says what the assistant will do, not what it did."""
    sentences = _sentences(text)
    return bool(sentences) and bool(_INTENT.search(sentences[-1]) or _PLAN.search(sentences[-1]))


def _scan_text(text: str, weight: float, found: list[tuple[Identifier, float]]) -> None:
    found.extend((ident, weight) for ident in find_identifiers(_head(text, _TEXT_SCAN_CHARS)))


def _head(text: str, limit: int) -> str:
    """`text` cut to `limit` characters at a space or line end, so no identifier is cut in two ("https://github.co")."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    return head[:cut] if cut > 0 else head


def _scan_result(text: str, git: bool, found: list[tuple[Identifier, float]]) -> None:
    """Identifiers of a tool result: a file once per line it is named on, without the line number
    (grep, tracebacks and linters name ``a.py:12``, ``a.py:40``, ...); installed packages, the
    client ports of a log and the files our own offload notices point to are left out, and so are the
    dates, versions and code symbols of an output, and its hex words unless git printed them."""
    for ident in find_identifiers(_OWN_NOTICE.sub("", text), git=git):
        if ident.kind in _RESULT_NOISE or (ident.kind == "hash" and not git):
            continue  # log timestamps, code symbols and hex of a tool's output; named elsewhere, they count there
        if ident.kind == "path":
            if _VENDORED.search(ident.text):
                continue
            ident = replace(ident, text=_LINE_SUFFIX.sub("", ident.text))
        elif ident.kind == "host_port" and _EPHEMERAL_PORT.search(ident.text):
            continue  # the client's end of a connection, as access logs show it
        found.append((ident, _FROM_RESULT))


def _candidates(text: str) -> list[str]:
    """What a user's text could state a rule in: each list item whole (with the lines it wraps
    onto) when it is short, else its sentences; and the sentences of the prose around the items."""
    return [c for c, _ in _pieces(text)]


def _pieces(text: str) -> list[tuple[str, bool]]:
    """`_candidates` with, for each, whether it comes from a list item."""
    out: list[tuple[str, bool]] = []
    item: list[str] | None = None
    prose: list[str] = []

    def flush() -> None:
        nonlocal item
        if item is not None:
            whole = " ".join(" ".join(item).split())
            out.extend((c, True) for c in ([whole] if len(whole) <= ITEM_CHARS else _sentences(whole)))
        item = None

    def flush_prose() -> None:
        out.extend((c, False) for c in _sentences("\n".join(prose)))
        prose.clear()

    fenced = False
    for line in text.replace("’", "'").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            flush()
            continue
        if fenced or line.lstrip().startswith("|"):
            flush()
            continue
        mark = _ITEM_MARK.match(line)
        if mark:
            flush()
            flush_prose()
            item = [line[mark.end() :].replace("**", "").strip()]
        elif item is not None and line.startswith((" ", "\t")) and line.strip():
            item.append(line.strip().replace("**", ""))  # the item goes on, wrapped or with its example
        else:
            flush()
            prose.append(line)
    flush()
    flush_prose()
    return [(c, is_item) for c, is_item in out if len(c) >= 4]


def rules_in(text: str) -> list[str]:
    """The rules `text` states: its list items and sentences that are constraints (see `collect_facts`).

    A rule is taken whole, with its value: one that points back ("Never exceed it.") and names no
    value itself is joined to the sentence before it when that one names one ("The budget cap is
    $500."). Questions and pasted log lines are not rules. A lead-in whose content follows ("I want you
    to:", then a list) is no rule alone: when it asks the agent to do what follows, the items after it
    (or the one sentence after it) are rules, each in the user's words.
    """
    out: list[str] = []
    previous = ""
    pieces = _pieces(text)
    directed: set[int] = set()  # the pieces a directive lead-in introduces
    for k, (candidate, _) in enumerate(pieces):
        if not _leads_in(candidate) or k + 1 == len(pieces):
            continue
        if _DIRECTIVE.search(candidate) or _CONSTRAINT.search(candidate):
            following = pieces[k + 1 :]
            if following[0][1]:  # the list under it, to the first line of prose
                directed.update(k + 1 + j for j in range(_run_of_items(following)))
            elif not _leads_in(following[0][0]):
                directed.add(k + 1)
    for k, (candidate, _) in enumerate(pieces):
        leads = _leads_in(candidate) and k + 1 < len(pieces)  # its content follows: the rule is there
        if (
            not leads
            and (k in directed or _is_constraint(candidate))
            and not _QUESTION.search(candidate)
            and not _LOG_LINE.search(candidate)
            and not _PASTED.search(candidate)
        ):
            if not _VALUE.search(candidate) and _POINTS_BACK.search(candidate) and _VALUE.search(previous):
                candidate = f"{previous} {candidate}"
            out.append(candidate)
        previous = candidate
    return out


def _leads_in(candidate: str) -> bool:
    """True when `candidate` introduces what follows it: it ends with a colon."""
    return candidate.rstrip().endswith((":", "："))


def _run_of_items(pieces: Sequence[tuple[str, bool]]) -> int:
    """How many of `pieces` from the first are list items."""
    return next((j for j, (_, is_item) in enumerate(pieces) if not is_item), len(pieces))


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
    return unique(items)[:MAX_NEXT]


# --- text tools, shared with the extractive summarizer ------------------------------------------


def _shorten(text: str, limit: int) -> str:
    """`text` on one line, cut at a sentence end (or a space) within `limit` characters."""
    flat = " ".join(TAG.sub(" ", text).split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 1]
    ends = [m.end() for m in re.finditer(r"[.!?。！？](?=\s|$)|[。！？]", head)]
    if ends and ends[-1] >= limit // 2:
        return head[: ends[-1]].rstrip()
    space = head.rfind(" ")
    return (head[:space] if space >= limit // 2 else head).rstrip() + "…"


def unique(items: Iterable[str]) -> list[str]:
    """Each item once, where it first occurs."""
    return list(dict.fromkeys(items))


def unique_keep_last(items: Iterable[str]) -> list[str]:
    """Each item once, where it last occurs."""
    listed = list(items)
    last = {item: j for j, item in enumerate(listed)}
    return [item for j, item in enumerate(listed) if last[item] == j]


def newest_first(items: Iterable[str]) -> list[str]:
    """Each item once, where it last occurs, the last first."""
    return list(reversed(unique_keep_last(items)))
