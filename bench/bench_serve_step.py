"""The step `ctxkeep serve` runs for each request (`Session.add` of the new messages, then `prepare`), in one
process, on `bench_serve.py`'s turns, warm and cold.

In the proxy the step runs in the session's worker thread between two requests, while the event loop, the
client and the upstream run on the same cores; its caches are cold when it starts. Here each step runs on
its own (warm), or after 4 MB copied and a request body parsed (cold), and the parts it spends its time in
are printed beside each other (medians over the steps, milliseconds):

    .venv/bin/python bench/bench_serve_step.py [--tokens 100000] [--steps 60] [--dir /dev/shm]

The parts are timed by wrapping the functions `Session` calls (the conversion of the new messages, adding
and counting them, the pass, its offload part, the journal): the wrappers add a microsecond or two each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_serve
from ctxkeep import engine, session
from ctxkeep.workspace.journal import Journal

CHURN = 4_000_000  # bytes copied between two cold steps, beside one request body parsed
# What `Session.add` and `Session.prepare` call, in the order they call it, and how each is printed.
PARTS = [
    (session.inputs, "to_batch"),
    (session.live_mod, "add"),
    (Journal, "append"),
    (session.engine, "prepare"),
    (engine, "offload_recent"),
    (Journal, "step"),
]
LABELS = [
    "converting the new messages",
    "adding and counting them",
    "the journal (append)",
    "the pass (prepare)",
    "  of which the offload pass",
    "the journal (step)",
]


def timed(owner: Any, name: str, label: str, spent: dict[str, float]) -> None:
    """Replace `owner.name` with a wrapper that adds its seconds to `spent[label]`."""
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            spent[label] += time.perf_counter() - started

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--dir", help="where the workspace goes (default: the system's temporary folder)")
    args = parser.parse_args()

    spent: dict[str, float] = defaultdict(float)
    for (owner, name), label in zip(PARTS, LABELS, strict=True):
        timed(owner, name, label, spent)

    messages = bench_serve.history_of(args.tokens, "step")
    system, history = messages[0]["content"], messages[1:]
    body = json.dumps({"model": "fast", "messages": messages, "tools": [bench_serve.TOOL]})
    churn = bytearray(CHURN)
    parts: dict[str, dict[str, list[float]]] = {"warm": defaultdict(list), "cold": defaultdict(list)}
    with (
        tempfile.TemporaryDirectory(dir=args.dir) as root,
        session.Session.open(Path(root) / "w", window=4 * args.tokens) as held,
    ):
        held.sync(history)
        held.prepare(system, tools=[bench_serve.TOOL])
        for i in range(args.steps):
            grown = bench_serve.grow(history, 10_000 + i, "step")
            new = json.loads(json.dumps(grown[len(history) :]))  # as the proxy hands them over: parsed JSON
            history = grown
            kind = "cold" if i % 2 else "warm"
            if kind == "cold":
                churn[:] = bytes(CHURN)
                json.loads(body)
            spent.clear()
            started = time.perf_counter()
            held.add(new)
            held.prepare(system, tools=[bench_serve.TOOL])
            parts[kind]["the whole step"].append(time.perf_counter() - started)
            for label, seconds in spent.items():
                parts[kind][label].append(seconds)
    print(f"the step of a {args.tokens:,}-token conversation, {args.steps // 2} steps each, median ms:")
    print(f"  {'':30s} {'warm':>6s} {'cold':>6s}")
    for label in ["the whole step", *LABELS]:
        warm, cold = (1000 * statistics.median(parts[k][label] or [0.0]) for k in ("warm", "cold"))
        print(f"  {label:30s} {warm:6.3f} {cold:6.3f}")


if __name__ == "__main__":
    main()
