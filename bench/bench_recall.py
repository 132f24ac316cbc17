"""Exact recall: what the archive alone cannot show of the compacted messages, and what `recall` gives back.

Run: PYTHONPATH=src .venv/bin/python bench/bench_recall.py [--window 32000] [TRANSCRIPT ...]

Each transcript (default: every shared one) is compacted by `ctxkeep compact` at the window into a
temporary workspace; then every archived message is recalled (`ctxkeep.workspace.recall`) and compared
with the archive line as stored. Per transcript: archived messages; those with a saved original (an
offloaded output, cut call arguments, an oversized text, dropped reasoning); the originals put back
word for word (the recalled text equals the saved file; "missing" counts those not kept); the lines of
those originals the archive does not hold (what neither memory_read of the archive nor dialog_search
could find); and the characters archived and recalled.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

import orjson

from ctxkeep.cli import main as ctxkeep
from ctxkeep.codec import message_from_dict
from ctxkeep.folder import LocalFolder
from ctxkeep.messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.workspace.recall import MAX_LINES, recall

TRANSCRIPTS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "transcripts" / "raw"


def texts(message: Message) -> str:
    """Every text a message holds (results, calls' arguments, reasoning), one per line."""
    out: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock | ThinkingBlock):
            out.append(block.text)
        elif isinstance(block, ToolCall):
            out.append(block.arguments)
        elif isinstance(block, ToolResult):
            out.append(block.text)
    return "\n".join(out)


def measure(workspace: Path) -> dict[str, int]:
    """The figures of one compacted workspace (every workspace under it: one per conversation)."""
    figures = dict.fromkeys(("archived", "with_original", "restored", "missing", "hidden_lines", "archived_chars"), 0)
    figures["recalled_chars"] = 0
    for dialog in sorted(workspace.rglob("dialog/*.jsonl")):
        folder = LocalFolder(dialog.parent.parent)
        lines = dialog.read_bytes().splitlines()
        for start in range(1, len(lines) + 1, MAX_LINES):
            end = min(len(lines), start + MAX_LINES - 1)
            for item in recall(folder, f"dialog/{dialog.name}:{start}-{end}"):
                stored = texts(message_from_dict(orjson.loads(lines[item.line - 1])))
                full = texts(item.message)
                figures["archived"] += 1
                figures["archived_chars"] += len(stored)
                figures["recalled_chars"] += len(full)
                if item.restored or item.missing:
                    figures["with_original"] += 1
                    figures["missing"] += len(item.missing)
                for name in item.restored:
                    original = (folder.read_original(name) or b"").decode("utf-8", "replace")
                    figures["restored"] += original in full
                    seen = set(stored.splitlines())
                    figures["hidden_lines"] += sum(1 for line in original.splitlines() if line not in seen)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=32_000)
    parser.add_argument("transcripts", nargs="*", type=Path)
    args = parser.parse_args()
    if not args.transcripts and not TRANSCRIPTS.is_dir():
        print(f"no shared transcripts at {TRANSCRIPTS}: name the transcripts to compact", file=sys.stderr)
        return 2
    files = args.transcripts or sorted(p for p in TRANSCRIPTS.iterdir() if p.is_file())
    print(f"window {args.window:,}")
    print(f"{'transcript':40} {'arch':>6} {'w/orig':>6} {'back':>6} {'miss':>5} {'hidden lines':>12} {'chars x':>8}")
    total = dict.fromkeys(("archived", "with_original", "restored", "missing", "hidden_lines"), 0)
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            out = Path(tmp) / path.stem
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = ctxkeep(["compact", str(path), "-o", str(out), "--window", str(args.window), "--no-progress"])
            if code != 0:
                print(f"{path.name:40} compact failed ({code})")
                continue
            f = measure(out)
            for key in total:
                total[key] += f[key]
            ratio = f["recalled_chars"] / max(1, f["archived_chars"])
            print(
                f"{path.name[:40]:40} {f['archived']:>6} {f['with_original']:>6} {f['restored']:>6}"
                f" {f['missing']:>5} {f['hidden_lines']:>12} {ratio:>7.2f}x"
            )
    print(
        f"{'all':40} {total['archived']:>6} {total['with_original']:>6} {total['restored']:>6}"
        f" {total['missing']:>5} {total['hidden_lines']:>12}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
