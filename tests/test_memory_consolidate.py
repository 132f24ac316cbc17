"""Daily consolidation (no entry lost, missed days caught up, backup first) and the rules after a compaction."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from ctxkeep import DeterministicModel, EngineSettings, Session
from ctxkeep.folder import MemoryFolder
from ctxkeep.memory.consolidate import STATE_FILE, consolidate, cron_line, next_run, pending_logs
from ctxkeep.memory.files import MEMORY_FILE, append_daily, append_to_section, entries_of
from ctxkeep.memory.rules import rules_text
from ctxkeep.messages import Message
from ctxkeep.settings import CompactSettings, MemorySettings
from ctxkeep.summarize.testing import fixed_summary_model

DAY1 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
DAY2 = datetime(2026, 9, 2, 11, 30, tzinfo=UTC)
MIDNIGHT = datetime(2026, 9, 3, 0, 0, tzinfo=UTC)


def _two_days() -> MemoryFolder:
    folder = MemoryFolder()
    append_to_section(folder, "Deploys go out on Tuesdays", section="Rules")  # written by a person
    append_daily(folder, "The user prefers short answers", at=DAY1, tag="preference")
    append_daily(folder, "`make test` needs DOCKER_HOST set", at=DAY1, tag="lesson")
    append_daily(folder, "a free note\nover two lines", at=DAY1)
    append_daily(folder, "The user prefers short answers", at=DAY2, tag="preference")  # a repeat
    append_daily(folder, "The staging URL is https://staging.example.org", at=DAY2, tag="fact")
    return folder


def test_missed_days_are_merged_by_tag_and_nothing_is_lost_or_repeated() -> None:
    folder = _two_days()
    assert pending_logs(folder) == ["memory/2026-09-01.md", "memory/2026-09-02.md"]
    done = consolidate(folder, now=MIDNIGHT)
    assert (done.logs, done.added, done.repeated, done.by) == (
        ("memory/2026-09-01.md", "memory/2026-09-02.md"),
        4,
        1,
        "rule",
    )
    sections = {(e.section, e.text) for e in entries_of(folder.files[MEMORY_FILE].decode())}
    assert sections == {
        ("Rules", "Deploys go out on Tuesdays"),
        ("Preferences", "The user prefers short answers (2026-09-01)"),
        ("Lessons", "`make test` needs DOCKER_HOST set (2026-09-01)"),
        ("Notes", "a free note\nover two lines (2026-09-01)"),
        ("Facts", "The staging URL is https://staging.example.org (2026-09-02)"),
    }
    assert done.backup == "memory/backup/MEMORY-20260903T000000.md"
    assert folder.files[done.backup] == b"# MEMORY\n\n## Rules\n\n- Deploys go out on Tuesdays\n"
    assert pending_logs(folder) == []
    again = consolidate(folder, now=MIDNIGHT)
    assert again.logs == () and again.backup is None


def test_a_log_written_to_after_its_merge_is_merged_again_without_repeats() -> None:
    folder = _two_days()
    consolidate(folder, now=MIDNIGHT)
    append_daily(folder, "One more thing learned late", at=DAY2)
    done = consolidate(folder, now=MIDNIGHT.replace(hour=1))
    assert (done.logs, done.added, done.repeated) == (("memory/2026-09-02.md",), 1, 2)
    state = json.loads(folder.files[STATE_FILE])
    assert set(state["files"]) == {"memory/2026-09-01.md", "memory/2026-09-02.md"}


def test_the_model_may_merge_and_supersede_but_never_drop_an_entry() -> None:
    folder = _two_days()
    append_daily(folder, "The user now prefers detailed answers", at=DAY2, tag="preference")
    model = fixed_summary_model()
    tidy = (
        "# MEMORY\n\n## Rules\n\n- Deploys go out on Tuesdays\n\n## Preferences\n\n"
        "- The user now prefers detailed answers (2026-09-02)\n"
    )
    model.enqueue(
        json.dumps(
            {
                "memory": tidy,
                "superseded": [
                    {
                        "entry": "The user prefers short answers (2026-09-01)",
                        "by": "The user now prefers detailed answers (2026-09-02)",
                    }
                ],
            }
        )
    )
    done = consolidate(folder, now=MIDNIGHT, model=model)
    assert (done.by, done.superseded) == ("model", 1)
    entries = {(e.section, e.text) for e in entries_of(folder.files[MEMORY_FILE].decode())}
    assert (
        "Superseded",
        "The user prefers short answers (2026-09-01) (superseded by: The user now prefers detailed answers"
        " (2026-09-02))",
    ) in entries
    # The model left out three entries without a word: they are put back in their sections.
    assert ("Lessons", "`make test` needs DOCKER_HOST set (2026-09-01)") in entries
    assert ("Facts", "The staging URL is https://staging.example.org (2026-09-02)") in entries
    assert ("Notes", "a free note\nover two lines (2026-09-01)") in entries


def test_a_model_answering_nonsense_leaves_the_rules_merge() -> None:
    folder = _two_days()
    done = consolidate(folder, now=MIDNIGHT, model=DeterministicModel(default=lambda _: "sure!"))
    assert done.by == "rule" and done.added == 4


def test_the_schedule_times_and_the_cron_line() -> None:
    assert next_run(datetime(2026, 9, 2, 23, 59), "00:00") == datetime(2026, 9, 3, 0, 0)
    assert next_run(datetime(2026, 9, 3, 0, 0), "00:00") == datetime(2026, 9, 4, 0, 0)
    assert next_run(datetime(2026, 9, 3, 1, 0), "03:30") == datetime(2026, 9, 3, 3, 30)
    assert cron_line("/srv/agent ws", "03:30") == "30 3 * * * ctxkeep memory consolidate --workspace '/srv/agent ws'"
    line = cron_line("/srv/50%", "03:30", program=("/opt/py", "-m", "ctxkeep.cli"))
    assert line == "30 3 * * * /opt/py -m ctxkeep.cli memory consolidate --workspace /srv/50\\%"
    with pytest.raises(ValueError, match="HH:MM"):
        next_run(DAY1, "24:00")


AGENTS_MD = """# Project

## Session Startup

Read NOTES.md first. Today's log: memory/YYYY-MM-DD.md.

## Style

Be brief.

## Red Lines

- Never push to main.
- Never print secrets.
"""


def test_rules_text_takes_the_sections_dates_them_and_fits_the_cap() -> None:
    text = rules_text(AGENTS_MD, MemorySettings(), date(2026, 9, 3))
    assert text == (
        "<workspace-rules source=AGENTS.md>\n## Session Startup\n\nRead NOTES.md first. Today's log:"
        " memory/2026-09-03.md.\n\n## Red Lines\n\n- Never push to main.\n- Never print secrets.\n</workspace-rules>"
    )
    short = rules_text(AGENTS_MD, MemorySettings(rules_max_chars=60), date(2026, 9, 3))
    assert short is not None and "[… the rest is in AGENTS.md]" in short
    body = short.split("\n", 1)[1].rsplit("\n", 1)[0]
    assert len(body) <= 60
    assert rules_text("# nothing here", MemorySettings(), date(2026, 9, 3)) is None
    assert rules_text(AGENTS_MD, MemorySettings(rules_sections=("Style",)), date(2026, 9, 3)) is not None


def test_every_context_after_a_compaction_carries_the_rules_read_from_disk_then() -> None:
    store = MemoryFolder()
    store.write("AGENTS.md", AGENTS_MD.encode())
    settings = EngineSettings(compact=CompactSettings(max_input_length=4_000, reserve_cap=400), summary_max_chars=2_500)
    with Session(store, settings=settings) as session:
        seen = []
        previous = None
        for i in range(80):
            session.add([Message.of("user", f"step {i} " + "words " * 40), Message.of("assistant", "ok " * 30)])
            if any(s[0] for s in seen):  # changed on disk after the first compaction
                store.write("AGENTS.md", AGENTS_MD.replace("Never print secrets.", "Never delete backups.").encode())
            step = session.prepare("system", now=MIDNIGHT)
            summary = step.context.summary or ""
            seen.append((step.compaction is not None, "<workspace-rules" in summary, "Never delete backups" in summary))
            assert step.context.tokens == sum(session.counter.count_each(step.context.as_messages()))
            if step.compaction is None and previous is not None:
                # Until the next compaction the summary sent, rules included, stays as it was: a prompt cache keeps it.
                assert summary == previous
            previous = summary
            # The summary the next compaction builds on never holds them.
            assert "<workspace-rules" not in (step.live.summary_body or "")
    compacted = [s for s in seen if s[0]]
    assert len(compacted) >= 2
    first = next(k for k, s in enumerate(seen) if s[0])
    assert all(s[1] for s in seen[first:])  # every context from the first compaction on
    assert not any(s[1] for s in seen[:first])  # and none before
    assert compacted[-1][2] and not compacted[0][2]  # re-read from disk at each compaction


def test_an_agents_md_link_leaves_the_rules_out_and_the_compaction_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "AGENTS.md").write_text(AGENTS_MD)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "AGENTS.md").symlink_to(repo / "AGENTS.md")
    settings = EngineSettings(compact=CompactSettings(max_input_length=4_000, reserve_cap=400), summary_max_chars=2_500)
    with Session.open(workspace, settings=settings) as session:
        session.add([Message.of("user", "words " * 3_000)])
        session.add([Message.of("assistant", "ok")])
        step = session.compact(now=MIDNIGHT)
    assert step.compaction is not None
    assert "<workspace-rules" not in (step.context.summary or "")
    assert "left out of this context" in caplog.text
