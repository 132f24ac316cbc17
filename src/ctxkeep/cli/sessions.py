"""``ctxkeep sessions`` (also ``ctxkeep serve ls``): the proxy's conversations, most recently used first.

Reads the folders under the proxy's root and nothing else: no lock is taken, so it runs beside a
proxy that is serving them, and it needs none of the `serve` extra's packages.
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

__all__ = ["Conversation", "add_arguments", "conversations", "default_root", "run"]


def add_arguments(sessions: argparse.ArgumentParser) -> None:
    """The command's options."""
    sessions.add_argument("--root", help="the folder `ctxkeep serve --root` keeps them in (default ~/.ctxkeep/serve)")
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


def run(args: argparse.Namespace) -> int:
    """Print the conversations under ``--root`` as a table, or as JSON with ``--json``."""
    root = Path(args.root) if args.root else default_root()
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
