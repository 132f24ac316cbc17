"""What the summaries keep: files, failing commands and identifiers of the compacted messages, over real sessions.

Run: .venv/bin/python bench/bench_summary.py [--windows 128000,32000]

Every conversation of every shared transcript is replayed through a `Session` (in memory, the
built-in extractive summarizer, default 16,000-character cap) turn by turn, as bench_replay.py
does, at each window. At each compaction, from the messages it archived:

    files   file paths of the tool calls: path arguments (`PATH_KEYS`), edit tools and patches, the
            files of ``cat``/``sed``/redirections in commands (`ctxkeep.summarize.runs.tool_run`)
    fails   failing shell commands (an error result or a non-zero exit code), their command text;
            a call that never ran ("Sibling tool call errored") is not one
    ids     exact identifiers (`extract_identifiers`) of user and assistant text and of the string
            values of tool-call arguments; not of tool results

Each is looked for verbatim (as a substring) in (1) the summary right after that compaction and (2)
the summary at the end of the conversation; what (2) lacks that (1) had, later compactions dropped
under the cap ((2) can be higher: a later compaction may name again what an earlier summary had
dropped). Counts are per compaction: something two compactions archived counts twice. A failing
command counts as kept when the summary has it whole or has its identifying part, `command_head`
(the whole command when it is one line of at most 200 characters, else its first line cut to 200):
the shortened form the summarizer documents for a command it has no room for. "whole" shows how
many were kept entire.

Target: 100% of files and failing commands at (1) and (2): the summarizer keeps them verbatim
whatever the size, until even they cannot fit the cap (the docstring of
`ctxkeep.summarize.extractive`). None for identifiers: the summary keeps at most 300, and drops them
before anything else in Critical Context; the figures show what the cap costs.

Also: the median and max time of one call of the extractive summarizer, and of the whole compaction.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the shared conversations, read and repaired as the replay benchmark reads them (run from the repository root)
from bench_replay import conversations
from ctxkeep.engine import EngineSettings
from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message, ToolResult
from ctxkeep.replay import turns
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings
from ctxkeep.summarize import SummaryRequest
from ctxkeep.summarize.extractive import ExtractiveSummarizer
from ctxkeep.summarize.identifiers import command_head, extract_identifiers
from ctxkeep.summarize.runs import ToolRun, tool_run
from ctxkeep.tokens import get_counter

RAW = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "transcripts" / "raw"
COUNTER = get_counter("o200k_base")
KINDS = ("files", "fails", "ids")


class TimedSummarizer:
    """The extractive summarizer, timing each call."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.seconds: list[float] = []

    def summarize(self, request: SummaryRequest) -> str:
        """The extractive summary of `request`; the time it took is appended to `seconds`."""
        t = time.perf_counter()
        text = self.inner.summarize(request)
        self.seconds.append(time.perf_counter() - t)
        return text


@dataclass(kw_only=True, slots=True)
class Tally:
    """Items archived, and how many of them the summary right after (`now`) and the final one (`end`) had."""

    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    now: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    end: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    whole_now: int = 0  # failing commands kept entire
    whole_end: int = 0
    compactions: int = 0
    summarizer_s: list[float] = field(default_factory=list)
    compaction_s: list[float] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for k in KINDS:
            self.total[k] += other.total[k]
            self.now[k] += other.now[k]
            self.end[k] += other.end[k]
        self.whole_now += other.whole_now
        self.whole_end += other.whole_end
        self.compactions += other.compactions
        self.summarizer_s += other.summarizer_s
        self.compaction_s += other.compaction_s


def runs_of(archived: tuple[Message, ...]) -> list[ToolRun]:
    results: dict[str, ToolResult] = {}
    for msg in archived:
        result = msg.tool_result
        if result is not None:
            results.setdefault(result.call_id, result)
    return [tool_run(call, results.get(call.id), i) for i, msg in enumerate(archived) for call in msg.tool_calls]


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


def archived_items(archived: tuple[Message, ...]) -> tuple[list[str], list[str], list[str]]:
    """Files, failing commands and identifiers of the messages a compaction archived."""
    runs = runs_of(archived)
    files = list(dict.fromkeys(p for r in runs for p in (*r.paths_read, *r.paths_modified)))
    fails = list(dict.fromkeys(r.command for r in runs if r.kind == "shell" and r.failed and r.command))
    texts = [m.text for m in archived if m.role in ("user", "assistant")]
    texts += [s for m in archived for call in m.tool_calls for s in strings(call.input())]
    return files, fails, extract_identifiers(texts)


def replay(messages: list[Message], system: str | None, settings: EngineSettings) -> Tally:
    """One conversation replayed; each compaction's items checked against its summary and the final one."""
    tally = Tally()
    summarizer = TimedSummarizer()
    pending: list[tuple[list[str], list[str], list[str]]] = []
    with Session(MemoryFolder(), settings=settings, counter=COUNTER, summarizer=summarizer) as session:
        for group in turns(messages):
            session.add(group)
            step = session.prepare(system)
            if step.compaction is None:
                continue
            tally.compactions += 1
            tally.compaction_s.append(step.compaction.seconds)
            items = archived_items(step.archived)
            pending.append(items)
            count(tally, items, session.summary or "", tally.now, "whole_now")
        final = session.summary or ""
    for items in pending:
        count(tally, items, final, tally.end, "whole_end")
    tally.summarizer_s = summarizer.seconds
    return tally


def count(
    tally: Tally, items: tuple[list[str], list[str], list[str]], summary: str, kept: dict[str, int], whole: str
) -> None:
    files, fails, ids = items
    if kept is tally.now:
        tally.total["files"] += len(files)
        tally.total["fails"] += len(fails)
        tally.total["ids"] += len(ids)
    kept["files"] += sum(p in summary for p in files)
    kept["ids"] += sum(i in summary for i in ids)
    kept["fails"] += sum(c in summary or command_head(c) in summary for c in fails)
    setattr(tally, whole, getattr(tally, whole) + sum(c in summary for c in fails))


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def print_row(name: str, t: Tally) -> None:
    row = f"{name[:36]:<36} {t.compactions:>4}"
    for k in KINDS:
        row += f" | {t.total[k]:>6,} {pct(t.now[k], t.total[k]):>5} {pct(t.end[k], t.total[k]):>5}"
    print(row)


def shared(windows: list[int]) -> None:
    files = sorted(p for p in RAW.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    if not files:
        print(f"no shared transcripts at {RAW}; nothing to measure (the summaries need real sessions)")
        return
    loaded: list[tuple[str, list[tuple[str | None, list[Message]]]]] = []
    for path in files:
        try:
            loaded.append((path.name, conversations(path)))
        except Exception as exc:  # a file the importers do not read is reported, not fatal
            print(f"{path.name}: skipped: {exc}")
    print("Per compaction, from the messages it archived: files (tool-call paths), fails (failing shell commands),")
    print("ids (identifiers of user/assistant text and tool-call arguments). now: % found verbatim in the summary")
    print("right after that compaction; end: in the final summary of the conversation. A failing command counts")
    print("as kept whole or as its command_head (first line, <= 200 chars), the summarizer's documented short form.")
    totals: dict[int, Tally] = {}
    for w in windows:
        settings = EngineSettings(compact=CompactSettings(max_input_length=w))
        print(f"\nwindow {w:,}")
        head = f"{'file':<36} {'comp':>4}"
        for k in KINDS:
            head += f" | {k:>6} {'now':>5} {'end':>5}"
        print(head)
        total = Tally()
        quiet = 0
        for name, convs in loaded:
            t = Tally()
            for system, messages in convs:
                t.add(replay(messages, system, settings))
            total.add(t)
            if t.compactions:
                print_row(name, t)
            else:
                quiet += 1
        if quiet:
            print(f"({quiet} files without a compaction at this window)")
        print_row("TOTAL", total)
        totals[w] = total
    print()
    for w, t in totals.items():
        print_totals(w, t)


def print_totals(window: int, t: Tally) -> None:
    line = f"window {window:,}: {t.compactions} compactions"
    if not t.compactions:
        print(line)
        return
    for k in KINDS:
        line += f"; {k} {t.total[k]:,}: now {pct(t.now[k], t.total[k])}, end {pct(t.end[k], t.total[k])}"
    print(line)
    fails = t.total["fails"]
    print(
        f"  failing commands kept whole (not only their head): now {pct(t.whole_now, fails)},"
        f" end {pct(t.whole_end, fails)}"
    )
    s = [x * 1000 for x in t.summarizer_s]
    c = [x * 1000 for x in t.compaction_s]
    print(
        f"  extractive summarizer per compaction: median {statistics.median(s):.1f} ms, max {max(s):.1f} ms;"
        f" whole compaction: median {statistics.median(c):.1f} ms, max {max(c):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", default="128000,32000")
    args = parser.parse_args()
    shared([int(w) for w in args.windows.split(",")])


if __name__ == "__main__":
    main()
