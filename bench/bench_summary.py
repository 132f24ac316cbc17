"""What the summaries keep: files, failing commands and identifiers of the compacted messages, over real sessions.

Run: .venv/bin/python bench/bench_summary.py [--windows 128000,32000] [--transcripts NAME,NAME] [--repeated N]
         [--summarizer extractive|deterministic|smollm2 | --model SPEC [--base-url URL] [--model-window N]]

Every conversation of every shared transcript (or of those whose file name contains one of the
`--transcripts` texts) is replayed through a `Session` (in memory, default 16,000-character cap)
turn by turn, as bench_replay.py does, at each window, with one of these summarizers:

    extractive     the built-in `ExtractiveSummarizer` (the default)
    deterministic  `ModelSummarizer(fixed_summary_model())`, window 8192, max_tokens 1024: the model
                   summarizer's whole path (parts, merges, audit, augment) with a model that makes no
                   calls; 8192 is the compaction model's window, not the session's
    smollm2        the same with SmolLM2-135M: the bench starts scripts/llama_server.py (llama.cpp,
                   --context 8192) on a free port, owns its PID and stops it at the end; window 8192,
                   max_tokens 1024, retries 1, JSON replies. Each call takes 20-40 s on 2 cores:
                   restrict it with --transcripts and --windows
    --model SPEC   any other model (`get_model(SPEC, base_url=...)`), window `--model-window`
                   (default `ModelSummarySettings().window`), `--reply-format` markdown or json

At each compaction, from the messages it archived:

    files   file paths of the tool calls: path arguments (`PATH_KEYS`), edit tools and patches, the
            files of ``cat``/``sed``/redirections in commands (`ctxkeep.summarize.facts.runs.tool_run`)
    fails   failing shell commands (an error result or a non-zero exit code, or, for an unflagged result,
            the end of its text, read from the saved original when it was offloaded), their command
            text; a call that never ran ("Sibling tool call errored") is not one
    ids     exact identifiers (`extract_identifiers`) of user and assistant text and of the string
            values of tool-call arguments; not of tool results
    strict  the identifiers `collect_facts(archived, identifier_limit=None).identifiers`: those the
            model summarizer's augmentation (`ctxkeep.summarize.model.augment`) guarantees, each either
            verbatim in the summary or counted by its "(N more identifiers in the archive)" note

Each is looked for verbatim (as a substring) in (1) the summary right after that compaction and (2)
the summary at the end of the conversation; what (2) lacks that (1) had, later compactions dropped
under the cap ((2) can be higher: a later compaction may name again what an earlier summary had
dropped). Counts are per compaction: something two compactions archived counts twice. A failing
command counts as kept when the summary has it whole or has its identifying part, `command_head`
(the whole command when it is one line of at most 200 characters, else its first line cut to 200):
the shortened form the summarizer documents for a command it has no room for. "whole" shows how
many were kept entire.

For strict, (1) splits three ways: "now" verbatim in the summary; "note" absent but counted by the
summary's "(N more identifiers in the archive)" notes; "lost" neither. The notes also count the
previous summary's identifiers the new one dropped; those rank last, so the cap drops them first,
and the note covers an archived identifier only for what is left of N after them.

Targets. Extractive: 100% of files and failing commands at (1) and (2): the summarizer keeps them
verbatim whatever the size, until even they cannot fit the cap (the docstring of
docs/summarize.md); none for identifiers: the summary keeps at most 300, and drops them
before anything else in Critical Context; the figures show what the cap costs. Model summarizers:
100% of files, failing commands and strict identifiers at (1), verbatim or counted in the note
(files and failing commands verbatim or as their head), and 0 strict identifiers lost, whatever
the model writes: augment appends what the model left out. Every compaction should be applied;
one fails only when no reply of the model is a valid summary (nothing is archived then).

What the summary right after each compaction carries verbatim of every message archived so far
(read with the summarizers' own `voices`): the session's first real ask
(whole, or its head and tail around the cut note when it alone is over its budget), the newest
user-typed message, the typed messages that fit the user budget newest first (`budgets`, less the
first message and the headings), and each standing-instruction block (each kind once, its newest
version; whole, or head and tail). Targets: 100% of each. Also the summary's size (median, max) and
the share of its characters on lines that repeat an earlier line (headings, fences and "(none)" left
out); target 0. `--repeated N` prints the N lines that repeated most often, to see what says things twice.

Also: the median and max time of one call of the extractive summarizer, and of the whole compaction.
For model summarizers, per summarize call (failed ones included): model calls, parts the history
was split into, prompt (input) tokens, output tokens (as the server reports them, else counted),
wall seconds; median, max and total of each; compactions applied and failed, the reasons of the
failures, and how many applied summaries still fail the quality audit (the best reply kept).
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# the shared conversations, read and repaired as the replay benchmark reads them (run from the repository root)
from bench_replay import conversations
from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message, ToolResult
from ctxkeep.providers import get_model
from ctxkeep.replay import turns
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, ModelSummarySettings
from ctxkeep.summarize import Summarizer, SummaryRequest, with_originals
from ctxkeep.summarize.extractive import ExtractiveSummarizer
from ctxkeep.summarize.facts.collect import collect_facts
from ctxkeep.summarize.facts.identifiers import extract_identifiers
from ctxkeep.summarize.facts.runs import ToolRun, tool_run
from ctxkeep.summarize.facts.shell import command_head, command_targets
from ctxkeep.summarize.model.summarizer import ModelSummarizer, SummaryRun
from ctxkeep.summarize.sections.markdown import PHRASES, omitted_count, parse_sections, unquote
from ctxkeep.summarize.testing import fixed_summary_model
from ctxkeep.summarize.verbatim import Carried, budgets, split_carried
from ctxkeep.summarize.voices import voices
from ctxkeep.tokens import get_counter

# the local model server's launcher (scripts/ is not a package; the repository root is its parent)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.llama_server import serving

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT.parent / "shared" / "data" / "transcripts" / "raw"
COUNTER = get_counter("o200k_base")
KINDS = ("files", "fails", "ids", "strict")
# What the summary carries verbatim, counted per compaction: the session's first typed message (whole, or cut to
# its head and tail because it alone is over its budget), the newest typed message, the typed messages that fit
# the user budget newest first, and the standing-instruction blocks archived so far (whole, or head and tail).
VERBATIM = (
    "first", "first_whole", "first_cut", "newest", "newest_kept", "fit", "fit_kept",
    "instr", "instr_whole", "instr_cut",
)  # fmt: skip
SUMMARIZERS = ("extractive", "deterministic", "smollm2")
MODEL_WINDOW = 8_192  # the compaction model's window (llama-server's --context), not the session's
MODEL_MAX_TOKENS = 1_024
WINDOW = ModelSummarySettings().window  # the default of any other --model
# augment's note of the identifiers it had no room for, in either language
MORE_IDS = re.compile(r"\((\d+) more identifiers in the archive\)|（另有 (\d+) 个标识符，详见归档）")
_FENCED_ITEM = re.compile(r"\n?(`{3,})\n(.*)\n\1", re.DOTALL)
_ID_TITLES = frozenset(t.lower() for t in PHRASES["identifiers"].values())

Items = tuple[list[str], list[str], list[str], list[str]]  # files, fails, ids, strict


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One summarize call: its wall time, whether it returned a summary (else why not), the previous
    summary it was given, and what a model summarizer spent (`SummaryRun`; None for the extractive one)."""

    seconds: float
    ok: bool
    reason: str = ""
    previous: str | None = None
    run: SummaryRun | None = None
    max_chars: int = 0


class TimedSummarizer:
    """A summarizer, timing and recording each call."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.calls: list[Call] = []

    def summarize(self, request: SummaryRequest) -> str:
        """`inner`'s summary of `request`; the call is appended to `calls`, failed or not."""
        t = time.perf_counter()
        reason = ""
        try:
            text = self.inner.summarize(request)
        except Exception as exc:  # recorded, then the engine turns it into a failed compaction
            reason = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            run = getattr(self.inner, "last_run", None)
            self.calls.append(
                Call(
                    seconds=time.perf_counter() - t,
                    ok=not reason,
                    reason=reason,
                    previous=request.previous,
                    run=run if isinstance(run, SummaryRun) else None,
                    max_chars=request.max_chars,
                )
            )
        return text


@dataclass(kw_only=True, slots=True)
class Tally:
    """Items archived, and how many of them the summary right after (`now`) and the final one (`end`) had."""

    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    now: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    end: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    whole_now: int = 0  # failing commands kept entire
    whole_end: int = 0
    noted: int = 0  # strict identifiers absent from the summary right after but counted by its note
    compactions: int = 0  # applied
    failed: int = 0  # the summarizer was called and gave no valid summary
    calls: list[Call] = field(default_factory=list)
    compaction_s: list[float] = field(default_factory=list)
    verbatim: dict[str, int] = field(default_factory=lambda: dict.fromkeys(VERBATIM, 0))
    sizes: list[int] = field(default_factory=list)  # characters of each summary right after its compaction
    duplicated: int = 0  # characters of those summaries on lines that repeat an earlier line
    repeated: Counter[str] = field(default_factory=Counter)  # those lines, with how often they repeated
    twice: int = 0  # characters of those summaries saying again what another line says (`said_twice`)
    done: int = 0  # Done items of those summaries (omission notes left out)
    unbacked: int = 0  # of them, items that point to no evidence in the archive (`has_evidence`)
    blocked: int = 0  # Blocked items not marked resolved
    stale: int = 0  # of them, failures a later run in the archive had already fixed (`fixed_later`)
    examples: list[str] = field(default_factory=list)  # a few unbacked and stale items, to see what they are

    def add(self, other: Tally) -> None:
        for k in KINDS:
            self.total[k] += other.total[k]
            self.now[k] += other.now[k]
            self.end[k] += other.end[k]
        self.whole_now += other.whole_now
        self.whole_end += other.whole_end
        self.noted += other.noted
        self.compactions += other.compactions
        self.failed += other.failed
        self.calls += other.calls
        self.compaction_s += other.compaction_s
        for k in VERBATIM:
            self.verbatim[k] += other.verbatim[k]
        self.sizes += other.sizes
        self.duplicated += other.duplicated
        self.repeated.update(other.repeated)
        self.twice += other.twice
        self.done += other.done
        self.unbacked += other.unbacked
        self.blocked += other.blocked
        self.stale += other.stale
        self.examples += other.examples


def runs_of(archived: tuple[Message, ...], originals: Mapping[str, str]) -> list[ToolRun]:
    results: dict[str, ToolResult] = {}
    for msg in archived:
        result = msg.tool_result
        if result is not None:
            results.setdefault(result.call_id, result)
    return [
        tool_run(call, results.get(call.id), i, originals=originals)
        for i, msg in enumerate(archived)
        for call in msg.tool_calls
    ]


def strings(value: Any) -> Iterator[str]:
    """Every string in parsed tool-call arguments."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def archived_items(archived: tuple[Message, ...], originals: Mapping[str, str]) -> Items:
    """Files, failing commands, identifiers and strict identifiers of the messages a compaction archived;
    `originals` the end of each offloaded output's saved original, as the summarizer gets them."""
    runs = runs_of(archived, originals)
    files = list(dict.fromkeys(p for r in runs for p in (*r.paths_read, *r.paths_modified)))
    fails = list(dict.fromkeys(r.command for r in runs if r.kind == "shell" and r.failed and r.command))
    texts = [m.text for m in archived if m.role in ("user", "assistant")]
    texts += [s for m in archived for call in m.tool_calls for s in strings(call.input())]
    strict = list(collect_facts(archived, identifier_limit=None, originals=originals).identifiers)
    return files, fails, extract_identifiers(texts), strict


def previous_identifiers(previous: str | None) -> list[str]:
    """The Exact identifiers listed in a previous summary's Critical Context, as augment reads them."""
    if not previous:
        return []
    out: list[str] = []
    for sub, items in parse_sections(previous).get("Critical Context", {}).items():
        if sub.strip().lower() not in _ID_TITLES:
            continue
        for item in items:
            if omitted_count(item) is not None or MORE_IDS.fullmatch(item.strip()):
                continue
            fenced = _FENCED_ITEM.fullmatch(item)
            if fenced:
                out.append(fenced.group(2))
            elif "\n" not in item:
                out.append(unquote(item))
    return out


def noted(strict: list[str], previous: str | None, summary: str) -> int:
    """How many of `strict` (archived identifiers) absent from `summary` its "(N more identifiers in the
    archive)" notes count: N less the previous summary's other identifiers it dropped (they rank last)."""
    absent = sum(i not in summary for i in strict)
    n = sum(int(a or b) for a, b in MORE_IDS.findall(summary))
    archived = set(strict)
    carried = sum(1 for i in dict.fromkeys(previous_identifiers(previous)) if i not in archived and i not in summary)
    return min(absent, max(0, n - carried))


def replay(
    messages: list[Message], system: str | None, settings: EngineSettings, make: Callable[[], Summarizer]
) -> Tally:
    """One conversation replayed; each compaction's items checked against its summary and the final one."""
    tally = Tally()
    summarizer = TimedSummarizer(make())
    pending: list[Items] = []
    so_far = Carried()
    archive: list[Message] = []
    saved: dict[str, str] = {}  # the ends of the offloaded originals of every archived message
    with Session(MemoryFolder(), settings=settings, counter=COUNTER, summarizer=summarizer) as session:
        for group in turns(messages):
            session.add(group)
            called = len(summarizer.calls)
            step = session.prepare(system)
            if step.compaction is None:
                if step.failure is not None and len(summarizer.calls) > called:
                    tally.failed += 1
                continue
            tally.compactions += 1
            tally.compaction_s.append(step.compaction.seconds)
            originals = with_originals(SummaryRequest(messages=step.archived), session.store.read_original).originals
            items = archived_items(step.archived, originals)
            pending.append(items)
            summary = session.summary or ""
            count(tally, items, summary, tally.now, "whole_now")
            tally.noted += noted(items[3], summarizer.calls[-1].previous, summary)
            so_far = merged(so_far, step.archived)
            count_verbatim(tally, so_far, summary, summarizer.calls[-1].max_chars)
            archive += step.archived
            saved.update(originals)
            count_progress(tally, tuple(archive), saved, summary)
        final = session.summary or ""
    for items in pending:
        count(tally, items, final, tally.end, "whole_end")
    tally.calls = summarizer.calls
    return tally


def merged(so_far: Carried, archived: tuple[Message, ...]) -> Carried:
    """The user's words and the instruction blocks of the messages archived so far (the summarizers' own reading,
    `voices`: the first real ask, then the newest, each once; each instruction kind once, its newest version)."""
    first, newest, blocks = so_far.first, list(so_far.newest), list(so_far.instructions)
    for said in (s for parts in voices(archived) for s in parts):
        if said.voice == "standing":
            head = said.text.split("\n", 1)[0]
            blocks = [b for b in blocks if b.split("\n", 1)[0] != head and b != said.text] + [said.text]
        elif said.voice == "ask" and first is None:
            first = said.text
        elif said.text != first:
            newest = [t for t in newest if t != said.text] + [said.text]
    return Carried(first=first, newest=tuple(newest), instructions=tuple(blocks))


def kept_cut(text: str, summary: str) -> bool:
    """True when `summary` has `text` cut to its head and tail: its first and last 60 characters around a cut note."""
    return text[:60] in summary and text[-60:] in summary and "characters omitted here" in summary


def count_verbatim(tally: Tally, so_far: Carried, summary: str, max_chars: int) -> None:
    """Counts what the summary right after a compaction carries verbatim of all the messages archived so far."""
    v = tally.verbatim
    if so_far.first is not None:
        v["first"] += 1
        whole = so_far.first in summary
        v["first_whole"] += whole
        v["first_cut"] += not whole and kept_cut(so_far.first, summary)
    later = [t for t in so_far.newest if t != so_far.first]
    if later:
        v["newest"] += 1
        v["newest_kept"] += later[-1] in summary or kept_cut(later[-1], summary)
    # the typed messages that fit the user budget beside the first message, newest first (fences counted)
    room = budgets(max_chars)[0] - 300 - (min(len(so_far.first), budgets(max_chars)[0]) if so_far.first else 0)
    for text in reversed(later):
        room -= len(text) + 10
        if room < 0:
            break
        v["fit"] += 1
        v["fit_kept"] += text in summary
    for block in so_far.instructions:
        v["instr"] += 1
        whole = block in summary
        v["instr_whole"] += whole
        v["instr_cut"] += not whole and kept_cut(block, summary)
    tally.sizes.append(len(summary))
    lines = repeated_lines(summary)
    tally.duplicated += sum(len(line) for line in lines)
    tally.repeated.update(line.strip() for line in lines)


_SPAN = re.compile(r"(`+)(.+?)\1")
_HASH = re.compile(r"\b[0-9a-f]{7,40}\b")
_BULLET = re.compile(r"^(?:[-*+]|\d{1,3}[.)])\s+")
_LABEL = re.compile(r"^[A-Z][\w ]{0,24}:\s+")
_SAID_CHARS = 20  # a line shorter than this (once normalized) is a word or a fence, not a statement


def count_progress(tally: Tally, archive: tuple[Message, ...], originals: Mapping[str, str], summary: str) -> None:
    """Counts the Done items of `summary` that point to no evidence in `archive` (all messages archived so far),
    the Blocked items not marked resolved that a later run of `archive` had fixed, and the characters said twice."""
    runs = runs_of(archive, originals)
    ids = {r.call_id for r in runs}
    hashes = {h for m in archive if m.tool_result is not None for h in _HASH.findall(m.tool_result.text[:2_000])}
    progress = parse_sections(split_carried(summary)[0]).get("Progress", {})
    for item in progress.get("Done", []):
        if omitted_count(item) is not None:
            continue
        tally.done += 1
        if not has_evidence(item, ids, hashes):
            tally.unbacked += 1
            tally.examples.append(f"done without evidence: {item[:150]}")
    for item in progress.get("Blocked", []):
        if omitted_count(item) is not None or item.rstrip().endswith(PHRASES["resolved"]["en"]):
            continue
        tally.blocked += 1
        if fixed_later(item, runs):
            tally.stale += 1
            tally.examples.append(f"blocked, fixed later: {item[:150]}")
    tally.twice += sum(len(line) for line in said_twice(summary))


def has_evidence(item: str, ids: set[str], hashes: set[str]) -> bool:
    """True when a Done `item` names a tool call of the archive or a commit hash a tool result printed."""
    words = set(re.findall(r"[\w-]{6,}", item))
    return bool(words & ids) or any(h in hashes for w in words for h in _HASH.findall(w))


def fixed_later(item: str, runs: Sequence[ToolRun]) -> bool:
    """True when the failure a Blocked `item` shows (its first code span: the command's head or the call's
    target) was fixed by a later successful run: the newest failed run in `runs` it names, followed by the same
    command or a call of the same program or tool on the same target (a shared operand or file; neither naming
    any)."""
    m = _SPAN.search(item)
    shown = m.group(2).strip().removesuffix("…") if m else ""
    if not shown:
        return False
    named = [j for j, run in enumerate(runs) if run.failed and shows(shown, run)]
    if not named:
        return False
    failed = runs[named[-1]]
    return same_target(failed, [r for r in runs[named[-1] + 1 :] if r.has_result and not r.failed])


def shows(shown: str, run: ToolRun) -> bool:
    """True when `shown` (a Blocked item's first code span) is the failed `run`'s command, its head or its target."""
    if run.command is None:
        return run.key == shown or (run.key.startswith(shown) and len(shown) >= 99)
    return run.command.startswith(shown) or command_head(run.command) == shown


def same_target(failed: ToolRun, later: Sequence[ToolRun]) -> bool:
    """The oracle's reading of "the same command, or a command on the same file or target, succeeded later":
    another tool's call by one of the same tool on the same target; a shell command by the same command, or by
    commands of the same programs that, together, ran on all its targets (the words of its operands; a quoted
    text with spaces, such as a commit message, is not a target), or, when it had none, on none either."""
    if failed.command is None:
        return any(r.tool == failed.tool and r.key == failed.key for r in later)
    if any(r.command == failed.command for r in later):
        return True
    done: dict[str, list[set[str]]] = {}
    for r in later:
        for program, ops in command_targets(r.command or ""):
            done.setdefault(program, []).append({o for o in ops if " " not in o})
    steps = command_targets(failed.command)
    for program, ops in steps:
        targets = {o for o in ops if " " not in o}
        runs_on = done.get(program, [])
        if not runs_on or not (targets <= set().union(*runs_on) if targets else any(not t for t in runs_on)):
            return False
    return bool(steps)


def said_twice(summary: str) -> list[str]:
    """The lines of `summary` that say again what another line of their part says (the same words once list
    marks, labels and code quotes are taken off), and the lines of the sections whose words the verbatim part
    quotes (a lone path or identifier is an index entry, not a statement). Headings and lines under
    `_SAID_CHARS` characters left out."""
    sections, verbatim = split_carried(summary)
    quoted = " ".join(verbatim.split())
    out: list[str] = []
    for part, lines in (("sections", sections.splitlines()), ("verbatim", verbatim.splitlines())):
        seen: set[str] = set()
        for line in lines:
            bare = normalized(line)
            if len(bare) < _SAID_CHARS or line.lstrip().startswith("#"):
                continue
            index_entry = _SPAN.fullmatch(_BULLET.sub("", line.strip())) is not None
            if bare in seen or (part == "sections" and not index_entry and bare.removesuffix("…").rstrip() in quoted):
                out.append(line)
            seen.add(bare)
    return out


def normalized(line: str) -> str:
    """`line` as said: no list mark, label ("Latest ask: "), code quotes or repeated spaces."""
    bare = _BULLET.sub("", line.strip())
    bare = _LABEL.sub("", bare).replace("`", "")
    return " ".join(bare.split())


def repeated_lines(summary: str) -> list[str]:
    """The lines of `summary` that repeat an earlier line word for word (headings, fences, "(none)" and blank
    lines left out): their characters are the share of the summary spent saying one thing twice."""
    seen: set[str] = set()
    out: list[str] = []
    for line in summary.splitlines():
        bare = line.strip()
        if not bare or bare.startswith("#") or set(bare) <= set("`~") or bare in ("- (none)", "- （无）"):
            continue
        if bare in seen:
            out.append(line)
        seen.add(bare)
    return out


def count(tally: Tally, items: Items, summary: str, kept: dict[str, int], whole: str) -> None:
    files, fails, ids, strict = items
    if kept is tally.now:
        tally.total["files"] += len(files)
        tally.total["fails"] += len(fails)
        tally.total["ids"] += len(ids)
        tally.total["strict"] += len(strict)
    kept["files"] += sum(p in summary for p in files)
    kept["ids"] += sum(i in summary for i in ids)
    kept["strict"] += sum(i in summary for i in strict)
    kept["fails"] += sum(c in summary or command_head(c) in summary for c in fails)
    setattr(tally, whole, getattr(tally, whole) + sum(c in summary for c in fails))


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def lost(t: Tally) -> int:
    """Strict identifiers neither verbatim in the summary right after nor counted by its note."""
    return t.total["strict"] - t.now["strict"] - t.noted


def print_row(name: str, t: Tally) -> None:
    row = f"{name[:36]:<36} {t.compactions:>4} {t.failed:>4}"
    for k in KINDS[:3]:
        row += f" | {t.total[k]:>6,} {pct(t.now[k], t.total[k]):>5} {pct(t.end[k], t.total[k]):>5}"
    s = t.total["strict"]
    row += f" | {s:>6,} {pct(t.now['strict'], s):>5} {pct(t.noted, s):>5} {pct(lost(t), s):>5}"
    print(row)


def select(names: Sequence[str]) -> list[Path]:
    """The raw transcripts, those whose file name contains one of `names` when any are given."""
    files = sorted(p for p in RAW.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    if not names:
        return files
    unmatched = [n for n in names if not any(n in p.name for p in files)]
    if unmatched and files:
        raise SystemExit(f"no transcript in {RAW} matches {', '.join(unmatched)}")
    return [p for p in files if any(n in p.name for n in names)]


def shared(
    windows: list[int], names: Sequence[str], label: str, make: Callable[[], Summarizer], repeated: int = 0
) -> None:
    files = select(names)
    if not files:
        print(f"no shared transcripts at {RAW}; nothing to measure (the summaries need real sessions)")
        return
    loaded: list[tuple[str, list[tuple[str | None, list[Message]]]]] = []
    for path in files:
        try:
            loaded.append((path.name, conversations(path)))
        except Exception as exc:  # a file the importers do not read is reported, not fatal
            print(f"{path.name}: skipped: {exc}")
    print(f"summarizer: {label}")
    print("Per compaction, from the messages it archived: files (tool-call paths), fails (failing shell commands),")
    print("ids (identifiers of user/assistant text and tool-call arguments). now: % found verbatim in the summary")
    print("right after that compaction; end: in the final summary of the conversation. A failing command counts")
    print("as kept whole or as its command_head (first line, <= 200 chars), the summarizer's documented short form.")
    print("strict: collect_facts(archived, identifier_limit=None).identifiers; now verbatim, note counted by")
    print("'(N more identifiers in the archive)', lost neither. comp: compactions applied; fail: failed.")
    totals: dict[int, Tally] = {}
    for w in windows:
        settings = EngineSettings(compact=CompactSettings(max_input_length=w))
        print(f"\nwindow {w:,}")
        head = f"{'file':<36} {'comp':>4} {'fail':>4}"
        for k in KINDS[:3]:
            head += f" | {k:>6} {'now':>5} {'end':>5}"
        head += f" | {'strict':>6} {'now':>5} {'note':>5} {'lost':>5}"
        print(head)
        total = Tally()
        quiet = 0
        for name, convs in loaded:
            t = Tally()
            for system, messages in convs:
                t.add(replay(messages, system, settings, make))
            total.add(t)
            if t.compactions or t.failed:
                print_row(name, t)
            else:
                quiet += 1
        if quiet:
            print(f"({quiet} files without a compaction at this window)")
        print_row("TOTAL", total)
        totals[w] = total
    print()
    for w, t in totals.items():
        print_totals(w, t, label)
        if repeated and t.repeated:
            print(f"  the {min(repeated, len(t.repeated))} lines repeated most often (times repeated × line):")
            print_repeated(t, repeated)
            for example in t.examples[:repeated]:
                print(f"    {example}")


def print_totals(window: int, t: Tally, label: str) -> None:
    line = f"window {window:,}: {t.compactions} compactions"
    if t.failed:
        line += f" (and {t.failed} failed)"
    if not t.calls:
        print(line)
        return
    if t.compactions:
        for k in KINDS[:3]:
            line += f"; {k} {t.total[k]:,}: now {pct(t.now[k], t.total[k])}, end {pct(t.end[k], t.total[k])}"
    print(line)
    if t.compactions:
        fails, s = t.total["fails"], t.total["strict"]
        print(
            f"  failing commands kept whole (not only their head): now {pct(t.whole_now, fails)},"
            f" end {pct(t.whole_end, fails)}"
        )
        print(
            f"  strict identifiers {s:,}: {pct(t.now['strict'], s)} verbatim, {pct(t.noted, s)} counted in the note,"
            f" {pct(lost(t), s)} lost ({lost(t):,}); end {pct(t.end['strict'], s)} verbatim"
        )
        print_verbatim(t)
    runs = [c.run for c in t.calls if c.run is not None]
    if len(runs) < len(t.calls):  # the extractive summarizer: its time only
        s_ms = [c.seconds * 1000 for c in t.calls]
        c_ms = [x * 1000 for x in t.compaction_s] or [0.0]
        print(
            f"  {label} summarizer per compaction: median {statistics.median(s_ms):.1f} ms, max {max(s_ms):.1f} ms;"
            f" whole compaction: median {statistics.median(c_ms):.1f} ms, max {max(c_ms):.1f} ms"
        )
        return
    print(f"  {label}, per compaction ({len(t.calls)} summarize calls, failed ones included): median / max / total")
    for name, values, unit in (
        ("model calls", [r.calls for r in runs], ""),
        ("parts", [r.parts for r in runs], ""),
        ("prompt tokens", [r.input_tokens for r in runs], ""),
        ("output tokens", [r.output_tokens for r in runs], ""),
        ("wall seconds", [c.seconds for c in t.calls], "s"),
    ):
        print(f"    {name:<14} {spread(values, unit)}")
    audited = sum(1 for c in t.calls if c.ok and c.run is not None and c.run.audit)
    print(
        f"  compactions applied {t.compactions}, failed {t.failed} (no valid summary);"
        f" applied summaries still failing the audit: {audited}"
    )
    for reason, n in Counter(c.reason for c in t.calls if not c.ok).most_common(3):
        print(f"    {n} × {reason[:200]}")


def print_repeated(t: Tally, n: int) -> None:
    """The `n` lines that repeated most often in the summaries right after each compaction."""
    for line, times in t.repeated.most_common(n):
        print(f"    {times:>4} × {line[:110]}")


def print_verbatim(t: Tally) -> None:
    """What the summaries right after each compaction carried verbatim, their size and their repeated lines."""
    v = t.verbatim
    if not t.sizes:
        return
    print(
        f"  verbatim, per compaction: first user message {v['first']}: whole {pct(v['first_whole'], v['first'])},"
        f" head+tail {pct(v['first_cut'], v['first'])}; newest user message {v['newest']}:"
        f" {pct(v['newest_kept'], v['newest'])}; user messages that fit the budget {v['fit']}:"
        f" {pct(v['fit_kept'], v['fit'])}"
    )
    print(
        f"  standing-instruction blocks {v['instr']}: whole {pct(v['instr_whole'], v['instr'])},"
        f" head+tail {pct(v['instr_cut'], v['instr'])}"
    )
    print(
        f"  summary size, characters: median {statistics.median(t.sizes):,.0f}, max {max(t.sizes):,};"
        f" on repeated lines {100 * t.duplicated / max(1, sum(t.sizes)):.1f}%,"
        f" said twice {100 * t.twice / max(1, sum(t.sizes)):.1f}% (target <= 2%)"
    )
    print(
        f"  Done items {t.done:,}: without evidence {t.unbacked} (target 0); Blocked items not marked resolved"
        f" {t.blocked:,}: fixed later {t.stale} (target 0)"
    )


def spread(values: Sequence[float], unit: str) -> str:
    """Median / max / total of `values`: seconds to the hundredth, counts whole (a median may end in .5)."""
    if unit:
        return f"{statistics.median(values):.2f}{unit} / {max(values):.2f}{unit} / {sum(values):.1f}{unit}"
    median = statistics.median(values)
    middle = f"{int(median):,}" if median == int(median) else f"{median:,.1f}"
    return f"{middle} / {max(values):,} / {sum(values):,}"


@contextmanager
def llama_server(context: int) -> Iterator[str]:
    """The base URL of a llama-server serving SmolLM2 that this process started, stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="bench-llama-") as tmp:
        try:
            with serving(context=context, log=Path(tmp) / "server.log") as url:
                yield url
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", default="128000,32000", help="session windows, tokens, comma-separated")
    parser.add_argument("--transcripts", default="", help="only raw files whose name contains one of these (a,b)")
    parser.add_argument("--summarizer", choices=SUMMARIZERS, default="extractive")
    parser.add_argument("--model", help="any other compaction model, e.g. openai:gpt-4o-mini (with ModelSummarizer)")
    parser.add_argument("--base-url", help="the --model's server")
    parser.add_argument("--model-window", type=int, help=f"the --model's window, tokens (default {WINDOW:,})")
    parser.add_argument("--reply-format", choices=("markdown", "json"), default="markdown", help="for --model")
    parser.add_argument("--repeated", type=int, default=0, metavar="N", help="print the N most repeated lines")
    args = parser.parse_args()
    # warnings of each summary failing the audit and each failed compaction: the totals count them instead
    logging.getLogger("ctxkeep").setLevel(logging.ERROR)
    try:
        windows = [int(w) for w in args.windows.split(",")]
    except ValueError:
        parser.error(f"--windows takes whole numbers separated by commas; got {args.windows!r}")
    names = [n.strip() for n in args.transcripts.split(",") if n.strip()]
    if args.model is None and (args.base_url or args.model_window or args.reply_format != "markdown"):
        parser.error("--base-url, --model-window and --reply-format go with --model")
    if args.model is not None:
        if args.summarizer != "extractive":
            parser.error("give either --summarizer or --model, not both")
        model = get_model(args.model, base_url=args.base_url) if args.base_url else get_model(args.model)
        reply_format: Literal["markdown", "json"] = args.reply_format
        try:  # a bad window fails here, once, not at every compaction
            settings = ModelSummarySettings(window=args.model_window or WINDOW, reply_format=reply_format)
        except ValueError as exc:
            parser.error(f"--model-window: {exc}")
        shared(windows, names, args.model, lambda: ModelSummarizer(model, settings=settings), args.repeated)
    elif args.summarizer == "deterministic":
        shared(
            windows,
            names,
            "deterministic",
            lambda: ModelSummarizer(
                fixed_summary_model(), settings=ModelSummarySettings(window=MODEL_WINDOW, max_tokens=MODEL_MAX_TOKENS)
            ),
            args.repeated,
        )
    elif args.summarizer == "smollm2":
        with llama_server(MODEL_WINDOW) as url:
            smol = get_model("openai:smollm2", base_url=url)
            shared(
                windows,
                names,
                "smollm2",
                lambda: ModelSummarizer(
                    smol,
                    settings=ModelSummarySettings(
                        window=MODEL_WINDOW, max_tokens=MODEL_MAX_TOKENS, retries=1, reply_format="json"
                    ),
                ),
                args.repeated,
            )
    else:
        shared(windows, names, "extractive", ExtractiveSummarizer, args.repeated)


if __name__ == "__main__":
    main()
