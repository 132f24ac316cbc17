"""Token counting benchmark: cold throughput against tiktoken, and recounting an unchanged history.

    python bench/bench_tokens.py [--encoding o200k_base] [--repeat 5]

(1) Cold counting: every distinct string of the shared transcripts counted in one batch, by
    ctxkeep's default backend (toktok) and by tiktoken (the reference); tokens per second and
    the ratio. Target: >= 2 M tokens/s. Also the same texts as messages through a fresh
    `TokenCounter` (rendering, overhead and cache filling included).
(2) Recounting an unchanged 2,000-message history (real messages built from transcript texts)
    with a warm counter. Target: <= 1 ms.

Uses ../shared/data/transcripts/raw/ when it exists, synthetic text otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ctxkeep.messages import Message
from ctxkeep.tokens import TokenCounter, get_counter

RAW = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "transcripts" / "raw"
THROUGHPUT_TARGET = 2_000_000  # tokens/s
RECOUNT_TARGET_MS = 1.0
HISTORY = 2_000


def strings(obj: Any) -> Iterator[str]:
    """Every string value in a JSON document."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def transcript_texts() -> list[str]:
    """Distinct non-empty strings of the shared raw transcripts; [] when they are absent."""
    if not RAW.is_dir():
        return []
    found: set[str] = set()
    for path in sorted(RAW.iterdir()):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            found.update(strings(json.loads(text)))
        except ValueError:
            for line in text.splitlines():
                try:
                    found.update(strings(json.loads(line)))
                except ValueError:
                    continue
    return sorted(s for s in found if s)


def synthetic_texts(n: int = 5_000) -> list[str]:
    """Mixed prose, code, JSON, logs and Chinese, deterministic."""
    rng = random.Random(7)
    pieces = [
        "The agent read the file and found the failing test in tests/test_split.py line 42.",
        'def compact(messages: list[Message]) -> list[Message]:\n    return [m for m in messages if m.role != "tool"]',
        '{"id": "call_8f2a", "name": "bash", "arguments": {"command": "pytest -q tests/", "timeout": 120}}',
        "2025-01-14T09:12:33Z INFO worker-3 request=GET /api/v1/items?page=2 status=200 latency_ms=17",
        "上下文窗口的预算管理：在每次推理之前压缩旧的工具输出，并保留最近的消息。",
    ]
    return [" ".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """The fastest of `repeat` runs of `fn`, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _rate(tokens: int, seconds: float) -> str:
    return f"{tokens / seconds / 1e6:6.1f} M tokens/s ({seconds * 1e3:7.1f} ms)"


def _time_copies(counter: TokenCounter, history: list[Message]) -> float:
    """Seconds to count fresh copies of `history` (equal content, new objects)."""
    copies = [Message(role=m.role, content=m.content, id=m.id) for m in history]
    start = time.perf_counter()
    counter.count_messages(copies)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoding", default="o200k_base", choices=["o200k_base", "cl100k_base"])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement; the best is reported")
    args = parser.parse_args(argv)

    texts = transcript_texts()
    if texts:
        print(f"texts: {len(texts):,} distinct strings of the transcripts in {RAW}")
    else:
        print(f"note: no transcripts in {RAW}; using synthetic text")
        texts = synthetic_texts()
    chars = sum(map(len, texts))

    fast = get_counter(args.encoding)
    ref = get_counter(args.encoding, backend="tiktoken")
    # the very first batch is the honest cold figure: toktok keeps caches warm between calls
    start = time.perf_counter()
    counts = fast.count_texts(texts)
    t_first = time.perf_counter() - start
    total = sum(counts)
    print(f"       {chars:,} characters, {total:,} tokens ({args.encoding})")

    print("\n(1) counting every text in one batch")
    t_fast = best_of(args.repeat, lambda: fast.count_texts(texts))
    start = time.perf_counter()
    assert ref.count_texts(texts) == counts, "toktok and tiktoken disagree"
    t_ref = time.perf_counter() - start
    verdict = "ok" if total / t_first >= THROUGHPUT_TARGET else "BELOW TARGET"
    print(f"    ctxkeep, first run  {_rate(total, t_first)}  target >= 2 M tokens/s: {verdict}")
    print(f"    ctxkeep, best run   {_rate(total, t_fast)}")
    print(f"    tiktoken reference  {_rate(total, t_ref)}")
    print(f"    ratio               {t_ref / t_first:6.1f} x (first run), {t_ref / t_fast:.1f} x (best run)")

    roles = ("user", "assistant")
    messages = [Message.of(roles[i % 2], t) for i, t in enumerate(texts)]

    def cold_messages() -> None:
        get_counter(args.encoding).count_each(messages)

    t_msgs = best_of(args.repeat, cold_messages)
    print(f"    as {len(messages):,} messages {_rate(total, t_msgs)}  fresh TokenCounter: rendering, cache filling")

    print(f"\n(2) recounting an unchanged {HISTORY:,}-message history")
    step = max(1, len(messages) // HISTORY)  # spread over all the texts (they are sorted)
    history = [Message.of(m.role, m.text) for m in (messages[::step] * HISTORY)[:HISTORY]]
    counter = get_counter(args.encoding)
    start = time.perf_counter()
    tokens = counter.count_messages(history)
    first_ms = (time.perf_counter() - start) * 1e3
    runs = [best_of(1, lambda: counter.count_messages(history)) * 1e3 for _ in range(max(20, args.repeat * 10))]
    best, median = min(runs), statistics.median(runs)
    verdict = "ok" if median <= RECOUNT_TARGET_MS else "ABOVE TARGET"
    print(f"    first count         {first_ms:7.2f} ms  ({tokens:,} tokens)")
    print(f"    recount             {median:7.3f} ms median, {best:.3f} ms best  target <= 1 ms: {verdict}")
    t_copy = min(_time_copies(counter, history) for _ in range(args.repeat)) * 1e3
    print(f"    equal copies        {t_copy:7.2f} ms  (new objects, same content: found by content hash)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
