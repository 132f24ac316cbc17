"""``ctxkeep store``: a workspace's store as a whole.

    ctxkeep store migrate URL                      bring a PostgreSQL database to this ctxkeep's schema
    ctxkeep store ls URL [PREFIX]                  the workspaces a PostgreSQL database holds, one a line

A PostgreSQL store creates its tables in an empty database by itself; a database an older ctxkeep made is
migrated by this command, after the older processes stopped (they would not read the new tables).
"""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "run"]


def add_arguments(store: argparse.ArgumentParser) -> None:
    """The command's actions and their options."""
    actions = store.add_subparsers(dest="action", required=True)
    migrate = actions.add_parser("migrate", help="bring a PostgreSQL database to this ctxkeep's schema")
    migrate.add_argument("url", help="the database: postgresql://user@host:port/dbname")
    ls = actions.add_parser("ls", help="the workspaces a PostgreSQL database holds, one a line")
    ls.add_argument("url", help="the database: postgresql://user@host:port/dbname")
    ls.add_argument("prefix", nargs="?", default="", help="only the names that start with it")


def run(args: argparse.Namespace) -> int:
    """Run the action; returns the exit code."""
    import sys

    from ctxkeep.postgres import is_url

    if not is_url(args.url):
        print(f"ctxkeep: error: {args.url!r} is no PostgreSQL URL; write postgresql://…", file=sys.stderr)
        return 2
    from ctxkeep.postgres.store import migrate, workspaces

    if args.action == "migrate":
        before, after = migrate(args.url)
        print(f"schema version {before} -> {after}" if after != before else f"schema version {after}: up to date")
    elif args.action == "ls":
        for name in workspaces(args.url, args.prefix):
            print(name)
    return 0
