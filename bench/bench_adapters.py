"""The adapters in a real agent loop: each framework, over HTTP, against the validating local server.

Run: .venv/bin/python bench/bench_adapters.py [--tasks 150] [--only plain,langchain,...]

For the plain openai-SDK loop (README) and each adapter whose test module exposes
`run(workspace, base_url, tasks, restart_at)`, the long run of its test (tasks with ~30 KB tool outputs
at a 16,000-token window, reopened halfway) with `Session.prepare` timed. Per adapter: requests,
requests refused, compactions, peak prompt tokens the server counted, `prepare` per call (median, p95;
with and without the calls that compacted) and, where the adapter is async, the event loop's longest
stalls: a ticker task asks for a 1 ms sleep all along, and what it waited beyond that is time the loop
was blocked (target < 1 ms per call outside compaction).

Needs the frameworks (`scripts/test` installs every extra); a framework that is missing is skipped
with a line that says so. `--engine` runs only ctxkeep's pass over the same workload (the README's loop,
the validating server's scripted agent called in-process, no HTTP, no framework), for a quick count of
compactions per step and the peak the server would count (target: at most 1 compaction per 5 requests,
peak under the window).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.validating_server import (  # noqa: E402
    SEARCH_TOOL,
    ValidatingServer,
    check_request,
    reply_to,
    task,
    tool_output,
)

from ctxkeep import Session  # noqa: E402
from ctxkeep.tokens.encodings import TiktokenTokenizer  # noqa: E402

WINDOW = 16_000
MODULES = {
    "plain": "tests.test_agent_loop",
    "langchain": "tests.test_adapter_langchain",
    "openai-agents": "tests.test_adapter_openai_agents",
    "pydantic-ai": "tests.test_adapter_pydantic_ai",
    "agentscope": "tests.test_adapter_agentscope",
}


@dataclass
class Timings:
    """`Session.prepare` calls: seconds each, and whether it compacted."""

    calls: list[tuple[float, bool]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def timed_prepare(timings: Timings) -> Iterator[None]:
    """Time every `Session.prepare` (an `AsyncSession` runs it in a worker thread, so it is timed too)."""
    original = Session.prepare

    def prepare(self: Session, *args: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        step = original(self, *args, **kw)
        with timings.lock:
            timings.calls.append((time.perf_counter() - start, step.compaction is not None))
        return step

    Session.prepare = prepare  # type: ignore[method-assign]
    try:
        yield
    finally:
        Session.prepare = original  # type: ignore[method-assign]


async def with_ticker(work: Callable[[], Any], stalls: list[float]) -> None:
    """Run the coroutine `work()` while a ticker records how late each 1 ms sleep woke up."""
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            stalls.append(time.perf_counter() - start - 0.001)

    ticker = asyncio.create_task(tick())
    try:
        await work()
    finally:
        done.set()
        await ticker


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def bench(name: str, module_name: str, tasks: int) -> None:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        print(f"{name:14} skipped: {exc}")
        return
    runner = getattr(module, "arun", None) or getattr(module, "run", None)
    if runner is None:
        print(f"{name:14} skipped: {module_name} has no run()")
        return
    timings, stalls = Timings(), list[float]()
    with tempfile.TemporaryDirectory() as tmp, ValidatingServer(window=WINDOW) as api, timed_prepare(timings):
        workspace = Path(tmp) / "ws"
        if inspect.iscoroutinefunction(runner):
            asyncio.run(with_ticker(lambda: runner(workspace, api.base_url, tasks, tasks // 2), stalls))
        else:
            runner(workspace, api.base_url, tasks, tasks // 2)
        compactions = sum(1 for _, compacted in timings.calls if compacted)
        quiet = [s for s, compacted in timings.calls if not compacted]
        every = [s for s, _ in timings.calls]
        print(
            f"{name:14} {len(api.records):>8} {len(api.refused):>7} {compactions:>11} {api.peak_tokens:>7} "
            f"{ms(statistics.median(quiet)) if quiet else '-':>10} {ms(percentile(quiet, 0.95)):>8} "
            f"{ms(statistics.median(every)):>10} {ms(percentile(every, 0.95)):>8} "
            + (f"{ms(max(stalls)):>9} {ms(percentile(stalls, 0.99)):>9}" if stalls else f"{'sync':>9} {'':>9}")
        )


def engine_only(tasks: int, *, model: bool = False) -> None:
    """The plain loop's workload through `Session` alone: each request checked and counted as the server would.
    With `model`, summaries come from a model summarizer (a deterministic model answering a fixed summary)."""
    from ctxkeep.summarize import ModelSummarizer
    from ctxkeep.summarize.testing import fixed_summary_model

    summarizer = {"summarizer": ModelSummarizer(fixed_summary_model())} if model else {}
    tokenizer = TiktokenTokenizer("o200k_base")
    system = "You are a build engineer. Use the tools, then answer briefly."
    history: list[Any] = []
    requests = compactions = peak = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        session = Session.open(Path(tmp) / "ws", window=WINDOW, **summarizer)
        try:
            for i in range(tasks):
                if i == tasks // 2:
                    session.sync(history)
                    session.close()
                    session = Session.open(Path(tmp) / "ws", window=WINDOW, **summarizer)
                history.append({"role": "user", "content": task(i)})
                while True:
                    session.sync(history)
                    step = session.prepare(system, tools=[SEARCH_TOOL])
                    body = {"model": "engine", "messages": step.to_openai(), "tools": [SEARCH_TOOL]}
                    tokens = check_request(body, WINDOW, tokenizer)
                    requests += 1
                    compactions += step.compaction is not None
                    peak = max(peak, tokens)
                    reply = reply_to(body, tokens, requests)["choices"][0]["message"]
                    history.append(reply)
                    if not reply.get("tool_calls"):
                        break
                    for call in reply["tool_calls"]:
                        query = json.loads(call["function"]["arguments"])["query"]
                        history.append({"role": "tool", "tool_call_id": call["id"], "content": tool_output(query)})
        finally:
            session.close()
    label = "engine only (model summarizer)" if model else "engine only"
    print(
        f"{label}: {requests} requests, {compactions} compactions (1 per {requests / max(1, compactions):.1f}"
        f" requests), peak {peak} of {WINDOW}, {time.perf_counter() - start:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=150)
    parser.add_argument("--only", default=",".join(MODULES), help="comma-separated: " + ", ".join(MODULES))
    parser.add_argument("--engine", action="store_true", help="only ctxkeep's pass over the workload, no frameworks")
    parser.add_argument("--model", action="store_true", help="with --engine: a model summarizer (deterministic)")
    args = parser.parse_args()
    if args.engine:
        engine_only(args.tasks, model=args.model)
        return
    print(f"window {WINDOW}, {args.tasks} tasks, reopened halfway; times in ms")
    print(
        f"{'adapter':14} {'requests':>8} {'refused':>7} {'compactions':>11} {'peak':>7} "
        f"{'prep med':>10} {'p95':>8} {'all med':>10} {'p95':>8} {'stall max':>9} {'p99':>9}"
    )
    print(f"{'':14} {'':>8} {'':>7} {'':>11} {'':>7} {'(no compaction)':>19} {'(every call)':>19} {'(event loop)':>19}")
    for name in args.only.split(","):
        bench(name, MODULES[name], args.tasks)


if __name__ == "__main__":
    main()
