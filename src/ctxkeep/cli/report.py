"""``ctxkeep report``: a workspace as one self-contained HTML page."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(report: argparse.ArgumentParser) -> None:
    """The command's options."""
    report.add_argument("workspace", help="a folder a ctxkeep session wrote")
    report.add_argument("-o", "--output", required=True, help="the HTML file to write (- for standard output)")


def run(args: argparse.Namespace) -> int:
    """Write the page; returns the exit code."""
    from pathlib import Path

    from ctxkeep import html_report  # here, so --help stays fast
    from ctxkeep.folder import LocalFolder
    from ctxkeep.workspace import view as workspace_view

    from .output import check_output, write_output

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
