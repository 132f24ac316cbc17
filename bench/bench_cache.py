"""Prompt-cache stability: how much of each request is still the unchanged start of the next one.

Run: PYTHONPATH=src .venv/bin/python bench/bench_cache.py [--window 128000] [--sizes 400,2000] [--no-reme]
                                                         [--explain] [--cache DIR] [--reme-venv DIR]

1. Every conversation of the shared transcripts is replayed through a `Session` at the window, `prepare`
   before each assistant turn, under three aging policies (what ctxkeep did, what it did next, the
   default now; see `policies`). At each step after the first, the tokens of the longest common prefix
   with the previous step's context (system prompt, summary, messages; a message counts when it is the
   same as the one sent at its place before):

   - between: over the previous context's tokens, for the steps without a compaction (weighted): the
     share of the previous prompt a provider's cache serves again (100% when the context only grew);
   - p5: the 5th percentile of that per step;
   - whole: the same over every step, compactions included;
   - of sent: the prefix over the tokens sent at the step, between compactions (new messages count
     against it, so no policy reaches 100%: bench_reme.py's figure);
   - comp: compactions; peak: the largest context sent;
   - cold: steps after a pause longer than a prompt cache lives (`OffloadSettings.cache_lifetime`, 5
     minutes, from the messages' timestamps): the previous prompt is cached no more, whatever the policy,
     so like compactions they are left out of "between" and "p5" (and counted in "whole").

   `--explain` prints every step between compactions whose prefix broke: where, and why (a result
   offloaded or aged, the summary or system prompt changed, a message gone). `--agents-md FILE` puts
   that AGENTS.md in every workspace, so its rules come back after each compaction (ctxkeep.memory.rules).

2. The synthetic AgentScope sessions of bench_reme.py (`--sizes`, the same seeded files under the cache
   folder), each step as there (before every assistant Msg), ctxkeep under each policy with the seed's
   settings and a fixed summary, and ReMe (reme-ai 0.3.1.10, through bench_reme's worker in its own
   venv; `--no-reme` leaves it out). Both sides' contexts are rendered as AgentScope dicts and compared
   by bench_reme.prefix_reuse, the same function: o200k tokens of the common prefix (into the first
   differing message) over the tokens sent, between compactions ("lowest": the lowest step) and over the
   whole replay; plus, between compactions, the share of the previous context kept (whole messages) and
   the tokens sent past the common prefix per step ("uncached": what a provider bills at full price);
   compactions; the mean and largest context sent (o200k tokens of the rendered dicts). A larger context
   raises "of sent" (the new messages weigh less in it) without any cache saving: read it with "mean".

Targets (issue 15): >= 99% between compactions and >= 97% over whole replays of the shared transcripts at
128,000; above ReMe on the synthetic sessions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import bench_reme as reme
import bench_summary as summary_bench
from bench_replay import RAW, conversations
from ctxkeep import from_agentscope, to_agentscope
from ctxkeep.aging import cold_cache
from ctxkeep.context import SUMMARY_ID, Context
from ctxkeep.folder import MemoryFolder
from ctxkeep.memory.rules import RULES_TAG
from ctxkeep.messages import Message
from ctxkeep.offload import record_in
from ctxkeep.plan import PART_BREAK
from ctxkeep.replay import turns
from ctxkeep.session import Session
from ctxkeep.settings import EngineSettings, OffloadSettings
from ctxkeep.summarize import ExtractiveSummarizer
from ctxkeep.tokens import get_counter
from ctxkeep.tokens.encodings import TiktokenTokenizer

COUNTER = get_counter("o200k_base")
TOKENIZER = TiktokenTokenizer("o200k_base")
CACHE_LIFETIME = OffloadSettings().cache_lifetime  # the providers' own, whatever the policy replayed
AGENTS_MD = ""  # --agents-md: the workspace's AGENTS.md in every replay of the shared transcripts


def policies(base: EngineSettings) -> dict[str, EngineSettings]:
    """The aging policies compared: each result one at a time as it passes `recent_n` (ctxkeep before
    issue 15), in batches and all at once over the threshold (its first step), and the default."""
    off = base.offload
    return {
        "one at a time": replace(
            base, offload=replace(off, age_batch_bytes=0, age_tail_tokens=0, age_over_threshold=True)
        ),
        "batches, aged over threshold": replace(base, offload=replace(off, age_tail_tokens=0, age_over_threshold=True)),
        "default": base,
    }


@dataclass
class Reuse:
    """Prefix tokens kept, between compactions and over the whole replay."""

    kept_between: int = 0
    before_between: int = 0  # tokens of the previous contexts, for the steps without a compaction
    sent_between: int = 0  # tokens sent at those steps
    kept: int = 0
    before: int = 0  # tokens of the previous contexts, every step
    compactions: int = 0
    peak: int = 0
    per_step: list[float] = field(default_factory=list)
    kept_across: int = 0  # prefix tokens at the compaction steps
    before_across: int = 0  # tokens of the contexts before them
    parts: int = 0  # the most parts a summary had ("frozen" layout)
    consolidations: int = 0  # compactions that made several parts one
    cold: int = 0  # steps after a pause longer than the cache lives: nothing of the previous prompt is cached

    def add(self, other: Reuse) -> None:
        self.kept_across += other.kept_across
        self.before_across += other.before_across
        self.parts = max(self.parts, other.parts)
        self.consolidations += other.consolidations
        self.kept_between += other.kept_between
        self.before_between += other.before_between
        self.sent_between += other.sent_between
        self.kept += other.kept
        self.before += other.before
        self.compactions += other.compactions
        self.cold += other.cold
        self.peak = max(self.peak, other.peak)
        self.per_step += other.per_step

    def row(self) -> str:
        between = self.kept_between / self.before_between if self.before_between else 1.0
        whole = self.kept / self.before if self.before else 1.0
        xs = sorted(self.per_step)
        p5 = xs[int(0.05 * (len(xs) - 1))] if xs else 1.0
        of_sent = self.kept_between / self.sent_between if self.sent_between else 1.0
        figures = f"{between:>8.2%} {p5:>7.2%} {whole:>7.2%} {of_sent:>8.2%}"
        return f"{figures} {self.compactions:>5} {self.peak:>8,} {self.cold:>5}"


def common(before: list[Message], now: list[Message], counts: list[int]) -> tuple[int, int | None]:
    """Tokens of the longest common prefix of `now` and `before`: the messages they share from the start, and
    the common start of the first differing one's text when both have the same role (as bench_reme.py counts
    into the first differing message); and where they first differ (None: `now` starts with all of `before`)."""
    kept = 0
    for i, (a, b, n) in enumerate(zip(before, now, counts, strict=False)):
        if a is not b and a != b:
            if a.role == b.role:
                kept += _common_tokens(_text(a), _text(b))
            return kept, i
        kept += n
    return kept, None if len(now) >= len(before) else len(now)


def _text(message: Message) -> str:
    result = message.tool_result
    return result.text if result is not None else message.text


def _common_tokens(a: str, b: str) -> int:
    ta, tb = TOKENIZER.encoding.encode_ordinary(a), TOKENIZER.encoding.encode_ordinary(b)
    return next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), min(len(ta), len(tb)))


def why(before: list[Message], now: list[Message], at: int) -> str:
    """Why the message at `at` is not the one sent there before."""
    if at >= len(now):
        return "the context got shorter"
    a, b = before[at], now[at]
    if a.id == SUMMARY_ID and b.id == SUMMARY_ID:
        rules = f"<{RULES_TAG}"
        if rules in a.text and rules not in b.text:
            return "the summary lost the AGENTS.md rules"
        return "the summary changed"
    if a.id != b.id:
        return f"another message there ({a.role} {a.id[:16]} was, {b.role} {b.id[:16]} is)"
    if a.role == "system":
        return "the system prompt changed"
    try:
        old, new = record_in(a), record_in(b)
    except ValueError as exc:
        return f"an unreadable offload record ({exc})"
    if new is not None and (old is None or old.stage != new.stage):
        was = "sent whole" if old is None else f"cut {old.stage}"
        return f"a result of {new.original_bytes:,} bytes, {was}, got its {new.stage} cut"
    return f"the {a.role} message {a.id[:16]} changed otherwise"


def replay(
    messages: list[Message], system: str | None, settings: EngineSettings, *, explain: str | None = None
) -> Reuse:
    reuse = Reuse()
    before: list[Message] = []
    previous = last_parts = 0
    folder = MemoryFolder()
    if AGENTS_MD:
        folder.write("AGENTS.md", AGENTS_MD.encode())  # its rules come back into the context after each compaction
    with Session(folder, settings=settings, counter=COUNTER) as session:
        for n, group in enumerate(turns(messages)):
            session.add(group)
            cold = cold_cache(session.live.messages, CACHE_LIFETIME)
            step = session.prepare(system)
            now = _sent(step.context)
            counts = COUNTER.count_each(now)
            sent = sum(counts)
            reuse.peak = max(reuse.peak, sent)
            reuse.compactions += step.compaction is not None
            if before:  # the first request of a conversation has nothing to reuse
                kept, at = common(before, now, counts)
                reuse.kept += kept
                reuse.before += previous
                if step.compaction is not None:
                    reuse.kept_across += kept
                    reuse.before_across += previous
                    parts = (step.live.summary or "").count(PART_BREAK) + 1
                    reuse.consolidations += parts < last_parts
                    reuse.parts, last_parts = max(reuse.parts, parts), parts
                elif cold:
                    reuse.cold += 1
                else:
                    reuse.kept_between += kept
                    reuse.before_between += previous
                    reuse.sent_between += sent
                    reuse.per_step.append(kept / previous if previous else 1.0)
                    if explain is not None and at is not None:
                        print(
                            f"  {explain[:30]:<30} step {n:>4}: message {at} of {len(before)} differs,"
                            f" {previous - kept:,} of {previous:,} tokens lost: {why(before, now, at)}"
                        )
            before, previous = now, sent
    return reuse


def _sent(context: Context) -> list[Message]:
    return context.as_messages()


HEAD = f"{'':<40} {'between':>8} {'p5':>7} {'whole':>7} {'of sent':>8} {'comp':>5} {'peak':>8} {'cold':>5}"


Inputs = list[tuple[str, list[tuple[str | None, list[Message]]]]]


def shared_inputs() -> Inputs:
    """The conversations of every shared transcript, by file name."""
    inputs: Inputs = []
    files = sorted(p for p in RAW.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    for path in files:
        try:
            convs = conversations(path)
        except Exception as exc:  # a file the importers do not read is reported, not fatal
            print(f"{path.name}: skipped ({exc})")
            continue
        if convs:
            inputs.append((path.name, convs))
    return inputs


def shared(window: int, inputs: Inputs, *, explain: bool) -> None:
    print(f"1. shared transcripts, prefix reuse at a {window:,}-token window\n")
    for mode, settings in policies(EngineSettings.for_window(window)).items():
        print(f"aging: {mode}\n{HEAD}")
        total = Reuse()
        for name, convs in inputs:
            reuse = Reuse()
            for system, messages in convs:
                label = name if explain and mode == "default" else None
                reuse.add(replay(messages, system, settings, explain=label))
            print(f"{name[:40]:<40} {reuse.row()}")
            total.add(reuse)
        print(f"{'shared transcripts, all':<40} {total.row()}\n")


# --- 3. the summary's layout through a compaction ----------------------------------------------------


def layouts(window: int, inputs: Inputs) -> None:
    """Prefix reuse at the compaction steps and what the summary keeps, "single" against "frozen"."""
    print(f"3. the summary's layout through compactions, shared transcripts at {window:,}, extractive summarizer\n")
    print(
        f"{'layout':<8} {'comp':>5} {'across':>7} {'whole':>7} {'between':>8} {'parts':>5} {'consol':>6}"
        f" | {'files now/end':>13} {'fails now/end':>13} {'ids now/end':>11} | {'first':>5} {'newest':>6}"
        f" | {'summary chars med/max':>21}"
    )
    base = EngineSettings.for_window(window)
    for layout in ("single", "frozen"):
        settings = replace(base, summary_layout=layout)
        reuse, tally = Reuse(), summary_bench.Tally()
        for _, convs in inputs:
            for system, messages in convs:
                reuse.add(replay(messages, system, settings))
                tally.add(summary_bench.replay(messages, system, settings, ExtractiveSummarizer))
        across = reuse.kept_across / reuse.before_across if reuse.before_across else 1.0
        whole = reuse.kept / reuse.before if reuse.before else 1.0
        between = reuse.kept_between / reuse.before_between if reuse.before_between else 1.0
        pct, t, v = summary_bench.pct, tally, tally.verbatim
        kept = " ".join(f"{pct(t.now[k], t.total[k]):>6}/{pct(t.end[k], t.total[k]):<6}" for k in ("files", "fails"))
        ids = f"{pct(t.now['ids'], t.total['ids']):>5}/{pct(t.end['ids'], t.total['ids']):<5}"
        first = pct(v["first_whole"] + v["first_cut"], v["first"])
        sizes = f"{statistics.median(t.sizes):,.0f} / {max(t.sizes):,}" if t.sizes else "-"
        print(
            f"{layout:<8} {reuse.compactions:>5} {across:>7.2%} {whole:>7.2%} {between:>8.2%} {reuse.parts:>5}"
            f" {reuse.consolidations:>6} | {kept} {ids} | {first:>5} {pct(v['newest_kept'], v['newest']):>6}"
            f" | {sizes:>21}"
        )
    print()


# --- 2. the synthetic sessions of bench_reme.py, both sides ----------------------------------------


def run_ctxkeep(dicts: list[dict[str, Any]], steps: list[int], settings: EngineSettings) -> reme.Run:
    """bench_reme.run_ctxkeep's collecting run (same conversion, steps, fixed summary, rendering), at `settings`."""
    messages = [from_agentscope([d]) for d in dicts]
    run = reme.Run(times=[], compactions=0)
    start = 0
    with Session(MemoryFolder(), settings=settings, summarizer=reme.FixedSummarizer()) as session:
        for end in steps:
            session.add([m for group in messages[start:end] for m in group])
            start = end
            step = session.prepare(reme.SYSTEM)
            run.compactions += step.compaction is not None
            run.compacted.append(step.compaction is not None)
            rendered = [reme.render(d["role"], d["content"]) for d in to_agentscope(list(step.context.as_messages()))]
            keys = [reme.digest(r) for r in rendered]
            for k, r in zip(keys, rendered, strict=True):
                run.texts.setdefault(k, r)
            run.contexts.append(keys)
    return run


def kept_of_previous(run: reme.Run, tokenizer: TiktokenTokenizer) -> tuple[float, int, int, int]:
    """Between compactions: the prefix tokens (whole messages) over the previous context's tokens, and the
    tokens sent past that prefix per step (what a provider bills uncached); the mean and largest context sent
    (o200k tokens of the rendered messages)."""
    sizes: dict[str, int] = {}

    def size(key: str) -> int:
        if key not in sizes:
            sizes[key] = len(tokenizer.encoding.encode_ordinary(run.texts[key]))
        return sizes[key]

    kept = before = uncached = steps = 0
    sent = [sum(size(a) for a in context) for context in run.contexts]
    for k in range(1, len(run.contexts)):
        if run.compacted[k]:
            continue
        prev, cur = run.contexts[k - 1], run.contexts[k]
        prefix = 0
        for a, b in zip(prev, cur, strict=False):
            if a != b:
                break
            prefix += size(a)
        kept += prefix
        before += sent[k - 1]
        uncached += sent[k] - prefix
        steps += 1
    mean = sum(sent) // max(1, len(sent))
    return kept / max(1, before), uncached // max(1, steps), mean, max(sent, default=0)


def synthetic(sizes: list[int], args: argparse.Namespace) -> None:
    cache = reme.cache_dir(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    tokenizer = TiktokenTokenizer("o200k_base")
    worker = None
    if not args.no_reme:
        python = reme.reme_python(Path(args.reme_venv) if args.reme_venv else cache / "reme-0.3.1.10")
        worker = reme.ReMeWorker(python, cache / "reme-worker.log")
    print("2. bench_reme.py's synthetic AgentScope sessions, seed settings (128,000), fixed summary\n")
    print(
        f"{'':<48} {'of sent, between':>17} {'lowest':>7} {'whole':>7} {'of previous':>12} {'uncached':>9}"
        f" {'comp':>5} {'mean':>7} {'peak':>8}"
    )
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    try:
        for n in sizes:
            session = reme.session_file(cache, n)
            dicts = [json.loads(line) for line in session.read_text(encoding="utf-8").splitlines()]
            steps = reme.steps_of(dicts)
            runs: dict[str, reme.Run] = {}
            for mode, settings in policies(reme.SETTINGS).items():
                runs[f"ctxkeep, {mode}"] = run_ctxkeep(dicts, steps, settings)
            if worker is not None:
                base = Path(tempfile.mkdtemp(dir=shm, prefix="run-reme-"))
                try:
                    runs["ReMe"], _ = reme.run_reme(worker, session, steps, base, collect=True)
                finally:
                    shutil.rmtree(base, ignore_errors=True)
            for side, run in runs.items():
                between, whole, lowest = reme.prefix_reuse(run, tokenizer)
                previous, uncached, mean, peak = kept_of_previous(run, tokenizer)
                print(
                    f"{n:>5,} Msgs {side:<38} {between:>17.4f} {lowest:>7.4f} {whole:>7.4f} {previous:>12.4f}"
                    f" {uncached:>9,} {run.compactions:>5} {mean:>7,} {peak:>8,}"
                )
            print()
    finally:
        if worker is not None:
            worker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=128_000, help="window of the shared transcripts' replay")
    parser.add_argument("--sizes", default="400,2000", help="Msgs of bench_reme's synthetic sessions; empty for none")
    parser.add_argument("--no-reme", action="store_true", help="leave ReMe out of the synthetic sessions")
    parser.add_argument("--explain", action="store_true", help="print every broken prefix between compactions")
    parser.add_argument("--no-layouts", action="store_true", help="leave out the summary layouts (3.)")
    parser.add_argument("--agents-md", help="an AGENTS.md for every workspace of the shared transcripts' replays")
    parser.add_argument("--cache", help="bench_reme's cache folder (sessions, ReMe's venv)")
    parser.add_argument("--reme-venv", help="ReMe's virtual environment (default: CACHE/reme-0.3.1.10)")
    args = parser.parse_args()
    if args.agents_md:
        global AGENTS_MD
        AGENTS_MD = Path(args.agents_md).read_text(encoding="utf-8")
    inputs = shared_inputs()
    if inputs:
        shared(args.window, inputs, explain=args.explain)
    else:
        print(f"no shared transcripts at {RAW}")
    sizes = [int(n) for n in args.sizes.split(",") if n]
    if sizes:
        synthetic(sizes, args)
    if inputs and not args.no_layouts:
        layouts(args.window, inputs)


if __name__ == "__main__":
    main()
