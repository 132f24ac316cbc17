"""The ``ctxkeep`` command line.

    ctxkeep inspect FILE [--format NAME] [--json] [--lenient] [--max-bytes N] [--encoding NAME|tokenizer.json]
                         [--provider openai|anthropic] [--progress|--no-progress]
    ctxkeep compact FILE -o WORKSPACE [--replace] [--as openai|anthropic] [--window N] [--conversation N]
                         [--format NAME] [--lenient] [--max-bytes N] [--encoding ...] [--json]
                         [--progress|--no-progress]
                         [--model SPEC [--base-url URL] [--model-window N] [--reply-format markdown|json]
                          [--agents-md FILE]]
    ctxkeep sessions [--root DIR] [--json]        (also: ctxkeep serve ls)
    ctxkeep show WORKSPACE [--compaction N] [--json]
    ctxkeep recall WORKSPACE dialog/YYYY-MM-DD.jsonl:FROM-TO [--json]   (or a tool_result/<uuid>.txt)
    ctxkeep report WORKSPACE -o report.html
        (show, recall, report: a workspace kept in PostgreSQL is --store URL --session ID instead of WORKSPACE)
    ctxkeep store migrate URL | ls URL [PREFIX] | copy SRC DST [--session ID]
    ctxkeep serve --upstream URL [--host 127.0.0.1] [--port 8787] [--window N] [--root DIR | --store URL] [--model SPEC]
                  [--timeout SECONDS] [--max-body SIZE] [--log-format text|json]
                  [--allow-remote --auth-token TOKEN]

FILE is a regular file, or ``-`` for standard input; at most `--max-bytes` of it are read.
`compact` summarizes with the built-in extractive summarizer (no model, no key) unless `--model`
names a compaction model (``openai:<model>``, ``anthropic:<model>``, ``deterministic``; see
`ctxkeep.providers`). `--replace` checks everything first, takes the old workspace's lock, builds
the new workspace in a folder beside it and swaps the two only when the new one is complete.

Exit codes: 0 success, 2 bad input (the message names file, line and what is wrong).

One module per command (`inspect`, `compact`, `serve`, `sessions`, `show`, `recall`, `report`, `store`; `memory` is
`ctxkeep.memory.cli`), each with `add_arguments(parser)` and `run(args)`; what several share has its own
module: `transcripts` (FILE, --format, --max-bytes), `progress`, `output` (where a command may write),
`workspace_build` (compact's replay and --replace's swap).
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from ctxkeep import __version__

# Not `typing.TYPE_CHECKING`: `ctxkeep --help` imports neither `typing` nor `ctxkeep.errors` (which does).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

# Each command's module imports what it needs inside `run`, down to the standard library's heavier
# modules: `--help` must not pay for the importers, the engine, the summarizer or the tokenizer
# (~0.5 s together), nor `inspect` for what only `report` or `serve` use. The parser itself is built
# lazily too: every command is listed with its help line, but only the one being run gets its options
# (and only its module is imported).

__all__ = ["main"]

# The commands in the order `ctxkeep --help` lists them, with their help line.
COMMANDS: dict[str, str] = {
    "inspect": "tokens by role and tool, largest tool results, pairing problems",
    "compact": "replay a transcript through the engine and write the final context and workspace",
    "serve": "an OpenAI- and Anthropic-compatible proxy that compacts before forwarding",
    "sessions": "the proxy's conversations: last use, size, compactions (also `ctxkeep serve ls`)",
    "show": "a workspace's steps and compactions, in the terminal",
    "recall": "archived messages word for word, with the saved originals of offloaded outputs",
    "report": "a workspace as one self-contained HTML page",
    "memory": "long-term memory: search, write, index, consolidate, schedule",
    "store": "PostgreSQL stores: migrate a database, list its workspaces, copy one from or to a folder",
}

# The module of each command: `add_arguments(parser)` and `run(args) -> int`.
_MODULES = {name: f"ctxkeep.cli.{name}" for name in COMMANDS} | {"memory": "ctxkeep.memory.cli"}


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
            import_module(_MODULES[name]).add_parser(sub)  # its own parser and help line
            continue
        command = sub.add_parser(name, help=help, formatter_class=_Formatter)
        if name in full:
            import_module(_MODULES[name]).add_arguments(command)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` runs: its first word that is not an option (`ctxkeep` has no option taking a value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


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


def _run(words: list[str], command: str | None) -> int:
    args = _parser([] if command is None else [command]).parse_args(words)
    from ctxkeep.errors import CtxkeepError  # after parsing: `--help` and usage errors never need it

    try:
        code: int = import_module(_MODULES[args.command]).run(args)
        return code
    except CtxkeepError as exc:
        print(f"ctxkeep: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: not an error; silence the flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# The extra each command needs, when ctxkeep's installed metadata cannot say which one brings a package.
_COMMAND_EXTRAS = {"serve": "serve", "memory": "memory", "store": "postgres"}


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


if __name__ == "__main__":
    raise SystemExit(main())
