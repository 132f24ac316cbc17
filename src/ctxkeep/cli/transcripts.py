"""What the commands that read a transcript share: FILE (or ``-``), ``--format``, ``--max-bytes``, progress."""

from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False  # not `typing`'s: the command line imports no `typing` before it must
if TYPE_CHECKING:
    from collections.abc import Iterator

    from ctxkeep.formats import Transcript

__all__ = ["FORMAT_HELP", "FormatNames", "file_size", "max_bytes_flag", "progress_flags", "read_transcript"]

# The names are not listed here: listing them imports `ctxkeep.formats`. A wrong name is refused with the list.
FORMAT_HELP = "skip detection and read the file as this format; an unknown NAME is refused with the list of names"


class FormatNames:
    """The ``--format`` choices, listed only when argparse checks or shows them: `--help` needs no `ctxkeep.formats`."""

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    @staticmethod
    def _names() -> list[str]:
        from ctxkeep.formats import format_names

        return format_names()


def max_bytes_flag(parser: argparse.ArgumentParser) -> None:
    """``--max-bytes N``."""
    parser.add_argument(
        "--max-bytes",
        type=int,
        metavar="N",
        help="read at most N bytes of the transcript (default 2,147,483,648, 2 GiB)",
    )


def progress_flags(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` (default: when standard error is a terminal)."""
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")


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


def file_size(path: str) -> int:
    """The size of the file at `path`; 0 when it cannot be told (standard input, a pipe, missing)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
