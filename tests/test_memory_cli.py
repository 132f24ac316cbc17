"""``ctxkeep memory ...`` end to end, and the scheduler's loop on an injected clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ctxkeep.cli import main
from ctxkeep.folder import LocalFolder
from ctxkeep.memory.cli import schedule
from ctxkeep.memory.files import append_daily


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_write_index_search_and_consolidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = str(tmp_path / "ws")
    assert run(capsys, "memory", "write", "Backups run at 02:00 from cron on db-1", "-w", ws)[0] == 0
    code, out, _ = run(capsys, "memory", "write", "用户更喜欢中文回答", "-w", ws, "--section", "Preferences")
    assert (code, out) == (0, "saved to MEMORY.md\n")
    code, out, _ = run(capsys, "memory", "index", "-w", ws, "--no-vectors")
    assert code == 0 and out.startswith("2 files indexed, 0 removed, 2 chunks, 0 embedded")
    code, out, _ = run(capsys, "memory", "search", "db-1 backups", "-w", ws, "--json", "--no-vectors")
    hit = json.loads(out.splitlines()[0])
    assert code == 0 and hit["path"].startswith("memory/") and hit["start_line"] == 1 and "02:00" in hit["text"]
    code, out, _ = run(capsys, "memory", "search", "中文", "-w", ws, "--no-vectors")
    assert (code, out) == (0, "MEMORY.md:5  relevance 100 (words 100)\n  > 5  - 用户更喜欢中文回答\n")
    code, _, err = run(capsys, "memory", "search", "zzzz", "-w", ws, "--dialog", "--no-vectors")
    assert (code, err) == (0, "no results\n")
    code, out, _ = run(capsys, "memory", "consolidate", "-w", ws)
    assert code == 0 and "1 added, 0 already there, 0 superseded" in out
    assert "Backups run at 02:00 from cron on db-1" in (Path(ws) / "MEMORY.md").read_text()
    assert run(capsys, "memory", "consolidate", "-w", ws)[1].startswith("nothing to consolidate")


def test_results_show_the_matching_lines_and_nothing_matching_well_is_no_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = str(tmp_path / "ws")
    for text in ["The wheel is built with hatchling", "CI runs ruff and mypy", "Ana prefers small pull requests"]:
        assert run(capsys, "memory", "write", text, "-w", ws)[0] == 0
    code, out, _ = run(capsys, "memory", "search", "who builds the wheel", "-w", ws, "--no-vectors")
    head, *lines = out.splitlines()
    day = next(Path(ws, "memory").glob("*.md")).name
    assert code == 0 and head == f"memory/{day}:3  relevance 50 (words 50)"  # "wheel", not "builds" ("built")
    assert [line.split()[:2] for line in lines] == [[">", "3"], ["4", "-"]]  # the match, a line after (line 2 is blank)
    code, out, err = run(capsys, "memory", "search", "kubernetes cluster", "-w", ws, "--no-vectors")
    assert (code, out, err) == (0, "", "no results\n")
    code, out, _ = run(capsys, "memory", "search", "wheel kubernetes cluster upgrade", "-w", ws, "--no-vectors")
    assert out == ""  # one word of four: under the default 30
    code, out, _ = run(
        capsys,
        "memory",
        "search",
        "wheel kubernetes cluster upgrade",
        "-w",
        ws,
        "--no-vectors",
        "--min-relevance",
        "20",
    )
    assert out.splitlines()[0].endswith(":3  relevance 25 (words 25)")
    code, _, err = run(capsys, "memory", "search", "x", "-w", ws, "--min-relevance", "101")
    assert (code, err) == (2, "ctxkeep: error: --min-relevance must be a number from 0 to 100; got 101\n")


def test_help_explains_the_relevance_with_the_numbers_search_uses() -> None:
    from ctxkeep.memory import search
    from ctxkeep.memory.cli import SCORE_HELP

    assert f"{search.COSINE_FLOOR} or less (unrelated) is 0, {search.COSINE_FULL} or more 100" in SCORE_HELP
    assert f"--min-relevance ({search.MIN_RELEVANCE:.0f})" in SCORE_HELP


def test_bad_arguments_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = str(tmp_path)
    (tmp_path / "MEMORY.md").write_text("# MEMORY\n")
    code, _, err = run(capsys, "memory", "search", "x", "-w", ws, "-k", "0")
    assert (code, err) == (2, "ctxkeep: error: -k must be 1 or more; got 0\n")
    code, _, err = run(capsys, "memory", "schedule", "-w", ws, "--at", "25:00")
    assert code == 2 and "HH:MM" in err
    code, _, err = run(capsys, "memory", "search", "x", "-w", ws, "--embeddings-url", "http://127.0.0.1:9/v1")
    assert code == 2 and "--embeddings-model" in err
    code, _, err = run(capsys, "memory", "write", "  ", "-w", ws)
    assert code == 2 and "some text" in err


def test_schedule_prints_a_cron_line_that_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run as cron runs it: /bin/sh from the home folder with a bare PATH, ``\\%`` read as ``%``."""
    ws = tmp_path / "agent 50% ws"
    assert run(capsys, "memory", "write", "Backups run at 02:00 from cron on db-1", "-w", str(ws))[0] == 0
    home = tmp_path / "home"
    home.mkdir()
    code, out, _ = run(capsys, "memory", "schedule", "-w", os.path.relpath(ws), "--cron", "--at", "00:05")
    assert code == 0 and out.startswith("5 0 * * * /") and "\\%" in out
    command = out.rstrip("\n").split(" ", 5)[5].replace("\\%", "%")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(["/bin/sh", "-c", command], cwd=home, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "merged 1 logs" in done.stdout
    assert "db-1" in (ws / "MEMORY.md").read_text()


def test_the_scheduler_catches_up_then_runs_at_the_time(tmp_path: Path) -> None:
    folder = LocalFolder(tmp_path)
    clock = [datetime(2026, 4, 2, 22, 0).astimezone()]
    append_daily(folder, "missed yesterday", at=clock[0] - timedelta(days=1))
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += timedelta(seconds=seconds)
        if len(slept) == 3:  # something written during the evening
            append_daily(folder, "written at night", at=clock[0])

    runs = schedule(folder, "00:00", clock=lambda: clock[0], sleep=sleep, runs=2)
    assert runs == 2  # the catch-up at start, then midnight
    assert clock[0] == datetime(2026, 4, 3, 0, 0).astimezone()
    assert max(slept) <= 60
    memory = (tmp_path / "MEMORY.md").read_text()
    assert "missed yesterday (2026-04-01)" in memory and "written at night (2026-04-02)" in memory


def test_help_lists_memory_and_imports_no_model(tmp_path: Path) -> None:
    code = (
        "import sys; from ctxkeep.cli import _parser; _parser();"
        " heavy = [m for m in ('onnxruntime', 'pysqlite3', 'sqlite_vec', 'numpy') if m in sys.modules];"
        " print(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.extra("memory")
def test_the_first_search_starts_the_resident_embedder_and_the_next_ones_use_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import tempfile
    import time

    from ctxkeep.memory.resident import ResidentEmbedder, resident_embedder, socket_path, stop_server

    ws = str(tmp_path / "ws")
    assert run(capsys, "memory", "write", "The user prefers dark mode in every editor", "-w", ws)[0] == 0
    with tempfile.TemporaryDirectory(dir="/tmp") as runtime:  # a socket path must stay short
        monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
        path = socket_path()
        code, alone, _ = run(
            capsys, "memory", "search", "which colour theme does the user like", "-w", ws, "--no-resident"
        )
        assert code == 0 and not path.exists()  # MiniLM loaded in this process; nothing started
        code, first, _ = run(capsys, "memory", "search", "which colour theme does the user like", "-w", ws)
        assert first == alone
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    if conn.connect_ex(str(path)) == 0:
                        break
                time.sleep(0.1)
            assert isinstance(resident_embedder(start=False), ResidentEmbedder)
            code, second, _ = run(capsys, "memory", "search", "which colour theme does the user like", "-w", ws)
            assert code == 0 and second == first and "dark mode" in first
        finally:
            assert stop_server(path)
