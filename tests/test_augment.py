"""What every model summary is given: the identifiers it lacks, failures, files, AGENTS.md rules; the cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import raw_params

from ctxkeep.formats import load
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.providers.deterministic import DeterministicModel
from ctxkeep.summarize import SummaryRequest, missing_sections
from ctxkeep.summarize.augment import agents_rules
from ctxkeep.summarize.facts import collect_facts
from ctxkeep.summarize.model import ModelSummarizer

GARBAGE = "".join(
    f"## {t}\n- the the the\n\n"
    for t in ("Goal", "Constraints & Preferences", "Progress", "Key Decisions", "Next Steps", "Critical Context")
)

AGENTS = """\
# Agents

## session startup
Run `make setup` first.
  - then read NOTES.md

## Other
not copied

### Red Lines
- Never push to `main`.
- Never delete /var/data.
"""


def conversation() -> tuple[Message, ...]:
    call = ToolCall(id="c1", name="Bash", arguments=json.dumps({"command": "pytest -x tests/test_app.py"}))
    read = ToolCall(id="c2", name="Read", arguments=json.dumps({"file_path": "/repo/src/app.py"}))
    edit = ToolCall(id="c3", name="Edit", arguments=json.dumps({"file_path": "/repo/src/cfg.py", "old": "a"}))
    return (
        Message.of("user", "Fix order 12345678 on https://example.com/api and localhost:8080, see #482"),
        Message(role="assistant", content=(call, read, edit)),
        Message(role="tool", content=(ToolResult(call_id="c1", content="E   KeyError: 'x'\n1 failed", exit_code=1),)),
        Message(role="tool", content=(ToolResult(call_id="c2", content="ok"),)),
        Message(role="tool", content=(ToolResult(call_id="c3", content="ok"),)),
    )


def summarize(request: SummaryRequest, reply: str = GARBAGE, agents_md: str | None = None) -> str:
    model = DeterministicModel()
    model.enqueue(reply)
    return ModelSummarizer(model, agents_md=agents_md).summarize(request)


def test_identifiers_failures_files_and_rules_are_appended() -> None:
    messages = conversation()
    summary = summarize(SummaryRequest(messages=messages), agents_md=AGENTS)
    assert missing_sections(summary) == []
    for ident in collect_facts(messages).identifiers:
        assert ident in summary
    assert "12345678" in summary and "https://example.com/api" in summary
    assert "KeyError: 'x'" in summary and "exit 1" in summary
    assert "/repo/src/app.py" in summary and "/repo/src/cfg.py" in summary
    assert "Run `make setup` first.\n  - then read NOTES.md" in summary
    assert "- Never push to `main`.\n- Never delete /var/data." in summary
    assert "not copied" not in summary


def test_agents_rules_match_any_level_case_insensitively() -> None:
    rules = agents_rules(AGENTS)
    assert rules == {
        "Session Startup": "Run `make setup` first.\n  - then read NOTES.md",
        "Red Lines": "- Never push to `main`.\n- Never delete /var/data.",
    }
    assert agents_rules("# x\n```\n# Red Lines\n```\n") == {}


def test_the_cap_trims_only_the_model_text() -> None:
    long = GARBAGE.replace("- the the the", "\n".join(f"- filler item {j} " + "x" * 80 for j in range(40)))
    summary = summarize(SummaryRequest(messages=conversation(), max_chars=3_000), long, agents_md=AGENTS)
    assert len(summary) <= 3_000
    assert "filler item 39" not in summary
    assert "- Never push to `main`.\n- Never delete /var/data." in summary
    assert "/repo/src/cfg.py" in summary and "12345678" in summary


def test_too_many_identifiers_leave_a_note() -> None:
    text = " ".join(f"/srv/app/module_{j}/file_{j}.py" for j in range(400))
    summary = summarize(SummaryRequest(messages=(Message.of("user", text),), max_chars=3_000))
    assert len(summary) <= 3_000
    assert "more identifiers in the archive" in summary


def test_previous_identifiers_and_files_are_carried() -> None:
    first = summarize(SummaryRequest(messages=conversation()))
    later = (Message.of("user", "now look at docs/README.md please"),)
    second = summarize(SummaryRequest(messages=later, previous=first))
    for kept in ("12345678", "https://example.com/api", "/repo/src/app.py", "/repo/src/cfg.py", "docs/README.md"):
        assert kept in second


@pytest.mark.parametrize("path", raw_params()[:6])
def test_every_identifier_of_a_real_transcript_survives(path: Path | None) -> None:
    assert path is not None
    messages = load(path).conversations[0].messages[:200]
    request = SummaryRequest(messages=tuple(messages))
    summary = summarize(request)
    assert len(summary) <= request.max_chars
    ids = collect_facts(request.messages).identifiers
    lost = [i for i in ids if i not in summary]
    assert not lost or "more identifiers in the archive" in summary
