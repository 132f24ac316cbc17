"""The connection pools of the PostgreSQL store: a store's own, or the process's one per URL (`shared_pool`), which
`Session.open` uses so that a workspace opened again (the proxy opens one per request) reuses the connections of
the last instead of starting a server process each; and how every connection is set up and left.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

import psycopg
import psycopg_pool

# The process's pools, one per URL (`shared_pool`).
_shared: dict[str, psycopg_pool.ConnectionPool[Any]] = {}
_shared_guard = threading.Lock()
# Connections of a shared pool: as many sessions at once as a proxy serves (each holds one while open, a memory
# block takes another), well under a server's max_connections (100 by default) for a few processes.
SHARED_POOL_SIZE = 24


def new_pool(url: str, size: int, connect_timeout: float, *, check: bool = False) -> psycopg_pool.ConnectionPool[Any]:
    """A pool of at most `size` connections to `url`, none kept while idle, each set up by `configure` and left
    by `reset`; `check`: each checked as it is taken. Not open yet."""
    # None kept open while idle (a session's reads and writes go through its lock's connection), one thread to
    # open them.
    return psycopg_pool.ConnectionPool(
        url,
        min_size=0,
        max_size=size,
        num_workers=1,
        kwargs={"autocommit": True},
        configure=configure,
        reset=reset,
        check=psycopg_pool.ConnectionPool.check_connection if check else None,
        open=False,
        timeout=connect_timeout,
        name="ctxkeep",
    )


def shared_pool(url: str, connect_timeout: float = 10.0) -> psycopg_pool.ConnectionPool[Any]:
    """The process's pool of connections to `url`, opened at the first call and kept until the process ends
    (an idle connection closes after ten minutes). Each connection is checked as it is taken: one the server
    dropped meanwhile (a restart, a failover) is replaced, not handed out."""
    with _shared_guard:
        pool = _shared.get(url)
        if pool is None or pool.closed:
            pool = new_pool(url, SHARED_POOL_SIZE, connect_timeout, check=True)
            pool.open(wait=False)  # connections are made as they are asked for
            _shared[url] = pool
            if len(_shared) == 1:
                atexit.register(_close_shared)
        return pool


def _close_shared() -> None:
    with _shared_guard:
        for pool in _shared.values():
            pool.close(timeout=1.0)
        _shared.clear()


def configure(conn: psycopg.Connection[Any]) -> None:
    """Set up a new connection: durable commits, no JIT, memory search's scan of the vectors."""
    # Durable at commit, whatever the server's default: a step acknowledged is a step on the server's disk.
    # A stronger setting (a standby's too: remote_write, remote_apply) given for the role or in the URL stays.
    # No JIT either: ctxkeep's statements are small, and compiling one costs more than running it (memory search's
    # BM25 over 10,000 chunks crosses jit_above_cost: a median of 28 ms with JIT, 15 ms without, on a busy machine).
    # Memory search's nearest chunks (pgvector's HNSW, which holds every workspace's): scan on until enough of the
    # workspace's are found, in order of distance (a placeholder setting where the server has no pgvector).
    conn.execute(
        "SELECT set_config('jit', 'off', false), CASE WHEN current_setting('synchronous_commit') IN ('off', 'local')"
        " THEN set_config('synchronous_commit', 'on', false) END,"
        " set_config('hnsw.iterative_scan', 'strict_order', false)"
    )


def reset(conn: psycopg.Connection[Any]) -> None:
    """Leave a connection that goes back to the pool: every advisory lock it holds released."""
    # A connection back in the pool holds no lock: a memory block whose unlock failed leaves none behind.
    conn.execute("SELECT pg_advisory_unlock_all()")
