"""The ``ctxkeep`` command line.

    ctxkeep inspect FILE [--format NAME] [--json] [--lenient] [--encoding NAME|tokenizer.json]
                         [--provider openai|anthropic] [--progress|--no-progress]

Exit codes: 0 success, 2 bad input (the message names file, line and what is wrong).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from ctxkeep.errors import CtxkeepError
from ctxkeep.formats import format_names, load
from ctxkeep.report import build_report, render_text
from ctxkeep.tokens import CountSettings, get_counter

__all__ = ["main"]

# Below this many bytes a progress bar would only flicker.
PROGRESS_MIN_BYTES = 2_000_000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxkeep", description="Keep an agent's context inside its budget.")
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="tokens by role and tool, largest tool results, pairing problems")
    inspect.add_argument("file", help="a transcript (Claude Code, Codex, pi, OpenHands, SWE-agent, tau-bench, ...)")
    inspect.add_argument("--format", choices=format_names(), help="skip detection and read the file as this format")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument("--lenient", action="store_true", help="skip malformed lines and report them")
    inspect.add_argument(
        "--encoding",
        default="o200k_base",
        help="o200k_base (default), cl100k_base, or the path of a Hugging Face tokenizer.json",
    )
    inspect.add_argument(
        "--provider",
        choices=["openai", "anthropic"],
        default="openai",
        help="whose rule counts images (default openai)",
    )
    progress = inspect.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return _inspect(args)
    except CtxkeepError as exc:
        print(f"ctxkeep: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: not an error; silence the flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _inspect(args: argparse.Namespace) -> int:
    show = args.progress
    if show is None:
        show = sys.stderr.isatty() and _size(args.file) >= PROGRESS_MIN_BYTES
    bar = _Progress(sys.stderr) if show else None
    if bar:
        bar.stage("reading")
    transcript = load(args.file, format=args.format, lenient=args.lenient)
    counter = get_counter(args.encoding, settings=CountSettings(provider=args.provider))
    report = build_report(transcript, counter, progress=bar.update if bar else None)
    if bar:
        bar.close()
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(render_text(report))
    return 0


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class _Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.monotonic()

    def stage(self, name: str) -> None:
        self.stream.write(f"\r{name}...")
        self.stream.flush()

    def update(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // total if total else width
        self.stream.write(f"\rcounting [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} messages")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write(f"\rdone in {time.monotonic() - self.started:.2f} s" + " " * 40 + "\n")
        self.stream.flush()


if __name__ == "__main__":
    raise SystemExit(main())
