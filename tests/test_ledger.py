"""The ledger: the agent's todo items with their states, as data, carried exactly across every cut."""

from __future__ import annotations

import json

import pytest
from tests.conftest import RAW

from ctxkeep.formats import load
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.settings import ModelSummarySettings
from ctxkeep.summarize import ModelSummarizer, SummaryRequest
from ctxkeep.summarize.extractive import ExtractiveSummarizer
from ctxkeep.summarize.facts.ledger import Job, Todo, jobs_of, ledger_of, merge_todos, parse_job, parse_todo
from ctxkeep.summarize.sections.markdown import JOBS_TITLE, PLAN_TITLE, parse_sections
from ctxkeep.summarize.testing import fixed_summary_model

SUMMARIZER = ExtractiveSummarizer()


def call(cid: str, name: str, **args: object) -> ToolCall:
    return ToolCall(id=cid, name=name, arguments=json.dumps(args))


def said(text: str, *calls: ToolCall) -> Message:
    blocks: tuple[TextBlock | ToolCall, ...] = ((TextBlock(text=text),) if text else ()) + calls
    return Message(role="assistant", content=blocks)


def result(cid: str, text: str) -> Message:
    return Message(role="tool", content=(ToolResult(call_id=cid, content=text),))


def todo_write(cid: str, *items: tuple[str, str]) -> list[Message]:
    """A Claude Code TodoWrite call of (content, status) items, and its result."""
    todos = [{"content": c, "status": s, "activeForm": f"Doing {c.lower()}"} for c, s in items]
    return [said("", call(cid, "TodoWrite", todos=todos)), result(cid, "Todos have been modified successfully.")]


def plan(summary: str) -> list[str]:
    return parse_sections(summary).get("Progress", {}).get(PLAN_TITLE, [])


def summarize(messages: list[Message], previous: str | None = None) -> str:
    return SUMMARIZER.summarize(SummaryRequest(messages=tuple(messages), previous=previous))


def test_the_newest_list_wins_and_a_finished_item_stays_finished() -> None:
    messages = [
        Message.of("user", "Add a /health route."),
        *todo_write("t1", ("Write the route", "in_progress"), ("Add a test", "pending"), ("Ask about auth", "pending")),
        *todo_write("t2", ("Write the route", "completed"), ("Add a test", "in_progress")),  # auth left out
        *todo_write("t3", ("Write the route", "pending"), ("Add a test", "completed"), ("Update docs", "pending")),
        *todo_write("t4", ("Update docs", "in_progress")),  # a new list that leaves out the finished ones
    ]
    assert ledger_of(messages) == (
        Todo(text="Write the route", status="completed"),  # completed once: a later "pending" does not undo it
        Todo(text="Add a test", status="completed"),  # finished and left out of the newer list: kept
        Todo(text="Update docs", status="in_progress"),  # "Ask about auth" was open and left out: dropped
    )
    s = summarize(messages)
    assert plan(s) == ["[completed] Write the route", "[completed] Add a test", "[in_progress] Update docs"]
    # said once: the todo items are not repeated in the other lists
    progress = parse_sections(s)["Progress"]
    assert not any("Update docs" in i for sub in ("Done", "In Progress") for i in progress.get(sub, []))
    assert not any("Update docs" in i for i in parse_sections(s).get("Next Steps", {}).get("", []))


def test_codex_update_plan_and_task_tools() -> None:
    codex = [
        said("", call("p1", "update_plan", explanation="x", plan=[{"step": "Read the code", "status": "completed"}])),
        result("p1", "Plan updated"),
        said("", call("p2", "update_plan", plan=[{"step": "Fix the bug", "status": "in-progress"}])),
        result("p2", "Plan updated"),
    ]
    assert [t.render() for t in ledger_of(codex)] == ["[completed] Read the code", "[in_progress] Fix the bug"]
    tasks = [
        said("", call("k1", "TaskCreate", subject="Port the parser", description="from C to Rust")),
        result("k1", "Task #7 created successfully: Port the parser"),
        said("", call("k2", "TaskCreate", subject="Benchmark it")),
        result("k2", "Task #8 created successfully: Benchmark it"),
        said("", call("k3", "TaskUpdate", taskId="7", status="completed")),
        result("k3", "Updated task #7 status"),
    ]
    assert [t.render() for t in ledger_of(tasks)] == ["[completed] #7 Port the parser", "[pending] #8 Benchmark it"]
    # after a cut, an update names the item by the id the summary carried
    first = summarize([Message.of("user", "Port the parser."), *tasks])
    later = [said("", call("k4", "TaskUpdate", taskId="8", status="in_progress")), result("k4", "Updated")]
    assert plan(summarize(later, previous=first)) == ["[completed] #7 Port the parser", "[in_progress] #8 Benchmark it"]


def test_the_ledger_is_carried_exactly_and_updated_after_a_cut() -> None:
    first = summarize(
        [
            Message.of("user", "Migrate the settings to TOML."),
            *todo_write("t1", ("Read settings.py", "completed"), ("Write the TOML loader", "in_progress")),
        ]
    )
    assert plan(first) == ["[completed] Read settings.py", "[in_progress] Write the TOML loader"]
    # no todo call since: the ledger stands as it was, word for word, over several cuts
    again = first
    for n in range(3):
        again = summarize([Message.of("user", f"Also look at item {n}."), said("Looking.")], previous=again)
    assert plan(again) == plan(first)
    # a newer list replaces the states; the finished item it leaves out stays
    newer = summarize(todo_write("t2", ("Write the TOML loader", "completed"), ("Drop the INI reader", "pending")))
    merged = summarize(
        todo_write("t2", ("Write the TOML loader", "completed"), ("Drop the INI reader", "pending")), previous=again
    )
    assert plan(merged) == [
        "[completed] Read settings.py",
        "[completed] Write the TOML loader",
        "[pending] Drop the INI reader",
    ]
    assert plan(newer) == plan(merged)[1:]


def test_an_item_reads_back_as_it_was_written() -> None:
    for todo in (
        Todo(text="Fix #12 in `app.py`", status="pending"),
        Todo(text="Ship it", status="blocked", id="a1"),
        Todo(text="", status="in_progress", id="9"),  # an update of a task created before the archive began
    ):
        assert parse_todo(todo.render()) == todo
    assert parse_todo("Fix the route") is None and parse_todo("[done]") is None
    assert merge_todos((Todo(text="a", status="pending"),), ()) == (Todo(text="a", status="pending"),)


@pytest.mark.skipif(not (RAW / "cc_codemie_196820da.jsonl").exists(), reason="no shared transcripts")
def test_a_real_todo_list_survives_every_cut_exactly() -> None:
    messages = list(load(RAW / "cc_codemie_196820da.jsonl").messages)
    whole = ledger_of(messages)
    assert len(whole) >= 5 and {t.status for t in whole} >= {"completed"}
    # cut before every third user message, each summary made from the previous one and the new messages
    cuts = [i for i, m in enumerate(messages) if m.role == "user" and m.text.strip()][1::3]
    summary: str | None = None
    for start, end in zip([0, *cuts], [*cuts, len(messages)], strict=True):
        summary = summarize(messages[start:end], previous=summary)
    assert summary is not None
    assert plan(summary) == [t.render() for t in whole]


def started(cid: str, job: str, command: str) -> list[Message]:
    """A Claude Code Bash call run in the background, and its result naming the job and its output file."""
    return [
        said("", call(cid, "Bash", command=command, run_in_background=True)),
        result(cid, f"Command running in background with ID: {job}. Output is being written to: /tmp/t/{job}.output"),
    ]


def text_of(message: Message) -> str:
    return message.tool_result.text if message.tool_result is not None else message.text


def jobs(summary: str) -> list[str]:
    return parse_sections(summary).get("Progress", {}).get(JOBS_TITLE, [])


def test_background_jobs_started_and_not_ended_are_carried_until_they_end() -> None:
    messages = [
        Message.of("user", "Run the server and the slow tests."),
        *started("c1", "b1", "mix phx.server"),
        *started("c2", "b2", "mix test --slow"),
        *started("c3", "b3", "sleep 60"),
        said("", call("c4", "KillShell", shell_id="b3")),
        result("c4", "Successfully killed shell: b3 (sleep 60)"),
        said("", call("c5", "Read", file_path="/repo/notes.md")),
        result("c5", "x\n" * 60 + "Command running in background with ID: b9."),  # a file quoting the words
    ]
    assert jobs_of(messages).running == (
        Job(id="b1", what="mix phx.server", output="/tmp/t/b1.output"),
        Job(id="b2", what="mix test --slow", output="/tmp/t/b2.output"),
    )
    first = summarize(messages)
    assert jobs(first) == [
        "`b1` `mix phx.server` → `/tmp/t/b1.output`",
        "`b2` `mix test --slow` → `/tmp/t/b2.output`",
    ]
    # a cut with no word of them: carried as they were
    quiet = summarize([Message.of("user", "Meanwhile, read the docs."), said("Reading.")], previous=first)
    assert jobs(quiet) == jobs(first)
    # the tests end, reported by a notification; an output read that says "running" ends nothing
    ended = [
        said("", call("c6", "BashOutput", bash_id="b1")),
        result("c6", "<status>running</status>\n<stdout>Listening on :4000</stdout>"),
        Message.of(
            "user",
            "<task-notification>\n<task-id>b2</task-id>\n<status>completed</status>\n"
            "<summary>Background command completed (exit code 0)</summary>\n</task-notification>",
        ),
    ]
    assert jobs(summarize(ended, previous=quiet)) == ["`b1` `mix phx.server` → `/tmp/t/b1.output`"]
    assert parse_job(jobs(first)[0]) == Job(id="b1", what="mix phx.server", output="/tmp/t/b1.output")


@pytest.mark.skipif(not (RAW / "cc_spotter_258c7280.jsonl").exists(), reason="no shared transcripts")
def test_a_real_background_job_is_listed_while_it_runs_and_leaves_when_it_ends() -> None:
    messages = list(load(RAW / "cc_spotter_258c7280.jsonl").messages)
    start = next(i for i, m in enumerate(messages) if "background with ID: bd0afab" in text_of(m))
    end = next(i for i, m in enumerate(messages) if i > start and "<task-id>bd0afab</task-id>" in text_of(m))
    cut = start + 1
    first = summarize(messages[:cut])
    assert any(j.startswith("`bd0afab` ") and j.endswith("bd0afab.output`") for j in jobs(first))
    second = summarize(messages[cut : end + 1], previous=first)
    assert not any("bd0afab" in j for j in jobs(second))


def test_a_model_summary_that_drops_the_ledger_gets_it_back_and_carries_it() -> None:
    model = ModelSummarizer(fixed_summary_model(), settings=ModelSummarySettings(window=8_192, max_tokens=1_024))
    first = [
        Message(role="user", content=(TextBlock(text="Port the exporter."),)),
        *todo_write("t1", ("Read the exporter", "completed"), ("Write the tests", "in_progress")),
    ]
    summary = model.summarize(SummaryRequest(messages=tuple(first)))
    assert "[completed] Read the exporter" in summary and "[in_progress] Write the tests" in summary
    # the next summary updates the ledger the previous one carried, as the extractive summarizer does
    later = todo_write("t2", ("Write the tests", "completed"), ("Run the linter", "pending"))
    after = model.summarize(SummaryRequest(messages=tuple(later), previous=summary))
    assert "[completed] Write the tests" in after and "[pending] Run the linter" in after
    assert "[completed] Read the exporter" in after and "[in_progress] Write the tests" not in after


def test_a_model_summary_that_drops_the_background_jobs_gets_them_back_until_they_end() -> None:
    model = ModelSummarizer(fixed_summary_model(), settings=ModelSummarySettings(window=8_192, max_tokens=1_024))
    messages = [
        Message.of("user", "Run the server and the slow tests."),
        *started("c1", "b1", "mix phx.server"),
        *started("c2", "b2", "mix test --slow"),
    ]
    first = model.summarize(SummaryRequest(messages=tuple(messages)))
    assert "`b1` `mix phx.server` → `/tmp/t/b1.output`" in first and "`b2` `mix test --slow`" in first
    # the next cut says nothing of b1 and reports b2 finished: b1 is carried, b2 leaves, as in the extractive one
    ended = Message.of(
        "user", "<task-notification>\n<task-id>b2</task-id>\n<status>completed</status>\n</task-notification>"
    )
    after = model.summarize(SummaryRequest(messages=(Message.of("user", "Read the docs."), ended), previous=first))
    assert "`b1` `mix phx.server` → `/tmp/t/b1.output`" in after and "mix test --slow" not in after
