"""`ctxkeep inspect`: text and JSON reports, exit codes, lenient reading, progress."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT, raw_params

from ctxkeep.cli import main

EXAMPLE = ROOT / "examples" / "claude_code_session.jsonl"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", str(EXAMPLE), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["format"] == "claude_code"
    assert report["messages"] == 9
    assert report["pairing_problems"] == []
    tools = {row["tool"]: row["calls"] for row in report["by_tool"]}
    assert tools == {"Bash": 2, "Read": 1, "Edit": 1}
    assert set(report["by_role"]) == {"user", "assistant", "tool"}
    assert report["tokens"] == sum(report["by_role"].values())
    largest = report["largest_tool_results"]
    assert [r["tokens"] for r in largest] == sorted((r["tokens"] for r in largest), reverse=True)
    assert largest[0]["tool"] in {"Bash", "Read"} and any(r["is_error"] for r in largest)


def test_inspect_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", str(EXAMPLE))
    assert code == 0
    assert "tokens by role" in out and "largest tool results" in out and "pairing problems: none" in out


def test_bad_line_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = EXAMPLE.read_text().splitlines()
    lines[4] = lines[4][:50]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "inspect", str(bad))
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"ctxkeep: error: {bad}:5: ")

    code, out, err = run(capsys, "inspect", str(bad), "--lenient", "--json")
    assert code == 0
    assert any("line 5" in note for note in json.loads(out)["notes"])


def test_invalid_utf8_is_reported_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = EXAMPLE.read_bytes().replace(b"Please fix it", b"Please \xff\xfe fix it")
    path = tmp_path / "latin.jsonl"
    path.write_bytes(data)
    code, out, _ = run(capsys, "inspect", str(path), "--json")
    assert code == 0
    assert any("invalid UTF-8" in note for note in json.loads(out)["notes"])


def test_unknown_format_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = tmp_path / "odd.txt"
    odd.write_text("just some words\n")
    code, _, err = run(capsys, "inspect", str(odd))
    assert code == 2 and "unrecognised transcript format" in err and "--format" in err
    code, _, err = run(capsys, "inspect", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "cannot read file" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n \n")
    code, _, err = run(capsys, "inspect", str(empty))
    assert code == 2 and err == f"ctxkeep: error: {empty}: the file is empty\n"


def test_format_override_wrong_format_is_clear(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "inspect", str(EXAMPLE), "--format", "tau_bench")
    assert code == 2 and str(EXAMPLE) in err


def test_progress_bar(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "inspect", str(EXAMPLE), "--progress")
    assert code == 0 and "counting [" in err and "9/9 messages" in err
    code, _, err = run(capsys, "inspect", str(EXAMPLE), "--no-progress")
    assert err == ""


def test_console_script_runs_for_real() -> None:
    exe = Path(sys.executable).with_name("ctxkeep")
    proc = subprocess.run([str(exe), "inspect", str(EXAMPLE), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["messages"] == 9


@pytest.mark.parametrize("path", raw_params())
def test_inspect_every_shared_transcript(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", str(path), "--json", "--no-progress")
    assert code == 0, err
    report = json.loads(out)
    assert report["messages"] > 0 and report["tokens"] > 0
