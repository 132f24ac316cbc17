"""A `Session` on a real folder: time per step as the history grows, and the time to reopen it.

Run: .venv/bin/python bench/bench_disk.py [--sizes 400,1000,2000,50000] [--window 128000] [--reopen 50000]

1. For each size, a synthetic agent session of that many messages (generated here, deterministic:
   user asks, half of them in Chinese; assistant turns with one to three tool calls, parallel ones
   included; results from a few hundred bytes to 80 KB, browser pages among them) is replayed into
   a new workspace on disk (every commit fsynced), turn by turn: `add` of the turn's messages, then
   `prepare`, the way an agent runs. Printed: median and p95 ms per step (add + prepare), by
   history length, over steps without a compaction, the CPU time of the same steps, the time the
   disk took for the step's fdatasync, and the fsyncs per step; then the steps with a compaction (wall,
   CPU, fsyncs each, and the wall time of the commit: the next live log written and everything the
   compaction wrote made durable, in `start_live`). Beside them the floor: right after each
   step, the bytes that step appended to its live log are appended to a file of their own in the same
   folder and fdatasynced (what no durable step can go below), and the step's median over the floor's.
   `--durability` runs the session at `step` (the default), `batch` or `off`. With `--window 0` no
   compaction ever happens (a window of 10^9 tokens): every message stays live, which shows
   whether a step costs the new messages or the whole history.
2. `--reopen N`: a workspace holding N live messages (no compaction) is closed and opened again,
   three times; the best and the median time of `Session.open`.

Target (issue 15): per step at 50,000 messages within 1.5x of the step at 1,000; reopen of 50,000
live messages < 0.5 s; about one durable commit (fsync) per step.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeAlias

from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.session import Session
from ctxkeep.settings import DURABILITIES, CompactSettings, EngineSettings
from ctxkeep.tokens import get_counter
from sync_clock import Floor, SyncClock, live_size  # bench/ is the script's folder

COUNTER = get_counter("o200k_base")
BUCKETS = (100, 400, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
_ZH = "请检查这个模块的测试结果并修复失败的用例，然后总结一下你做了哪些修改以及为什么这样做。"
_TOOLS = ("bash", "read_file", "grep", "browser_navigate")


def _body(rng: random.Random, size: int, turn: int) -> str:
    lines = []
    n = 0
    i = 0
    while n < size:
        line = f"{turn}:{i} src/pkg/module_{rng.randrange(50)}.py:{rng.randrange(900)} value={rng.random():.6f} ok"
        lines.append(line)
        n += len(line) + 1
        i += 1
    return "\n".join(lines)


def _result_size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.65:
        return rng.randrange(100, 2_000)
    if r < 0.92:
        return rng.randrange(3_000, 15_000)
    return rng.randrange(20_000, 80_000)


def session_turns(n: int, seed: int = 15) -> Iterator[list[Message]]:
    """Turns of a synthetic agent session, `n` messages in all (the last turn may be cut short)."""
    rng = random.Random(seed)
    made = 0
    turn = 0
    while made < n:
        ask = _ZH if turn % 2 else "Please check the module's tests, fix the failures and summarize your changes."
        batch = [Message.of("user", f"[{turn}] {ask}", id=f"u{turn}")]
        calls = [
            ToolCall(id=f"c{turn}_{k}", name=rng.choice(_TOOLS), arguments=f'{{"path": "src/pkg/m{turn}_{k}.py"}}')
            for k in range(rng.choice((1, 1, 1, 2, 3)))
        ]
        batch.append(
            Message(role="assistant", content=(TextBlock(text=f"Checking step {turn}."), *calls), id=f"a{turn}")
        )
        for call in calls:
            body = _body(rng, _result_size(rng), turn)
            batch.append(Message(role="tool", content=(ToolResult(call_id=call.id, content=body),), id=f"r{call.id}"))
        batch.append(Message.of("assistant", f"Step {turn} done: {rng.randrange(10**6)} checked.", id=f"d{turn}"))
        turn += 1
        yield batch[: n - made]
        made += len(batch)


def _settings(window: int) -> EngineSettings:
    if window:
        return EngineSettings.for_window(window)
    return EngineSettings(compact=CompactSettings(max_input_length=10**9))


Row: TypeAlias = tuple[int, float, float, float, float]
Compaction: TypeAlias = tuple[float, float, int, float]


class CommitClock:
    """The wall time of a store's `start_live` calls: a compaction's commit, where the next live log is written
    and everything the compaction wrote without a sync (originals, archive) is made durable with it."""

    def __init__(self, store: object) -> None:
        self.seconds = 0.0
        real = store.start_live  # type: ignore[attr-defined]

        def timed(generation: int, data: bytes) -> None:
            t = time.perf_counter()
            try:
                real(generation, data)
            finally:
                self.seconds += time.perf_counter() - t

        store.start_live = timed  # type: ignore[attr-defined]


def run(n: int, window: int, folder: Path, durability: str) -> tuple[list[Row], list[Compaction], int, int]:
    """Per-step (history length, wall seconds, CPU seconds, seconds in fsync, the floor's seconds) for steps
    without compaction; per step with one (wall seconds, CPU seconds, fsyncs); steps, fsyncs. The CPU time
    leaves out waiting for the disk and for other processes (a loaded machine); the fsync time is what the
    disk took to make the step durable."""
    times: list[Row] = []
    compacted: list[Compaction] = []
    steps = fsyncs = 0
    added = 0
    with (
        Session.open(folder, settings=_settings(window), counter=COUNTER, durability=durability) as session,
        Floor(folder.parent / f"floor-{folder.name}.bin") as floor,
    ):
        commit = CommitClock(session.store)
        for batch in session_turns(n):
            before = live_size(folder)
            committed = commit.seconds
            with SyncClock() as fs:
                t, c = time.perf_counter(), time.process_time()
                session.add(batch)
                step = session.prepare("You are a careful coding agent.")
                elapsed, cpu = time.perf_counter() - t, time.process_time() - c
            fsyncs += fs.count
            added += len(batch)
            steps += 1
            if step.compaction is None:
                times.append((added, elapsed, cpu, fs.seconds, floor.append(live_size(folder) - before)))
            else:
                compacted.append((elapsed, cpu, fs.count, commit.seconds - committed))
        return times, compacted, steps, fsyncs


def _bucket(n: int) -> int:
    return next((b for b in BUCKETS if n <= b), BUCKETS[-1])


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.95 * len(xs)))]


def steps(sizes: list[int], window: int, tmp: Path, durability: str) -> None:
    label = f"window {window:,}" if window else "no compaction"
    label += f", durability {durability}"
    print(f"ms per step (add + prepare) on disk, {label}, steps without compaction, by history length")
    print("(wall: what the agent waits, fsync included; cpu: this process's CPU time, which a loaded machine")
    print(" changes less; fsync: the wall time of the step's fdatasync, which a disk shared with other work")
    print(" changes most; floor: the step's bytes appended and fdatasynced alone, right after it; ratio:")
    print(" median step / median floor)")
    print(
        f"{'session':>8} {'history <=':>10} {'steps':>6} {'median':>8} {'p95':>8} {'cpu med':>8} {'cpu p95':>8}"
        f" {'fsync med':>9} {'floor med':>9} {'ratio':>6}"
    )
    for n in sizes:
        times, compacted, total, fsyncs = run(n, window, tmp / f"s{n}", durability)
        by: dict[int, list[tuple[float, ...]]] = {}
        for added, *seconds in times:
            by.setdefault(_bucket(added), []).append(tuple(s * 1000 for s in seconds))
        for b in sorted(by):
            print(f"{n:>8,} {b:>10,} {len(by[b]):>6,} {_figures(by[b])}")
        every = [tuple(s * 1000 for s in seconds) for _, *seconds in times]
        print(
            f"{n:>8,} {'all':>10} {len(every):>6,} {_figures(every)}"
            f"   ({total:,} steps, {len(compacted)} compactions, {fsyncs / total:.2f} fsyncs per step)"
        )
        if compacted:
            walls, cpus, counts, commits = zip(*compacted, strict=True)
            print(
                f"{n:>8,} {'compaction':>10} {len(compacted):>6,} {statistics.median(walls) * 1000:>8.3f}"
                f" {_p95(list(walls)) * 1000:>8.3f} {statistics.median(cpus) * 1000:>8.3f}"
                f" {_p95(list(cpus)) * 1000:>8.3f}   (steps with a compaction: {statistics.median(counts):.0f} fsyncs;"
                f" the commit, new live log written and everything made durable: median"
                f" {statistics.median(commits) * 1000:.2f} ms, p95 {_p95(list(commits)) * 1000:.2f} ms)"
            )


def _figures(rows: list[tuple[float, ...]]) -> str:
    wall = [r[0] for r in rows]
    cpu = [r[1] for r in rows]
    synced = statistics.median(r[2] for r in rows)
    floor = statistics.median(r[3] for r in rows)
    return (
        f"{statistics.median(wall):>8.3f} {_p95(wall):>8.3f} {statistics.median(cpu):>8.3f} {_p95(cpu):>8.3f}"
        f" {synced:>9.3f} {floor:>9.3f} {statistics.median(wall) / floor:>6.2f}"
    )


def reopen(n: int, tmp: Path) -> None:
    folder = tmp / f"reopen{n}"
    with Session.open(folder, settings=_settings(0), counter=COUNTER) as session:
        for batch in session_turns(n):
            session.add(batch)
            session.prepare("You are a careful coding agent.")
    size = sum(p.stat().st_size for p in (folder / "live").iterdir())
    times, cpus = [], []
    for _ in range(3):
        t, c = time.perf_counter(), time.process_time()
        with Session.open(folder, settings=_settings(0), counter=get_counter("o200k_base")) as session:
            held = len(session.messages)
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    print(
        f"\nreopen of {held:,} live messages (live log {size / 1e6:.1f} MB): best {min(times):.3f} s,"
        f" median {statistics.median(times):.3f} s; CPU best {min(cpus):.3f} s, median {statistics.median(cpus):.3f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="400,1000,2000,50000")
    parser.add_argument("--window", type=int, default=0, help="the model's window; 0: no compaction (default)")
    parser.add_argument("--reopen", type=int, default=50_000, help="live messages to reopen; 0 skips it")
    parser.add_argument("--durability", default="step", choices=DURABILITIES, help="the session's (default step)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        steps([int(s) for s in args.sizes.split(",")], args.window, Path(tmp), args.durability)
        if args.reopen:
            reopen(args.reopen, Path(tmp))


if __name__ == "__main__":
    main()
