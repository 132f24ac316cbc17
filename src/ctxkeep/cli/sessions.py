"""``ctxkeep sessions`` (also ``ctxkeep serve ls``): the proxy's conversations, most recently used first.

Reads the folders under the proxy's root (or, with ``--store URL``, the workspaces of that PostgreSQL
database, `ctxkeep serve --store`) and nothing else: no lock is taken, so it runs beside a proxy that is
serving them, and it needs none of the `serve` extra's packages.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ctxkeep.errors import CtxkeepError
from ctxkeep.folder import LocalFolder
from ctxkeep.workspace import records

TYPE_CHECKING = False  # not `typing`'s: the command line imports no `typing` before it must
if TYPE_CHECKING:
    from ctxkeep.postgres.database import Usage

__all__ = ["Conversation", "add_arguments", "conversations", "default_root", "in_database", "run"]


def add_arguments(sessions: argparse.ArgumentParser) -> None:
    """The command's options."""
    sessions.add_argument("--root", help="the folder `ctxkeep serve --root` keeps them in (default ~/.ctxkeep/serve)")
    sessions.add_argument(
        "--store", metavar="URL", help="the PostgreSQL database `ctxkeep serve --store` keeps them in"
    )
    sessions.add_argument("--json", action="store_true", help="print them as JSON")


def default_root() -> Path:
    """Where `ctxkeep serve` keeps its conversations without ``--root``."""
    return Path.home() / ".ctxkeep" / "serve"


@dataclass(frozen=True, kw_only=True, slots=True)
class Conversation:
    """One conversation's folder under the proxy's root."""

    name: str  # the folder's name: the X-Ctxkeep-Session header, or the first ask's words and a hash
    branches: int  # workspaces: 1, unless the client edited its history
    last_used: str  # when a file of it last changed, ISO 8601 in UTC
    bytes: int  # on disk, every branch
    compactions: int  # every branch's


def conversations(root: Path) -> list[Conversation]:
    """The conversations under `root`, most recently used first."""
    try:
        folders = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    except FileNotFoundError:
        raise CtxkeepError(f"{root} does not exist: give the --root that `ctxkeep serve` was run with") from None
    except OSError as exc:
        raise CtxkeepError(f"cannot list {root}: {exc.strerror or exc}") from None
    found = [_conversation(folder) for folder in folders]
    return sorted(found, key=lambda c: c.last_used, reverse=True)


def _conversation(folder: Path) -> Conversation:
    branches = [p for p in folder.iterdir() if p.name.isdigit() and p.is_dir()]
    size, newest = 0, folder.lstat().st_mtime
    for top, _, files in os.walk(folder):
        for name in files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue  # removed while listed (a proxy at work)
            size += st.st_size
            newest = max(newest, st.st_mtime)
    compactions = 0
    for branch in branches:
        found, _ = records.read(LocalFolder(branch).read_records())
        compactions += sum(1 for rec in found if rec["kind"] == "compaction")
    used = datetime.fromtimestamp(newest, UTC).isoformat(timespec="seconds")
    return Conversation(name=folder.name, branches=len(branches), last_used=used, bytes=size, compactions=compactions)


def in_database(url: str) -> list[Conversation]:
    """The conversations `ctxkeep serve --store URL` keeps in that database (``<conversation>/<branch>``), most
    recently used first."""
    from ctxkeep.postgres.database import usage

    grouped: dict[str, list[Usage]] = {}
    for workspace in usage(url):
        key, _, branch = workspace.name.rpartition("/")
        if key and branch.isdigit():
            grouped.setdefault(key, []).append(workspace)
    found = [
        Conversation(
            name=key,
            branches=len(branches),
            last_used=datetime.fromtimestamp(max(b.last_used for b in branches), UTC).isoformat(timespec="seconds"),
            bytes=sum(b.size for b in branches),
            compactions=sum(1 for b in branches for rec in records.read(b.records)[0] if rec["kind"] == "compaction"),
        )
        for key, branches in grouped.items()
    ]
    return sorted(found, key=lambda c: c.last_used, reverse=True)


def run(args: argparse.Namespace) -> int:
    """Print the conversations under ``--root`` (or in ``--store``) as a table, or as JSON with ``--json``."""
    if args.root and args.store:
        raise CtxkeepError("give --root (a folder) or --store (a PostgreSQL URL), not both")
    root: Path | str = Path(args.root) if args.root else default_root()
    if args.store:
        from ctxkeep.postgres.store import shown_url

        found, root = in_database(args.store), shown_url(args.store)
    else:
        assert isinstance(root, Path)
        found = conversations(root)
    if args.json:
        print(json.dumps([asdict(c) for c in found], ensure_ascii=False, indent=2))
    elif not found:
        print(f"no conversations in {root} yet")
    else:
        print(render(found))
    return 0


def render(found: list[Conversation]) -> str:
    """The conversations as a table, one a line."""
    width = max(len("conversation"), *(len(c.name) for c in found))
    lines = [f"{'conversation':<{width}}  {'last used (UTC)':<19}  {'size':>9}  {'compactions':>11}  branches"]
    for c in found:
        used = c.last_used.replace("T", " ")[:19]
        lines.append(f"{c.name:<{width}}  {used:<19}  {_size(c.bytes):>9}  {c.compactions:>11,}  {c.branches}")
    return "\n".join(lines)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} B"
    value = n / 1024
    for unit in ("KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GB"
