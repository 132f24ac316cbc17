"""What the summaries keep of the user's own words, over the shared transcripts, read by an oracle of its own.

Each conversation is replayed turn by turn through a `Session` (in memory) at a window; after every
compaction, the summary is checked against everything archived so far:

    rules   every rule (`rules_in`) of every real ask archived, verbatim in the summary; in a squeezed one (a
            cap below the sections' floor and the verbatim parts' shares, `budgets`), the newest rules that fit
            the user's budget: the rest come back from the archive when room returns, and are looked for then
    first   the first real ask, whole, or its head and tail when it alone is over the user budget
    newest  the newest real asks that fit the user budget beside the first (newest first), each whole

A real ask is what the user typed and means, read here without the summarizer's own reading: a user
message that is not a tool result, a host's summary, an injected (``isMeta``) entry, an attachment
other than a queued prompt, a harness note (a task notification, the local-command caveat, an
interrupted-request note, command output) or a block of injected tags; a slash command is one only
when it has words of its own and does not change a setting (``/review src`` is, ``/model x`` is not).

Run: PYTHONPATH=src python -m tests.user_words [--windows 32000,128000]  (prints the figures)
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ctxkeep.folder import MemoryFolder
from ctxkeep.formats import load
from ctxkeep.messages import Message
from ctxkeep.pairing import repair
from ctxkeep.replay import split_system, turns
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings
from ctxkeep.summarize import SummaryRequest
from ctxkeep.summarize.extractive import ExtractiveSummarizer
from ctxkeep.summarize.facts.collect import rules_in
from ctxkeep.summarize.verbatim import SECTIONS_FLOOR, budgets
from ctxkeep.tokens import get_counter

RAW = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "transcripts" / "raw"
WINDOWS = (32_000, 128_000)
KINDS = ("rules", "first", "newest")

_HARNESS = re.compile(
    r"^\s*(?:<task-notification>|<local-command|<bash-|<user_shell_command|<turn_aborted>|<command-message>"
    r"|Caveat: The messages below|\[Request interrupted|This session is being continued|\[Summary of"
    r"|# AGENTS\.md instructions|<environment_context>|<user_instructions>|<permissions instructions>"
    r"|Base directory for this skill:|Please continue working on the task)"
)
_TAGS = re.compile(r"<(system-reminder|user-prompt-submit-hook)>.*?</\1>", re.DOTALL)
_COMMAND = re.compile(r"<command-name>\s*/?(.*?)\s*</command-name>", re.DOTALL)
_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
_SETTINGS = frozenset({"clear", "compact", "model", "mode", "config", "resume", "exit", "help", "cost", "status"})


def _flag(extra: Mapping[str, object], key: str) -> object:
    if key in extra:
        return extra[key]
    return next((v[key] for v in extra.values() if isinstance(v, Mapping) and key in v), None)


def real_ask(msg: Message) -> str | None:
    """The words of `msg` when it is a real ask (see the module docstring), else None."""
    if msg.role != "user" or msg.tool_result is not None or _flag(msg.extra, "isMeta") is True:
        return None
    if _flag(msg.extra, "isCompactSummary") is True or _flag(msg.extra, "attachment") not in (None, "queued_command"):
        return None
    if _flag(msg.extra, "pi:role") not in (None, "user") or _flag(msg.extra, "codex:type") == "compacted":
        return None
    text = msg.text.strip()
    if _HARNESS.match(text):
        return None
    command = _COMMAND.search(text)
    if command:
        name = command.group(1).strip()
        args = _ARGS.search(text)
        words = args.group(1).strip() if args else ""
        return f"/{name} {words}" if words and name.split(":")[0] not in _SETTINGS else None
    text = _TAGS.sub("", text).strip()
    if not text or (text.startswith("<") and text.endswith(">")) or text.startswith(("{", "[")):
        return None
    typed = re.match(r"^/([A-Za-z][\w:.-]*)(?:[ \t]+(\S[^\n]*))?$", text)
    if typed and (not typed.group(2) or typed.group(1) in _SETTINGS):
        return None
    return text


@dataclass(kw_only=True)
class Tally:
    """Per kind: how many were looked for and how many the summaries kept."""

    wanted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    kept: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    missed: list[str] = field(default_factory=list)  # what was lost, for a failing test's message

    def add(self, other: Tally) -> None:
        for k in KINDS:
            self.wanted[k] += other.wanted[k]
            self.kept[k] += other.kept[k]
        self.missed += other.missed

    def share(self, kind: str) -> float:
        return 100.0 * self.kept[kind] / self.wanted[kind] if self.wanted[kind] else 100.0


class _Recording(ExtractiveSummarizer):
    """The extractive summarizer, remembering the cap of its last request."""

    max_chars = 0

    def summarize(self, request: SummaryRequest) -> str:
        self.max_chars = request.max_chars
        return super().summarize(request)


def _check(tally: Tally, asks: list[str], summary: str, max_chars: int) -> None:
    """Count what `summary` keeps of `asks` (all the real asks archived so far, oldest first)."""
    if not asks:
        return
    room, instructions = budgets(max_chars)
    first, later = asks[0], [a for a in asks[1:] if a != asks[0]]
    rules = list(dict.fromkeys(r for a in asks for r in rules_in(a)))
    if room + instructions > max_chars - SECTIONS_FLOOR:  # squeezed: the newest rules within the user's budget
        left, wanted = room, []
        for rule in reversed(rules):
            left -= len(rule) + 3
            if left < 0:
                break
            wanted.append(rule)
        rules = wanted
    for rule in rules:
        tally.wanted["rules"] += 1
        ok = rule in summary
        tally.kept["rules"] += ok
        if not ok:
            tally.missed.append(f"rule {rule[:80]!r}")
    tally.wanted["first"] += 1
    ok = first in summary or (len(first) + 200 > room and first[:60] in summary and first[-60:] in summary)
    tally.kept["first"] += ok
    if not ok:
        tally.missed.append(f"first {first[:80]!r}")
    left = room - 300 - min(len(first), room)
    for text in dict.fromkeys(reversed(later)):  # newest first, each once
        left -= len(text) + 10
        if left < 0:
            break
        tally.wanted["newest"] += 1
        ok = text in summary
        tally.kept["newest"] += ok
        if not ok:
            tally.missed.append(f"newest {text[:80]!r}")


def replay(messages: list[Message], system: str | None, window: int) -> Tally:
    """One conversation replayed at `window`; each compaction's summary checked (`_check`)."""
    tally = Tally()
    summarizer = _Recording()
    settings = EngineSettings(compact=CompactSettings(max_input_length=window))
    asks: list[str] = []
    with Session(MemoryFolder(), settings=settings, counter=get_counter("o200k_base"), summarizer=summarizer) as s:
        for group in turns(messages):
            s.add(group)
            step = s.prepare(system)
            if step.compaction is None:
                continue
            asks += [a for m in step.archived if (a := real_ask(m)) is not None]
            _check(tally, asks, s.summary or "", summarizer.max_chars)
    return tally


def conversations(path: Path) -> list[tuple[str | None, list[Message]]]:
    """The conversations of a shared transcript, repaired, as (system prompt, the rest)."""
    out = []
    for conv in load(path).conversations:
        system, rest = split_system(repair(conv.messages)[0])
        if len(rest) >= 4:
            out.append((system, rest))
    return out


def measure(path: Path, window: int) -> Tally:
    """Every conversation of `path` at `window`."""
    tally = Tally()
    for system, messages in conversations(path):
        tally.add(replay(messages, system, window))
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", default=",".join(map(str, WINDOWS)))
    args = parser.parse_args()
    files = sorted(p for p in RAW.glob("*") if p.suffix in (".jsonl", ".json", ".traj"))
    for window in (int(w) for w in args.windows.split(",")):
        total = Tally()
        print(f"window {window:,}: file, then kept / looked for: rules, first ask, newest asks within budget")
        for path in files:
            tally = measure(path, window)
            total.add(tally)
            row = "  ".join(f"{tally.kept[k]:>4}/{tally.wanted[k]:<4}" for k in KINDS)
            print(f"  {path.name:<40} {row}")
        print("  TOTAL " + "  ".join(f"{k} {total.share(k):.1f}% ({total.kept[k]}/{total.wanted[k]})" for k in KINDS))
        for miss in total.missed[:15]:
            print(f"    lost: {miss}")


if __name__ == "__main__":
    main()
