"""Failures told right: unflagged results judged from their end, failing commands kept whole or as their head."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ctxkeep.errors import StorageError
from ctxkeep.folder import LocalFolder
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.session import Session
from ctxkeep.settings import ModelSummarySettings
from ctxkeep.store import OFFLOAD_KEY
from ctxkeep.summarize import ExtractiveSummarizer, ModelSummarizer, SummaryRequest, with_originals
from ctxkeep.summarize.facts.runs import MAX_FAILURES, failure_item, judged, tool_run
from ctxkeep.summarize.facts.shell import command_head
from ctxkeep.summarize.request import ORIGINAL_TAIL_CHARS
from ctxkeep.summarize.sections.markdown import parse_sections
from ctxkeep.summarize.testing import fixed_summary_model


def bash(cid: str, command: str) -> ToolCall:
    return ToolCall.from_input(id=cid, name="bash", input={"command": command})


def result(cid: str, text: str, **kw: object) -> ToolResult:
    return ToolResult(call_id=cid, content=text, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("collected 3 items\n\nexit code: 1", (1, True)),
        ("Process exited with code 2", (2, True)),
        ("[The command completed with exit code 1.]", (1, True)),
        ("lots of output\nerror: something earlier\nexit code: 0", (0, False)),  # the exit line decides
        ("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'", (None, True)),
        (
            "tests/test_a.py F.\nFAILED tests/test_a.py::test_b - assert 1 == 2\n=== 1 failed, 1 passed in 0.1s ===",
            (None, True),
        ),
        ("error: could not compile `app` due to 2 previous errors", (None, True)),
        ("npm ERR! code ELIFECYCLE", (None, True)),
        # not failures: a search that names errors, a passing run, and an error far above the end
        ("src/a.py:3: raise ValueError('bad')\nsrc/b.py:9: # error: handled", (None, False)),
        ("3 passed in 0.2s", (None, False)),
        ("error: at the top\n" + "\n".join(f"ok {n}" for n in range(10)), (None, False)),
        # the kept head of an offloaded output: its end, where the error is, is in the saved file
        (
            "test_ok PASSED\n[ctxkeep: output truncated, showing 15 of 90,000 bytes (line 1 of 2,000); the full"
            " output is in tool_result/a.txt, read from line 2]",
            (None, False),
        ),
    ],
)
def test_an_unflagged_result_is_judged_from_its_last_lines(text: str, expected: tuple[int | None, bool]) -> None:
    assert judged(text) == expected


def test_an_openai_chat_result_that_failed_is_a_failure_with_its_error_line() -> None:
    run = tool_run(bash("c1", "pytest -q"), result("c1", "F\nFAILED tests/t.py::x - KeyError: 1\nexit code: 1"), 0)
    assert run.failed and run.exit_code == 1 and run.error_line.startswith("FAILED tests/t.py::x")
    ok = tool_run(bash("c2", "pytest -q"), result("c2", "1 passed"), 0)
    assert not ok.failed and ok.exit_code is None
    flagged = tool_run(bash("c3", "ls"), result("c3", "exit code: 1", exit_code=0), 0)
    assert not flagged.failed  # a source's own exit code wins over the text


def test_a_failing_command_is_kept_whole_or_as_its_head_never_clipped() -> None:
    long_one = "cd /repo && python -m pytest tests/integration/test_pay.py -k 'refund and not slow' -x -q -vv --tb=line"
    assert 100 < len(long_one) <= 200
    run = tool_run(bash("c1", long_one), result("c1", "x", exit_code=1), 0)
    item = failure_item(run, False, "en")
    assert f"`{long_one}`" in item
    heredoc = "git commit -F - <<'EOF'\nFix the refund path\n\nLong body " + "x" * 400 + "\nEOF"
    run = tool_run(bash("c2", heredoc), result("c2", "error: nothing to commit", exit_code=1), 0)
    item = failure_item(run, False, "en")
    assert f"`{command_head(heredoc)}`" in item and "more characters; see the archive" in item
    assert item.endswith("error: nothing to commit")


def test_every_failing_command_survives_the_model_path_beyond_the_first_eight() -> None:
    msgs: list[Message] = [Message.of("user", "Make the build pass.")]
    commands = [f"make target_{n} VERBOSE=1 && ./scripts/check_{n}.sh --strict" for n in range(MAX_FAILURES + 6)]
    for n, command in enumerate(commands):
        msgs.append(Message(role="assistant", content=(bash(f"c{n}", command),)))
        msgs.append(Message(role="tool", content=(result(f"c{n}", f"make: *** [target_{n}] Error 2"),)))
    msgs.append(Message(role="assistant", content=(TextBlock(text="Still failing."),)))
    model = ModelSummarizer(fixed_summary_model(), settings=ModelSummarySettings(window=8_192, max_tokens=1_024))
    for summarizer in (ExtractiveSummarizer(), model):
        summary = summarizer.summarize(SummaryRequest(messages=tuple(msgs), max_chars=12_000))
        assert all(c in summary for c in commands), type(summarizer).__name__


def test_a_flagged_failure_offloaded_to_its_head_points_to_the_saved_end_not_to_its_first_line() -> None:
    head = (
        "test_ok PASSED\ntest_b PASSED\n[ctxkeep: output truncated, showing 30 of 90,000 bytes (lines 1-2 of"
        " 2,000); the full output is in tool_result/ab12.txt, read from line 3]"
    )
    run = tool_run(bash("c1", "pytest -v"), result("c1", head, is_error=True), 0)
    assert run.failed and run.error_line == "(the error is near the end of tool_result/ab12.txt)"
    told = head.replace("test_b PASSED", "E   KeyError: 'x'")
    run = tool_run(bash("c2", "pytest -v"), result("c2", told, is_error=True), 0)
    assert run.error_line == "KeyError: 'x'"  # the head does say what went wrong


# --- the error of an offloaded output, from the end of its saved original -------------------------------------

LOG_HEAD = "".join(f"collecting module_{n} ... ok\n" for n in range(4_000))
LOG_TAIL = "FAILED tests/test_pay.py::test_refund - AssertionError: 300 != 250\n=== 1 failed, 3999 passed in 9.1s ==="


def offloaded(cid: str, head: str, name: str) -> ToolResult:
    """A result whose head alone is kept, as ctxkeep.offload leaves it, with the record naming its saved file."""
    record = {
        "file": name,
        "stage": "recent",
        "policy": "head",
        "original_bytes": 200_000,
        "original_lines": 4_002,
        "kept_bytes": len(head),
        "next_line": 40,
    }
    notice = f"\n[ctxkeep: output truncated, showing 1,000 of 200,000 bytes; the full output is in {name}, read on]"
    return ToolResult(call_id=cid, content=head + notice, extra={OFFLOAD_KEY: record})


def test_an_offloaded_failure_is_judged_and_quoted_from_the_end_of_its_original() -> None:
    name = "tool_result/0b6e3c39-1c2d-5e4f-8a9b-0c1d2e3f4a5b.txt"
    cut = offloaded("c1", LOG_HEAD[:1_000], name)
    alone = tool_run(bash("c1", "pytest -q"), cut, 0)
    assert not alone.failed  # its head says nothing: not judged from it
    run = tool_run(bash("c1", "pytest -q"), cut, 0, originals={name: LOG_HEAD[-500:] + LOG_TAIL})
    assert run.failed and run.error_line.startswith("FAILED tests/test_pay.py::test_refund")
    flagged = tool_run(bash("c1", "pytest -q"), replace(cut, is_error=True), 0, originals={name: LOG_TAIL})
    assert flagged.error_line.startswith("FAILED tests/test_pay.py::test_refund")  # not the head's first line


def test_with_originals_reads_the_end_of_each_offloaded_output_once() -> None:
    name = "tool_result/0b6e3c39-1c2d-5e4f-8a9b-0c1d2e3f4a5b.txt"
    gone = "tool_result/1b6e3c39-1c2d-5e4f-8a9b-0c1d2e3f4a5b.txt"
    msgs = (
        Message(role="assistant", content=(bash("c1", "pytest -q"), bash("c2", "make"))),
        Message(role="tool", content=(offloaded("c1", "head", name),)),
        Message(role="tool", content=(offloaded("c2", "head", gone),)),
    )
    asked: list[str] = []

    def read(file: str) -> bytes | None:
        asked.append(file)
        return (LOG_HEAD + LOG_TAIL).encode() if file == name else None  # `gone` was removed by retention

    request = with_originals(SummaryRequest(messages=msgs), read)
    assert asked == [name, gone]
    assert list(request.originals) == [name] and request.originals[name].endswith(LOG_TAIL)
    assert len(request.originals[name]) == ORIGINAL_TAIL_CHARS
    with pytest.raises(TypeError):
        SummaryRequest(messages=msgs, originals={name: b"bytes"})  # type: ignore[dict-item]


@pytest.mark.parametrize("summarizer", ["extractive", "model"])
def test_a_session_quotes_the_error_from_the_end_of_the_saved_original(tmp_path: Path, summarizer: str) -> None:
    made = (
        ExtractiveSummarizer()
        if summarizer == "extractive"
        else ModelSummarizer(fixed_summary_model(), settings=ModelSummarySettings(window=8_192, max_tokens=1_024))
    )
    output = LOG_HEAD + LOG_TAIL  # no error flag, no exit code: an OpenAI chat tool message
    msgs = [
        Message.of("user", "Run the payment tests."),
        Message(role="assistant", content=(bash("c1", "pytest -q tests/test_pay.py"),)),
        Message(role="tool", content=(result("c1", output),)),
        Message.of("assistant", "One test fails."),
        Message.of("user", "Fix it."),
    ]
    with Session(LocalFolder(tmp_path / "ws"), summarizer=made) as session:
        session.add(msgs)
        session.prepare()
        kept = session.messages[2].tool_result
        assert kept is not None and "FAILED" not in kept.text  # only the head is live: the end was offloaded
        step = session.compact()
        assert step.compaction is not None
        summary = session.summary or ""
    assert "FAILED tests/test_pay.py::test_refund - AssertionError: 300 != 250" in summary
    assert "`pytest -q tests/test_pay.py`" in summary


def test_an_original_that_cannot_be_read_leaves_the_kept_head_and_the_compaction_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: LocalFolder, name: str) -> bytes | None:
        raise StorageError(f"cannot read {name}: permission denied", path=name)

    monkeypatch.setattr(LocalFolder, "read_original", refuse)
    msgs = [
        Message.of("user", "Run the payment tests."),
        Message(role="assistant", content=(bash("c1", "pytest -q tests/test_pay.py"),)),
        Message(role="tool", content=(result("c1", LOG_HEAD + LOG_TAIL),)),
        Message.of("assistant", "One test fails."),
        Message.of("user", "Fix it."),
    ]
    with Session(LocalFolder(tmp_path / "ws")) as session:
        session.add(msgs)
        session.prepare()
        step = session.compact()
    assert step.compaction is not None and step.failure is None
    assert "`pytest -q tests/test_pay.py`" in (step.live.summary or "")


def test_a_store_reads_only_the_originals_ctxkeep_names(tmp_path: Path) -> None:
    folder = LocalFolder(tmp_path / "ws")
    name = "tool_result/0b6e3c39-1c2d-5e4f-8a9b-0c1d2e3f4a5b.txt"
    folder.save_original(name, b"the end")
    assert folder.read_original(name) == b"the end"
    for other in ("tool_result/../state.json", "state.json", "tool_result/notes.txt", "tool_result/x/../../a"):
        assert folder.read_original(other) is None


@pytest.mark.parametrize(
    ("command", "output", "failed"),
    [
        # a question answered "no": exit 1 is the answer, not a failure
        ('grep -n "pendingBash" src/agent.ts', "", False),
        ("rg TODO src | head -5", "", False),
        ("test -f build/out.js && echo built", "", False),
        ("[ -d .venv ]", "", False),
        ("diff -u a.txt b.txt", "--- a.txt\n+++ b.txt\n@@ -1 +1 @@\n-a\n+b", False),
        ("which mypy", "", False),
        ("command -v uv", "", False),
        ("pgrep -f uvicorn", "", False),
        ("git diff --quiet", "", False),
        # the same programs failing for real: an error in the output, or exit 2
        ("grep -n x missing.txt", "grep: missing.txt: No such file or directory", True),
        ("cat app.log | grep ERROR", "cat: app.log: No such file or directory", True),
        # exit 1 of a program that is not a question; git diff without --quiet/--exit-code exits 0 on changes
        ("pytest -q", "1 failed", True),
        ("git diff HEAD~1", "fatal: bad revision 'HEAD~1'", True),
    ],
)
def test_no_match_exits_are_answers_not_failures(command: str, output: str, failed: bool) -> None:
    run = tool_run(bash("c1", command), result("c1", output, exit_code=1), 0)
    assert run.failed is failed
    assert run.no_match is not failed
    summary = ExtractiveSummarizer().summarize(
        SummaryRequest(messages=(Message(role="assistant", content=(bash("c1", command),)), tool_message("c1", output)))
    )
    blocked = parse_sections(summary)["Progress"]["Blocked"]
    assert bool(blocked) is failed
    if not failed:
        assert f"`{command}` (no match)" in summary  # Commands run says what the exit meant


def test_exit_2_of_a_search_is_a_failure() -> None:
    run = tool_run(bash("c1", "grep -rn x src"), result("c1", "", exit_code=2), 0)
    assert run.failed and not run.no_match


def tool_message(cid: str, text: str, code: int = 1) -> Message:
    return Message(role="tool", content=(result(cid, text, exit_code=code),))


def runs(*steps: tuple[str, str, int]) -> tuple[Message, ...]:
    """A bash call per (call id, command, exit code), each with its result."""
    out: list[Message] = []
    for cid, command, code in steps:
        out += [Message(role="assistant", content=(bash(cid, command),)), tool_message(cid, f"out {cid}", code)]
    return tuple(out)


def test_a_commit_retried_with_another_message_resolves_the_failed_one() -> None:
    messages = runs(
        ("c1", 'git commit -m "feat: add the bridge"', 1),
        ("c2", 'git commit -m "feat: add the bridge (hooks fixed)"', 0),
        ("c3", "pytest tests/test_a.py", 1),
        ("c4", "pytest tests/test_b.py", 0),  # another target: not a fix
    )
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=messages))
    blocked = parse_sections(summary)["Progress"]["Blocked"]
    assert blocked[0].startswith("bash (exit 1): `pytest tests/test_a.py`") and not blocked[0].endswith("later)")
    assert blocked[1].startswith('bash (exit 1): `git commit -m "feat: add the bridge"`')
    assert blocked[1].endswith("(resolved later)")


def test_a_cut_command_a_previous_summary_shows_is_resolved_by_runs_on_its_words() -> None:
    long = "mkdir -p build/out && cp " + " ".join(f"src/part_{i}.ts" for i in range(30)) + " build/out/"
    first = ExtractiveSummarizer().summarize(SummaryRequest(messages=runs(("c1", long, 1))))
    [item] = parse_sections(first)["Progress"]["Blocked"]
    assert "more characters; see the archive" in item  # shown by its head only
    fix = runs(("c2", "mkdir -p build/out", 0), ("c3", long.split(" && ", 1)[1], 0))
    second = ExtractiveSummarizer().summarize(SummaryRequest(messages=fix, previous=first))
    assert parse_sections(second)["Progress"]["Blocked"] == [f"{item} (resolved later)"]
