"""The connection pools of the PostgreSQL store: a store's own, or the process's one per URL (`shared_pool`), which
`Session.open` uses so that a workspace opened again (the proxy opens one per request) reuses the connections of
the last instead of starting a server process each; and how every connection is set up and left.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Literal

import psycopg
import psycopg_pool

# The process's pools, one per URL and use (`shared_pool`).
_shared: dict[tuple[str, str], psycopg_pool.ConnectionPool[Any]] = {}
_shared_guard = threading.Lock()
# Connections of a shared pool, well under a server's max_connections (100 by default) for a few processes. A
# session holds its connection for as long as it is open (a proxy: the whole request, a stream included), so the
# sessions' connections are a pool of their own: they never drain the pool of the short statements (a memory
# block, opening a workspace) that a held session itself waits on.
SHARED_POOL_SIZE = 24
# How long a session waits for a pooled connection before it opens one of its own (every pooled one is held).
_SESSION_WAIT = 0.2


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


def shared_pool(
    url: str, connect_timeout: float = 10.0, use: Literal["statements", "sessions"] = "statements"
) -> psycopg_pool.ConnectionPool[Any]:
    """The process's pool of connections to `url` for `use`, opened at the first call and kept until the process
    ends (an idle connection closes after ten minutes). Each connection is checked as it is taken: one the server
    dropped meanwhile (a restart, a failover) is replaced, not handed out."""
    with _shared_guard:
        pool = _shared.get((url, use))
        if pool is None or pool.closed:
            pool = new_pool(url, SHARED_POOL_SIZE, connect_timeout, check=True)
            pool.open(wait=False)  # connections are made as they are asked for
            _shared[(url, use)] = pool
            if len(_shared) == 1:
                atexit.register(_close_shared)
        return pool


@contextlib.contextmanager
def session_connection(url: str, connect_timeout: float) -> Iterator[psycopg.Connection[Any]]:
    """A connection for a session to hold while it is open: one of the process's session pool for `url`, or,
    when every pooled one is held, one of its own, closed at the end (never a wait for another session to end).
    Either way its advisory locks are gone when the block ends (`reset`, or the closed connection)."""
    pool = shared_pool(url, connect_timeout, "sessions")
    try:
        conn = pool.getconn(timeout=_SESSION_WAIT)
    except psycopg_pool.PoolTimeout:
        own = psycopg.connect(url, autocommit=True, connect_timeout=max(1, round(connect_timeout)))
        with own:
            configure(own)
            yield own
        return
    try:
        yield conn
    finally:
        pool.putconn(conn)


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
