"""How wrong the usual token rules of thumb are, by kind of content, against exact counts.

Run: .venv/bin/python bench/bench_estimates.py [--encoding o200k_base|cl100k_base]

References: ``chars / 4`` (the common estimate, used by Claude Code and LangChain's
approximate counter) and ``UTF-8 bytes / 3.75`` (ReMe's rule). Every message of the shared
transcripts is put in a bucket (user text, assistant text, tool results that look like JSON,
logs/shell output, source code, other tool output, tool-call arguments, CJK text) and the ratio
estimate / exact count is printed per bucket: 1.00 is right, above over-counts, below
under-counts. ctxkeep counts exactly, so its ratio is 1.00 by construction; the point is what
an estimate costs a compaction trigger.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

from ctxkeep.formats import load
from ctxkeep.messages import Message
from ctxkeep.tokens import get_counter

RAW = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "transcripts" / "raw"
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
CODE = re.compile(r"^\s*(def |class |import |from \w+ import|function |const |let |#include|fn |pub )", re.M)
LOG = re.compile(r"(^\s*\d+[→:\t]|\[\d{4}-\d\d-\d\d|^(INFO|DEBUG|WARN|ERROR)\b|^\s*at |Traceback|^\$ |\n---)", re.M)


def bucket(msg: Message, text: str) -> str:
    if len(CJK.findall(text)) > len(text) // 10:
        return "CJK text"
    if msg.role == "tool":
        stripped = text.lstrip()
        if stripped[:1] in "{[" and stripped.rstrip()[-1:] in "}]":
            return "tool: JSON"
        if CODE.search(text):
            return "tool: source code"
        if LOG.search(text):
            return "tool: logs / shell"
        return "tool: other"
    return f"{msg.role} text"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoding", default="o200k_base")
    args = parser.parse_args()
    counter = get_counter(args.encoding)
    files = sorted(RAW.glob("*")) if RAW.is_dir() else []
    if not files:
        print(f"no transcripts in {RAW}; nothing to measure")
        return
    exact: dict[str, int] = defaultdict(int)
    chars: dict[str, int] = defaultdict(int)
    utf8: dict[str, int] = defaultdict(int)
    pieces: list[tuple[str, str]] = []
    for path in files:
        for msg in load(path).messages:
            for call in msg.tool_calls:
                pieces.append(("tool-call arguments", call.arguments))
            result = msg.tool_result
            text = result.text if result is not None else msg.text
            if text:
                pieces.append((bucket(msg, text), text))
    counts = counter.count_texts([t for _, t in pieces])
    for (name, text), n in zip(pieces, counts, strict=True):
        exact[name] += n
        chars[name] += len(text)
        utf8[name] += len(text.encode("utf-8"))
    print(f"encoding {args.encoding}; {len(pieces):,} texts from {len(files)} transcripts")
    print(f"{'content':<22} {'texts':>7} {'exact tokens':>13} {'chars/4':>9} {'bytes/3.75':>11}")
    n_texts: dict[str, int] = defaultdict(int)
    for name, _ in pieces:
        n_texts[name] += 1
    for name in sorted(exact, key=lambda k: -exact[k]):
        e = exact[name]
        print(f"{name:<22} {n_texts[name]:>7,} {e:>13,} {chars[name] / 4 / e:>9.2f} {utf8[name] / 3.75 / e:>11.2f}")
    total = sum(exact.values())
    print(
        f"{'all':<22} {len(pieces):>7,} {total:>13,} {sum(chars.values()) / 4 / total:>9.2f} "
        f"{sum(utf8.values()) / 3.75 / total:>11.2f}"
    )
    print("ratio = estimate / exact: > 1 over-counts (compacts too early), < 1 under-counts (overflows)")


if __name__ == "__main__":
    main()
