"""``ctxkeep recall``: archived messages word for word, with the saved originals of offloaded outputs.

    ctxkeep recall WORKSPACE dialog/YYYY-MM-DD.jsonl:FROM-TO [--json]
    ctxkeep recall WORKSPACE tool_result/<uuid>.txt
    ctxkeep recall --store URL --session ID SOURCE      (a workspace kept in PostgreSQL)

The source is what a summary, a search hit or an offload notice names (`ctxkeep.workspace.recall`).
"""

from __future__ import annotations

import argparse

from . import location

TYPE_CHECKING = False  # not `typing`'s: the command line imports no `typing` before it must
if TYPE_CHECKING:
    from ctxkeep.store import Store

__all__ = ["add_arguments", "run"]


def add_arguments(recall: argparse.ArgumentParser) -> None:
    """The command's options."""
    location.add_arguments(recall)
    recall.add_argument(
        "source", help="dialog/YYYY-MM-DD.jsonl:FROM-TO (or :N) as a summary names it, or tool_result/<uuid>.txt"
    )
    recall.add_argument(
        "--json", action="store_true", help="print the messages as JSON, each with its line and the originals put back"
    )


def run(args: argparse.Namespace) -> int:
    """Print the messages (or the saved original) `args.source` names; returns the exit code."""
    import sys
    from pathlib import Path

    if args.store is None and args.workspace is not None and not Path(args.workspace).is_dir():
        print(f"ctxkeep: error: {args.workspace} is not a folder; give the workspace a session wrote", file=sys.stderr)
        return 2
    with location.opened(args) as (folder, _):
        return _print(folder, args)


def _print(folder: Store, args: argparse.Namespace) -> int:
    """Print what `args.source` names in `folder`; the exit code."""
    import json
    import sys

    from ctxkeep.codec import message_to_dict
    from ctxkeep.workspace import recall

    try:
        name = recall.original_name(folder, args.source)
        if name is not None:
            data = recall.read_original(folder, name)
            if data is None:
                raise FileNotFoundError(f"{name} is not kept in this workspace (never saved, or removed by retention)")
            text = data.decode("utf-8", "replace")
            print(json.dumps({"file": name, "text": text}, ensure_ascii=False) if args.json else text)
            return 0
        items = recall.recall(folder, args.source)
    except (ValueError, FileNotFoundError) as exc:
        print(f"ctxkeep: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        rows = [
            {
                "file": i.file,
                "line": i.line,
                "restored": list(i.restored),
                "missing": list(i.missing),
                "message": message_to_dict(i.message),
            }
            for i in items
        ]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    else:
        print("\n\n".join(recall.render(i) for i in items))
    return 0
