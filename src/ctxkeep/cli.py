"""The ``ctxkeep`` command line.

    ctxkeep inspect FILE [--format NAME] [--json] [--lenient] [--max-bytes N] [--encoding NAME|tokenizer.json]
                         [--provider openai|anthropic] [--progress|--no-progress]
    ctxkeep compact FILE -o WORKSPACE [--replace] [--as openai|anthropic] [--window N] [--conversation N]
                         [--format NAME] [--lenient] [--max-bytes N] [--encoding ...] [--json]
                         [--progress|--no-progress]
                         [--model SPEC [--base-url URL] [--model-window N] [--reply-format markdown|json]
                          [--agents-md FILE]]
    ctxkeep sessions [--root DIR] [--json]        (also: ctxkeep serve ls)
    ctxkeep show WORKSPACE [--compaction N]
    ctxkeep report WORKSPACE -o report.html
    ctxkeep serve --upstream URL [--host 127.0.0.1] [--port 8787] [--window N] [--root DIR] [--model SPEC]
                  [--timeout SECONDS] [--max-body SIZE] [--log-format text|json]
                  [--allow-remote --auth-token TOKEN]

FILE is a regular file, or ``-`` for standard input; at most `--max-bytes` of it are read.
`compact` summarizes with the built-in extractive summarizer (no model, no key) unless `--model`
names a compaction model (``openai:<model>``, ``anthropic:<model>``, ``deterministic``; see
`ctxkeep.providers`). `--replace` checks everything first, takes the old workspace's lock, builds
the new workspace in a folder beside it and swaps the two only when the new one is complete.

Exit codes: 0 success, 2 bad input (the message names file, line and what is wrong).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ctxkeep import __version__

# Not `typing.TYPE_CHECKING`: `ctxkeep --help` imports neither `typing` nor `ctxkeep.errors` (which does).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from typing import TextIO

    from ctxkeep.formats import Transcript

# Each command imports what it needs inside its function, down to the standard library's heavier
# modules: `--help` must not pay for the importers, the engine, the summarizer or the tokenizer
# (~0.5 s together), nor `inspect` for what only `report` or `serve` use. The parser itself is built
# lazily too: every command is listed with its help line, but only the one being run gets its options.

__all__ = ["main"]

# The names are not listed here: listing them imports `ctxkeep.formats`. A wrong name is refused with the list.
_FORMAT_HELP = "skip detection and read the file as this format; an unknown NAME is refused with the list of names"

# Below this many bytes a progress bar would only flicker.
PROGRESS_MIN_BYTES = 2_000_000

# The commands in the order `ctxkeep --help` lists them, with their help line.
COMMANDS: dict[str, str] = {
    "inspect": "tokens by role and tool, largest tool results, pairing problems",
    "compact": "replay a transcript through the engine and write the final context and workspace",
    "serve": "an OpenAI- and Anthropic-compatible proxy that compacts before forwarding",
    "sessions": "the proxy's conversations: last use, size, compactions (also `ctxkeep serve ls`)",
    "show": "a workspace's steps and compactions, in the terminal",
    "report": "a workspace as one self-contained HTML page",
    "memory": "long-term memory: search, write, index, consolidate, schedule",
}


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, sized to the terminal as `shutil.get_terminal_size` would, without importing
    shutil (which imports zlib, bz2 and lzma: ~3 ms of every `--help` and usage error)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def _columns() -> int:
    """The terminal's width: $COLUMNS, else the size of standard output's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Only the subcommands in `commands` (all when None) get their options:
    the others are listed by name and help line, which is all `ctxkeep --help` shows of them."""
    parser = argparse.ArgumentParser(
        prog="ctxkeep", description="Keep an agent's context inside its budget.", formatter_class=_Formatter
    )
    parser.add_argument("--version", action="version", version=f"ctxkeep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    full = set(COMMANDS) if commands is None else set(commands)
    for name, help in COMMANDS.items():
        if name == "memory" and name in full:
            from ctxkeep.memory import cli as memory_cli  # its own parser and help line

            memory_cli.add_parser(sub)
            continue
        command = sub.add_parser(name, help=help, formatter_class=_Formatter)
        if name in full:
            _OPTIONS[name](command)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` runs: its first word that is not an option (`ctxkeep` has no option taking a value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _inspect_parser(inspect: argparse.ArgumentParser) -> None:
    inspect.add_argument(
        "file", help="a transcript (Claude Code, Codex, pi, OpenHands, SWE-agent, tau-bench, ...); - for stdin"
    )
    inspect.add_argument("--format", choices=_FormatNames(), metavar="NAME", help=_FORMAT_HELP)
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


def _compact_parser(compact: argparse.ArgumentParser) -> None:
    compact.add_argument("file", help="a transcript in any format `inspect` reads; - for stdin")
    compact.add_argument("-o", "--output", required=True, help="workspace folder to create (must be new or empty)")
    compact.add_argument(
        "--replace", action="store_true", help="replace the output folder if it is a ctxkeep workspace"
    )
    compact.add_argument("--as", dest="as_", choices=["openai", "anthropic"], default="openai", help="context format")
    compact.add_argument("--window", type=int, default=128_000, help="the model's context window in tokens")
    compact.add_argument("--conversation", type=int, default=0, help="which conversation of the file (default 0)")
    compact.add_argument("--format", choices=_FormatNames(), metavar="NAME", help=_FORMAT_HELP)
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


def _sessions_parser(sessions: argparse.ArgumentParser) -> None:
    sessions.add_argument("--root", help="the folder `ctxkeep serve --root` keeps them in (default ~/.ctxkeep/serve)")
    sessions.add_argument("--json", action="store_true", help="print them as JSON")


def _show_parser(show: argparse.ArgumentParser) -> None:
    show.add_argument("workspace", help="a folder a ctxkeep session wrote")
    show.add_argument("--compaction", type=int, metavar="N", help="also what compaction N archived and changed")


def _report_parser(report: argparse.ArgumentParser) -> None:
    report.add_argument("workspace", help="a folder a ctxkeep session wrote")
    report.add_argument("-o", "--output", required=True, help="the HTML file to write (- for standard output)")


def _serve_parser(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--upstream", required=True, help="the API's base URL with its version, e.g. .../v1")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8787, help="the port to listen on (default 8787)")
    serve.add_argument("--window", type=int, default=128_000, help="the upstream model's context window in tokens")
    serve.add_argument("--root", help="the folder of the conversations' workspaces (default ~/.ctxkeep/serve)")
    serve.add_argument("--model", help="summarize with this model: openai:<model>, anthropic:<model>")
    serve.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the upstream (504 after)")
    serve.add_argument(
        "--background", action="store_true", help="write summaries ahead, so no request waits for the compaction model"
    )
    serve.add_argument(
        "--max-body",
        type=_byte_size,
        default=32 * 1024 * 1024,
        metavar="SIZE",
        help="the largest request body taken, e.g. 32M (the default), 500K or 1G; larger ones get a 413",
    )
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="one line per request on stderr, as text (default) or as one JSON object a line",
    )
    serve.add_argument(
        "--allow-remote", action="store_true", help="allow a --host other machines can reach (needs a token)"
    )
    serve.add_argument(
        "--auth-token", help="the token clients must send in X-Ctxkeep-Token (or set CTXKEEP_AUTH_TOKEN)"
    )


# What each command adds to its parser (memory's is `ctxkeep.memory.cli.add_parser`).
_OPTIONS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "inspect": _inspect_parser,
    "compact": _compact_parser,
    "serve": _serve_parser,
    "sessions": _sessions_parser,
    "show": _show_parser,
    "report": _report_parser,
}


class _FormatNames:
    """The ``--format`` choices, listed only when argparse checks or shows them: `--help` needs no `ctxkeep.formats`."""

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    @staticmethod
    def _names() -> list[str]:
        from ctxkeep.formats import format_names

        return format_names()


def _byte_size(text: str) -> int:
    """A size in bytes from ``1048576``, ``500K``, ``32M`` or ``1G`` (powers of 1024)."""
    number, unit = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    if not number.isdigit() or unit not in ("", "K", "M", "G"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes, or a number with K, M or G (32M)")
    return int(number) << (10 * ("KMG".index(unit) + 1) if unit else 0)


def _max_bytes_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-bytes",
        type=int,
        metavar="N",
        help="read at most N bytes of the transcript (default 2,147,483,648, 2 GiB)",
    )


def _progress_flags(parser: argparse.ArgumentParser) -> None:
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    words = sys.argv[1:] if argv is None else list(argv)
    command = _command(words)
    if command == "serve" and words[words.index("serve") + 1 : words.index("serve") + 2] == ["ls"]:
        at = words.index("serve")  # `ctxkeep serve ls` is `ctxkeep sessions`
        words, command = [*words[:at], "sessions", *words[at + 2 :]], "sessions"
    try:
        return _run(words, command)
    except ModuleNotFoundError as exc:
        extra = _extra_of(exc, command)
        if extra is None:
            raise  # not a package an extra brings: a bug, whose traceback says where
        print(
            f"ctxkeep: error: ctxkeep {command} needs the {extra} extra ({_top(exc)} is not installed):"
            f" pip install 'ctxkeep[{extra}]'",
            file=sys.stderr,
        )
        return 2


# The extra each command needs, when ctxkeep's installed metadata cannot say which one brings a package.
_COMMAND_EXTRAS = {"serve": "serve", "memory": "memory"}


def _extra_of(exc: ModuleNotFoundError, command: str | None) -> str | None:
    """The extra that brings the module `exc` could not import: read from ctxkeep's own metadata (the extras
    of pyproject.toml), else the extra of `command`; None for a module no extra brings."""
    import importlib.metadata
    import re

    top = _top(exc).lower().replace("-", "_")
    if not top or top == "ctxkeep" or top in sys.stdlib_module_names:
        return None
    try:
        requires = importlib.metadata.requires("ctxkeep") or []
    except importlib.metadata.PackageNotFoundError:
        return _COMMAND_EXTRAS.get(command or "")
    for requirement in requires:
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*).*extra\s*==\s*['\"]([\w.-]+)['\"]", requirement)
        if found is None or found[2] in ("all", "dev"):
            continue
        package = re.sub(r"[-.]+", "_", found[1].lower())
        if package == top or package.startswith(top + "_"):  # pysqlite3-binary brings pysqlite3
            return found[2]
    return None


def _top(exc: ModuleNotFoundError) -> str:
    """The top-level package of the module that could not be imported."""
    return (exc.name or "").partition(".")[0]


def _run(words: list[str], command: str | None) -> int:
    args = _parser([] if command is None else [command]).parse_args(words)
    from ctxkeep.errors import CtxkeepError  # after parsing: `--help` and usage errors never need it

    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "sessions":
            from ctxkeep import cli_sessions

            return cli_sessions.run(args)
        if args.command == "memory":
            from ctxkeep.memory import cli as memory_cli

            return memory_cli.run(args)
        if args.command in ("show", "report"):
            return _show(args) if args.command == "show" else _report(args)
        if args.command == "compact":
            from ctxkeep import cli_compact  # here, so the other commands and --help stay fast

            return cli_compact.run(args)
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


def _show(args: argparse.Namespace) -> int:
    import shutil

    from ctxkeep import workspace_view  # here, so --help stays fast
    from ctxkeep.folder import LocalFolder

    view = workspace_view.read(LocalFolder(args.workspace), name=args.workspace)
    print(workspace_view.render_text(view, width=max(20, shutil.get_terminal_size().columns - 12)))
    if args.compaction is not None:
        print()
        print(workspace_view.render_compaction(view, args.compaction))
    return 0


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ctxkeep import html_report, workspace_view  # here, so --help stays fast
    from ctxkeep.cli_output import check_output, write_output
    from ctxkeep.folder import LocalFolder

    out = None if args.output == "-" else Path(args.output)
    if out is not None:
        check_output(out, "-o")  # before the page is built: a refused path costs nothing
    page = html_report.render(workspace_view.read(LocalFolder(args.workspace), name=args.workspace)).encode()
    if out is None:
        sys.stdout.buffer.write(page)
        return 0
    # Private (the page holds the conversation) and whole.
    write_output(out, page, "-o")
    print(f"wrote {out} ({len(page):,} bytes)")
    return 0


def _serve(args: argparse.Namespace) -> int:
    """Run the proxy until interrupted; the server's modules are imported only here, so --help stays fast."""
    from pathlib import Path

    from ctxkeep.errors import CtxkeepError
    from ctxkeep.serve import ServeSettings, is_loopback, run

    token = args.auth_token or os.environ.get("CTXKEEP_AUTH_TOKEN") or None
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise CtxkeepError(f"--host {args.host} can be reached from other machines: add --allow-remote to mean it")
        if token is None:
            raise CtxkeepError(f"--host {args.host} needs --auth-token (or CTXKEEP_AUTH_TOKEN): clients must send it")
    from ctxkeep.cli_sessions import default_root

    root = Path(args.root) if args.root else default_root()
    try:
        settings = ServeSettings(
            upstream=args.upstream,
            root=root,
            window=args.window,
            model=args.model,
            timeout=args.timeout,
            auth_token=token,
            background=args.background,
            max_body=args.max_body,
        )
        print(
            f"ctxkeep serve: http://{args.host}:{args.port}/v1 -> the upstream; workspaces in {root}", file=sys.stderr
        )
        run(settings, host=args.host, port=args.port, log_format=args.log_format)
    except ValueError as exc:
        raise CtxkeepError(str(exc)) from None
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from ctxkeep.report import build_report, render_text
    from ctxkeep.tokens import CountSettings, get_counter

    show = args.progress
    if show is None:
        show = sys.stderr.isatty() and _size(args.file) >= PROGRESS_MIN_BYTES
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


def read_transcript(args: argparse.Namespace) -> Transcript:
    """The transcript FILE names: a regular file, or standard input for ``-``."""
    from ctxkeep.errors import CtxkeepError
    from ctxkeep.formats import load, parse
    from ctxkeep.formats.source import MAX_BYTES, Source

    max_bytes = MAX_BYTES if args.max_bytes is None else args.max_bytes
    if max_bytes < 1:
        raise CtxkeepError(f"--max-bytes must be a whole number of bytes, 1 or more; got {max_bytes}")
    if args.file == "-":
        if sys.stdin is None:
            raise CtxkeepError("FILE is - but there is no standard input to read")
        source = Source.from_stream(sys.stdin.buffer, lenient=args.lenient, max_bytes=max_bytes)
        return parse(source, args.format)
    return load(args.file, format=args.format, lenient=args.lenient, max_bytes=max_bytes)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Progress:
    """A one-line progress bar on stderr (`inspect` and `compact`)."""

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
