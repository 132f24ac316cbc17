"""``ctxkeep inspect``: where a transcript's tokens go."""

from __future__ import annotations

import argparse
import sys

from .progress import PROGRESS_MIN_BYTES, Progress
from .transcripts import FORMAT_HELP, FormatNames, file_size, max_bytes_flag, progress_flags, read_transcript

__all__ = ["add_arguments", "run"]


def add_arguments(inspect: argparse.ArgumentParser) -> None:
    """The command's options."""
    inspect.add_argument(
        "file", help="a transcript (Claude Code, Codex, pi, OpenHands, SWE-agent, tau-bench, ...); - for stdin"
    )
    inspect.add_argument("--format", choices=FormatNames(), metavar="NAME", help=FORMAT_HELP)
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument("--lenient", action="store_true", help="skip malformed lines and report them")
    max_bytes_flag(inspect)
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
    progress_flags(inspect)


def run(args: argparse.Namespace) -> int:
    """Print the transcript's report; returns the exit code."""
    from ctxkeep.report import build_report, render_text
    from ctxkeep.tokens import CountSettings, get_counter

    show = args.progress
    if show is None:
        show = sys.stderr.isatty() and file_size(args.file) >= PROGRESS_MIN_BYTES
    bar = Progress(sys.stderr, "counting", "messages") if show else None
    if bar:
        bar.stage("reading")
    transcript = read_transcript(args)
    counter = get_counter(args.encoding, settings=CountSettings(provider=args.provider))
    report = build_report(transcript, counter, progress=bar.update if bar else None)
    if bar:
        bar.close()
    if args.json:
        import json  # only here: the text report needs no json

        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(render_text(report))
    return 0
