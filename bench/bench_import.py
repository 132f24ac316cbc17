"""Import speed: `ctxkeep.formats.load` on every shared transcript.

Run: .venv/bin/python bench/bench_import.py [--repeat N]

Prints, per file, the best of N wall times for `load` (read, decode, detect, parse, build
messages) and, as the reference, for reading the file and parsing its JSON with the standard
library's `json` alone, with the ratio. Target: the largest shared transcript under 1 s.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ctxkeep.formats import load

RAW = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "transcripts" / "raw"


def best_of(repeat: int, fn: object) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def json_only(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip()[:1] in "[" or path.suffix in (".json", ".traj"):
        json.loads(text)
    else:
        for line in text.split("\n"):
            if line.strip():
                json.loads(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    files = sorted(RAW.glob("*"), key=lambda p: p.stat().st_size) if RAW.is_dir() else []
    if not files:
        print(f"no transcripts in {RAW}; nothing to measure")
        return
    print(f"{'file':<40} {'MB':>6} {'format':<12} {'msgs':>6} {'load s':>8} {'json s':>8} {'ratio':>6}")
    for path in files:
        transcript = load(path)
        t_load = best_of(args.repeat, lambda p=path: load(p))
        t_json = best_of(args.repeat, lambda p=path: json_only(p))
        n = len(transcript.messages)
        mb = path.stat().st_size / 1e6
        print(
            f"{path.name:<40} {mb:>6.2f} {transcript.format:<12} {n:>6} {t_load:>8.3f} {t_json:>8.3f} "
            f"{t_load / t_json:>6.2f}"
        )
    largest = files[-1]
    t = best_of(args.repeat, lambda: load(largest))
    verdict = "meets" if t < 1.0 else "MISSES"
    size = largest.stat().st_size / 1e6
    print(f"\nlargest: {largest.name} ({size:.2f} MB) loads in {t:.3f} s — {verdict} the < 1 s target")


if __name__ == "__main__":
    main()
