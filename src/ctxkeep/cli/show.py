"""``ctxkeep show``: a workspace's steps and compactions in the terminal, or as JSON."""

from __future__ import annotations

import argparse
import sys

from . import location
from .report import add_price_arguments, price_of

TYPE_CHECKING = False  # not `typing`'s: the command line imports no `typing` before it must
if TYPE_CHECKING:
    from ctxkeep.workspace import view as workspace_view

__all__ = ["add_arguments", "run"]


def add_arguments(show: argparse.ArgumentParser) -> None:
    """The command's options."""
    location.add_arguments(show)
    show.add_argument("--compaction", type=int, metavar="N", help="also what compaction N archived and changed")
    show.add_argument(
        "--json",
        action="store_true",
        help="print the window, the savings, the steps, the compactions' records and the summary as JSON",
    )
    add_price_arguments(show)


def run(args: argparse.Namespace) -> int:
    """Print the workspace; returns the exit code."""
    import shutil

    from ctxkeep.workspace import view as workspace_view  # here, so --help stays fast

    try:
        priced = price_of(args)
    except ValueError as exc:
        print(f"ctxkeep: error: {exc}", file=sys.stderr)
        return 2
    with location.opened(args) as (store, name):
        view = workspace_view.read(store, name=name)
    if args.json:
        import json

        shown = as_json(view, args.compaction)
        shown["savings"] = view.savings(priced).to_dict()
        print(json.dumps(shown, ensure_ascii=False, indent=2))
        return 0
    width = max(20, shutil.get_terminal_size().columns - 12)
    print(workspace_view.render_text(view, width=width, price=priced))
    if args.compaction is not None:
        print()
        print(workspace_view.render_compaction(view, args.compaction))
    return 0


def as_json(view: workspace_view.View, number: int | None) -> dict[str, object]:
    """The view as plain data: the figures, the window, threshold and kept tail, the tokens sent at each step,
    every compaction's record (and, for compaction `number`, the messages it archived and its summary's diff),
    the failures, what was left out. `run` adds the savings, priced by the command's options."""
    from ctxkeep.errors import WorkspaceError

    if number is not None and not 1 <= number <= len(view.compactions):
        raise WorkspaceError(
            f"the workspace has compactions 1 to {len(view.compactions)}; there is no compaction {number}"
        )
    compactions: list[dict[str, object]] = []
    for c in view.compactions:
        entry: dict[str, object] = {"number": c.number, "step": c.step, "record": dict(c.record)}
        if c.number == number:
            entry["archived"] = [
                {"line": m.line, "id": m.id, "role": m.role, "label": m.label, "text": m.text, "cut": m.cut}
                for m in c.messages
            ]
            entry["archived_left_out"] = c.messages_left_out
            entry["diff"] = list(c.diff)
        compactions.append(entry)
    return {
        "workspace": view.name,
        "generation": view.generation,
        "live_messages": view.live_messages,
        "archived_messages": view.archived_messages,
        "offloaded_results": view.originals,
        "window": view.window,
        "threshold": view.threshold,
        "reserve": view.reserve,
        "steps": list(view.steps),
        "compactions": compactions,
        "failures": [
            {"step": step, "record": dict(rec)} for rec, step in zip(view.failures, view.failure_steps, strict=True)
        ],
        "summary": view.summary,
        "left_out": list(view.cuts),
    }
