"""Kill a real process (SIGKILL) writing to a PostgreSQL workspace; it must reopen whole.

What `Session.add` acknowledged is there; every message is live or archived exactly once, in order; the summary
is one that was committed (never half of a step: a transaction is whole or absent); summary.md's copy agrees;
and a resumed replay ends where an uninterrupted one does. tests/test_crash.py does the same for a folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxkeep.session import Session

sys.path.insert(0, str(Path(__file__).parent))
import crash_worker

pytestmark = [pytest.mark.slow, pytest.mark.extra("postgres")]

WORKER = Path(__file__).parent / "pg_crash_worker.py"
IDS = [m.id for m in crash_worker.conversation()]
WORKER_SECONDS = 600  # only stops a hung worker: a replay takes a few seconds


def _run(url: str, ws: str, mode: str, n: int, start: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKER), url, ws, mode, str(n), str(start)],
        capture_output=True,
        text=True,
        timeout=WORKER_SECONDS,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), str(WORKER.parent)])},
    )


def _contents(url: str, ws: str) -> tuple[list[str], list[str], str | None]:
    from ctxkeep.postgres.store import PostgresStore

    with PostgresStore(url, ws) as store, Session(store, settings=crash_worker.SETTINGS, now=crash_worker.NOW) as s:
        history = [m.id for m in s.history()]
        live = [m.id for m in s.messages]
        summary = s.summary
        assert (store.read_summary() or b"").decode() == (summary or "")
        where = store.where("").removesuffix("/")
    return history[: len(history) - len(live)], live, None if summary is None else summary.replace(where, "WORKSPACE")


def _workspace(mode: str, n: int) -> str:
    # Every name has the same length: offload notices carry it, and their length moves the cut.
    return f"crash-{mode[0]}-{n:07d}"


@pytest.fixture(scope="module")
def clean_run(postgres_url: str) -> dict[str, object]:
    started = time.monotonic()
    proc = _run(postgres_url, _workspace("clean", 0), "none", 0)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    archived, live, summary = _contents(postgres_url, _workspace("clean", 0))
    assert archived + live == IDS
    assert result["summaries"], "the fixed conversation must compact at least once"
    result["final"] = (archived, live, summary)
    result["seconds"] = time.monotonic() - started
    return result


def _check(postgres_url: str, clean_run: dict[str, object], ws: str, proc: subprocess.CompletedProcess[str]) -> None:
    acked = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("acked ")]
    archived, live, summary = _contents(postgres_url, ws)
    seen = archived + live
    assert seen == IDS[: len(seen)], f"{ws}: messages lost, repeated or out of order"
    assert seen[: len(acked)] == acked, f"{ws}: an acknowledged message is lost"
    summaries = clean_run["summaries"]
    assert isinstance(summaries, list)
    assert summary is None or summary in summaries, f"{ws}: a summary that was never committed"
    resumed = _run(postgres_url, ws, "none", 0, start=len(seen))
    assert resumed.returncode == 0, resumed.stderr
    assert _contents(postgres_url, ws) == clean_run["final"], f"{ws}: resuming did not end where a clean run ends"


@pytest.mark.parametrize("mode", ["before", "after"])
def test_killed_at_a_write_reopens_whole(postgres_url: str, clean_run: dict[str, object], mode: str) -> None:
    ops = int(clean_run["ops"])  # type: ignore[call-overload]
    for n in sorted({*range(1, ops + 1, max(1, ops // 8)), ops}):
        ws = _workspace(mode, n)
        proc = _run(postgres_url, ws, mode, n)
        assert proc.returncode == -9, f"kill point {n}/{ops} was not reached: {proc.stderr[-2000:]}"
        _check(postgres_url, clean_run, ws, proc)


def test_killed_at_any_moment_reopens_whole(postgres_url: str, clean_run: dict[str, object]) -> None:
    # Wherever the process is: inside a transaction the server rolls back when the connection drops. The
    # moments spread over a clean run's time, start-up included (about a third of it).
    seconds = float(clean_run["seconds"])  # type: ignore[arg-type]
    for ms in sorted({int(seconds * 1000 * k / 8) for k in range(2, 8)}):
        ws = _workspace("timer", ms)
        proc = _run(postgres_url, ws, "timer", ms)
        assert proc.returncode == -9, proc.stderr[-2000:]
        _check(postgres_url, clean_run, ws, proc)
