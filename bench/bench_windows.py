"""Small windows: is the window a promise? Every shared conversation replayed at small windows.

Run: .venv/bin/python bench/bench_windows.py [--windows 4096,8192,16000,32000] [--seeded] [--fixed 0,0.3,0.6]

Each conversation is replayed through a `Session` with `EngineSettings.for_window(w)` (or, with
`--seeded`, the seed's absolute sizes with only the window changed, as before the sizes followed
the window), `prepare` before each assistant turn, as `bench_replay.py` does. Per window:

- replays, and those whose largest context sent stayed within the window;
- steps over the window, how many of them said so in `Step.warnings`, and how many were
  excused: the system prompt and the newest turn alone (what must be sent) exceed the window;
- the files whose peak went over the window on a step that was not excused, with that peak.

`--fixed` adds, for each share given, a run where the system prompt and tool schemas take that share of the
window (the transcript's own system prompt padded with instructions, and tool schemas with long descriptions,
half each): the agents with big tool sets and small local models.

Target: peak <= window in every replay where the system prompt, the tools and the newest turn fit at all,
and a warning on every step over the window.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from bench_replay import RAW, conversations
from ctxkeep.context import system_tokens_of
from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message
from ctxkeep.replay import turns
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings
from ctxkeep.tokens import get_counter

COUNTER = get_counter("o200k_base")
OVER = "over the model's window"


@dataclass
class Tally:
    replays: int = 0
    within: int = 0
    over_steps: int = 0
    warned: int = 0
    excused: int = 0
    offenders: dict[str, int] = field(default_factory=dict)


def fixed_part(system: str | None, tokens: int) -> tuple[str | None, list[dict[str, Any]]]:
    """`system` padded, and tool schemas made, so that together they take about `tokens` tokens (half each)."""
    if tokens <= 0:
        return system, []
    rule = "Before you change a file, read it, and keep every change small and tested. "
    base = system_tokens_of(system, COUNTER)
    pad = max(0, tokens // 2 - base)
    padded = (system or "") + "\n" + rule * (pad // max(1, COUNTER.count_text(rule)))
    tools: list[dict[str, Any]] = []
    left = tokens - system_tokens_of(padded, COUNTER)
    while left > 60:
        words = min(left - 40, 400)
        description = " ".join(f"option{k}" for k in range(words // 2))
        tool = {
            "type": "function",
            "function": {
                "name": f"tool_{len(tools)}",
                "description": description,
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            },
        }
        tools.append(tool)
        left -= COUNTER.count_text(json.dumps(tool))
    return padded, tools


def replay(
    name: str, system: str | None, messages: list[Message], settings: EngineSettings, tally: Tally, share: float = 0
) -> None:
    window = settings.compact.max_input_length
    system, tools = fixed_part(system, int(window * share))
    system_tokens = system_tokens_of(system, COUNTER) + (COUNTER.count_text(json.dumps(tools)) if tools else 0)
    peak = 0
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        for group in turns(messages):
            session.add(group)
            step = session.prepare(system, tools=tools or None)
            tokens = step.context.tokens
            peak = max(peak, tokens)
            if tokens <= window:
                continue
            tally.over_steps += 1
            tally.warned += any(OVER in w for w in step.warnings)
            # What must be sent whatever the pass does: the system prompt, tools and the newest turn (as offloaded).
            newest = session.live.counts[-len(group) :]
            if system_tokens + sum(newest) > window:
                tally.excused += 1
            else:
                tally.offenders[name] = max(tally.offenders.get(name, 0), tokens)
    tally.replays += 1
    tally.within += peak <= window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="4096,8192,16000,32000")
    parser.add_argument("--seeded", action="store_true", help="the seed's absolute sizes, only the window changed")
    parser.add_argument(
        "--fixed", default="0", help="shares of the window the system prompt and tools take, e.g. 0,0.6"
    )
    args = parser.parse_args()
    logging.getLogger("ctxkeep").setLevel(logging.ERROR)  # the over-window warnings are counted, not printed
    files = sorted(p for p in RAW.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    if not files:
        print(f"no shared transcripts at {RAW}; nothing to replay")
        return
    convs = {path.name: conversations(path) for path in files}
    print("window  fixed  replays  within  over-steps  warned  excused  | unexcused peaks (file: tokens)")
    cases = [(int(w), float(f)) for f in args.fixed.split(",") for w in args.windows.split(",")]
    for w, share in cases:
        if args.seeded:
            settings = EngineSettings(compact=CompactSettings(max_input_length=w))
        else:
            settings = EngineSettings.for_window(w)
        tally = Tally()
        for name, items in convs.items():
            for system, messages in items:
                replay(name, system, messages, settings, tally, share)
        offenders = ", ".join(f"{n}: {t:,}" for n, t in sorted(tally.offenders.items())) or "none"
        print(
            f"{w:>6,}  {share:>5.0%}  {tally.replays:>7}  {tally.within:>6}  {tally.over_steps:>10,}"
            f"  {tally.warned:>6,}  {tally.excused:>7,}  | {offenders}"
        )


if __name__ == "__main__":
    main()
