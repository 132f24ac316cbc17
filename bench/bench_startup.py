"""Startup: how long a fresh `ctxkeep` process takes for `--help` and for `inspect` on a small file.

Run: .venv/bin/python bench/bench_startup.py [--runs N] [--top N] [--baseline SRC]

Each command runs N times as a new process, the commands interleaved so that a burst of load on the
machine hits them alike; it prints the median and the minimum wall time of each, beside bare
`python -c pass` (what no change to ctxkeep can remove), and each as a multiple of `python -c pass`'s
(median over median, min over min): on a loaded machine every process slows alike, so the ratio is the
figure that compares across loads. Then `python -X importtime` of each command:
the modules that cost the most, by their own import time. Targets: `--help` < 60 ms, `inspect` on a
10 KB file < 150 ms. The small file is a synthetic OpenAI-format conversation of ~10 KB (English,
code, JSON and Chinese), written to a temporary folder, so the figures do not depend on shared data;
format detection goes through every importer to reach OpenAI's, the last. `inspect Claude Code 10 KB`
reads the repository's examples/claude_code_session.jsonl, whose importer detection reaches second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS_MS = {"--help": 60.0, "inspect 10 KB": 150.0, "inspect Claude Code 10 KB": 150.0}
# A real Claude Code session of ~10 KB from the repository: detection stops at its importer (the second
# it tries), where the OpenAI file above goes through all ten.
CLAUDE_CODE = Path(__file__).resolve().parents[1] / "examples" / "claude_code_session.jsonl"


def small_transcript(path: Path, size: int = 10_240) -> int:
    """Write an OpenAI-format conversation of at most `size` bytes to `path`; its size in bytes."""
    messages: list[dict[str, object]] = [{"role": "system", "content": "You are a careful coding agent."}]
    turn = 0
    while True:
        call_id = f"call_{turn}"
        more = [
            {"role": "user", "content": f"Step {turn}: run the tests in src/pkg/mod_{turn}.py, 请检查输出并修复错误。"},
            {
                "role": "assistant",
                "content": "Running the tests.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"pytest -q tests/t{turn}.py"})},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"FAILED tests/t{turn}.py::test_case - AssertionError: assert {turn} == {turn + 1}\n"
                + "def test_case():\n    value = compute(3, key='alpha')\n    assert value == 4\n" * 3,
            },
        ]
        if len(json.dumps(messages + more, ensure_ascii=False, indent=1).encode()) > size:
            break
        messages += more
        turn += 1
    data = json.dumps(messages, ensure_ascii=False, indent=1).encode()
    path.write_bytes(data)
    return len(data)


def ctxkeep_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m ctxkeep.cli``."""
    script = Path(sys.executable).with_name("ctxkeep")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ctxkeep.cli"]


# As an installed package runs: with its bytecode cached. Without it (PYTHONDONTWRITEBYTECODE, set in
# some shells) every run compiles ctxkeep's sources again, ~0.2 s of `inspect`.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def import_offenders(cmd: list[str], top: int) -> list[tuple[int, int, str]]:
    """(self µs, cumulative µs, module) of the `top` slowest imports of `cmd`, by self time."""
    env = {**ENV, "PYTHONPROFILEIMPORTTIME": "1"}
    err = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env).stderr
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, cumulative, name = line[len("import time:") :].split("|")
            rows.append((int(own), int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per command (default 15)")
    parser.add_argument("--top", type=int, default=12, help="how many of the slowest imports to show")
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="also run each ctxkeep command from this source folder (e.g. `git archive` of an older commit's src/),"
        " interleaved with the current one, so both see the same load",
    )
    args = parser.parse_args()
    exe = ctxkeep_command()
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small.json"
        size = small_transcript(small)
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], ENV),
            "import ctxkeep": ([sys.executable, "-c", "import ctxkeep"], ENV),
            "--help": ([*exe, "--help"], ENV),
            "inspect 10 KB": ([*exe, "inspect", str(small)], ENV),
        }
        if CLAUDE_CODE.is_file():
            commands["inspect Claude Code 10 KB"] = ([*exe, "inspect", str(CLAUDE_CODE)], ENV)
        if args.baseline:
            old = {**ENV, "PYTHONPATH": str(Path(args.baseline).resolve())}
            for name in [n for n in commands if n != "python -c pass"]:
                commands[f"{name} (baseline)"] = (commands[name][0], old)
        for cmd, env in commands.values():
            wall(cmd, env)  # warm the page cache and write the .pyc files
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, (cmd, env) in commands.items():
                times[name].append(wall(cmd, env))
        load = os.getloadavg()[0]
        print(f"{args.runs} fresh processes each, {os.cpu_count()} cores, load average {load:.2f}; file {size:,} bytes")
        # On a loaded machine every process is slower alike: the ratio to `python -c pass`, run interleaved
        # with the commands, is the figure that compares across loads.
        bare_median, bare_min = statistics.median(times["python -c pass"]), min(times["python -c pass"])
        width = max(map(len, times))
        print(f"{'command':<{width}} {'median ms':>10} {'min ms':>8} {'x pass':>7} {'min x':>6}  target (median)")
        for name, ts in times.items():
            target = TARGETS_MS.get(name)
            mark = ""
            if target is not None:
                mark = f"{'meets' if statistics.median(ts) * 1000 < target else 'MISSES'} < {target:.0f}"
            median, least = statistics.median(ts), min(ts)
            print(
                f"{name:<{width}} {median * 1000:>10.1f} {least * 1000:>8.1f}"
                f" {median / bare_median:>7.2f} {least / bare_min:>6.2f}  {mark}"
            )
        print("x pass: median / median of `python -c pass`; min x: min / min of `python -c pass`")
        for name in [n for n in TARGETS_MS if n in commands]:
            print(f"\n{name}: slowest imports (-X importtime), self and cumulative ms")
            for own, cumulative, module in import_offenders(commands[name][0], args.top):
                print(f"  {own / 1000:>7.1f} {cumulative / 1000:>8.1f}  {module.strip()}")


if __name__ == "__main__":
    main()
