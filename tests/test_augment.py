"""What every model summary is given: the identifiers it lacks, failures, files, AGENTS.md rules; the cap."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.conftest import raw_params

from ctxkeep.formats import load
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.summarize import SECTIONS, SummaryRequest, missing_sections
from ctxkeep.summarize.agents_md import agents_rules
from ctxkeep.summarize.facts.collect import collect_facts
from ctxkeep.summarize.model.augment import augment
from ctxkeep.summarize.sections.markdown import PHRASES, parse_sections

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


# What a model that names nothing writes: the six sections, each "(none)".
SKELETON = "".join(f"## {title}\n- (none)\n\n" for title in SECTIONS)
MORE_IDS = re.compile(r"\((\d+) more identifiers in the archive\)")
MORE_FILES = re.compile(r"\((\d+) more files in the archive\)")
ID_HEADING = re.compile(r"^### (?:exact identifiers|精确标识符)$", re.MULTILINE | re.IGNORECASE)

# A reply with its own identifier subsection ({own}, under Critical Context, before another one) and
# room for one elsewhere ({elsewhere}, at the end of Key Decisions).
WITH_OWN = """\
## Goal
- Fix the order bug

## Constraints & Preferences
- (none)

## Progress
### Done
- Ran the tests

## Key Decisions
- Patch the parser
{elsewhere}
## Next Steps
- Rerun the tests

## Critical Context
{own}### Notes
- the parser is old
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
    """What `ctxkeep.summarize.ModelSummarizer` makes of a valid `reply` (its audit and retries aside)."""
    return augment(reply, request, agents_md=agents_md)


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


def test_headings_inside_code_fences_are_left_where_they_are() -> None:
    # An example the model quoted in Key Decisions, with a Critical Context and an identifier list inside a fence.
    quoted = "- an example reply\n```\n## Critical Context\n### Exact identifiers\n- `fake.py`\n```\n"
    reply = WITH_OWN.format(own="### Exact identifiers\n- `src/app.py`\n", elsewhere=quoted)
    summary = summarize(SummaryRequest(messages=conversation()), reply)
    sections = parse_sections(summary)
    assert (
        sections["Key Decisions"][""][-1]
        == "an example reply\n```\n## Critical Context\n### Exact identifiers\n- `fake.py`\n```"
    )
    identifiers = sections["Critical Context"][PHRASES["identifiers"]["en"]]
    assert identifiers[0] == "`src/app.py`" and "`12345678`" in identifiers and "`fake.py`" not in identifiers
    assert len(ID_HEADING.findall(summary)) == 2  # the real one, and the quoted one left in its fence
    fenced_rules = "```\n## Red Lines\n- quoted\n```\n~~~\n```\n# Red Lines\n~~~\n## Red Lines\n- the real one\n"
    assert agents_rules(fenced_rules) == {"Red Lines": "- the real one"}


def test_the_cap_trims_only_the_model_text() -> None:
    long = GARBAGE.replace("- the the the", "\n".join(f"- filler item {j} " + "x" * 80 for j in range(40)))
    summary = summarize(SummaryRequest(messages=conversation(), max_chars=3_000), long, agents_md=AGENTS)
    assert len(summary) <= 3_000
    assert "filler item 39" not in summary
    assert "- Never push to `main`.\n- Never delete /var/data." in summary
    assert "/repo/src/cfg.py" in summary and "12345678" in summary


def many_paths(n: int) -> tuple[Message, ...]:
    return (Message.of("user", " ".join(f"/srv/app/module_{j}/file_{j}.py" for j in range(n))),)


def test_too_many_identifiers_leave_a_note_that_counts_exactly() -> None:
    messages = many_paths(400)
    summary = summarize(SummaryRequest(messages=messages, max_chars=3_000))
    assert len(summary) <= 3_000
    lost = [i for i in collect_facts(messages, identifier_limit=None).identifiers if i not in summary]
    assert lost and MORE_IDS.findall(summary) == [str(len(lost))]


def test_identifiers_past_the_extractive_cap_are_listed() -> None:
    messages = many_paths(400)
    assert len(collect_facts(messages).identifiers) == 300
    everything = collect_facts(messages, identifier_limit=None).identifiers
    assert len(everything) >= 400
    summary = summarize(SummaryRequest(messages=messages, max_chars=40_000))
    assert [i for i in everything if i not in summary] == []
    assert "more identifiers in the archive" not in summary


@pytest.mark.parametrize("limit", [-1, 2.5, True, "300"])
def test_identifier_limit_is_checked(limit: object) -> None:
    with pytest.raises(ValueError, match="identifier_limit"):
        collect_facts(many_paths(3), identifier_limit=limit)  # type: ignore[arg-type]


def test_identifier_limit_zero_keeps_none() -> None:
    assert collect_facts(many_paths(3), identifier_limit=0).identifiers == ()


@pytest.mark.parametrize("heading", ["Exact identifiers", "exact IDENTIFIERS", PHRASES["identifiers"]["zh"]])
def test_the_models_own_identifier_subsection_is_extended_not_repeated(heading: str) -> None:
    reply = WITH_OWN.format(own=f"### {heading}\n- `12345678`\n- (none)\n\n", elsewhere="")
    summary = summarize(SummaryRequest(messages=conversation(), language="en"), reply)
    assert missing_sections(summary) == []
    assert ID_HEADING.findall(summary) == [f"### {heading}"]
    critical = list(parse_sections(summary)["Critical Context"])
    # the model's subsection is moved last of its own, the appended lists follow inside Critical Context
    assert critical == ["Notes", heading, "Tool failures", "Files read", "Files modified"]
    items = parse_sections(summary)["Critical Context"][heading]
    assert items[0] == "`12345678`" and "(none)" not in items
    assert {"`#482`", "`localhost:8080`", "`https://example.com/api`"} <= set(items[1:])
    assert summary.count("12345678") == 1


@pytest.mark.parametrize("in_critical", [True, False])
def test_an_identifier_subsection_elsewhere_moves_into_critical_context(in_critical: bool) -> None:
    own = "### Exact identifiers\n- `12345678`\n\n" if in_critical else ""
    reply = WITH_OWN.format(own=own, elsewhere="### Exact identifiers\n- `#482`\n")
    summary = summarize(SummaryRequest(messages=conversation(), language="en"), reply)
    assert missing_sections(summary) == []
    assert len(ID_HEADING.findall(summary)) == 1
    sections = parse_sections(summary)
    assert list(sections["Key Decisions"]) == [""]
    assert "- Patch the parser\n\n## Next Steps" in summary
    items = sections["Critical Context"]["Exact identifiers"]
    mine = ["`12345678`", "`#482`"] if in_critical else ["`#482`"]
    assert items[: len(mine)] == mine
    for ident in collect_facts(conversation(), identifier_limit=None).identifiers:
        assert ident in summary
    assert summary.count("#482") == 1
    last = ["Exact identifiers", "Tool failures", "Files read", "Files modified"]
    assert list(sections["Critical Context"])[-4:] == last


def test_notes_are_listed_whole_in_critical_context() -> None:
    gap = "Messages 1–40 (part 1 of 3) could not be summarized (timeout); read them in the archive."
    long = GARBAGE.replace("- the the the", "\n".join(f"- filler item {j} " + "x" * 80 for j in range(40)))
    request = SummaryRequest(messages=conversation(), max_chars=3_000, language="en")
    summary = augment(long, request, notes=[gap])
    assert len(summary) <= 3_000
    assert parse_sections(summary)["Critical Context"]["Not summarized"] == [gap]
    with pytest.raises(TypeError, match="notes"):
        augment(GARBAGE, request, notes=gap)


def test_an_identifier_spanning_lines_is_carried_verbatim() -> None:
    previous = augment(SKELETON, SummaryRequest(messages=conversation(), language="en"))
    previous = previous.replace("- `12345678`\n", "-\n```\nport =\n    8080\n```\n- `12345678`\n")
    later = (Message.of("user", "now look at docs/README.md please"),)
    summary = augment(SKELETON, SummaryRequest(messages=later, previous=previous, language="en"))
    assert "\n```\nport =\n    8080\n```\n" in summary and "12345678" in summary


def test_previous_identifiers_and_files_are_carried() -> None:
    first = summarize(SummaryRequest(messages=conversation()))
    later = (Message.of("user", "now look at docs/README.md please"),)
    second = summarize(SummaryRequest(messages=later, previous=first))
    for kept in ("12345678", "https://example.com/api", "/repo/src/app.py", "/repo/src/cfg.py", "docs/README.md"):
        assert kept in second


@pytest.mark.parametrize("max_chars", [16_000, 4_000])
@pytest.mark.parametrize("path", raw_params())
def test_no_identifier_of_a_real_transcript_is_lost_uncounted(path: Path | None, max_chars: int) -> None:
    """Of the first 60% of a real transcript, summarized by a model that names nothing, each identifier
    and file is in the summary or counted, exactly, by the note of its list."""
    assert path is not None
    messages = load(path).conversations[0].messages
    part = tuple(messages[: len(messages) * 6 // 10])
    # the tight size also has the model write its own (empty) identifier subsection, to be merged
    reply = SKELETON if max_chars > 10_000 else SKELETON + "### Exact identifiers\n- (none)\n"
    summary = augment(reply, SummaryRequest(messages=part, max_chars=max_chars))
    assert len(summary) <= max_chars
    assert missing_sections(summary) == []
    assert len(ID_HEADING.findall(summary)) <= 1
    facts = collect_facts(part, identifier_limit=None)
    files = set(facts.files_read) | set(facts.files_modified)
    lost_files = [f for f in files if f not in summary]
    lost = [i for i in facts.identifiers if i not in summary and i not in files]
    assert sum(map(int, MORE_IDS.findall(summary))) == len(lost)
    assert sum(map(int, MORE_FILES.findall(summary))) == len(lost_files)


def test_a_file_the_appended_lists_name_is_not_listed_twice() -> None:
    call = ToolCall.from_input(id="c1", name="Read", input={"file_path": "/repo/src/app.py"})
    msgs = (
        Message.of("user", "Read the app."),
        Message(role="assistant", content=(call,)),
        Message(role="tool", content=(ToolResult(call_id="c1", content="print(1)"),)),
    )
    reply = SKELETON + "### Exact identifiers\n- `/repo/src/app.py`\n- `PORT=8080`\n"
    out = augment(reply, SummaryRequest(messages=msgs))
    assert out.count("- `/repo/src/app.py`") == 1 and "- `PORT=8080`" in out
    assert parse_sections(out)["Critical Context"][PHRASES["files_read"]["en"]] == ["`/repo/src/app.py`"]
