"""The memory flush: what the rule extracts, the model loop, and the session hook (once per cycle, no loop)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxkeep import DeterministicModel, EngineSettings, ModelSummarizer, Session
from ctxkeep import plan as plan_mod
from ctxkeep.errors import ProviderError
from ctxkeep.folder import MemoryFolder
from ctxkeep.memory.extract import extract, lessons, preferences
from ctxkeep.memory.files import entries_of
from ctxkeep.memory.flush import STATE_FILE, flush, flushed_cycle
from ctxkeep.memory.hooks import MemoryHooks
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.settings import CompactSettings, MemorySettings, ModelSummarySettings
from ctxkeep.summarize.testing import fixed_summary, fixed_summary_model

NOW = datetime(2026, 5, 2, 18, 30, tzinfo=UTC)


def _call(i: int, command: str) -> Message:
    return Message(
        role="assistant", content=(ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": command})),)
    )


def _result(i: int, text: str, code: int) -> Message:
    return Message(role="tool", content=(ToolResult(call_id=f"c{i}", content=text, exit_code=code),))


CONVERSATION = [
    Message.of("user", "Set up the project. I prefer uv over pip. Can you also check the tests?"),
    Message.of("user", "以后不要用 sudo 安装东西。我喜欢简洁的回答。你觉得呢？"),
    _call(1, "pip install -r requirements.txt"),
    _result(1, "Collecting x\nERROR: externally-managed-environment\nhint: use a venv", 1),
    _call(2, "ls"),
    _result(2, "src tests", 0),
    _call(3, "uv pip install -r requirements.txt"),
    _result(3, "Installed 12 packages", 0),
    _call(4, "pytest -q"),
    _result(4, "flaky network", 1),
    _call(5, "pytest -q"),
    _result(5, "3 passed", 0),
    Message.of("assistant", "I always prefer to run the linter first."),  # the agent's, not the user's
]


def test_the_rule_finds_stated_preferences_and_a_failure_then_what_worked() -> None:
    assert [n.text for n in preferences(CONVERSATION)] == [
        "I prefer uv over pip.",
        "以后不要用 sudo 安装东西。",
        "我喜欢简洁的回答。",
    ]
    (lesson,) = lessons(CONVERSATION)  # the flaky pytest worked on the same call again: no lesson
    assert lesson.text == (
        "bash: `pip install -r requirements.txt` failed (exit 1: ERROR: externally-managed-environment);"
        " `uv pip install -r requirements.txt` worked"
    )  # the `ls` between them is about something else
    assert len(extract(CONVERSATION + CONVERSATION)) == 4  # repeats dropped


def test_a_lesson_pairs_a_failure_with_the_next_success_of_the_same_tool() -> None:
    messages = [
        Message(role="assistant", content=(ToolCall(id="a", name="read", arguments='{"path": "/etc/app.yml"}'),)),
        Message(role="tool", content=(ToolResult(call_id="a", content="No such file or directory", is_error=True),)),
        Message(role="assistant", content=(ToolCall(id="b", name="read", arguments='{"path": "/etc/app/app.yml"}'),)),
        Message(role="tool", content=(ToolResult(call_id="b", content="port: 80"),)),
    ]
    (lesson,) = lessons(messages)
    assert lesson.text == "read: `/etc/app.yml` failed (No such file or directory); `/etc/app/app.yml` worked"


def test_nothing_to_store_writes_nothing() -> None:
    folder = MemoryFolder()
    run = flush(folder, [Message.of("user", "What is 2 + 2?"), Message.of("assistant", "4")], now=NOW)
    assert run.notes == () and run.written_to is None
    assert folder.files == {}


def test_the_rule_writes_tagged_entries_to_the_days_log() -> None:
    folder = MemoryFolder()
    run = flush(folder, CONVERSATION, now=NOW)
    assert run.by == "rule" and run.written_to == "memory/2026-05-02.md"
    texts = [e.text for e in entries_of(folder.files["memory/2026-05-02.md"].decode())]
    assert texts[0] == "18:30 [preference] I prefer uv over pip."
    assert sum("[lesson]" in t for t in texts) == 1


def test_the_model_searches_writes_and_stops_within_its_steps() -> None:
    folder = MemoryFolder()
    model = fixed_summary_model()
    model.enqueue(
        json.dumps({"action": "search", "query": "package manager", "entries": []}),
        json.dumps(
            {
                "action": "write",
                "query": "",
                "entries": [
                    {"kind": "preference", "text": "Use uv, not pip, for installs."},
                    {"kind": "lesson", "text": "pip fails with externally-managed-environment; uv pip works."},
                ],
            }
        ),
        json.dumps({"action": "done", "query": "", "entries": []}),
    )
    run = flush(folder, CONVERSATION, now=NOW, model=model)
    assert (run.by, run.calls) == ("model", 3)
    assert len(model.requests) == 3 and model.requests[0].schema is not None
    assert "(nothing saved about this)" in model.requests[1].turns[-1].text
    log = folder.files["memory/2026-05-02.md"].decode()
    assert "[preference] Use uv, not pip, for installs." in log and "[lesson] pip fails" in log


def test_a_model_that_never_stops_is_cut_off_and_one_that_fails_falls_back_to_the_rule() -> None:
    looping = DeterministicModel(default=lambda _: '{"action": "search", "query": "x", "entries": []}')
    run = flush(MemoryFolder(), CONVERSATION, now=NOW, model=looping, steps=2)
    assert (run.by, run.calls, run.notes) == ("model", 2, ())
    broken = fixed_summary_model()
    broken.enqueue(ProviderError("down", provider="deterministic"))
    folder = MemoryFolder()
    run = flush(folder, CONVERSATION, now=NOW, model=broken)
    assert run.by == "rule" and run.errors and len(run.notes) == 4
    nonsense = DeterministicModel(default=lambda _: "I think you should save the preferences.")
    assert flush(MemoryFolder(), CONVERSATION, now=NOW, model=nonsense).by == "rule"


def _session_settings(flush: bool = True) -> EngineSettings:
    return EngineSettings(
        compact=CompactSettings(max_input_length=4_000, reserve_cap=400),
        summary_max_chars=2_500,
        memory=MemorySettings(flush=flush),
    )


def _turns(n: int, start: int = 0) -> list[Message]:
    out = []
    for i in range(start, start + n):
        out.append(Message.of("user", f"Turn {i}: I prefer answers in French. " + "context " * 40))
        out.append(Message.of("assistant", f"Réponse {i}. " + "texte " * 40))
    return out


def test_the_session_flushes_once_per_compaction_and_never_twice_for_a_cycle() -> None:
    store = MemoryFolder()
    with Session(store, settings=_session_settings()) as session:
        compactions, cycles = 0, set()
        for i in range(60):
            session.add(_turns(1, i))
            archived_before = session.live.archive.lines
            step = session.prepare("system", now=NOW)
            if step.compaction is not None:
                compactions += 1
                assert flushed_cycle(store) == archived_before  # the cycle: what the archive held before it
                cycles.add(archived_before)
        assert compactions >= 2 and len(cycles) == compactions
        log = store.files["memory/2026-05-02.md"].decode()
        entries = entries_of(log)
        assert entries and all("[preference] Turn" in e.text for e in entries)
        # Each compaction noted only what it archived: no entry twice.
        assert len({e.text for e in entries}) == len(entries)
        # A flush already recorded for this cycle (a crash after it, say) is not run again.
        hooks = MemoryHooks(store=store, settings=_session_settings().memory, counter=session.counter)
        plan = plan_mod.plan(session.live, session.settings, now=NOW, force=True)
        assert isinstance(plan, plan_mod.Plan)
        store.write(STATE_FILE, json.dumps({"cycle": session.live.archive.lines}).encode())
        hooks.before_compaction(plan, session.live)
        assert entries_of(store.files["memory/2026-05-02.md"].decode()) == entries


def test_flush_state_is_kept_in_the_workspace_and_off_by_default(tmp_path: os.PathLike[str]) -> None:
    with Session.open(tmp_path, settings=_session_settings(flush=False)) as session:
        session.add(_turns(30))
        assert session.prepare("system", now=NOW).compaction is not None
        archived = session.live.archive.lines
    assert not os.path.exists(os.path.join(os.fspath(tmp_path), "memory"))
    with Session.open(tmp_path, settings=_session_settings()) as session:
        session.add(_turns(30, 30))
        assert session.prepare("system", now=NOW).compaction is not None
    state = json.loads((Path(tmp_path) / STATE_FILE).read_text())
    assert state["cycle"] == archived


def test_the_compaction_model_is_the_flush_model() -> None:
    flush_reply = json.dumps({"action": "done", "query": "", "entries": []})
    model = DeterministicModel(default=lambda r: flush_reply if "long-term memory" in r.system else fixed_summary(r))
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=16_000, max_tokens=1_000))
    store = MemoryFolder()
    settings = EngineSettings(
        compact=CompactSettings(max_input_length=8_000, reserve_cap=400), memory=MemorySettings(flush=True)
    )
    with Session(store, settings=settings, summarizer=summarizer) as session:
        session.add(_turns(10))
        assert session.prepare("system", now=NOW).compaction is None
        assert model.requests == []  # under the threshold: nothing to flush, nothing cut
        session.add(_turns(60, 10))
        assert session.prepare("system", now=NOW).compaction is not None
    flushes = [r for r in model.requests if "long-term memory" in r.system]
    assert len(flushes) == 1 and len(model.requests) > 1  # the summary's call(s), then the flush's
    assert flushed_cycle(store) == 0 and "memory/2026-05-02.md" not in store.files


def test_the_model_flush_keeps_to_its_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxkeep.memory import flush as flush_mod

    model = DeterministicModel(default=lambda _: '{"action": "done", "query": "", "entries": []}')
    flush(MemoryFolder(), CONVERSATION, now=NOW, model=model)
    assert 0 < model.requests[0].timeout <= flush_mod.BUDGET_SECONDS  # each call gets only what is left
    monkeypatch.setattr(flush_mod, "BUDGET_SECONDS", 0.0)
    late = DeterministicModel(default=lambda _: '{"action": "done", "query": "", "entries": []}')
    run = flush(MemoryFolder(), CONVERSATION, now=NOW, model=late)
    assert late.requests == [] and run.by == "rule" and len(run.notes) == 4


def _noted_turns(store: MemoryFolder) -> list[int]:
    """The turns whose stated preference the day's log holds, in the order noted."""
    raw = store.files.get("memory/2026-05-02.md")
    texts = [e.text for e in entries_of(raw.decode())] if raw is not None else []
    return [int(t.split("Turn ")[1].split(":")[0]) for t in texts if "[preference] Turn" in t]


def _turns_in(messages: tuple[Message, ...] | list[Message]) -> list[int]:
    return [int(m.text.split(":")[0].removeprefix("Turn ")) for m in messages if m.role == "user"]


def test_a_manual_compact_of_a_small_context_notes_exactly_what_it_archives() -> None:
    # Under the compaction's reserve: a /compact still keeps at most half, and the flush must note that half.
    store = MemoryFolder()
    with Session(store, settings=_session_settings()) as session:
        session.add([Message.of("user", f"Turn {i}: I prefer tabs, variant {i}.") for i in range(8)])
        step = session.compact(system="system", now=NOW)
    assert step.compaction is not None and step.archived
    assert _noted_turns(store) == _turns_in(step.archived)


def test_each_automatic_compaction_notes_exactly_what_it_archives() -> None:
    store = MemoryFolder()
    with Session(store, settings=_session_settings()) as session:
        noted = archived = 0
        for i in range(60):
            session.add(_turns(1, i))
            step = session.prepare("system", now=NOW)
            if step.compaction is not None:
                archived += 1
                assert _noted_turns(store)[noted:] == _turns_in(step.archived)
                noted = len(_noted_turns(store))
        assert archived >= 2
