"""The pre-reasoning pass replayed over real sessions: time per step, tokens before/after, compactions.

Run: .venv/bin/python bench/bench_replay.py [--windows 128000,32000] [--synthetic 20000] [--disk]

1. Every conversation of every shared transcript is replayed through a `Session` (in memory) the
   way an agent runs: messages added turn by turn, `prepare` before each assistant turn. Per file:
   messages, tokens of the whole history, and at each window the tokens of the final context, the
   largest context sent, and the number of compactions.
2. Time of one step (`add` of the turn's messages + `prepare`), for steps without a compaction,
   by history length (messages added so far): median and p95. Target: < 0.5 ms median, flat as
   history grows.
3. A synthetic history of `--synthetic` messages (real messages repeated with fresh ids, a window
   too large to compact) shows whether the step time stays flat far beyond the shared sessions.
4. `--disk`: the largest transcript again on a real folder (every write fsynced), for the price of
   durability; and the time of each compaction.

No reference implementation runs here for this pass (ReMe's needs agentscope and a model); the
figures stand alone.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from ctxkeep.context import system_tokens_of
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.formats import load
from ctxkeep.messages import Message, ToolCall, make_id
from ctxkeep.pairing import repair
from ctxkeep.replay import split_system, turns
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings
from ctxkeep.tokens import get_counter

RAW = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "transcripts" / "raw"
BUCKETS = (100, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000)
COUNTER = get_counter("o200k_base")


def replay(session: Session, messages: list[Message], system: str | None) -> dict[str, object]:
    steps: list[tuple[int, float, bool]] = []
    compaction_s: list[float] = []
    added = 0
    peak = final = 0
    for group in turns(messages):
        t = time.perf_counter()
        session.add(group)
        step = session.prepare(system)
        elapsed = time.perf_counter() - t
        added += len(group)
        steps.append((added, elapsed, step.compaction is not None))
        if step.compaction:
            compaction_s.append(step.compaction.seconds)
        peak = max(peak, step.context.tokens)
        final = step.context.tokens
    return {
        "steps": steps,
        "peak": peak,
        "final": final,
        "compactions": len(compaction_s),
        "compaction_s": compaction_s,
    }


def conversations(path: Path) -> list[tuple[str | None, list[Message]]]:
    out = []
    for conv in load(path).conversations:
        fixed, _ = repair(conv.messages)
        system, rest = split_system(fixed)
        if len(rest) >= 4:
            out.append((system, rest))
    return out


def bucket_of(n: int) -> int:
    return next((b for b in BUCKETS if n <= b), BUCKETS[-1])


def print_timing(title: str, steps: list[tuple[int, float, bool]]) -> None:
    by: dict[int, list[float]] = {}
    for added, seconds, compacted in steps:
        if not compacted:
            by.setdefault(bucket_of(added), []).append(seconds * 1000)
    print(f"\n{title}: ms per step without compaction (add + prepare), by history length")
    print(f"{'history <=':>12} {'steps':>7} {'median':>8} {'p95':>8}")
    for b in sorted(by):
        xs = sorted(by[b])
        p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
        print(f"{b:>12,} {len(xs):>7,} {statistics.median(xs):>8.3f} {p95:>8.3f}")
    every = sorted(s * 1000 for _, s, c in steps if not c)
    if every:
        print(
            f"{'all':>12} {len(every):>7,} {statistics.median(every):>8.3f} {every[int(0.95 * (len(every) - 1))]:>8.3f}"
        )


def shared(windows: list[int]) -> None:
    files = sorted(p for p in RAW.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    if not files:
        print(f"no shared transcripts at {RAW}; skipping part 1")
        return
    all_steps: dict[int, list[tuple[int, float, bool]]] = {w: [] for w in windows}
    head = f"{'file':<44} {'convs':>5} {'msgs':>6} {'tokens':>9}"
    for w in windows:
        head += f" | {w // 1000}k: {'final':>7} {'peak':>7} {'comp':>4}"
    print("final: the last context sent (summed over a file's conversations); peak: the largest context sent;")
    print("comp: compactions. tokens: the whole history, as if nothing were cut.\n")
    print(head)
    for path in files:
        try:
            convs = conversations(path)
        except Exception as exc:  # a file the importers do not read is reported, not fatal
            print(f"{path.name[:44]:<44} skipped: {exc}")
            continue
        if not convs:
            continue
        n_msgs = sum(len(m) for _, m in convs)
        tokens = sum(sum(COUNTER.count_each(m)) + system_tokens_of(s, COUNTER) for s, m in convs)
        row = f"{path.name[:44]:<44} {len(convs):>5} {n_msgs:>6,} {tokens:>9,}"
        for w in windows:
            settings = EngineSettings(compact=CompactSettings(max_input_length=w))
            final = peak = comp = 0
            for system, messages in convs:
                with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
                    r = replay(session, messages, system)
                all_steps[w] += r["steps"]  # type: ignore[arg-type]
                final += r["final"]  # type: ignore[operator]
                peak = max(peak, r["peak"])  # type: ignore[call-overload]
                comp += r["compactions"]  # type: ignore[operator]
            row += f" | {'':>4} {final:>7,} {peak:>7,} {comp:>4}"
        print(row)
    for w in windows:
        print_timing(f"shared transcripts, window {w:,}", all_steps[w])


def synthetic(n: int) -> None:
    files = sorted(p for p in RAW.rglob("*.jsonl") if p.is_file())
    base: list[Message] = []
    for path in files:
        for _, messages in conversations(path):
            base = messages if len(messages) > len(base) else base
    if not base:
        print("no shared transcripts: the synthetic history needs real messages; skipping part 3")
        return
    history: list[Message] = []
    copy = 0
    while len(history) < n:
        for msg in base:
            history.append(_fresh(msg, copy))
        copy += 1
    history = history[:n]
    history, _ = repair(history)
    settings = EngineSettings(compact=CompactSettings(max_input_length=10**9))
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        r = replay(session, history, None)
    print_timing(f"synthetic history of {len(history):,} messages (no compaction)", r["steps"])  # type: ignore[arg-type]


def _fresh(msg: Message, copy: int) -> Message:
    """The message with ids made unique for this copy (calls and results keep their pairing)."""
    content = tuple(
        replace(b, id=make_id(b.id, copy))
        if isinstance(b, ToolCall)
        else replace(b, call_id=make_id(b.call_id, copy))
        if msg.role == "tool"
        else b
        for b in msg.content
    )
    return replace(msg, id=make_id(msg.id, copy), content=content)


def disk(window: int) -> None:
    files = sorted(p for p in RAW.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    best: tuple[str | None, list[Message]] = (None, [])
    for path in files:
        for conv in conversations(path):
            best = conv if len(conv[1]) > len(best[1]) else best
    if not best[1]:
        return
    settings = EngineSettings(compact=CompactSettings(max_input_length=window))
    with tempfile.TemporaryDirectory() as tmp, Session(LocalFolder(tmp), settings=settings, counter=COUNTER) as s:
        r = replay(s, best[1], best[0])
    print_timing(f"largest conversation ({len(best[1]):,} messages) on disk, window {window:,}", r["steps"])  # type: ignore[arg-type]
    comp = r["compaction_s"]
    assert isinstance(comp, list)
    if comp:
        print(
            f"compactions: {len(comp)}, median {statistics.median(comp) * 1000:.1f} ms, max {max(comp) * 1000:.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", default="128000,32000")
    parser.add_argument("--synthetic", type=int, default=20_000)
    parser.add_argument("--disk", action="store_true")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    shared(windows)
    if args.synthetic:
        synthetic(args.synthetic)
    if args.disk:
        disk(windows[-1])


if __name__ == "__main__":
    main()
