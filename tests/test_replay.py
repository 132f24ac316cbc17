"""Every shared transcript replayed through a session, and the `ctxkeep compact` command end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from tests.conftest import ROOT, raw_params

from ctxkeep.cli import main
from ctxkeep.codec import message_from_dict
from ctxkeep.folder import MemoryFolder
from ctxkeep.formats import load
from ctxkeep.messages import Block, Message, ThinkingBlock, ToolCall
from ctxkeep.offload import OFFLOAD_KEY, is_output
from ctxkeep.pairing import repair, validate
from ctxkeep.replay import replay, split_system
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings
from ctxkeep.summarize import missing_sections

EXAMPLE = ROOT / "examples" / "claude_code_session.jsonl"
PAIRING = {"orphan_result", "missing_result", "separated_result", "result_before_call"}


@pytest.mark.parametrize("path", raw_params())
def test_replay_loses_nothing_and_never_breaks_a_pair(path: Path) -> None:
    settings = EngineSettings(compact=CompactSettings(max_input_length=16_000))
    for conv in load(path).conversations[:8]:
        system, messages = split_system(conv.messages)
        fixed, _ = repair(messages)
        folder = MemoryFolder()
        with Session(folder, settings=settings) as session:
            result = replay(session, fixed, system=system)
            live = session.messages
            summary = session.summary
        archived = [
            message_from_dict(orjson.loads(line))
            for info in folder.list("dialog/")
            for line in (folder.read(info.name) or b"").splitlines()
        ]
        assert [m.id for m in archived + list(live)] == [m.id for m in fixed], "a message was lost or repeated"
        assert not [p for p in validate(live) if p.kind in PAIRING]
        if result.compactions:
            assert summary is not None and missing_sections(summary) == []
            assert sum(c.compacted for c in result.compactions) == len(archived)
        # Offloading changes only outputs (tool results, and command output the user ran), only their text, and in
        # old assistant messages their reasoning (dropped) and their calls' arguments (cut, ids and names kept).
        by_id = {m.id: m for m in fixed}
        for msg in archived + list(live):
            original = by_id[msg.id]
            if msg != original and original.role == "assistant":
                assert [(c.id, c.name) for c in msg.tool_calls] == [(c.id, c.name) for c in original.tool_calls]
                assert _said(msg) == _said(original)
                assert all(isinstance(json.loads(c.arguments), dict) for c in msg.tool_calls if OFFLOAD_KEY in c.extra)
            elif msg != original:
                assert is_output(original) and msg.role == original.role
                if msg.role == "tool":
                    assert msg.tool_result.call_id == original.tool_result.call_id  # type: ignore[union-attr]


def _said(message: Message) -> list[Block]:
    """What an assistant message says, without its reasoning and calls."""
    return [b for b in message.content if not isinstance(b, ThinkingBlock | ToolCall)]


def test_compact_command_writes_the_workspace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ws"
    code = main(["compact", str(EXAMPLE), "-o", str(out), "--window", "600", "--json", "--no-progress"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["messages"] == 9 and report["compactions"] >= 1
    assert report["tokens_final_context"] < report["tokens_full_history"]
    context = json.loads((out / "context.json").read_text())
    assert context["messages"][0]["role"] in ("system", "user")
    assert "<context-summary>" in json.dumps(context)
    assert (out / "summary.md").read_text().startswith("The full earlier conversation is in dialog/")
    assert list((out / "dialog").glob("*.jsonl"))


def test_compact_as_anthropic_and_refuses_a_used_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ws"
    assert main(["compact", str(EXAMPLE), "-o", str(out), "--as", "anthropic", "--no-progress"]) == 0
    context = json.loads((out / "context.json").read_text())
    assert set(context) == {"system", "messages"} and context["messages"][0]["role"] == "user"
    capsys.readouterr()
    assert main(["compact", str(EXAMPLE), "-o", str(out), "--no-progress"]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert main(["compact", str(EXAMPLE), "-o", str(out), "--no-progress", "--replace"]) == 0
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep me")
    capsys.readouterr()
    assert main(["compact", str(EXAMPLE), "-o", str(other), "--no-progress", "--replace"]) == 2
    assert "only replaces a ctxkeep workspace" in capsys.readouterr().err
    assert (other / "mine.txt").read_text() == "keep me"


def test_compact_with_a_model_summarizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agents = tmp_path / "AGENTS.md"
    agents.write_text("## Red Lines\n- Never delete the archive.\n")
    out = tmp_path / "ws"
    argv = ["compact", str(EXAMPLE), "-o", str(out), "--window", "600", "--json", "--no-progress"]
    code = main([*argv, "--model", "deterministic", "--model-window", "16000", "--agents-md", str(agents)])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["summarizer"] == "deterministic" and report["compactions"] >= 1
    summary = (out / "summary.md").read_text()
    assert "### Pending user asks" in summary and "- Never delete the archive." in summary
    assert missing_sections(summary) == []


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model"),
        (["--model", "gpt-4o"], "cannot tell the model"),
        (["--model", "deterministic", "--model-window", "100"], "leaves no room"),
        (["--model", "deterministic", "--agents-md", "/nonexistent/AGENTS.md"], "cannot read --agents-md"),
    ],
)
def test_compact_model_flags_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], error: str
) -> None:
    assert main(["compact", str(EXAMPLE), "-o", str(tmp_path / "ws"), "--no-progress", *flags]) == 2
    assert error in capsys.readouterr().err


def test_compact_bad_conversation_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compact", str(EXAMPLE), "-o", str(tmp_path / "ws"), "--conversation", "3"]) == 2
    assert "holds 1 conversation" in capsys.readouterr().err


def test_installed_console_script_compacts(tmp_path: Path) -> None:
    exe = shutil.which("ctxkeep", path=str(Path(sys.executable).parent))
    assert exe, "the ctxkeep console script is not installed in this environment"
    proc = subprocess.run(
        [exe, "compact", str(EXAMPLE), "-o", str(tmp_path / "ws"), "--window", "600"],
        capture_output=True,
        text=True,
        timeout=600,  # stops a hung process only: the run takes about a second
    )
    assert proc.returncode == 0, proc.stderr
    assert "compactions" in proc.stdout and "tokens" in proc.stdout


def test_readme_main_job_on_the_bundled_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command: the bundled session compacts, and the summary keeps what the agent needs."""
    out = tmp_path / "demo"
    example = ROOT / "examples" / "agent_session.jsonl"
    assert main(["compact", str(example), "-o", str(out), "--window", "32000", "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compactions"] >= 1 and report["peak_context_tokens"] <= 32_000
    # What the agent needs is in the context it is sent: in the summary, or still live.
    summary = (out / "summary.md").read_text()
    context = (out / "context.json").read_text()
    for needle in ("#482", "localhost:8081", "app/i18n/zh_CN.json", "migrations", "COUPON_EXPIRED"):
        assert needle in summary or needle in context, needle
    assert "#482" in summary and "COUPON_EXPIRED" in summary
    assert [p.name for p in (out / "dialog").iterdir()] == ["2026-03-14.jsonl"]
