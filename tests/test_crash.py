"""Kill a real process (SIGKILL) at many points of a replay, at every durability; the workspace must reopen
whole (a kill is not a power loss: what the process wrote is in the system's cache, synced or not).

Every message is live or archived exactly once, in order; the summary is one that was committed
(old or new, never half); summary.md agrees; and a resumed replay ends where an uninterrupted one does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from ctxkeep.folder import LocalFolder
from ctxkeep.session import Session
from ctxkeep.settings import DURABILITIES

sys.path.insert(0, str(Path(__file__).parent))
import crash_worker

# Each test starts dozens of processes: CI runs them, the quick loop (-m "not slow") does not.
pytestmark = pytest.mark.slow

WORKER = Path(__file__).parent / "crash_worker.py"
IDS = [m.id for m in crash_worker.conversation()]
# A worker replays a short conversation in about a second; the limit only stops a hung one, so it is
# sized for a very slow, very busy machine.
WORKER_SECONDS = 600


def _run(
    ws: Path, kill_at: int, mode: str, start: int = 0, durability: str = "step"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKER), str(ws), str(kill_at), mode, str(start), durability],
        capture_output=True,
        text=True,
        timeout=WORKER_SECONDS,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
    )


def _contents(ws: Path) -> tuple[list[str], list[str], str | None]:
    with Session(LocalFolder(ws), settings=crash_worker.SETTINGS, now=crash_worker.NOW) as session:
        live = [m.id for m in session.messages]
        summary = session.summary
        on_disk = session.store.read_summary()
        assert (on_disk or b"").decode() == (summary or "")
        if summary is not None:
            summary = summary.replace(str(ws.absolute()), "WORKSPACE")
    archived: list[str] = []
    for path in sorted((ws / "dialog").glob("*.jsonl")):
        archived += [orjson.loads(line)["id"] for line in path.read_bytes().splitlines()]
    return archived, live, summary


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("crash")


def _workspace(base: Path, mode: str, n: int, durability: str = "step") -> Path:
    # Every workspace path has the same length: offload notices carry it, and their length moves the cut.
    return base / f"{durability[0]}{mode[0]}-{n:07d}"


@pytest.fixture(scope="module")
def clean_run(base: Path) -> dict[str, object]:
    ws = _workspace(base, "clean", 0)
    proc = _run(ws, 0, "none")
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    archived, live, summary = _contents(ws)
    assert archived + live == IDS
    assert result["summaries"], "the fixed conversation must compact at least once"
    result["final"] = (archived, live, summary)
    return result


def _points(ops: int, count: int) -> list[int]:
    step = max(1, ops // count)
    return sorted({*range(1, ops + 1, step), ops})


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize("mode", ["before", "torn", "after"])
def test_killed_at_any_point_reopens_whole(
    clean_run: dict[str, object], base: Path, mode: str, durability: str
) -> None:
    ops = int(clean_run["ops"])  # type: ignore[call-overload]
    summaries = clean_run["summaries"]
    assert isinstance(summaries, list)
    points = _points(ops, 10)
    for n in points:
        ws = _workspace(base, mode, n, durability)
        proc = _run(ws, n, mode, durability=durability)
        assert proc.returncode == -9, f"kill point {n}/{ops} was not reached: {proc.stderr[-2000:]}"
        archived, live, summary = _contents(ws)
        seen = archived + live
        assert seen == IDS[: len(seen)], f"{mode} at {n}: messages lost, repeated or out of order"
        assert summary is None or summary in summaries, f"{mode} at {n}: a summary that was never committed"
        resumed = _run(ws, 0, "none", start=len(seen), durability=durability)
        assert resumed.returncode == 0, resumed.stderr
        assert _contents(ws) == clean_run["final"], f"{mode} at {n}: resuming did not end where a clean run ends"
