"""``ctxkeep store``: a workspace's store as a whole.

    ctxkeep store migrate URL                      bring a PostgreSQL database to this ctxkeep's schema
    ctxkeep store ls URL [PREFIX]                  the workspaces a PostgreSQL database holds, one a line
    ctxkeep store copy SRC DST [--session ID]      a workspace from a folder to a database, or back, verified

In `copy`, SRC and DST are each a workspace folder or a PostgreSQL URL, and --session names the workspace in
the database (both, when both are). The target must hold nothing yet; the copy is read back and compared
(every part's SHA-256, the message counts) before the command says it is done.

A PostgreSQL store creates its tables in an empty database by itself; a database an older ctxkeep made is
migrated by this command, after the older processes stopped (they would not read the new tables).
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # not `typing`'s: the command line imports no `typing` before it must
if TYPE_CHECKING:
    from ctxkeep.store import Store

__all__ = ["add_arguments", "run"]


def add_arguments(store: argparse.ArgumentParser) -> None:
    """The command's actions and their options."""
    actions = store.add_subparsers(dest="action", required=True)
    migrate = actions.add_parser("migrate", help="bring a PostgreSQL database to this ctxkeep's schema")
    migrate.add_argument("url", help="the database: postgresql://user@host:port/dbname")
    copy = actions.add_parser("copy", help="a workspace from a folder to a database, or back, verified")
    copy.add_argument("source", help="a workspace folder, or a PostgreSQL URL (with --session)")
    copy.add_argument("target", help="a new workspace folder, or a PostgreSQL URL (with --session)")
    copy.add_argument("--session", metavar="ID", help="the workspace's name in the database")
    copy.add_argument("--lock-timeout", type=float, default=10.0, help="seconds to wait for a workspace in use")
    ls = actions.add_parser("ls", help="the workspaces a PostgreSQL database holds, one a line")
    ls.add_argument("url", help="the database: postgresql://user@host:port/dbname")
    ls.add_argument("prefix", nargs="?", default="", help="only the names that start with it")


def run(args: argparse.Namespace) -> int:
    """Run the action; returns the exit code."""
    import sys

    from ctxkeep.postgres import is_url

    if args.action == "copy":
        return _copy(args)
    if not is_url(args.url):
        print(f"ctxkeep: error: {args.url!r} is no PostgreSQL URL; write postgresql://…", file=sys.stderr)
        return 2
    from ctxkeep.postgres.database import has_vectors, migrate, workspaces

    if args.action == "migrate":
        before, after = migrate(args.url)
        print(f"schema version {before} -> {after}" if after != before else f"schema version {after}: up to date")
        # A re-run adds the vectors once pgvector is installed: say which search the database now serves.
        if has_vectors(args.url):
            print("memory search: full text and vectors (pgvector)")
        else:
            print("memory search: full text only (no `vector` extension; install pgvector and migrate again)")
    elif args.action == "ls":
        for name in workspaces(args.url, args.prefix):
            print(name)
    return 0


def _copy(args: argparse.Namespace) -> int:
    import contextlib
    import os

    from ctxkeep.errors import WorkspaceError
    from ctxkeep.folder import LocalFolder
    from ctxkeep.postgres import is_url
    from ctxkeep.workspace.transfer import copy

    urls = [where for where in (args.source, args.target) if is_url(where)]
    if not urls:
        raise WorkspaceError("one of SRC and DST must be a PostgreSQL URL (to copy folders, copy the folder)")
    if args.session is None:
        raise WorkspaceError("name the workspace in the database with --session ID")
    if not is_url(args.source) and not os.path.isfile(os.path.join(args.source, "state.json")):
        raise WorkspaceError(f"{args.source} is no workspace folder (no state.json in it); give one a session wrote")
    with contextlib.ExitStack() as opened:
        stores: list[Store] = []
        for where, create in ((args.source, False), (args.target, True)):
            if is_url(where):
                from ctxkeep.postgres.store import PostgresStore

                stores.append(opened.enter_context(PostgresStore(where, args.session, create=create)))
            else:
                stores.append(LocalFolder(where))
        done = copy(stores[0], stores[1], lock_timeout=args.lock_timeout)
    print(
        f"copied and verified: {done.archived} archived and {done.live} live messages, {done.originals} originals,"
        f" {done.memory_files} memory files, {done.bytes:,} bytes"
    )
    return 0
