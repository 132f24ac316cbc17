"""Exact recall on a real workspace: a session offloads a test run whose error line is past the kept head,
compacts it into the archive, and `ctxkeep recall` and the `recall` tool give the run back whole."""

from __future__ import annotations

import json
import os
import shutil
from datetime import date
from typing import TYPE_CHECKING, Any

import pytest

from ctxkeep import Session
from ctxkeep.archive import Archive
from ctxkeep.archive import append as archive_append
from ctxkeep.cli import main
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.memory.tools import MemoryTool, memory_tools
from ctxkeep.messages import Message, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.offload import offload
from ctxkeep.oversize import cut_oversized, oversized_name
from ctxkeep.reasoning import without_thinking
from ctxkeep.settings import OffloadSettings
from ctxkeep.workspace.recall import recall

if TYPE_CHECKING:
    from pathlib import Path

ERROR = "E   KeyError: 'retry_limit' in billing/retry.py:88"
RUN = "".join(f"tests/test_x.py::test_{n} PASSED\n" for n in range(1500)) + ERROR + "\n"


def _turn(i: int, body: str) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pytest -x"}'}}
    return [
        {"role": "user", "content": f"run the tests, round {i}"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": body},
        {"role": "assistant", "content": f"round {i} done"},
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose first turn (a 50 KB test run, offloaded, the error on its last line) is archived."""
    ws = tmp_path_factory.mktemp("recall") / "ws"
    history: list[dict[str, Any]] = []
    with Session.open(ws, window=8_000) as session:
        for i in range(40):
            history += _turn(i, RUN if i == 0 else f"ok {i} line\n" * 300)
            session.sync(history)
            session.prepare("go on")
    return ws


@pytest.fixture
def ws(built: Path, tmp_path: Path) -> Path:
    """A copy of the built workspace a test may change."""
    return shutil.copytree(built, tmp_path / "ws")


def _archive(ws: Path) -> str:
    (name,) = sorted(p.name for p in (ws / "dialog").iterdir())
    return f"dialog/{name}"


def _offloaded(ws: Path) -> tuple[str, int, dict[str, Any]]:
    """The archived line of the offloaded run: its text as archived, its line and its offload record."""
    lines = (ws / _archive(ws)).read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if "ctxkeep_offload" in line:
            block = json.loads(line)["content"][0]
            return block["content"], number, block["extra"]["ctxkeep_offload"]
    raise AssertionError("no offloaded result was archived")


def test_the_archive_keeps_only_the_head_of_the_run(ws: Path) -> None:
    text, _, record = _offloaded(ws)
    assert ERROR not in text and record["kept_bytes"] < RUN.index(ERROR)  # what recall is for
    assert (ws / record["file"]).read_text(encoding="utf-8") == RUN


def test_cli_prints_the_lines_word_for_word_with_the_original(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line, record = _offloaded(ws)
    source = f"{_archive(ws)}:{line - 2}-{line + 1}"
    assert main(["recall", str(ws), source]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"[{_archive(ws)}:{line - 2}] user\nrun the tests, round 0\n\n")
    assert f'[{_archive(ws)}:{line - 1}] assistant\n-> bash [c0] {{"command": "pytest -x"}}\n' in out
    assert f"[{_archive(ws)}:{line}] tool (result of c0); full text from {record['file']}\n{RUN}\n" in out
    assert out.endswith(f"[{_archive(ws)}:{line + 1}] assistant\nround 0 done\n")


def test_cli_json_has_the_messages_with_the_originals_put_back(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line, record = _offloaded(ws)
    assert main(["recall", str(ws), f"{_archive(ws)}:{line}", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["file"], row["line"], row["restored"], row["missing"]) == (_archive(ws), line, [record["file"]], [])
    assert row["message"]["content"][0]["content"] == RUN
    assert main(["recall", str(ws), record["file"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"file": record["file"], "text": RUN}


def test_an_original_removed_by_retention_leaves_the_cut_text_and_says_so(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, line, record = _offloaded(ws)
    (ws / record["file"]).unlink()
    assert main(["recall", str(ws), f"{_archive(ws)}:{line}"]) == 0
    out = capsys.readouterr().out
    head = f"[{_archive(ws)}:{line}] tool (result of c0); {record['file']} no longer kept: the text below is cut"
    assert out == f"{head}\n{text}\n"


@pytest.mark.parametrize(
    ("source", "error"),
    [
        (":5-3", "a line range is FROM-TO with 1 <= FROM <= TO; got 'dialog/"),
        (":0-2", "a line range is FROM-TO with 1 <= FROM <= TO"),
        (":1-100000", "has lines 1-"),
        (":1-x", "a source is dialog/YYYY-MM-DD.jsonl:FROM-TO (or :N) or tool_result/<uuid>.txt; got"),
    ],
)
def test_cli_refuses_a_bad_range_in_one_line(
    ws: Path, capsys: pytest.CaptureFixture[str], source: str, error: str
) -> None:
    assert main(["recall", str(ws), _archive(ws) + source]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxkeep: error: ") and error in err and err.count("\n") == 1


def test_lines_a_crash_left_uncommitted_are_not_recalled(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = ws / _archive(ws)
    lines = archive.read_text(encoding="utf-8").count("\n")
    with archive.open("a", encoding="utf-8") as f:  # an append whose commit never came
        f.write('{"v":"ctxkeep/1","id":"late","role":"user","content":[{"type":"text","text":"never archived"}]}\n')
    assert main(["recall", str(ws), f"{_archive(ws)}:{lines + 1}"]) == 2
    assert f"has lines 1-{lines}; got {lines + 1}-{lines + 1}" in capsys.readouterr().err
    assert main(["recall", str(ws), f"{_archive(ws)}:{lines}"]) == 0
    assert "never archived" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "source",
    ["../ws/dialog/2026-01-01.jsonl:1-2", "/etc/passwd", "tool_result/../state.json", "state.json", "dialog/../x:1"],
)
def test_cli_refuses_a_path_outside_the_archive(ws: Path, capsys: pytest.CaptureFixture[str], source: str) -> None:
    assert main(["recall", str(ws), source]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxkeep: error: a source is dialog/YYYY-MM-DD.jsonl:FROM-TO (or :N) or tool_result/")
    assert err.endswith(f"got {source!r}\n") and err.count("\n") == 1


def test_cli_takes_a_saved_original_by_the_path_the_notice_prints_and_no_other(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, record = _offloaded(ws)
    assert main(["recall", str(ws), str(ws / record["file"])]) == 0
    assert capsys.readouterr().out == RUN + "\n"
    other = shutil.copytree(ws, tmp_path / "other")
    assert main(["recall", str(ws), str(other / record["file"])]) == 2  # another workspace's file
    assert "a source is" in capsys.readouterr().err


def test_cli_never_follows_a_link(ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"v":"ctxkeep/1","id":"x","role":"user","content":[{"type":"text","text":"secret"}]}\n')
    archive = ws / _archive(ws)
    archive.unlink()
    os.symlink(secret, archive)
    assert main(["recall", str(ws), f"{_archive(ws)}:1"]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "secret" not in err.replace(str(tmp_path), "") and err.count("\n") == 1


def _tools(ws: Path) -> dict[str, MemoryTool]:
    return {t.name: t for t in memory_tools(ws, embedder=None)}


def test_the_recall_tool_finds_the_error_past_the_kept_head(ws: Path) -> None:
    _, line, record = _offloaded(ws)
    tools = _tools(ws)
    source = f"{_archive(ws)}:{line - 2}-{line + 1}"
    answer = tools["recall"].invoke({"source": source, "max_chars": 100_000})
    assert ERROR in answer and f"full text from {record['file']}" in answer
    assert answer.endswith(f"[{_archive(ws)}:{line + 1}] assistant\nround 0 done")
    assert tools["recall"].invoke(json.dumps({"source": record["file"]})) == RUN[:20_000] + (
        f"\n[cut at max_chars=20000 of {len(RUN)} characters; go on with memory_read path={record['file']}"
        f" start_line={RUN[:20_000].count(chr(10)) + 1}]"
    )
    # memory_read opens the saved original too: the error is its last line
    read = tools["memory_read"].invoke({"path": record["file"], "start_line": 1501, "lines": 5})
    assert read == f"{record['file']}, lines 1501-1501 of 1501:\n1501: {ERROR}"


def test_the_recall_tool_says_where_to_go_on_past_max_chars(ws: Path) -> None:
    _, line, _ = _offloaded(ws)
    recall = _tools(ws)["recall"]
    answer = recall.invoke({"source": f"{_archive(ws)}:{line - 2}-{line + 1}", "max_chars": 200})
    assert answer.startswith(f"[{_archive(ws)}:{line - 2}] user\nrun the tests, round 0\n\n")
    assert answer.endswith(
        f"[lines {line}-{line + 1} not shown (max_chars=200); recall source={_archive(ws)}:{line}-{line + 1}]"
    )
    alone = recall.invoke({"source": f"{_archive(ws)}:{line}", "max_chars": 300})
    assert "[cut at max_chars=300 of" in alone and "the rest: memory_read path=tool_result/" in alone


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"source": "state.json"}, "error: a source is dialog/YYYY-MM-DD.jsonl:FROM-TO"),
        ({"source": "dialog/2020-01-01.jsonl:1"}, "error: dialog/2020-01-01.jsonl is not in this workspace's archive"),
        ({"source": "tool_result/00000000-0000-5000-8000-000000000000.txt"}, "error: tool_result/0000"),
        ({"source": "x", "max_chars": 0}, "error: max_chars must be a whole number"),
        ({"sources": "x"}, "error: unknown argument 'sources'"),
    ],
)
def test_the_recall_tool_answers_a_bad_call_with_an_error_text(ws: Path, arguments: dict[str, Any], error: str) -> None:
    assert _tools(ws)["recall"].invoke(arguments).startswith(error)


def test_the_recall_tool_refuses_a_linked_original(ws: Path, tmp_path: Path) -> None:
    _, line, record = _offloaded(ws)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the workspace's\n")
    (ws / record["file"]).unlink()
    os.symlink(outside, ws / record["file"])
    tools = _tools(ws)
    answer = tools["recall"].invoke({"source": record["file"]})
    assert answer.startswith("error: ") and "symbolic link" in answer and "not the workspace's" not in answer
    assert "symbolic link" in tools["memory_read"].invoke({"path": record["file"]})
    assert LocalFolder(ws).read(_archive(ws)) is not None  # the rest of the workspace is still read
    assert "not the workspace's" not in tools["recall"].invoke({"source": f"{_archive(ws)}:{line}"})


def test_every_kind_of_saved_original_is_put_back() -> None:
    """Cut call arguments, an oversized message and dropped reasoning come back whole, as results do."""
    store = MemoryFolder()
    page = "".join(f"<p>paragraph {n}</p>\n" for n in range(400))
    call = ToolCall.from_input(id="w1", name="write", input={"path": "site/index.html", "content": page})
    history = [
        Message.of("user", "write the page"),
        Message(role="assistant", content=(ThinkingBlock(text="the page needs 400 paragraphs"), call)),
        Message(role="tool", content=(ToolResult(call_id="w1", content="written"),)),
    ]
    for i in range(4):  # later calls make the write old, so its arguments are cut
        later = ToolCall(id=f"r{i}", name="read", arguments='{"path": "a"}')
        history += [
            Message(role="assistant", content=(later,)),
            Message(role="tool", content=(ToolResult(call_id=f"r{i}", content="a"),)),
        ]
    cut = offload(history, OffloadSettings(recent_n=1, old_max_bytes=1_000, recent_max_bytes=1_000), store)
    assert len(cut[1].tool_calls[0].arguments) < len(call.arguments)
    cut[1] = without_thinking([cut[1]], store)[0]
    paste = "x" * 30_000 + " the end of the paste"
    big = Message.of("user", paste)
    cut.append(cut_oversized(big, 2_000, store) or big)
    assert not any(isinstance(b, ThinkingBlock) for b in cut[1].content) and len(cut[-1].text) < 3_000
    archive_append(store, Archive(), cut, date(2026, 7, 1))
    items = recall(store, "dialog/2026-07-01.jsonl:2")
    thinking, restored_call = items[0].message.content
    assert thinking == ThinkingBlock(text="the page needs 400 paragraphs")
    assert isinstance(restored_call, ToolCall) and restored_call.arguments == call.arguments
    assert len(items[0].restored) == 2 and items[0].missing == ()
    (last,) = recall(store, f"dialog/2026-07-01.jsonl:{len(cut)}")
    assert last.message.text == paste and last.restored == (oversized_name(big.id),)


def test_each_compaction_record_names_lines_recall_gives_back(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The lines `ctxkeep show` names per compaction (its record's archive_lines) are a source recall takes."""
    records = [json.loads(line) for line in (ws / "compactions.jsonl").read_text(encoding="utf-8").splitlines()]
    spans = [r["archive_lines"] for r in records if r.get("kind") == "compaction"]
    assert len(spans) > 1
    folder = LocalFolder(ws)
    for span in spans:
        source = f"{span['file']}:{span['first']}-{span['last']}"
        assert [i.line for i in recall(folder, source)] == list(range(span["first"], span["last"] + 1))
    assert main(["show", str(ws)]) == 0
    assert f"{spans[1]['file']}:{spans[1]['first']}-{spans[1]['last']}" in capsys.readouterr().out
