"""``ctxkeep report``: a workspace as one self-contained HTML page, with what it saved."""

from __future__ import annotations

import argparse
import sys

from . import location

TYPE_CHECKING = False  # not `typing`'s: the command line imports no `typing` before it must
if TYPE_CHECKING:
    from ctxkeep.workspace.savings import Price

__all__ = ["add_arguments", "add_price_arguments", "price_of", "run"]


def add_arguments(report: argparse.ArgumentParser) -> None:
    """The command's options."""
    location.add_arguments(report)
    report.add_argument("-o", "--output", required=True, help="the HTML file to write (- for standard output)")
    add_price_arguments(report)


def add_price_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that price the tokens saved (`report` and `show`)."""
    parser.add_argument(
        "--price",
        metavar="PROVIDER:MODEL",
        help="price the tokens saved at this model's list price, e.g. openai:gpt-4o-mini"
        " (an unknown name lists the known ones)",
    )
    parser.add_argument(
        "--input-price", type=float, metavar="USD", help="US dollars per million input tokens (over --price's)"
    )
    parser.add_argument(
        "--output-price",
        type=float,
        metavar="USD",
        help="US dollars per million output tokens, for what the summarizer wrote (over --price's)",
    )


def price_of(args: argparse.Namespace) -> Price | None:
    """The price the options give, or None. Raises `ValueError` with the fix for an unknown model or bad price."""
    from ctxkeep.workspace.savings import price

    return price(args.price, input_price=args.input_price, output_price=args.output_price)


def run(args: argparse.Namespace) -> int:
    """Write the page; returns the exit code."""
    from pathlib import Path

    from ctxkeep import html_report  # here, so --help stays fast
    from ctxkeep.workspace import view as workspace_view

    from .output import check_output, write_output

    try:
        priced = price_of(args)
    except ValueError as exc:
        print(f"ctxkeep: error: {exc}", file=sys.stderr)
        return 2
    out = None if args.output == "-" else Path(args.output)
    if out is not None:
        check_output(out, "-o")  # before the page is built: a refused path costs nothing
    with location.opened(args) as (store, name):
        view = workspace_view.read(store, name=name)
    page = html_report.render(view, price=priced).encode()
    if out is None:
        sys.stdout.buffer.write(page)
        return 0
    # Private (the page holds the conversation) and whole.
    write_output(out, page, "-o")
    print(f"wrote {out} ({len(page):,} bytes)")
    return 0
