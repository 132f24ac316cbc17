"""The ``ctxkeep`` command line.

    ctxkeep inspect FILE [--format NAME] [--json] [--lenient] [--max-bytes N] [--encoding NAME|tokenizer.json]
                         [--provider openai|anthropic] [--progress|--no-progress]
    ctxkeep compact FILE -o WORKSPACE [--replace] [--as openai|anthropic] [--window N] [--conversation N]
                         [--format NAME] [--lenient] [--max-bytes N] [--encoding ...] [--json]
                         [--progress|--no-progress]
                         [--model SPEC [--base-url URL] [--model-window N] [--reply-format markdown|json]
                          [--agents-md FILE]]
    ctxkeep show WORKSPACE [--compaction N]
    ctxkeep report WORKSPACE -o report.html
    ctxkeep serve --upstream URL [--host 127.0.0.1] [--port 8787] [--window N] [--root DIR] [--model SPEC]
                  [--timeout SECONDS] [--allow-remote --auth-token TOKEN]

FILE is a regular file, or ``-`` for standard input; at most `--max-bytes` of it are read.
`compact` summarizes with the built-in extractive summarizer (no model, no key) unless `--model`
names a compaction model (``openai:<model>``, ``anthropic:<model>``, ``deterministic``; see
`ctxkeep.providers`). `--replace` checks everything first, takes the old workspace's lock, builds
the new workspace in a folder beside it and swaps the two only when the new one is complete.

Exit codes: 0 success, 2 bad input (the message names file, line and what is wrong).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson

from ctxkeep import __version__
from ctxkeep.errors import CtxkeepError, FormatError, StorageError, WorkspaceLockedError
from ctxkeep.folder import LocalFolder
from ctxkeep.formats import Transcript, format_names, load, parse
from ctxkeep.formats.anthropic import to_anthropic
from ctxkeep.formats.openai import to_openai
from ctxkeep.formats.source import MAX_BYTES, Source, read_file
from ctxkeep.memory import cli as memory_cli
from ctxkeep.messages import Message
from ctxkeep.offload import OFFLOAD_KEY
from ctxkeep.providers import get_model
from ctxkeep.replay import Replay, replay, split_system
from ctxkeep.report import build_report, render_text
from ctxkeep.session import _STATE_MARK, Session
from ctxkeep.settings import EngineSettings, ModelSummarySettings
from ctxkeep.store import STATE, TOOL_RESULT_DIR
from ctxkeep.summarize import ModelSummarizer
from ctxkeep.tokens import CountSettings, TokenCounter, get_counter

__all__ = ["main"]

# Below this many bytes a progress bar would only flicker.
PROGRESS_MIN_BYTES = 2_000_000
# How long `--replace` waits for a process that holds the old workspace, in seconds.
REPLACE_LOCK_WAIT = 2.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxkeep", description="Keep an agent's context inside its budget.")
    parser.add_argument("--version", action="version", version=f"ctxkeep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="tokens by role and tool, largest tool results, pairing problems")
    inspect.add_argument(
        "file", help="a transcript (Claude Code, Codex, pi, OpenHands, SWE-agent, tau-bench, ...); - for stdin"
    )
    inspect.add_argument("--format", choices=format_names(), help="skip detection and read the file as this format")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument("--lenient", action="store_true", help="skip malformed lines and report them")
    _max_bytes_flag(inspect)
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
    compact.add_argument("file", help="a transcript in any format `inspect` reads; - for stdin")
    compact.add_argument("-o", "--output", required=True, help="workspace folder to create (must be new or empty)")
    compact.add_argument(
        "--replace", action="store_true", help="replace the output folder if it is a ctxkeep workspace"
    )
    compact.add_argument("--as", dest="as_", choices=["openai", "anthropic"], default="openai", help="context format")
    compact.add_argument("--window", type=int, default=128_000, help="the model's context window in tokens")
    compact.add_argument("--conversation", type=int, default=0, help="which conversation of the file (default 0)")
    compact.add_argument("--format", choices=format_names(), help="skip detection and read the file as this format")
    compact.add_argument("--lenient", action="store_true", help="skip malformed lines and report them")
    _max_bytes_flag(compact)
    compact.add_argument("--encoding", default="o200k_base", help="o200k_base (default), cl100k_base or tokenizer.json")
    compact.add_argument("--json", action="store_true", help="print the report as JSON")
    compact.add_argument("--model", help="summarize with this model: openai:<model>, anthropic:<model>, deterministic")
    compact.add_argument("--base-url", help="the model's server, e.g. http://127.0.0.1:8080/v1")
    compact.add_argument("--model-window", type=int, default=128_000, help="the summary model's context window")
    compact.add_argument("--reply-format", choices=["markdown", "json"], default="markdown", help="json: schema-held")
    compact.add_argument("--agents-md", help="an AGENTS.md whose Session Startup and Red Lines every summary carries")
    _progress_flags(compact)
    _serve_parser(sub)
    _workspace_parsers(sub)
    memory_cli.add_parser(sub)
    return parser


def _workspace_parsers(sub: Any) -> None:
    show = sub.add_parser("show", help="a workspace's steps and compactions, in the terminal")
    show.add_argument("workspace", help="a folder a ctxkeep session wrote")
    show.add_argument("--compaction", type=int, metavar="N", help="also what compaction N archived and changed")
    report = sub.add_parser("report", help="a workspace as one self-contained HTML page")
    report.add_argument("workspace", help="a folder a ctxkeep session wrote")
    report.add_argument("-o", "--output", required=True, help="the HTML file to write (- for standard output)")


def _serve_parser(sub: Any) -> None:
    serve = sub.add_parser("serve", help="an OpenAI- and Anthropic-compatible proxy that compacts before forwarding")
    serve.add_argument("--upstream", required=True, help="the API's base URL with its version, e.g. .../v1")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8787, help="the port to listen on (default 8787)")
    serve.add_argument("--window", type=int, default=128_000, help="the upstream model's context window in tokens")
    serve.add_argument("--root", help="the folder of the conversations' workspaces (default ~/.ctxkeep/serve)")
    serve.add_argument("--model", help="summarize with this model: openai:<model>, anthropic:<model>")
    serve.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the upstream (504 after)")
    serve.add_argument(
        "--allow-remote", action="store_true", help="allow a --host other machines can reach (needs a token)"
    )
    serve.add_argument(
        "--auth-token", help="the token clients must send in X-Ctxkeep-Token (or set CTXKEEP_AUTH_TOKEN)"
    )


def _max_bytes_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_BYTES,
        metavar="N",
        help=f"read at most N bytes of the transcript (default {MAX_BYTES:,}, 2 GiB)",
    )


def _progress_flags(parser: argparse.ArgumentParser) -> None:
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "memory":
            return memory_cli.run(args)
        if args.command in ("show", "report"):
            return _show(args) if args.command == "show" else _report(args)
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


def _show(args: argparse.Namespace) -> int:
    from ctxkeep import workspace_view  # here, so --help stays fast

    view = workspace_view.read(LocalFolder(args.workspace), name=args.workspace)
    print(workspace_view.render_text(view, width=max(20, shutil.get_terminal_size().columns - 12)))
    if args.compaction is not None:
        print()
        print(workspace_view.render_compaction(view, args.compaction))
    return 0


def _report(args: argparse.Namespace) -> int:
    from ctxkeep import html_report, workspace_view  # here, so --help stays fast

    page = html_report.render(workspace_view.read(LocalFolder(args.workspace), name=args.workspace)).encode()
    if args.output == "-":
        sys.stdout.buffer.write(page)
        return 0
    out = Path(args.output)
    if out.is_dir():
        raise CtxkeepError(f"-o {out} is a folder; give the path of the HTML file to write")
    # Private (the page holds the conversation) and whole: a temporary file beside it, then one rename.
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(page)
            os.replace(tmp, out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise StorageError(f"cannot write {out}: {exc.strerror or exc}", path=str(out), errno=exc.errno) from None
    print(f"wrote {out} ({len(page):,} bytes)")
    return 0


def _serve(args: argparse.Namespace) -> int:
    """Run the proxy until interrupted; the server's modules are imported only here, so --help stays fast."""
    from ctxkeep.serve import ServeSettings, is_loopback, run

    token = args.auth_token or os.environ.get("CTXKEEP_AUTH_TOKEN") or None
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise CtxkeepError(f"--host {args.host} can be reached from other machines: add --allow-remote to mean it")
        if token is None:
            raise CtxkeepError(f"--host {args.host} needs --auth-token (or CTXKEEP_AUTH_TOKEN): clients must send it")
    root = Path(args.root) if args.root else Path.home() / ".ctxkeep" / "serve"
    try:
        settings = ServeSettings(
            upstream=args.upstream,
            root=root,
            window=args.window,
            model=args.model,
            timeout=args.timeout,
            auth_token=token,
        )
        print(
            f"ctxkeep serve: http://{args.host}:{args.port}/v1 -> the upstream; workspaces in {root}", file=sys.stderr
        )
        run(settings, host=args.host, port=args.port)
    except ValueError as exc:
        raise CtxkeepError(str(exc)) from None
    return 0


def _inspect(args: argparse.Namespace) -> int:
    show = args.progress
    if show is None:
        show = sys.stderr.isatty() and _size(args.file) >= PROGRESS_MIN_BYTES
    bar = _Progress(sys.stderr, "counting", "messages") if show else None
    if bar:
        bar.stage("reading")
    transcript = _read(args)
    counter = get_counter(args.encoding, settings=CountSettings(provider=args.provider))
    report = build_report(transcript, counter, progress=bar.update if bar else None)
    if bar:
        bar.close()
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(render_text(report))
    return 0


def _read(args: argparse.Namespace) -> Transcript:
    """The transcript FILE names: a regular file, or standard input for ``-``."""
    if args.max_bytes < 1:
        raise CtxkeepError(f"--max-bytes must be a whole number of bytes, 1 or more; got {args.max_bytes}")
    if args.file == "-":
        if sys.stdin is None:
            raise CtxkeepError("FILE is - but there is no standard input to read")
        source = Source.from_stream(sys.stdin.buffer, lenient=args.lenient, max_bytes=args.max_bytes)
        return parse(source, args.format)
    return load(args.file, format=args.format, lenient=args.lenient, max_bytes=args.max_bytes)


def _compact(args: argparse.Namespace) -> int:
    out = Path(args.output)
    # Everything that can be wrong with the arguments or the input is found before any folder is touched.
    settings = _engine_settings(args.window)
    summarizer = _summarizer(args)
    counter = get_counter(args.encoding)
    replacing = _check_output(out, replace=args.replace)
    transcript = _read(args)
    if not 0 <= args.conversation < len(transcript.conversations):
        raise CtxkeepError(
            f"{transcript.path} holds {len(transcript.conversations)} conversation(s); --conversation must be in"
            f" 0..{len(transcript.conversations) - 1}"
        )
    system, messages = split_system(transcript.conversations[args.conversation].messages)
    _check_offload_files(messages, transcript.path)
    run = _Run(args=args, settings=settings, counter=counter, summarizer=summarizer, system=system, messages=messages)
    if replacing:
        result, offloaded = _replace(out, run)
    else:
        result, offloaded = run.build(LocalFolder(out))
    report = _compact_report(args, result, offloaded, len(transcript.conversations))
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(_render_compact(report))
    return 0


def _engine_settings(window: int) -> EngineSettings:
    if window < 1:
        raise CtxkeepError(
            f"--window must be the model's context window, a whole number of tokens, 1 or more; got {window}"
        )
    try:
        return EngineSettings.for_window(window)  # every size follows the window: docs/engine.md
    except ValueError as exc:
        raise CtxkeepError(f"--window {window}: {exc}") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Run:
    """One replay of a conversation into a workspace, with everything it needs already checked."""

    args: argparse.Namespace
    settings: EngineSettings
    counter: TokenCounter
    summarizer: ModelSummarizer | None
    system: str | None
    messages: list[Message]

    def build(self, folder: LocalFolder) -> tuple[Replay, int]:
        """Replay into `folder`, write context.json there; the figures and the number of offloaded results."""
        show = self.args.progress if self.args.progress is not None else sys.stderr.isatty()
        bar = _Progress(sys.stderr, "replaying", "messages") if show else None
        with Session(folder, settings=self.settings, counter=self.counter, summarizer=self.summarizer) as session:
            result = replay(session, self.messages, system=self.system, progress=bar.update if bar else None)
            if bar:
                bar.close()
            context = session.prepare(self.system).context
            payload: Any
            if self.args.as_ == "anthropic":
                system_out, body = to_anthropic(context.as_messages())
                payload = {"system": system_out, "messages": body}
            else:
                payload = {"messages": to_openai(context.as_messages())}
            folder.write("context.json", (json.dumps(payload, ensure_ascii=False, indent=2) + "\n").encode())
            offloaded = len(session.store.originals())
        return result, offloaded


class _Staged(LocalFolder):
    """A workspace built in a temporary folder that becomes `final`: it names its files by their final paths.

    An offloaded result's notice tells the agent where its original is; that must be where it will be.
    """

    def __init__(self, root: str | os.PathLike[str], final: Path) -> None:
        super().__init__(root)
        self.final = final.resolve()

    def location(self, name: str) -> str:
        return str(self.final / Path(super().location(name)).relative_to(self.root))


def _check_output(out: Path, *, replace: bool) -> bool:
    """Whether `out` is a workspace `--replace` will replace; False when it is new or an empty folder."""
    try:
        mode = out.lstat().st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CtxkeepError(f"cannot use {out} as the workspace folder: {exc.strerror or exc}") from None
    if replace and stat.S_ISLNK(mode):
        raise CtxkeepError(
            f"{out} is a symbolic link; --replace replaces only a workspace folder itself, never through a link:"
            " give the folder's own path"
        )
    if out.is_dir() and not any(out.iterdir()):
        return False
    if not replace:
        raise CtxkeepError(
            f"{out} already exists and is not an empty folder; choose a new workspace folder, or pass --replace"
        )
    why = _not_a_workspace(out)
    if why is not None:
        raise CtxkeepError(
            f"{out} is not a ctxkeep workspace ({why}); --replace only replaces a ctxkeep workspace,"
            " so nothing was touched: choose a new workspace folder"
        )
    return True


def _not_a_workspace(folder: Path) -> str | None:
    """Why `folder` is no ctxkeep workspace, or None when its state.json is a readable ctxkeep state."""
    if not stat.S_ISDIR(folder.lstat().st_mode):
        return "not a folder"
    state = folder / STATE
    try:
        mode = state.lstat().st_mode
    except FileNotFoundError:
        return f"no {STATE}"
    except OSError as exc:
        return f"cannot read {STATE}: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return f"{STATE} is not a regular file"
    try:
        value = orjson.loads(read_file(state))
    except CtxkeepError as exc:
        return str(exc)
    except orjson.JSONDecodeError:
        return f"{STATE} is not JSON"
    if not isinstance(value, dict) or value.get("v") != _STATE_MARK:
        return f"{STATE} has no {_STATE_MARK} version marker"
    return None


def _replace(out: Path, run: _Run) -> tuple[Replay, int]:
    """Build the new workspace beside `out` while holding its lock, then swap: a failure leaves `out` as it was."""
    target = out.resolve()  # not a link (checked): this only spells `.` and `..` out, for the renames
    with _held(out):
        why = _not_a_workspace(target)  # again, now that nobody else can change it
        if why is not None:
            raise CtxkeepError(f"{out} is no longer a ctxkeep workspace ({why}); nothing was touched")
        staging = _sibling(target, "new")
        try:
            try:
                built = run.build(_Staged(staging, final=target))
            except CtxkeepError as exc:
                raise CtxkeepError(f"{exc} (the workspace {out} is as it was)") from exc
            _swap(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already after a swap
    return built


@contextlib.contextmanager
def _held(out: Path) -> Iterator[None]:
    """The lock a `Session` on `out` takes: no process works in the old workspace while it is replaced."""
    try:
        with LocalFolder(out).lock(REPLACE_LOCK_WAIT):
            yield
    except WorkspaceLockedError:
        raise CtxkeepError(
            f"{out} is in use by another process (it holds {out / '.lock'}); nothing was touched:"
            " run --replace again when that process has finished"
        ) from None


def _sibling(out: Path, kind: str) -> Path:
    """A new, empty, private folder beside `out` (same file system, so a rename moves it)."""
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=f".{kind}", dir=out.parent))
    except OSError as exc:
        raise StorageError(
            f"cannot create a folder beside {out}: {exc.strerror or exc}; make its parent folder writable",
            path=str(out.parent),
            errno=exc.errno,
        ) from None


def _swap(new: Path, out: Path) -> None:
    """Put the complete workspace `new` where `out` is: old aside, new in, then the old deleted."""
    aside = _sibling(out, "old")
    try:
        os.rename(out, aside)  # onto the empty folder just made: a rename may replace an empty folder
    except OSError as exc:
        aside.rmdir()
        raise StorageError(
            f"cannot move {out} aside: {exc.strerror or exc}; it is as it was", path=str(out), errno=exc.errno
        ) from None
    try:
        os.rename(new, out)
    except OSError as exc:
        try:
            os.rename(aside, out)
        except OSError:
            raise StorageError(
                f"cannot move the new workspace to {out}: {exc.strerror or exc}; the old workspace is in {aside}:"
                " move it back by hand",
                path=str(aside),
                errno=exc.errno,
            ) from None
        raise StorageError(
            f"cannot move the new workspace to {out}: {exc.strerror or exc}; the old workspace is back in place",
            path=str(out),
            errno=exc.errno,
        ) from None
    try:
        shutil.rmtree(aside)
    except OSError as exc:
        print(f"ctxkeep: warning: the old workspace is left in {aside}: {exc.strerror or exc}", file=sys.stderr)


def _check_offload_files(messages: Sequence[Message], path: str) -> None:
    """Refuse a tool result whose offload record names a file outside ``tool_result/``.

    ctxkeep's own transcripts carry the records; the workspace would follow the name.
    """
    for message in messages:
        result = message.tool_result
        record = result.extra.get(OFFLOAD_KEY) if result is not None else None
        file = record.get("file") if isinstance(record, dict) else None
        if not isinstance(file, str):
            continue  # no record, or one the engine leaves as it is with a warning
        folder, _, name = file.partition("/")
        if folder != TOOL_RESULT_DIR or name in ("", ".", "..") or "/" in name:
            raise CtxkeepError(
                f"{path}: message {message.id}: its offload record names {file!r}, which is not a file in"
                f" {TOOL_RESULT_DIR}/; fix or remove the record"
            )


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
            agents_md = read_file(args.agents_md).decode("utf-8", errors="replace")
        except FormatError as exc:
            raise CtxkeepError(f"cannot read --agents-md {args.agents_md}: {exc.reason}") from None
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
