"""Prompt-cache stability: how much of each context sent before is still the unchanged start of the next one.

Run: .venv/bin/python bench/bench_cache.py [--window 128000] [--synthetic 400,2000]

Every conversation of the shared transcripts (and synthetic sessions of `bench_disk.py`, the same
generator) is replayed through a `Session` at the window, `prepare` before each assistant turn. At
each step after the first: the tokens of the longest common prefix with the previous step's context
(system prompt, summary, messages; a message counts when it is the same as the one sent at its place
before), over the tokens of that previous context: the share of the previous prompt a provider's
cache could serve again. Printed per file and overall, twice: results aging one at a time as they
pass `recent_n` (`age_batch_bytes=0`, what ctxkeep did before) and in batches (the default):

- between: over the steps without a compaction, weighted (sum of prefix tokens / sum of previous tokens);
- p5: the 5th percentile of the per-step figure over those steps;
- whole: over every step of the replay, compactions included;
- of sent: the prefix tokens over the tokens sent at the step, over the whole replay (new messages
  count against it, so no policy reaches 100%);
- comp: compactions; peak: the largest context sent.

Targets (issue 15): >= 99% between compactions; >= 97% over whole replays at 128,000.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace

from bench_disk import session_turns
from bench_replay import RAW, conversations
from ctxkeep.context import Context
from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message
from ctxkeep.replay import turns
from ctxkeep.session import Session
from ctxkeep.settings import EngineSettings
from ctxkeep.tokens import get_counter

COUNTER = get_counter("o200k_base")


@dataclass
class Reuse:
    """Prefix tokens kept and tokens sent, between compactions and over the whole replay."""

    kept_between: int = 0
    sent_between: int = 0  # tokens of the previous contexts, for the steps without a compaction
    kept: int = 0
    sent: int = 0  # tokens of the previous contexts, every step
    now: int = 0  # tokens sent at each step
    compactions: int = 0
    peak: int = 0
    per_step: list[float] = field(default_factory=list)

    def add(self, other: Reuse) -> None:
        self.kept_between += other.kept_between
        self.sent_between += other.sent_between
        self.kept += other.kept
        self.sent += other.sent
        self.now += other.now
        self.compactions += other.compactions
        self.peak = max(self.peak, other.peak)
        self.per_step += other.per_step

    def row(self) -> str:
        between = self.kept_between / self.sent_between if self.sent_between else 1.0
        whole = self.kept / self.sent if self.sent else 1.0
        xs = sorted(self.per_step)
        p5 = xs[int(0.05 * (len(xs) - 1))] if xs else 1.0
        of_sent = self.kept / self.now if self.now else 1.0
        return f"{between:>8.2%} {p5:>7.2%} {whole:>7.2%} {of_sent:>8.2%} {self.compactions:>5} {self.peak:>8,}"


def _common(before: list[Message], now: list[Message], counts: list[int]) -> int:
    kept = 0
    for a, b, n in zip(before, now, counts, strict=False):
        if a is not b and a != b:
            break
        kept += n
    return kept


def replay(messages: list[Message], system: str | None, settings: EngineSettings) -> Reuse:
    reuse = Reuse()
    before: list[Message] = []
    previous = 0
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        for group in turns(messages):
            session.add(group)
            step = session.prepare(system)
            now = _sent(step.context)
            counts = COUNTER.count_each(now)
            sent = sum(counts)
            reuse.peak = max(reuse.peak, sent)
            reuse.compactions += step.compaction is not None
            if before:  # the first request of a conversation has nothing to reuse
                kept = _common(before, now, counts)
                reuse.kept += kept
                reuse.sent += previous
                reuse.now += sent
                if step.compaction is None:
                    reuse.kept_between += kept
                    reuse.sent_between += previous
                    reuse.per_step.append(kept / previous if previous else 1.0)
            before, previous = now, sent
    return reuse


def _sent(context: Context) -> list[Message]:
    return context.as_messages()


HEAD = f"{'':<40} {'between':>8} {'p5':>7} {'whole':>7} {'of sent':>8} {'comp':>5} {'peak':>8}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=128_000)
    parser.add_argument("--synthetic", default="400,2000", help="sizes of synthetic sessions; empty for none")
    args = parser.parse_args()
    batched = EngineSettings.for_window(args.window)
    modes = {
        "one at a time": replace(batched, offload=replace(batched.offload, age_batch_bytes=0)),
        "in batches": batched,
    }
    inputs: list[tuple[str, list[tuple[str | None, list[Message]]]]] = []
    files = sorted(p for p in RAW.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    for path in files:
        try:
            convs = conversations(path)
        except Exception as exc:  # a file the importers do not read is reported, not fatal
            print(f"{path.name}: skipped ({exc})")
            continue
        if convs:
            inputs.append((path.name, convs))
    if not inputs:
        print(f"no shared transcripts at {RAW}; only the synthetic sessions")
    synthetic = [int(n) for n in args.synthetic.split(",") if n]
    for n in synthetic:
        messages = [m for t in session_turns(n) for m in t]
        inputs.append((f"synthetic {n:,} messages", [("You are a careful coding agent.", messages)]))
    print(f"prefix reuse at a {args.window:,}-token window\n")
    for mode, settings in modes.items():
        print(f"results aging {mode}\n{HEAD}")
        shared = Reuse()
        for name, convs in inputs:
            reuse = Reuse()
            for system, messages in convs:
                reuse.add(replay(messages, system, settings))
            print(f"{name[:40]:<40} {reuse.row()}")
            if not name.startswith("synthetic"):
                shared.add(reuse)
        print(f"{'shared transcripts, all':<40} {shared.row()}\n")


if __name__ == "__main__":
    main()
