"""The database as a whole rather than one workspace: bring its schema up to date, list its workspaces, measure
and drop them (``ctxkeep store``, ``ctxkeep sessions``, the proxy's sweep). Each call opens a connection of its own
and needs no `PostgresStore`; a driver's or server's error becomes a one-line `StorageError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from ctxkeep.errors import StorageError

from . import schema
from .store import driver_errors, shown_url


def migrate(url: str) -> tuple[int, int]:
    """Bring the database at `url` to this ctxkeep's schema (``ctxkeep store migrate URL``): the version before
    and after. Raises `StorageError` when it cannot connect or the database is newer than this ctxkeep."""
    shown = shown_url(url)
    with driver_errors("migrate", shown), psycopg.connect(url, autocommit=True) as conn:
        before, after = schema.migrate(conn)
    if before > schema.VERSION:
        raise StorageError(
            f"{shown} holds ctxkeep's schema version {before}, newer than this ctxkeep's {schema.VERSION}: upgrade"
            " ctxkeep",
            path=shown,
        )
    return before, after


def has_vectors(url: str) -> bool:
    """Whether the database at `url` keeps the memory chunks' vectors (pgvector was there at the last migration):
    without them memory search on it is full text alone."""
    shown = shown_url(url)
    with driver_errors("read the schema of", shown), psycopg.connect(url, autocommit=True) as conn:
        return schema.has_vectors(conn)


def workspaces(url: str, prefix: str) -> list[str]:
    """The names of the workspaces in the database at `url` that start with `prefix`, sorted (none before the
    schema is made). Raises `StorageError` when the database cannot be reached."""
    shown = shown_url(url)
    with driver_errors("list the workspaces of", shown), psycopg.connect(url, autocommit=True) as conn:
        if schema.version(conn) == 0:
            return []
        rows = conn.execute(
            'SELECT name FROM ctxkeep_workspace WHERE starts_with(name, %s) ORDER BY name COLLATE "C"', (prefix,)
        ).fetchall()
    return [row[0] for row in rows]


def drop_workspace(url: str, name: str) -> None:
    """Remove the workspace `name` and everything it holds from the database at `url` (nothing when it is not
    there). Waits for no lock: the caller knows nobody uses it."""
    shown = shown_url(url)
    with driver_errors("remove a workspace of", shown), psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM ctxkeep_workspace WHERE name = %s", (name,))


@dataclass(frozen=True, slots=True)
class Usage:
    """A workspace of a database as `ctxkeep sessions` lists it."""

    name: str
    size: int  # bytes of every part it holds
    last_used: float  # when it last changed, epoch seconds
    records: bytes  # its compactions.jsonl


def usage(url: str, prefix: str = "") -> list[Usage]:
    """The workspaces of the database at `url` whose name starts with `prefix`: their size, last change and
    records. Raises `StorageError` when the database cannot be reached."""
    shown = shown_url(url)
    with driver_errors("list the workspaces of", shown), psycopg.connect(url, autocommit=True) as conn:
        if schema.version(conn) == 0:
            return []
        rows = conn.execute(_USAGE, (prefix,)).fetchall()
        records: dict[str, list[bytes]] = {}
        for name, data in conn.execute(_RECORDS, (prefix,)):
            records.setdefault(name, []).append(bytes(data))
    return [Usage(name, int(size), float(used), b"".join(records.get(name, []))) for name, size, used in rows]


_USAGE = """
SELECT w.name,
    coalesce((SELECT sum(octet_length(data)) FROM ctxkeep_log WHERE workspace = w.id), 0)
    + coalesce((SELECT sum(octet_length(data)) FROM ctxkeep_original WHERE workspace = w.id), 0)
    + coalesce((SELECT sum(octet_length(data)) FROM ctxkeep_memory WHERE workspace = w.id), 0)
    + coalesce((SELECT octet_length(data) FROM ctxkeep_state WHERE workspace = w.id), 0),
    extract(epoch FROM greatest(
        w.created,
        (SELECT max(saved) FROM ctxkeep_log WHERE workspace = w.id),
        (SELECT saved FROM ctxkeep_state WHERE workspace = w.id)
    ))
FROM ctxkeep_workspace w WHERE starts_with(w.name, %s) ORDER BY w.name COLLATE "C"
"""
_RECORDS = """
SELECT w.name, l.data FROM ctxkeep_log l JOIN ctxkeep_workspace w ON w.id = l.workspace
WHERE l.part = 'records' AND starts_with(w.name, %s) ORDER BY w.name, l.at
"""
