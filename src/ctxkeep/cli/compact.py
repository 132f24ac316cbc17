"""``ctxkeep compact``: replay a transcript through the engine into a new (or replaced) workspace.

The options only: the replay and ``--replace``'s swap are `ctxkeep.cli.workspace_build`, imported when the
command runs, so a usage error or ``compact --help`` does not load the engine, the session and the summarizer.
"""

from __future__ import annotations

import argparse

from ctxkeep.settings import DURABILITIES

from .transcripts import FORMAT_HELP, FormatNames, max_bytes_flag, progress_flags

__all__ = ["add_arguments", "run"]


def add_arguments(compact: argparse.ArgumentParser) -> None:
    """The command's options."""
    compact.add_argument("file", help="a transcript in any format `inspect` reads; - for stdin")
    compact.add_argument("-o", "--output", required=True, help="workspace folder to create (must be new or empty)")
    compact.add_argument(
        "--replace", action="store_true", help="replace the output folder if it is a ctxkeep workspace"
    )
    compact.add_argument("--as", dest="as_", choices=["openai", "anthropic"], default="openai", help="context format")
    compact.add_argument("--window", type=int, default=128_000, help="the model's context window in tokens")
    compact.add_argument(
        "--durability",
        choices=DURABILITIES,
        default="step",
        help="step (default), batch or off: what a power loss during the build may take (docs/engine.md)",
    )
    compact.add_argument("--conversation", type=int, default=0, help="which conversation of the file (default 0)")
    compact.add_argument("--format", choices=FormatNames(), metavar="NAME", help=FORMAT_HELP)
    compact.add_argument("--lenient", action="store_true", help="skip malformed lines and report them")
    max_bytes_flag(compact)
    compact.add_argument("--encoding", default="o200k_base", help="o200k_base (default), cl100k_base or tokenizer.json")
    compact.add_argument("--json", action="store_true", help="print the report as JSON")
    compact.add_argument("--model", help="summarize with this model: openai:<model>, anthropic:<model>, deterministic")
    compact.add_argument("--base-url", help="the model's server, e.g. http://127.0.0.1:8080/v1")
    compact.add_argument("--model-window", type=int, default=128_000, help="the summary model's context window")
    compact.add_argument("--reply-format", choices=["markdown", "json"], default="markdown", help="json: schema-held")
    compact.add_argument("--agents-md", help="an AGENTS.md whose Session Startup and Red Lines every summary carries")
    progress_flags(compact)


def run(args: argparse.Namespace) -> int:
    """Replay FILE into the workspace -o names and print what it did; returns the exit code."""
    from .workspace_build import build

    return build(args)
