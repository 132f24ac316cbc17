"""What only the PostgreSQL store has: its schema and migrations, its URLs, its errors, one database shared by
many workspaces. The `Store` contract itself is tests/test_store_contract.py (every store)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from ctxkeep.errors import StorageError, WorkspaceError
from ctxkeep.postgres import is_url, schema
from ctxkeep.postgres.database import migrate
from ctxkeep.postgres.store import PostgresStore, shown_url

pytestmark = pytest.mark.extra("postgres")


@pytest.fixture
def database(postgres_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the session's server, dropped afterwards."""
    name = f"db_{uuid.uuid4().hex}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield postgres_url.replace("@/postgres?", f"@/{name}?")
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_migrate_brings_an_empty_database_to_the_schema_once(database: str) -> None:
    assert migrate(database) == (0, schema.VERSION)
    assert migrate(database) == (schema.VERSION, schema.VERSION)
    out = subprocess.run(
        [sys.executable, "-m", "ctxkeep.cli", "store", "migrate", database], capture_output=True, text=True
    )
    assert out.returncode == 0
    # Debian's server has no pgvector: the re-run says the search stays full text, and how to get vectors.
    assert out.stdout.splitlines() == [
        f"schema version {schema.VERSION}: up to date",
        "memory search: full text only (no `vector` extension; install pgvector and migrate again)",
    ]


def test_a_store_creates_its_tables_in_an_empty_database(database: str) -> None:
    with PostgresStore(database, "first") as store:
        store.commit_state(b"{}")
    with psycopg.connect(database) as conn:
        assert schema.version(conn) == schema.VERSION


def test_a_database_of_a_newer_ctxkeep_is_refused(database: str) -> None:
    migrate(database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE ctxkeep_schema SET version = 99")
    with pytest.raises(StorageError, match="upgrade ctxkeep") as caught:
        PostgresStore(database, "w")
    assert "\n" not in str(caught.value)
    with pytest.raises(StorageError, match="upgrade ctxkeep"):
        migrate(database)


def test_workspaces_of_one_database_are_apart(postgres_url: str) -> None:
    a_name, b_name = f"a-{uuid.uuid4().hex}", f"b-{uuid.uuid4().hex}"
    with PostgresStore(postgres_url, a_name) as a, PostgresStore(postgres_url, b_name) as b:
        a.commit_state(b"a")
        a.append_archive("dialog/2026-05-02.jsonl", b"line\n")
        assert b.read_state() is None and b.archive_files() == []
        with a.lock(1), b.lock(1):  # one lock each
            pass


@pytest.mark.parametrize("name", ["", " padded", "/a", "a//b", "a/", "back\\slash", "tab\there", "x" * 201, 7])
def test_a_bad_workspace_name_is_refused_before_connecting(name: object) -> None:
    with pytest.raises(StorageError, match="workspace name") as caught:
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", name)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_an_unreachable_server_is_one_line_that_names_it_without_the_password() -> None:
    with pytest.raises(StorageError, match="check that the server is up") as caught:
        PostgresStore("postgresql://me:secret@127.0.0.1:1/db", "w", connect_timeout=2)
    message = str(caught.value)
    assert "\n" not in message and "secret" not in message and "postgresql://me@127.0.0.1:1/db" in message


def test_urls() -> None:
    assert is_url("postgresql://h/db") and is_url("postgres://h/db") and not is_url("./workspace")
    assert shown_url("postgresql://u:pw@h:5433/db?sslmode=require") == "postgresql://u@h:5433/db"
    assert shown_url("postgresql://u@/db?host=/run/pg&port=5432") == "postgresql://u@/db?host=/run/pg&port=5432"
    with pytest.raises(StorageError, match="not a PostgreSQL URL"):
        shown_url("postgresql://h/db?nosuchoption=1")


def test_a_write_while_the_server_is_gone_is_a_storage_error(postgres_url: str) -> None:
    with PostgresStore(postgres_url, f"gone-{uuid.uuid4().hex}") as store, store.lock(1):
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            # The lock's connection is cut, as when the server restarts: the session's writes now fail.
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s",
                (schema.SESSION_LOCK,),
            )
        with pytest.raises(StorageError, match="cannot write") as caught:
            store.commit_state(b"lost")
        assert "\n" not in str(caught.value)


def test_session_open_names_a_workspace_in_a_database(postgres_url: str) -> None:
    from ctxkeep import Message, Session

    name = f"team/agent-{uuid.uuid4().hex}"
    with Session.open(name, store=postgres_url) as session:
        session.add(Message.of("user", "hello"))
        assert isinstance(session.store, PostgresStore) and session.store.workspace == name
    with Session.open(name, store=postgres_url) as session:
        assert [m.text for m in session.messages] == ["hello"]
    with pytest.raises(WorkspaceError, match="store= takes a PostgreSQL URL"):
        Session.open(name, store="./folder")


def test_sessions_opened_again_reuse_the_process_pool_and_leave_no_lock(postgres_url: str) -> None:
    from ctxkeep import Message, Session

    def backend(session: Session) -> int:
        store = session.store
        assert isinstance(store, PostgresStore)
        with store.connection("read") as conn:  # the lock's, while the session is open
            return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])

    name = f"pooled-{uuid.uuid4().hex}"
    with Session.open(name, store=postgres_url) as session:  # the process's pool has a connection from here on
        session.add(Message.of("user", "hello"))
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        before = {r[0] for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'")}
        pids = []
        for i in range(3):
            with Session.open(name, store=postgres_url) as session:
                session.add(Message.of("user", f"turn {i}"))
                pids.append(backend(session))
            with PostgresStore(postgres_url, name) as other, other.lock(0):
                pass  # the closed session's lock went back with its connection: free at once
        assert set(pids) <= before  # server processes already there, not one started for each session
        # The server drops the pooled connections (a restart, a failover): the next session gets new ones.
        for pid in set(pids):
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with Session.open(name, store=postgres_url) as session:
        assert [m.text for m in session.messages][-1] == "turn 2" and backend(session) not in pids


def test_more_open_sessions_than_the_pool_holds_each_get_a_connection(postgres_url: str) -> None:
    # A proxy holds a session for a whole request (a stream included): past the pool's size a session opens a
    # connection of its own, and the statements it runs meanwhile (a memory block) never wait on held sessions.
    from ctxkeep.postgres import open_store
    from ctxkeep.postgres.pool import SHARED_POOL_SIZE

    prefix = f"many-{uuid.uuid4().hex}"
    with contextlib.ExitStack() as holding:
        stores = [holding.enter_context(open_store(postgres_url, f"{prefix}/{i}")) for i in range(SHARED_POOL_SIZE + 2)]
        for store in stores:
            holding.enter_context(store.lock(5.0))
        for store in stores:
            with store.memory_lock():
                store.write_memory("MEMORY.md", b"- noted")
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            held = admin.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s",
                (schema.SESSION_LOCK,),
            ).fetchone()
            assert held is not None and held[0] >= len(stores)
    with contextlib.ExitStack() as again:  # every lock went with its block: each workspace is free at once
        for i in range(SHARED_POOL_SIZE + 2):
            store = again.enter_context(open_store(postgres_url, f"{prefix}/{i}"))
            again.enter_context(store.lock(0))


def test_async_session_open_takes_the_store_too(postgres_url: str) -> None:
    import asyncio

    from ctxkeep import AsyncSession, Message

    async def main() -> list[str]:
        name = f"async-{uuid.uuid4().hex}"
        async with await AsyncSession.open(name, store=postgres_url) as session:
            await session.add(Message.of("user", "hi"))
        async with await AsyncSession.open(name, store=postgres_url) as session:
            return [m.text for m in session.session.messages]

    assert asyncio.run(main()) == ["hi"]


def test_show_recall_and_report_read_a_workspace_in_the_database(postgres_url: str, tmp_path: Path) -> None:
    import json

    from ctxkeep import Session
    from ctxkeep.cli import main

    sys.path.insert(0, str(Path(__file__).parent))
    import crash_worker

    name = f"cli/{uuid.uuid4().hex}"
    with Session.open(name, store=postgres_url, settings=crash_worker.SETTINGS, now=crash_worker.NOW) as session:
        for message in crash_worker.conversation():
            session.add(message)
            session.prepare("You are a careful agent.", now=crash_worker.NOW)
        archived, live = session.live.archive.lines, len(session.messages)
        first = next(iter(session.live.archive.files))
    where = ["--store", postgres_url, "--session", name]
    out = subprocess.run(
        [sys.executable, "-m", "ctxkeep.cli", "show", *where, "--json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["workspace"] == name and shown["archived_messages"] == archived > 0 and shown["compactions"]
    assert shown["live_messages"] == live > 0
    out = _cli("recall", *where, f"{first}:1", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["message"]["id"] == crash_worker.conversation()[0].id
    assert main(["report", *where, "-o", str(tmp_path / "report.html")]) == 0
    assert "<html" in (tmp_path / "report.html").read_text()
    ls = subprocess.run(
        [sys.executable, "-m", "ctxkeep.cli", "store", "ls", postgres_url, "cli/"], capture_output=True, text=True
    )
    assert name in ls.stdout.split()
    missing = _cli("show", "--store", postgres_url, "--session", "no-such")
    assert missing.returncode == 2 and "holds no workspace 'no-such'" in missing.stderr


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxkeep.cli", *args], capture_output=True, text=True)


def test_memory_tools_write_and_search_memory_kept_in_the_database(postgres_url: str) -> None:
    from ctxkeep import Session
    from ctxkeep.host.core import memory_tools_of

    name = f"memory/{uuid.uuid4().hex}"
    with Session.open(name, store=postgres_url) as session:
        tools = {t.name: t for t in memory_tools_of(session, True)}
        assert tools["memory_write"].invoke({"text": "Ana reviews every PR touching billing/"}).startswith("saved to")
        tools["memory_write"].invoke({"text": "deploys go out on Thursdays", "target": "memory", "section": "Ops"})
    with Session.open(name, store=postgres_url) as session:  # another process would see the same
        tools = {t.name: t for t in memory_tools_of(session, True)}
        assert session.store.index_path() is None  # no local file: the index is built from the database's files
        assert "Ana reviews every PR" in tools["memory_search"].invoke({"query": "who reviews billing"})
        assert "deploys go out on Thursdays" in tools["memory_search"].invoke({"query": "when do deploys go out"})


def test_store_copy_moves_a_folder_workspace_to_the_database_and_back(postgres_url: str, tmp_path: Path) -> None:
    from ctxkeep import Session
    from ctxkeep.folder import LocalFolder

    sys.path.insert(0, str(Path(__file__).parent))
    import crash_worker

    folder, back, name = tmp_path / "ws", tmp_path / "back", f"copied/{uuid.uuid4().hex}"
    with Session.open(folder, settings=crash_worker.SETTINGS, now=crash_worker.NOW) as session:
        for message in crash_worker.conversation():
            session.add(message)
            session.prepare("You are a careful agent.", now=crash_worker.NOW)
        session.store.write_memory("AGENTS.md", b"# rules\n")
        session.store.append_memory("memory/2026-12-03.md", b"- noted\n")
    out = _cli("store", "copy", str(folder), postgres_url, "--session", name)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("copied and verified: ") and "0 originals" not in out.stdout
    out = _cli("store", "copy", postgres_url, str(back), "--session", name)
    assert out.returncode == 0, out.stderr
    source, there, returned = LocalFolder(folder), PostgresStore(postgres_url, name, create=False), LocalFolder(back)
    try:
        for store in (there, returned):
            assert store.read_state() == source.read_state()
            assert [(f.name, f.size) for f in store.originals()] == [(f.name, f.size) for f in source.originals()]
            assert all(store.read_original(f.name) == source.read_original(f.name) for f in source.originals())
            assert store.read_memory("AGENTS.md") == b"# rules\n"
            assert store.read_memory("memory/2026-12-03.md") == b"- noted\n"
    finally:
        there.close()
    with Session.open(back, settings=crash_worker.SETTINGS, now=crash_worker.NOW) as session:
        assert [m.id for m in session.history()] == [m.id for m in crash_worker.conversation()]
    again = _cli("store", "copy", str(folder), postgres_url, "--session", name)
    assert again.returncode == 2 and "already holds" in again.stderr  # a copy never merges


def test_every_connection_commits_durably_and_a_stronger_setting_stays(postgres_url: str) -> None:
    weak = postgres_url + "&options=-c%20synchronous_commit%3Doff"
    strong = postgres_url + "&options=-c%20synchronous_commit%3Dremote_apply"
    for url, expected in ((weak, "on"), (strong, "remote_apply")):
        with PostgresStore(url, f"durable-{uuid.uuid4().hex}") as store:
            with store._conn("read") as conn:  # a connection of the pool
                assert conn.execute("SHOW synchronous_commit").fetchone() == (expected,)
            with store.lock(1), store._conn("read") as conn:  # the lock's own
                assert conn.execute("SHOW synchronous_commit").fetchone() == (expected,)


def test_the_memory_commands_take_a_workspace_in_the_database(postgres_url: str) -> None:
    where = ["--store", postgres_url, "--session", f"mem-cli/{uuid.uuid4().hex}"]
    out = _cli("memory", "write", "the staging database is on port 6543", *where)
    assert out.returncode == 0 and out.stdout.startswith("saved to memory/"), out.stderr
    out = _cli("memory", "search", "which port is staging on", *where, "--no-vectors")
    assert out.returncode == 0 and "port 6543" in out.stdout, out.stderr
    out = _cli("memory", "search", "anything", "--store", postgres_url, "--session", "no-such-memory", "--no-vectors")
    assert out.returncode == 2 and "holds no workspace" in out.stderr


def test_a_session_writing_summaries_ahead_shares_its_connection_with_the_writer_thread(postgres_url: str) -> None:
    from dataclasses import replace

    from ctxkeep import Session

    sys.path.insert(0, str(Path(__file__).parent))
    import crash_worker

    settings = replace(crash_worker.SETTINGS, compact=replace(crash_worker.SETTINGS.compact, background=True))
    name = f"ahead/{uuid.uuid4().hex}"
    with Session.open(name, store=postgres_url, settings=settings) as session:
        for message in crash_worker.conversation():
            session.add(message)
            session.prepare("You are a careful agent.")
        archived = session.live.archive.lines
    with Session.open(name, store=postgres_url, settings=settings) as session:
        assert archived > 0 and session.live.archive.lines == archived
        assert [m.id for m in session.history()] == [m.id for m in crash_worker.conversation()]


def test_a_reader_on_an_empty_database_makes_nothing(database: str) -> None:
    with pytest.raises(StorageError, match="holds no workspace 'w'"):
        PostgresStore(database, "w", create=False)
    with psycopg.connect(database) as conn:
        assert schema.version(conn) == 0


def test_an_adapter_given_a_name_and_a_store_refuses_memory_tools_it_could_not_close() -> None:
    from ctxkeep.host.core import memory_tools_of

    with pytest.raises(WorkspaceError, match=r"Session.open\('agent-1', store=...\)"):
        memory_tools_of("agent-1", True, {"store": "postgresql://h/db"})


def test_taking_a_workspace_lock_leaves_the_connections_lock_timeout_as_it_was(database: str) -> None:
    # The lock's wait is set for its statement alone: a role's or a database's lock_timeout holds again after it,
    # whether the lock was had or not (before: set to 0, no limit, for every later statement of the connection).
    from ctxkeep.postgres.store import _advisory_lock

    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {conn.info.dbname} SET lock_timeout = '7s'")
    with psycopg.connect(database, autocommit=True) as holder, psycopg.connect(database, autocommit=True) as conn:
        assert conn.execute("SHOW lock_timeout").fetchone() == ("7s",)
        assert _advisory_lock(conn, 1, 2, 5.0)
        assert conn.execute("SHOW lock_timeout").fetchone() == ("7s",)
        assert not _advisory_lock(holder, 1, 2, 0.2)  # held by `conn`: not had in time
        assert holder.execute("SHOW lock_timeout").fetchone() == ("7s",)


def test_a_database_emptied_under_a_running_process_is_made_again_on_the_next_open(database: str) -> None:
    # A process (the proxy) checks the schema of a URL once; the database emptied since (dropped and made again,
    # say) is brought to the schema again by the next store opened, not "relation does not exist" on every request.
    with PostgresStore(database, "first", shared=True) as store:
        store.commit_state(b"{}")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    with PostgresStore(database, "second", shared=True) as store:
        store.commit_state(b"{}")
    with psycopg.connect(database) as conn:
        assert schema.version(conn) == schema.VERSION
