"""The command line under abuse: every case runs the installed `ctxkeep` script as a subprocess.

A hostile but realistic user points `--replace` at the wrong folder, at a symlink or at a workspace
another process holds, gives impossible arguments, a named pipe, a device, a forced format that
reads nothing, a transcript whose offload record leaves the workspace. Each gets one line on
stderr and exit code 2, never a traceback or a hang (the timeout catches a hang), and a folder
that was there before is exactly as it was.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import ROOT, raw_files

from ctxkeep.folder import LocalFolder

GOOD = ROOT / "examples" / "agent_session.jsonl"
CLAUDE_CODE = ROOT / "examples" / "claude_code_session.jsonl"
# A hang is what the timeout is for: generous, so a slow, shared machine never fails a test.
TIMEOUT = 120


def _exe() -> str:
    exe = shutil.which("ctxkeep", path=str(Path(sys.executable).parent)) or shutil.which("ctxkeep")
    assert exe, "the ctxkeep console script is not installed in this environment"
    return exe


def ctxkeep(
    *argv: str | Path,
    stdin: bytes | Path | None = None,
    cwd: Path | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the installed console script, no progress bar, with the test's timeout."""
    args = [_exe(), *map(str, argv)]
    if isinstance(stdin, Path):
        with stdin.open("rb") as f:
            return subprocess.run(
                args, stdin=f, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd, preexec_fn=preexec
            )
    return subprocess.run(
        args,
        input=stdin.decode() if stdin is not None else None,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        preexec_fn=preexec,
    )


def refused(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, nothing on stdout, and one line on stderr (no traceback) holding every needle."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.startswith("ctxkeep: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under `root` (itself included) with its bytes, link target or kind."""
    out: dict[str, bytes | str] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        name = str(path.relative_to(root.parent))
        if path.is_symlink():
            out[name] = "-> " + os.readlink(path)
        elif path.is_dir():
            out[name] = "dir"
        elif path.is_file():
            out[name] = path.read_bytes()
        else:
            out[name] = "special"
    return out


def siblings(folder: Path) -> list[str]:
    """What the parent of `folder` holds besides `folder` (a temporary folder left behind shows here)."""
    return sorted(p.name for p in folder.parent.iterdir() if p != folder)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One workspace made by the real command; tests copy it."""
    ws = tmp_path_factory.mktemp("built") / "ws"
    proc = ctxkeep("compact", GOOD, "-o", ws, "--window", "32000")
    assert proc.returncode == 0, proc.stderr
    return ws


@pytest.fixture
def workspace(built: Path, tmp_path: Path) -> Path:
    """A fresh copy of a real workspace, alone in its own parent folder."""
    ws = tmp_path / "parent" / "ws"
    ws.parent.mkdir()
    shutil.copytree(built, ws, symlinks=True)
    return ws


# --- 1. --replace replaces only a ctxkeep workspace ----------------------------------------------------------


@pytest.mark.parametrize(
    "state",
    [b"{}\n", b"not json at all", b'{"v": "someone-else/1", "generation": 0}', b"[]", b"\xff\xfe\x00"],
    ids=["empty-object", "not-json", "other-marker", "array", "binary"],
)
def test_replace_refuses_a_folder_whose_state_json_is_not_ctxkeeps(tmp_path: Path, state: bytes) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('my work')\n")
    (project / "state.json").write_bytes(state)
    before = tree(project)
    proc = ctxkeep("compact", GOOD, "-o", project, "--replace")
    refused(proc, str(project), "not a ctxkeep workspace")
    assert tree(project) == before
    assert siblings(project) == []


def test_replace_refuses_a_state_json_that_is_not_a_file(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    os.mkfifo(project / "state.json")  # reading it would wait for a writer forever
    (project / "notes.txt").write_text("keep me")
    before = tree(project)
    refused(ctxkeep("compact", GOOD, "-o", project, "--replace"), "not a ctxkeep workspace")
    assert tree(project) == before


# --- 2. everything is checked before the old workspace is touched; the swap comes last ---------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["missing.jsonl"], "cannot read file"),
        ([GOOD, "--window", "0"], "--window"),
        ([GOOD, "--window", "-5"], "--window"),
        ([GOOD, "--conversation", "7"], "--conversation"),
        ([GOOD, "--model", "gpt-4o"], "cannot tell the model"),
        ([GOOD, "--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model"),
        ([GOOD, "--encoding", "no_such_encoding"], "no_such_encoding"),
        ([GOOD, "--format", "pi"], "no messages"),
    ],
    ids=["missing-input", "window-0", "window-negative", "conversation", "model", "base-url", "encoding", "format"],
)
def test_replace_checks_everything_before_touching_the_old_workspace(
    workspace: Path, args: list[str | Path], needle: str
) -> None:
    before = tree(workspace)
    proc = ctxkeep("compact", *args, "-o", workspace, "--replace", cwd=workspace.parent)
    refused(proc, needle)
    assert tree(workspace) == before
    assert siblings(workspace) == []


def _small_files() -> None:
    # Any file the command writes past 16 KB fails with EFBIG (Python ignores SIGXFSZ): a disk that
    # fills up half-way through building the new workspace.
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, 16_000))


def test_replace_that_fails_while_building_leaves_the_old_workspace(workspace: Path) -> None:
    before = tree(workspace)
    proc = ctxkeep("compact", GOOD, "-o", workspace, "--replace", "--window", "32000", preexec=_small_files)
    refused(proc)
    assert tree(workspace) == before
    assert siblings(workspace) == []


def test_replace_swaps_in_a_complete_workspace_that_names_its_own_files(workspace: Path) -> None:
    (workspace / "dialog" / "stale.jsonl").write_text("from the old workspace\n")
    proc = ctxkeep("compact", GOOD, "-o", workspace, "--replace", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["tool_results_offloaded"] > 0
    assert not (workspace / "dialog" / "stale.jsonl").exists()
    assert siblings(workspace) == []
    # An offloaded result's notice names its original where the workspace is, not where it was built.
    context = (workspace / "context.json").read_text()
    assert str(workspace / "tool_result") in context
    assert f"{workspace.parent}/.{workspace.name}" not in context
    saved = [p.name for p in (workspace / "tool_result").iterdir()]
    assert any(name in context for name in saved)
    # and the new workspace is one: replacing it again works
    assert ctxkeep("compact", GOOD, "-o", workspace, "--replace").returncode == 0
    assert siblings(workspace) == []


# --- 3. a workspace another process holds is not replaced ------------------------------------------------------------


def test_replace_refuses_a_workspace_another_process_holds(workspace: Path) -> None:
    before = tree(workspace)
    with LocalFolder(workspace).lock(timeout=0):
        proc = ctxkeep("compact", GOOD, "-o", workspace, "--replace")
        refused(proc, "in use by another process")
        assert tree(workspace) == before
    assert siblings(workspace) == []


# --- 10. named pipes, devices, standard input and the size cap ------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "compact"])
def test_a_named_pipe_is_refused_not_waited_on(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)  # nobody ever writes to it: opening it to read would wait forever
    argv = [command, fifo] + (["-o", tmp_path / "ws"] if command == "compact" else [])
    refused(ctxkeep(*argv), str(fifo), "named pipe", " -")
    assert not (tmp_path / "ws").exists()


def test_a_named_pipe_as_agents_md_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "AGENTS.md"
    os.mkfifo(fifo)
    proc = ctxkeep("compact", GOOD, "-o", tmp_path / "ws", "--model", "deterministic", "--agents-md", fifo)
    refused(proc, "--agents-md", "named pipe")
    assert not (tmp_path / "ws").exists()


def _small_memory() -> None:
    # Reading /dev/zero to the end would take all the memory there is; this keeps the test's failure small.
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused(device: str) -> None:
    refused(ctxkeep("inspect", device, preexec=_small_memory), device, "character device")


def test_a_folder_is_refused(tmp_path: Path) -> None:
    refused(ctxkeep("inspect", tmp_path), str(tmp_path), "folder")


def test_standard_input_is_read_as_dash(tmp_path: Path) -> None:
    from_file = ctxkeep("inspect", GOOD, "--json")
    from_stdin = ctxkeep("inspect", "-", "--json", stdin=GOOD)
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert json.loads(from_stdin.stdout)["messages"] == json.loads(from_file.stdout)["messages"] > 0
    proc = ctxkeep("compact", "-", "-o", tmp_path / "ws", "--json", stdin=GOOD)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["messages"] == json.loads(from_file.stdout)["messages"]


def test_the_size_read_is_capped_with_a_clear_error() -> None:
    size = GOOD.stat().st_size
    refused(ctxkeep("inspect", GOOD, "--max-bytes", "1000"), str(GOOD), "--max-bytes", "1,000 bytes")
    refused(ctxkeep("inspect", "-", "--max-bytes", "1000", stdin=GOOD), "<stdin>", "--max-bytes")
    refused(ctxkeep("inspect", "-", "--max-bytes", "100000", stdin=Path("/dev/zero")), "<stdin>", "--max-bytes")
    assert ctxkeep("inspect", GOOD, "--max-bytes", str(size)).returncode == 0
    refused(ctxkeep("inspect", GOOD, "--max-bytes", "0"), "--max-bytes")


# --- 11. impossible arguments and paths: one line, never a traceback -------------------------------------------------


@pytest.mark.parametrize("window", ["0", "-5"])
def test_a_window_below_one_token_is_one_line(tmp_path: Path, window: str) -> None:
    refused(ctxkeep("compact", GOOD, "-o", tmp_path / "ws", "--window", window), "--window", window)
    assert not (tmp_path / "ws").exists()


def test_replace_refuses_a_symlink(workspace: Path) -> None:
    link = workspace.parent / "link"
    link.symlink_to(workspace.name)
    before = tree(workspace)
    refused(ctxkeep("compact", GOOD, "-o", link, "--replace"), str(link), "symbolic link")
    assert link.is_symlink() and os.readlink(link) == workspace.name
    assert tree(workspace) == before


def _offloaded_transcript(path: Path, file: str) -> Path:
    """A ctxkeep transcript whose first tool result says it was offloaded to `file`, then enough results
    after it that a replay ages it (and so looks at that file's name)."""

    def line(msg_id: str, role: str, block: dict[str, object]) -> str:
        msg = {"v": "ctxkeep/1", "id": msg_id, "role": role, "content": [block]}
        return json.dumps(msg, separators=(",", ":"))

    record = {
        "file": file,
        "stage": "recent",
        "policy": "default",
        "original_bytes": 100,
        "original_lines": 3,
        "kept_bytes": 1,
        "next_line": 2,
    }
    lines = [line("u1", "user", {"type": "text", "text": "go"})]
    for n in range(1, 12):
        call = {"type": "tool_call", "id": f"c{n}", "name": "bash", "arguments": "{}"}
        result: dict[str, object] = {"type": "tool_result", "call_id": f"c{n}", "content": "ok"}
        if n == 1:
            result = {**result, "content": "x\n[ctxkeep: output truncated]", "extra": {"ctxkeep_offload": record}}
        lines += [line(f"a{n}", "assistant", call), line(f"t{n}", "tool", result)]
    lines.append(line("z", "assistant", {"type": "text", "text": "done"}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("file", ["tool_result/../x", "tool_result/a/../../x", "/etc/passwd"])
def test_an_offload_record_outside_tool_result_is_one_line(tmp_path: Path, file: str) -> None:
    transcript = _offloaded_transcript(tmp_path / "hostile.jsonl", file)
    assert ctxkeep("inspect", transcript).returncode == 0  # reading it is harmless
    refused(ctxkeep("compact", transcript, "-o", tmp_path / "ws"), str(transcript), repr(file))
    assert not (tmp_path / "ws").exists()
    assert not (tmp_path / "x").exists()


def test_an_offload_record_inside_tool_result_replays(tmp_path: Path) -> None:
    transcript = _offloaded_transcript(tmp_path / "fine.jsonl", "tool_result/abc.txt")
    proc = ctxkeep("compact", transcript, "-o", tmp_path / "ws")
    assert proc.returncode == 0, proc.stderr


# --- 17. a forced format that reads nothing is an error ---------------------------------------------------------------


def _codex_file() -> Path:
    files = raw_files("codex")
    if not files:
        pytest.skip("shared transcripts are absent")
    return files[0]


@pytest.mark.parametrize("command", ["inspect", "compact"])
@pytest.mark.parametrize("which", ["claude_code", "codex"])
def test_a_forced_format_that_finds_no_messages_is_an_error(tmp_path: Path, command: str, which: str) -> None:
    path = CLAUDE_CODE if which == "claude_code" else _codex_file()
    argv = [command, path, "--format", "pi"] + (["-o", tmp_path / "ws"] if command == "compact" else [])
    refused(ctxkeep(*argv), str(path), "no messages", "pi", f"looks like {which}")
    assert not (tmp_path / "ws").exists()


def test_lenient_reading_of_binary_garbage_is_an_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 16 + b"\n\x00\x01\x02\n")
    refused(ctxkeep("inspect", garbage, "--lenient", "--format", "openai"), str(garbage), "no messages", "skipped")
    refused(ctxkeep("compact", garbage, "-o", tmp_path / "ws", "--lenient", "--format", "openai"), "no messages")


# --- output paths: only a new file or the user's own regular file is written -----------------------------------


def _link(tmp_path: Path) -> Path:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "out.html"
    link.symlink_to(target)
    return link


def _fifo(tmp_path: Path) -> Path:
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    return fifo


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "out.html"
    folder.mkdir()
    (folder / "inside").write_text("keep me")
    return folder


def _dangling_link(tmp_path: Path) -> Path:
    link = tmp_path / "out.html"
    link.symlink_to(tmp_path / "nowhere.html")
    return link


@pytest.mark.parametrize(
    ("make", "kind"),
    [(_link, "symbolic link"), (_fifo, "named pipe"), (_folder, "folder"), (_dangling_link, "symbolic link")],
    ids=["symlink", "fifo", "folder", "dangling-symlink"],
)
def test_report_never_replaces_what_is_not_a_regular_file(
    workspace: Path, tmp_path: Path, make: Callable[[Path], Path], kind: str
) -> None:
    out = make(tmp_path)
    before = tree(tmp_path)
    refused(ctxkeep("report", workspace, "-o", out), str(out), kind)
    assert tree(tmp_path) == before  # nothing replaced, followed, or left behind


def test_report_writes_a_new_file_and_replaces_its_own(workspace: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    for _ in range(2):
        proc = ctxkeep("report", workspace, "-o", out)
        assert proc.returncode == 0, proc.stderr
        assert out.read_bytes().startswith(b"<!") and not out.is_symlink()
    assert stat_mode(out) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".report")) == []


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_report_refuses_another_users_file(workspace: Path, tmp_path: Path) -> None:
    out = tmp_path / "theirs.html"
    out.write_text("theirs")
    os.chown(out, 65534, 65534)
    refused(ctxkeep("report", workspace, "-o", out), str(out), "another user")
    assert out.read_text() == "theirs" and out.stat().st_uid == 65534


def test_a_device_is_refused_before_anything_is_written() -> None:
    """As root, `-o /dev/null` once turned the system's /dev/null into a regular file: the check alone, here,
    so a regression cannot do that again on the machine running the tests."""
    from ctxkeep.cli.output import check_output
    from ctxkeep.errors import CtxkeepError

    with pytest.raises(CtxkeepError, match="is a character device; ctxkeep never writes through or replaces it"):
        check_output(Path(os.devnull), "-o")


def test_compact_never_builds_a_workspace_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    link = tmp_path / "ws"
    link.symlink_to(tmp_path / "empty")
    refused(ctxkeep("compact", GOOD, "-o", link), str(link), "symbolic link")
    assert list((tmp_path / "empty").iterdir()) == []


# --- a missing extra is named in one line ------------------------------------------------------------------------

_BLOCKER = """
import importlib.abc, sys

class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Missing())
"""


def without(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment where `modules` cannot be imported, as if their extra were not installed."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BLOCKER.format(BLOCKED=set(modules)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.extra("serve")  # one of its modules is hidden: the others must be there
@pytest.mark.parametrize("missing", ["starlette", "uvicorn"])
def test_serve_without_its_extra_names_it(tmp_path: Path, missing: str) -> None:
    argv = [_exe(), "serve", "--upstream", "http://127.0.0.1:9/v1", "--root", str(tmp_path / "root")]
    proc = subprocess.run(argv, env=without(tmp_path, missing), capture_output=True, text=True, timeout=TIMEOUT)
    refused(
        proc, "ctxkeep serve needs the serve extra", f"({missing} is not installed)", "pip install 'ctxkeep[serve]'"
    )
    assert not (tmp_path / "root").exists()


def test_sessions_needs_no_extra(tmp_path: Path) -> None:
    (tmp_path / "root" / "conv" / "0").mkdir(parents=True)
    argv = [_exe(), "sessions", "--root", str(tmp_path / "root")]
    proc = subprocess.run(
        argv, env=without(tmp_path, "starlette", "uvicorn"), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].split()[0] == "conv"


# --- 7. a kill in the middle of --replace is finished or undone by the next run or open -----------------------------

# `ctxkeep compact --replace`, killed (SIGKILL) as it makes the rename named: between the two moves of the
# swap (the old workspace aside, the new one not yet in), or at the first (the new one built, nothing moved).
_KILLED_AT = """
import os, signal, sys
from pathlib import Path
from ctxkeep.cli import main
real, out, at = os.rename, Path(sys.argv[1]).resolve(), sys.argv[2]
def rename(src, dst, **kw):
    moving_in = Path(dst) == out and str(src).endswith(".new")
    moving_aside = Path(src) == out
    if (at == "between" and moving_in) or (at == "first" and moving_aside):
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst, **kw)
os.rename = rename
sys.exit(main(["compact", sys.argv[3], "-o", sys.argv[1], "--replace", "--window", "32000", "--no-progress"]))
"""


def killed_replace(workspace: Path, at: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_AT, str(workspace), at, str(CLAUDE_CODE)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_replace_killed_between_its_moves_is_finished_by_the_next_run(workspace: Path) -> None:
    foreign = workspace.parent / f".{workspace.name}.mine.old"  # named like ctxkeep's copies, but the user's
    foreign.mkdir()
    killed_replace(workspace, "between")
    assert not workspace.exists()  # what the kill leaves: no workspace, the two hidden copies and the journal
    assert len(siblings(workspace)) == 4
    proc = ctxkeep("compact", GOOD, "-o", workspace, "--replace", "--window", "32000")
    assert proc.returncode == 0, proc.stderr
    assert "interrupted replace" in proc.stderr and "finished" in proc.stderr
    assert siblings(workspace) == [foreign.name]  # never deleted what ctxkeep did not write


def test_a_replace_killed_between_its_moves_is_finished_by_the_next_open(workspace: Path) -> None:
    from ctxkeep import Session

    killed_replace(workspace, "between")
    with Session.open(workspace) as session:  # the new workspace, not a silently created empty one
        texts = "\n".join(m.text for m in session.messages)
    assert "invoice" in texts and "coupon" not in texts  # the Claude Code transcript, not GOOD's
    assert siblings(workspace) == []


def test_a_replace_killed_before_its_moves_is_rolled_back(workspace: Path) -> None:
    before = tree(workspace)
    killed_replace(workspace, "first")
    assert len(siblings(workspace)) == 3  # the new copy, the empty folder made for the old, the journal
    from ctxkeep import Session

    with Session.open(workspace) as session:
        assert "coupon" in "\n".join(m.text for m in session.messages)  # the old workspace, as it was
    assert siblings(workspace) == []
    assert tree(workspace)[f"{workspace.name}/state.json"] == before[f"{workspace.name}/state.json"]


# --- 8. a command that reads a workspace never makes one -------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "{ws}"],
        ["report", "{ws}", "-o", "{ws}.html"],
        ["memory", "search", "backups", "-w", "{ws}", "--no-vectors"],
        ["memory", "index", "-w", "{ws}", "--no-vectors"],
        ["memory", "consolidate", "-w", "{ws}"],
        ["memory", "schedule", "-w", "{ws}", "--cron"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
@pytest.mark.parametrize("kind", ["missing", "empty folder", "file"])
def test_a_command_reading_a_workspace_refuses_a_path_that_is_not_one(
    tmp_path: Path, argv: list[str], kind: str
) -> None:
    ws = tmp_path / "TYPO"
    if kind == "empty folder":
        ws.mkdir()
    elif kind == "file":
        ws.write_text("notes\n")
    before = tree(tmp_path)
    refused(ctxkeep(*(a.format(ws=ws) for a in argv)), "TYPO")
    assert tree(tmp_path) == before  # nothing made


def test_memory_commands_read_a_folder_memory_write_made(tmp_path: Path) -> None:
    ws = tmp_path / "notes"
    assert ctxkeep("memory", "write", "Backups run at 02:00", "-w", ws).returncode == 0  # may start one
    proc = ctxkeep("memory", "search", "backups", "-w", ws, "--no-vectors")
    assert proc.returncode == 0 and "02:00" in proc.stdout, proc.stderr


@pytest.mark.parametrize("damage", ["garbage", "cut", "torn pages"])
@pytest.mark.parametrize("rebuild", [False, True])
def test_a_damaged_memory_index_is_rebuilt_from_the_files(tmp_path: Path, damage: str, rebuild: bool) -> None:
    ws = tmp_path / "ws"
    assert ctxkeep("memory", "write", "Backups run at 02:00 on db-1", "-w", ws).returncode == 0
    assert ctxkeep("memory", "index", "-w", ws, "--no-vectors").returncode == 0
    index = ws / "index" / "memory.sqlite"
    data = index.read_bytes()
    if damage == "garbage":
        index.write_bytes(os.urandom(len(data)))
    elif damage == "cut":
        index.write_bytes(data[:100])
    else:
        index.write_bytes(data[:100] + b"\xff" * 4096 + data[4196:])
    if rebuild:
        proc = ctxkeep("memory", "index", "-w", ws, "--no-vectors", "--rebuild")
        assert proc.returncode == 0 and "1 files indexed" in proc.stdout, proc.stderr
    proc = ctxkeep("memory", "search", "backups", "-w", ws, "--no-vectors")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 and "db-1" in proc.stdout, proc.stderr
    assert rebuild or "damaged" in proc.stderr


def test_the_temporary_files_of_killed_memory_writes_are_removed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert ctxkeep("memory", "write", "first", "-w", ws, "--section", "Notes").returncode == 0
    (ws / "memory" / "backup").mkdir()
    left = [".MEMORY.md.0123456789abcdef.tmp", "memory/.consolidated.json.0123456789abcdef.tmp"]
    left += ["memory/backup/.MEMORY-20260101T000000.md.0123456789abcdef.tmp"]
    others = [".notes.txt.0123456789abcdef.tmp", "memory/.flush.json.0123456789abcdef.tmp", "mine.tmp"]
    for name in left + others:
        (ws / name).write_text("partial")
    assert ctxkeep("memory", "write", "second", "-w", ws, "--section", "Notes").returncode == 0
    assert [name for name in left + others if (ws / name).exists()] == others  # only ctxkeep's, under its lock


@pytest.mark.parametrize("section", [[], ["--section", "Notes"]])
def test_a_memory_entry_over_the_cap_is_refused_in_one_line(tmp_path: Path, section: list[str]) -> None:
    ws = tmp_path / "ws"
    assert ctxkeep("memory", "write", "small", "-w", ws).returncode == 0
    before = tree(ws)
    refused(ctxkeep("memory", "write", "x" * 20_000, "-w", ws, *section), "at most 16,384 bytes")
    assert {k: v for k, v in tree(ws).items() if "/index" not in k} == {
        k: v for k, v in before.items() if "/index" not in k
    }
