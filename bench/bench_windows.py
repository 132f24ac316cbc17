"""Small windows: is the window a promise? Every shared conversation replayed at small windows.

Run: .venv/bin/python bench/bench_windows.py [--windows 4096,8192,16000,32000] [--seeded]

Each conversation is replayed through a `Session` with `EngineSettings.for_window(w)` (or, with
`--seeded`, the seed's absolute sizes with only the window changed, as before the sizes followed
the window), `prepare` before each assistant turn, as `bench_replay.py` does. Per window:

- replays, and those whose largest context sent stayed within the window;
- steps over the window, how many of them said so in `Step.warnings`, and how many were
  excused: the system prompt and the newest turn alone (what must be sent) exceed the window;
- the files whose peak went over the window on a step that was not excused, with that peak.

Target: peak <= window in every replay where the system prompt and the newest turn fit at all, and a
warning on every step over the window.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field

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


def replay(name: str, system: str | None, messages: list[Message], settings: EngineSettings, tally: Tally) -> None:
    window = settings.compact.max_input_length
    system_tokens = system_tokens_of(system, COUNTER)
    peak = 0
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        for group in turns(messages):
            session.add(group)
            step = session.prepare(system)
            tokens = step.context.tokens
            peak = max(peak, tokens)
            if tokens <= window:
                continue
            tally.over_steps += 1
            tally.warned += any(OVER in w for w in step.warnings)
            # What must be sent whatever the pass does: the system prompt and the newest turn (as offloaded).
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
    args = parser.parse_args()
    logging.getLogger("ctxkeep").setLevel(logging.ERROR)  # the over-window warnings are counted, not printed
    files = sorted(p for p in RAW.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
    if not files:
        print(f"no shared transcripts at {RAW}; nothing to replay")
        return
    convs = {path.name: conversations(path) for path in files}
    print("window  replays  within  over-steps  warned  excused  | unexcused peaks (file: tokens)")
    for w in (int(x) for x in args.windows.split(",")):
        if args.seeded:
            settings = EngineSettings(compact=CompactSettings(max_input_length=w))
        else:
            settings = EngineSettings.for_window(w)
        tally = Tally()
        for name, items in convs.items():
            for system, messages in items:
                replay(name, system, messages, settings, tally)
        offenders = ", ".join(f"{n}: {t:,}" for n, t in sorted(tally.offenders.items())) or "none"
        print(
            f"{w:>6,}  {tally.replays:>7}  {tally.within:>6}  {tally.over_steps:>10,}  {tally.warned:>6,}"
            f"  {tally.excused:>7,}  | {offenders}"
        )


if __name__ == "__main__":
    main()
