"""Which workspace a command reads: a folder (``ctxkeep show WORKSPACE``), or a session kept in a PostgreSQL
database (``ctxkeep show --store URL --session ID``). The same words in every command that reads one."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

TYPE_CHECKING = False  # not `typing`'s: the command line imports no `typing` before it must
if TYPE_CHECKING:
    from ctxkeep.store import Store

__all__ = ["add_arguments", "opened"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workspace folder, or ``--store URL --session ID``."""
    parser.add_argument("workspace", nargs="?", help="a folder a ctxkeep session wrote (or --store and --session)")
    parser.add_argument("--store", metavar="URL", help="a PostgreSQL database that keeps workspaces: postgresql://…")
    parser.add_argument("--session", metavar="ID", help="the workspace's name in --store (`ctxkeep store ls URL`)")


@contextlib.contextmanager
def opened(args: argparse.Namespace) -> Iterator[tuple[Store, str]]:
    """The store `args` name, and the name to show for it; an existing one only (`WorkspaceError` otherwise)."""
    from ctxkeep.errors import WorkspaceError

    if args.store is None:
        if args.workspace is None or args.session is not None:
            raise WorkspaceError("give the workspace folder, or --store URL with --session ID")
        from ctxkeep.folder import LocalFolder

        yield LocalFolder(args.workspace), args.workspace
        return
    if args.workspace is not None or args.session is None:
        raise WorkspaceError("with --store URL, name the workspace by --session ID (and give no folder)")
    from ctxkeep.postgres import is_url

    if not is_url(args.store):
        raise WorkspaceError(f"--store takes a PostgreSQL URL, postgresql://user@host/db; got {args.store!r}")
    from ctxkeep.postgres.store import PostgresStore

    with PostgresStore(args.store, args.session, create=False) as store:
        yield store, args.session
