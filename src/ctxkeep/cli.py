"""The ``ctxkeep`` command line.

    ctxkeep inspect FILE [--format NAME] [--json] [--lenient] [--encoding NAME|tokenizer.json]
                         [--provider openai|anthropic] [--progress|--no-progress]
    ctxkeep compact FILE -o WORKSPACE [--replace] [--as openai|anthropic] [--window N] [--conversation N]
                         [--format NAME] [--lenient] [--encoding ...] [--json] [--progress|--no-progress]
                         [--model SPEC [--base-url URL] [--model-window N] [--reply-format markdown|json]
                          [--agents-md FILE]]

`compact` summarizes with the built-in extractive summarizer (no model, no key) unless `--model`
names a compaction model (``openai:<model>``, ``anthropic:<model>``, ``deterministic``; see
`ctxkeep.providers`).

Exit codes: 0 success, 2 bad input (the message names file, line and what is wrong).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ctxkeep import __version__
from ctxkeep.errors import CtxkeepError
from ctxkeep.formats import format_names, load
from ctxkeep.formats.anthropic import to_anthropic
from ctxkeep.formats.openai import to_openai
from ctxkeep.providers import get_model
from ctxkeep.replay import Replay, replay, split_system
from ctxkeep.report import build_report, render_text
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, ModelSummarySettings
from ctxkeep.summarize import ModelSummarizer
from ctxkeep.tokens import CountSettings, get_counter

__all__ = ["main"]

# Below this many bytes a progress bar would only flicker.
PROGRESS_MIN_BYTES = 2_000_000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxkeep", description="Keep an agent's context inside its budget.")
    parser.add_argument("--version", action="version", version=f"ctxkeep {__version__}")
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
    _progress_flags(inspect)

    compact = sub.add_parser(
        "compact", help="replay a transcript through the engine and write the final context and workspace"
    )
    compact.add_argument("file", help="a transcript in any format `inspect` reads")
    compact.add_argument("-o", "--output", required=True, help="workspace folder to create (must be new or empty)")
    compact.add_argument(
        "--replace", action="store_true", help="replace the output folder if it is a ctxkeep workspace"
    )
    compact.add_argument("--as", dest="as_", choices=["openai", "anthropic"], default="openai", help="context format")
    compact.add_argument("--window", type=int, default=128_000, help="the model's context window in tokens")
    compact.add_argument("--conversation", type=int, default=0, help="which conversation of the file (default 0)")
    compact.add_argument("--format", choices=format_names(), help="skip detection and read the file as this format")
    compact.add_argument("--lenient", action="store_true", help="skip malformed lines and report them")
    compact.add_argument("--encoding", default="o200k_base", help="o200k_base (default), cl100k_base or tokenizer.json")
    compact.add_argument("--json", action="store_true", help="print the report as JSON")
    compact.add_argument("--model", help="summarize with this model: openai:<model>, anthropic:<model>, deterministic")
    compact.add_argument("--base-url", help="the model's server, e.g. http://127.0.0.1:8080/v1")
    compact.add_argument("--model-window", type=int, default=128_000, help="the summary model's context window")
    compact.add_argument("--reply-format", choices=["markdown", "json"], default="markdown", help="json: schema-held")
    compact.add_argument("--agents-md", help="an AGENTS.md whose Session Startup and Red Lines every summary carries")
    _progress_flags(compact)
    return parser


def _progress_flags(parser: argparse.ArgumentParser) -> None:
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return _compact(args) if args.command == "compact" else _inspect(args)
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
    bar = _Progress(sys.stderr, "counting", "messages") if show else None
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


def _compact(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not (args.replace and (out / "state.json").is_file()):
            raise CtxkeepError(
                f"{out} already exists and is not an empty folder; choose a new workspace folder"
                + (" (--replace only replaces a ctxkeep workspace)" if args.replace else ", or pass --replace")
            )
        shutil.rmtree(out)
    transcript = load(args.file, format=args.format, lenient=args.lenient)
    if not 0 <= args.conversation < len(transcript.conversations):
        raise CtxkeepError(
            f"{args.file} holds {len(transcript.conversations)} conversation(s); --conversation must be in"
            f" 0..{len(transcript.conversations) - 1}"
        )
    system, messages = split_system(transcript.conversations[args.conversation].messages)
    settings = EngineSettings(compact=CompactSettings(max_input_length=args.window))
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    bar = _Progress(sys.stderr, "replaying", "messages") if show else None
    summarizer = _summarizer(args)
    with Session.open(out, settings=settings, counter=get_counter(args.encoding), summarizer=summarizer) as session:
        result = replay(session, messages, system=system, progress=bar.update if bar else None)
        if bar:
            bar.close()
        context = session.prepare(system).context
        payload: Any
        if args.as_ == "anthropic":
            system_out, body = to_anthropic(context.as_messages())
            payload = {"system": system_out, "messages": body}
        else:
            payload = {"messages": to_openai(context.as_messages())}
        (out / "context.json").write_text(json.dumps(payload, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        offloaded = len(session.store.originals())
    report = _compact_report(args, result, offloaded, len(transcript.conversations))
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(_render_compact(report))
    return 0


def _summarizer(args: argparse.Namespace) -> ModelSummarizer | None:
    """The model summarizer `--model` asks for; None for the built-in one."""
    if args.model is None:
        for flag in ("base_url", "agents_md"):
            if getattr(args, flag) is not None:
                raise CtxkeepError(f"--{flag.replace('_', '-')} needs --model")
        return None
    agents_md = None
    if args.agents_md is not None:
        try:
            agents_md = Path(args.agents_md).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise CtxkeepError(f"cannot read --agents-md {args.agents_md}: {exc.strerror or exc}") from None
    try:
        model = get_model(args.model, base_url=args.base_url)
        settings = ModelSummarySettings(window=args.model_window, reply_format=args.reply_format, agents_md=agents_md)
        return ModelSummarizer(model, settings=settings)
    except ValueError as exc:
        raise CtxkeepError(str(exc)) from None


def _compact_report(args: argparse.Namespace, r: Replay, offloaded: int, conversations: int) -> dict[str, Any]:
    steps_ms = [s * 1000 for s in r.step_seconds]
    return {
        "file": args.file,
        "workspace": args.output,
        "conversation": f"{args.conversation + 1} of {conversations}",
        "messages": r.messages,
        "steps": r.steps,
        "window": args.window,
        "tokens_full_history": r.tokens_full,
        "tokens_final_context": r.tokens_final,
        "peak_context_tokens": r.peak_tokens,
        "summarizer": args.model or "extractive",
        "compactions": len(r.compactions),
        "failed_compactions": len(r.failures),
        "archived_messages": sum(c.compacted for c in r.compactions),
        "tool_results_offloaded": offloaded,
        "pairing_repairs": r.repairs,
        "step_ms_median": round(statistics.median(steps_ms), 3) if steps_ms else 0.0,
        "seconds": round(r.seconds, 2),
        "context_file": str(Path(args.output) / "context.json"),
        "warnings": r.warnings[:5],
    }


def _render_compact(rep: dict[str, Any]) -> str:
    lines = [
        f"{rep['file']} (conversation {rep['conversation']}) -> {rep['workspace']}",
        f"  messages        {rep['messages']:,} in {rep['steps']:,} steps, window {rep['window']:,} tokens",
        f"  tokens          {rep['tokens_full_history']:,} in the full history -> {rep['tokens_final_context']:,}"
        f" in the final context (peak {rep['peak_context_tokens']:,})",
        f"  compactions     {rep['compactions']} ({rep['archived_messages']:,} messages archived in dialog/)"
        + (f", {rep['failed_compactions']} not applied (see failed/)" if rep["failed_compactions"] else "")
        + f", summaries by {rep['summarizer']}",
        f"  offloaded       {rep['tool_results_offloaded']} tool results in tool_result/",
        f"  time            {rep['seconds']} s, {rep['step_ms_median']} ms per step (median)",
        f"  context         {rep['context_file']}, {Path(rep['workspace']) / 'summary.md'}",
    ]
    lines += [f"  warning: {w}" for w in rep["warnings"]]
    return "\n".join(lines)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class _Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, stream: TextIO, verb: str, unit: str) -> None:
        self.stream = stream
        self.verb = verb
        self.unit = unit
        self.started = time.monotonic()
        self.shown = 0.0

    def stage(self, name: str) -> None:
        self.stream.write(f"\r{name}...")
        self.stream.flush()

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.shown < 0.1:  # redraw at most ten times a second
            return
        self.shown = now
        width = 30
        filled = width * done // total if total else width
        self.stream.write(f"\r{self.verb} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} {self.unit}")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write(f"\rdone in {time.monotonic() - self.started:.2f} s" + " " * 40 + "\n")
        self.stream.flush()


if __name__ == "__main__":
    raise SystemExit(main())
