"""How long `prepare` blocks per compaction when the summary is written in the background, with a slow model.

Run: .venv/bin/python bench/bench_background.py [--model-seconds 2] [--step-seconds 0.5,0] [--steps 120]
         [--window 32000] [--dir PATH]

A synthetic agent on a real workspace folder: each step adds a user turn, an assistant tool call and its
result (~1,500 tokens in all, the result a command's output of varying size), then calls `prepare`; between
steps the agent's own model "thinks" for `--step-seconds` (a sleep). The summarizer is the extractive one
behind a wait of `--model-seconds` per summary, standing for a compaction model that takes that long.

Each `--step-seconds` runs three times, in the same folder kind and order: ``Session.open(..., background=False)``
with an instant model (the floor: what a compaction costs besides the model: the archive write, the
rebuild, the commit), ``Session.open(..., background=False)`` with the slow model (the summary written in
`prepare`, the step waits for the model) and ``Session.open(..., background=True)`` with the slow model (written in
the session's thread from the soft threshold, applied at the threshold; see docs/engine.md). Printed per
run: compactions (and how many used a background summary), steps put off (`Step.deferred`: a compaction
was due, the summary not written yet, the context under `wait_threshold`), the largest context sent
against the threshold and the window, and the wall time of `prepare` on the steps that compacted
(median, p95, max) and on all other steps (median, max).

Target (issue 15, part 4): with a model that takes 2 s, the time `prepare` blocks per compaction has a
median of 0: the background row's compacting median at the floor row's (none of it the model's). `--step-seconds 0`
shows the limit: an agent that never waits gives the summary no time, and `prepare` waits for it once the
context passes `wait_threshold`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ctxkeep import Message, Session
from ctxkeep.messages import TextBlock, ToolCall, ToolResult
from ctxkeep.settings import EngineSettings
from ctxkeep.summarize import ExtractiveSummarizer, SummaryRequest


class SlowSummarizer:
    """The extractive summary, after `seconds` of waiting: a compaction model that takes that long."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._inner = ExtractiveSummarizer()

    def summarize(self, request: SummaryRequest) -> str:
        time.sleep(self.seconds)
        return self._inner.summarize(request)


def step_messages(i: int) -> list[Message]:
    """One step of the synthetic agent: an ask, a tool call, its output (400 to 1,600 words), a reply."""
    words = 400 + (i * 373) % 1_200
    output = "\n".join(f"src/pkg/module_{i}_{k}.py:{k + 1}: def handler_{k}(request): ..." for k in range(words // 8))
    call = ToolCall(id=f"call-{i}", name="bash", arguments=f'{{"command": "grep -rn handler src/pkg/ # step {i}"}}')
    return [
        Message.of("user", f"Step {i}: look for the handlers of area {i % 7} and tell me which to change.", id=f"u{i}"),
        Message(role="assistant", content=(TextBlock(text=f"Searching area {i % 7}."), call), id=f"a{i}"),
        Message(role="tool", content=(ToolResult(call_id=call.id, content=output),), id=f"r{i}"),
        Message.of("assistant", f"Area {i % 7}: handler_{i % 5} is the one to change.", id=f"d{i}"),
    ]


@dataclass
class Run:
    background: bool
    compacted: list[float] = field(default_factory=list)  # prepare's wall seconds on the steps that compacted
    other: list[float] = field(default_factory=list)
    from_background: int = 0
    deferred: int = 0
    peak: int = 0


def run(folder: Path, *, background: bool, model_seconds: float, args: argparse.Namespace, step_seconds: float) -> Run:
    settings = EngineSettings.for_window(args.window)
    out = Run(background=background)
    summarizer = SlowSummarizer(model_seconds)
    with Session.open(folder, settings=settings, summarizer=summarizer, background=background) as session:
        for i in range(args.steps):
            session.add(step_messages(i))
            began = time.perf_counter()
            step = session.prepare("You are a coding agent.")
            took = time.perf_counter() - began
            out.peak = max(out.peak, step.context.tokens)
            out.deferred += step.deferred
            if step.compaction is not None:
                out.compacted.append(took)
                out.from_background += step.compaction.background
            else:
                out.other.append(took)
            time.sleep(step_seconds)
    return out


def ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-seconds", type=float, default=2.0)
    parser.add_argument("--step-seconds", default="0.5,0", help="comma-separated: the agent's think time per step")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--window", type=int, default=32_000)
    parser.add_argument("--dir", type=Path, default=None, help="where the workspaces go (default: a temp dir)")
    args = parser.parse_args()
    settings = EngineSettings.for_window(args.window).compact
    print(
        f"window {args.window:,}: soft threshold {settings.soft_threshold:,}, threshold {settings.compact_threshold:,},"
        f" wait threshold {settings.wait_threshold:,}; model {args.model_seconds:g} s per summary;"
        f" {args.steps} steps of ~1,500 tokens"
    )
    print(
        f"{'think s':>7} {'mode':<10} {'compactions':>11} {'from bg':>7} {'put off':>7} {'peak':>7}"
        f" | {'compacting: median':>18} {'p95':>8} {'max':>8} ms | {'other: median':>13} {'max':>7} ms"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for think in (float(s) for s in args.step_seconds.split(",")):
            for mode, background, model_seconds in (
                ("floor", False, 0.0),
                ("inline", False, args.model_seconds),
                ("background", True, args.model_seconds),
            ):
                folder = Path(tmp) / f"{think}-{mode}"
                r = run(folder, background=background, model_seconds=model_seconds, args=args, step_seconds=think)
                print(
                    f"{think:>7g} {mode:<10} {len(r.compacted):>11} {r.from_background:>7} {r.deferred:>7}"
                    f" {r.peak:>7,} | {ms(r.compacted, 0.5):>18} {ms(r.compacted, 0.95):>8} {ms(r.compacted, 1.0):>8}"
                    f"    | {ms(r.other, 0.5):>13} {ms(r.other, 1.0):>7}",
                    flush=True,
                )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
