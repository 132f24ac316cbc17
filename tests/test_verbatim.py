"""What a summary carries word for word: the user's messages and the standing instructions, with either summarizer."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.origin import origin, origins
from ctxkeep.settings import ModelSummarySettings
from ctxkeep.summarize import ExtractiveSummarizer, ModelSummarizer, Summarizer, SummaryRequest, missing_sections
from ctxkeep.summarize.sections.markdown import parse_sections
from ctxkeep.summarize.testing import fixed_summary_model
from ctxkeep.summarize.verbatim import (
    INSTRUCTIONS_MAX_SHARE,
    INSTRUCTIONS_TITLE,
    SECTIONS_SKELETON,
    USER_TITLE,
    budgets,
    carried,
    host_summary,
    read_carried,
    render_carried,
    split_carried,
)


def user(text: str, **extra: object) -> Message:
    return Message(role="user", content=(TextBlock(text=text),), extra=extra)


def said(text: str, *calls: ToolCall) -> Message:
    return Message(role="assistant", content=(*([TextBlock(text=text)] if text else []), *calls))


def run(cid: str, command: str, output: str) -> list[Message]:
    call = ToolCall.from_input(id=cid, name="Bash", input={"command": command})
    return [said("", call), Message(role="tool", content=(ToolResult(call_id=cid, content=output),))]


def model_summarizer() -> ModelSummarizer:
    return ModelSummarizer(fixed_summary_model(), settings=ModelSummarySettings(window=8_192, max_tokens=1_024))


SUMMARIZERS = [pytest.param(ExtractiveSummarizer, id="extractive"), pytest.param(model_summarizer, id="model")]

TASK = (
    "Review PR #31 and address every comment:\n"
    "1. rename `parse_args` to `parse_cli`;\n"
    "2. narrow the Optional instead: `if x is None: return`;\n"
    "3. keep the public API unchanged;\n"
    "4. add a test for the empty input."
)
LATER = [f"Also look at item {n}: the log says `worker-{n}` stalls after 30 s; keep the retry at 3." for n in range(30)]


def conversation() -> list[Message]:
    msgs = [user(TASK)]
    for n, ask in enumerate(LATER):
        msgs += [*run(f"c{n}", f"pytest -q tests/test_{n}.py", "1 passed"), said(f"Done with {n}."), user(ask)]
    return msgs


@pytest.mark.parametrize("make", SUMMARIZERS)
def test_first_and_newest_user_messages_are_kept_whole_within_the_budget(make: type[Summarizer]) -> None:
    summary = make().summarize(SummaryRequest(messages=tuple(conversation()), max_chars=8_000))
    assert len(summary) <= 8_000 and missing_sections(summary) == []
    parts = read_carried(summary)
    assert parts.first == TASK and TASK in summary  # all four review comments, not the first one clipped
    assert parts.newest[-1] == LATER[-1]
    assert list(parts.newest) == LATER[-len(parts.newest) :]  # the newest ones, in order, none skipped
    room, _ = budgets(8_000)
    more = LATER[len(LATER) - len(parts.newest) - 1]
    assert len(render_carried(parts, max_chars=8_000)) + len(more) > room  # the next older one did not fit


@pytest.mark.parametrize("make", SUMMARIZERS)
def test_the_first_message_survives_later_compactions(make: type[Summarizer]) -> None:
    summarizer = make()
    msgs = conversation()
    first = summarizer.summarize(SummaryRequest(messages=tuple(msgs[:8]), max_chars=6_000))
    second = summarizer.summarize(SummaryRequest(messages=tuple(msgs[8:]), previous=first, max_chars=6_000))
    assert read_carried(second).first == TASK
    assert read_carried(second).newest[-1] == LATER[-1]
    assert second.count(TASK) == 1 and len(second) <= 6_000


@pytest.mark.parametrize("make", SUMMARIZERS)
def test_a_first_message_over_the_budget_keeps_its_head_and_tail(make: type[Summarizer]) -> None:
    pasted = "Fix the crash below.\n" + "\n".join(f"line {n}: frame in module_{n}" for n in range(2_000)) + "\nEND"
    summary = make().summarize(SummaryRequest(messages=(user(pasted), said("Looking.")), max_chars=6_000))
    assert len(summary) <= 6_000
    first = read_carried(summary).first
    assert first is not None and first.startswith("Fix the crash below.") and first.endswith("\nEND")
    assert "characters omitted here; the whole text is in the archive" in first


@pytest.mark.parametrize("make", SUMMARIZERS)
def test_a_first_message_with_code_fences_over_the_budget_keeps_its_head_and_tail(make: type[Summarizer]) -> None:
    # Its own fences make the one around it longer (````): the cut must count that fence, not the shortest.
    code = "```python\n" + "\n".join(f"x_{n} = {n}" for n in range(1_500)) + "\n```"
    task = f"Fix the bug in this code:\n{code}\nKeep the API the same."
    summary = make().summarize(SummaryRequest(messages=(user(task), said("Looking.")), max_chars=12_000))
    assert len(summary) <= 12_000
    first = read_carried(summary).first
    assert first is not None and first.startswith("Fix the bug in this code:") and first.endswith("the same.")


@pytest.mark.parametrize("make", SUMMARIZERS)
def test_standing_instructions_are_carried_verbatim_and_the_newest_version_wins(make: type[Summarizer]) -> None:
    agents = "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nALWAYS prefer MCP tools over grep.\n</INSTRUCTIONS>"
    env_old = "<environment_context>\n  <cwd>/repo</cwd>\n  <date>2026-01-01</date>\n</environment_context>"
    env_new = "<environment_context>\n  <cwd>/repo</cwd>\n  <date>2026-01-02</date>\n</environment_context>"
    developer = Message(
        role="system", content=(TextBlock(text="Run tests with `make test` only."),), extra={"codex:role": "developer"}
    )
    skill = user("Base directory for this skill: /skills/review\n\nRead every diff hunk twice.", isMeta=True)
    msgs = [user(agents), user(env_old), user("Fix the login bug."), developer, skill, said("On it."), user(env_new)]
    summary = make().summarize(SummaryRequest(messages=tuple(msgs), max_chars=8_000))
    blocks = read_carried(summary).instructions
    assert list(blocks) == [agents, developer.text, env_new]  # a skill's body is for its task, not standing
    assert env_old not in summary
    assert read_carried(summary).first == "Fix the login bug."  # injected blocks are not the user's messages


def test_instruction_blocks_over_their_room_share_it_and_keep_head_and_tail() -> None:
    big = "<permissions instructions>\n" + "Sandbox rule.\n" * 3_000
    small = "# AGENTS.md instructions for /repo\nNever edit generated files."
    parts = carried(
        [user(small), Message.of("user", "go"), Message(role="system", content=(TextBlock(text=big),))], None
    )
    text = render_carried(parts, max_chars=16_000)
    # they take what they need to stay whole, before the sections' lists, up to 40% of the cap
    assert len(text) - text.index(f"## {INSTRUCTIONS_TITLE}") <= 16_000 * INSTRUCTIONS_MAX_SHARE + 1
    assert small in text  # the small one whole
    kept = read_carried(text).instructions
    assert kept[0] == small and kept[1].startswith("<permissions instructions>") and "omitted here" in kept[1]


def test_a_system_message_among_the_compacted_ones_is_an_instruction() -> None:
    # the system prompt is a layer of its own and never compacted: any system message here came after it
    later = carried([user("fix it"), Message.of("system", "Tests run offline.")], None)
    assert later.instructions == ("Tests run offline.",) and later.first == "fix it"


def test_split_carried_gives_back_the_summary_and_read_carried_the_texts() -> None:
    tricky = "## Goal\nnot a heading: it is in the user's text\n```\ncode\n```"
    parts = carried([user(tricky), user("second")], None)
    appendix = render_carried(parts, max_chars=16_000)
    summary = "## Goal\n- x\n\n## Critical Context\n- y\n" + appendix
    own, rest = split_carried(summary)
    assert own == "## Goal\n- x\n\n## Critical Context\n- y\n" and rest == appendix.lstrip("\n")
    assert read_carried(summary).first == tricky and read_carried(summary).newest == ("second",)
    assert f"## {USER_TITLE}" in rest


def test_budgets_follow_the_cap_and_keep_their_floors_when_it_is_squeezed() -> None:
    assert budgets(16_000) == (3_200, 3_200)
    assert budgets(4_000) == (800, 800)
    # below the sections' floor plus the shares, each part keeps its floor, taken from the sections
    assert budgets(3_000) == (500, 500)  # the sections keep their floor of 2,000 while the parts keep theirs
    assert budgets(2_000) == (500, 400)  # at the smallest cap the floors come from the sections
    # a squeezed cap keeps the budget order: the user's words take all but the sections' skeleton
    squeezed = render_carried(carried([user("a task " * 200), user("more")], None), max_chars=2_000)
    assert 500 < len(squeezed) <= 2_000 - SECTIONS_SKELETON and read_carried(squeezed).first.startswith("a task a task")
    assert read_carried(squeezed).newest == ("more",)  # the long first message leaves the newest its room
    short = [user("Port the client to the new API."), *(user(f"ask {n}: " + "do it " * 12) for n in range(8))]
    whole = render_carried(carried(short, None), max_chars=2_000)
    assert [m.text.strip() for m in short] == [read_carried(whole).first, *read_carried(whole).newest]
    assert render_carried(carried(short, None), max_chars=2_000, sections=1_500) != whole  # the sections asked more


def test_no_instruction_block_is_ever_left_out_even_at_the_smallest_cap() -> None:
    blocks = [f"<skill name='s{n}'>\n" + f"Rule {n}: keep the line.\n" * 200 + f"END {n}" for n in range(4)]
    parts = carried([user("go"), *(Message.of("system", b) for b in blocks)], None)
    for cap in (2_000, 4_000, 16_000):
        kept = read_carried(render_carried(parts, max_chars=cap)).instructions
        assert len(kept) == 4
        for n, block in enumerate(kept):
            assert block.startswith(f"<skill name='s{n}'>") and block.endswith(f"END {n}")
            assert "the whole text is in the archive" in block


def test_a_long_first_message_leaves_the_newest_one_its_head_and_tail() -> None:
    first = "Build the importer.\n" + "spec line\n" * 2_000 + "SPEC END"
    newest = "Now switch the output to CSV: " + "column x; " * 300 + "and keep the header."
    text = render_carried(carried([user(first), user("ok"), user(newest)], None), max_chars=16_000)
    parts = read_carried(text)
    assert parts.first is not None and parts.first.endswith("SPEC END")
    assert parts.newest[-1].startswith("Now switch the output") and parts.newest[-1].endswith("keep the header.")


@pytest.mark.parametrize("make", SUMMARIZERS)
def test_summaries_stay_within_a_small_cap_with_long_messages(make: type[Summarizer]) -> None:
    long = "x" * 5_000
    msgs = [user(long), Message.of("system", "y" * 5_000), said("ok"), user(long + "z")]
    for cap in (2_000, 2_500, 3_000, 5_000):
        summary = make().summarize(SummaryRequest(messages=tuple(msgs), max_chars=cap))
        assert len(summary) <= cap and missing_sections(summary) == []


# --- where a message came from ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (user("Please fix the flaky test."), "typed"),
        (user("# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>x</INSTRUCTIONS>"), "instructions"),
        (user("<user_instructions>\nBe terse.\n</user_instructions>"), "instructions"),
        (user("<environment_context><cwd>/r</cwd></environment_context>"), "instructions"),
        (user("Split complex tasks into subtasks.", claude_code={"isMeta": True}), "instructions"),
        (user("Caveat: The messages below were generated by the user while running local commands."), "injected"),
        (user("This session is being continued from a previous conversation that ran out of context."), "host_summary"),
        (user("Summary: the branch is refactor.", claude_code={"isCompactSummary": True}), "host_summary"),
        (user("[Summary of the earlier conversation, written when pi compacted its context]\n\nx"), "host_summary"),
        (user("$ ls\nREADME.md", **{"pi:role": "bashExecution"}), "command_output"),
        (user("<bash-input>ls</bash-input>"), "command_output"),
        (Message.of("system", "Use make test."), "instructions"),
        # a user quoting a tag in the middle of a sentence is still typing
        (user("Why does <environment_context> show the wrong cwd?"), "typed"),
    ],
)
def test_origin_tells_typed_text_from_injected_text(message: Message, expected: str) -> None:
    assert origin(message) == expected


def test_the_prompt_a_slash_command_expands_to_is_an_instruction_not_typed() -> None:
    msgs = [user("<command-name>/review</command-name>\n<command-args>src</command-args>"), user("Review the diff.")]
    assert origins(msgs) == ["typed", "instructions"]
    assert carried(msgs, None).first == "/review src"


def test_a_host_summary_becomes_the_previous_summary_not_a_user_message() -> None:
    text = (
        "This session is being continued from a previous conversation.\nSummary:\n- E2E tests only; branch `refactor`."
    )
    msgs = [user(text, claude_code={"isCompactSummary": True}), user("Carry on with the refactor."), said("OK.")]
    assert host_summary(msgs) == text
    assert carried(msgs, None).first == "Carry on with the refactor."
    model = fixed_summary_model()
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=8_192, max_tokens=1_024))
    summarizer.summarize(SummaryRequest(messages=tuple(msgs)))
    assert f"<previous-summary>\n{text}\n</previous-summary>" in model.requests[0].turns[-1].text
    header = "[Summary of the earlier conversation, written when pi compacted its context]\n\n"
    pi = user(header + "# Checkpoint\nE2E tests only, never unit tests.\n\n## Branch\n`refactor`")
    assert host_summary([pi]).startswith("# Checkpoint")
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=(pi, user("go on"), said("ok"))))
    # the host's text is merged (its rules as rules, the rest as notes), not taken for what the user typed
    assert "E2E tests only, never unit tests." in section_items(summary, "Constraints & Preferences")
    assert any("`refactor`" in item for item in section_items(summary, "Critical Context"))
    assert read_carried(summary).first == "go on"


def section_items(summary: str, title: str) -> list[str]:
    return [i for items in parse_sections(summary).get(title, {}).values() for i in items]


def test_a_long_host_summary_is_cut_to_half_the_cap_keeping_head_and_tail() -> None:
    text = "This session is being continued from a previous conversation.\n" + "detail\n" * 3_000 + "Branch: `dev`."
    msgs = [user(text, claude_code={"isCompactSummary": True})]
    cut = host_summary(msgs, max_chars=8_000)
    assert cut is not None and len(cut) <= 4_000
    assert cut.startswith("This session is being continued") and cut.endswith("Branch: `dev`.")
    assert host_summary(msgs) == text


def test_a_text_cut_again_counts_what_its_first_cut_left_out() -> None:
    block = "<permissions instructions>\n" + "".join(f"rule {n:05d}\n" for n in range(3_000)) + "END"
    once = read_carried(render_carried(carried([user("go"), Message.of("system", block)], None), max_chars=16_000))
    twice = read_carried(render_carried(once, max_chars=2_000)).instructions[0]
    shown = len(twice) - len(re.search(r"\n\[… .* …\]\n", twice).group(0))
    omitted = int(re.search(r"\[… ([\d,]+) characters omitted", twice).group(1).replace(",", ""))
    assert shown + omitted == len(block)


def _value_session() -> list[Message]:
    return [
        user("Build the API server; use port 8080 for it."),
        said("ok"),
        user("Add a health check."),
        said("ok"),
        user("actually use 9090"),
        said("ok"),
    ]


@pytest.mark.parametrize("make", SUMMARIZERS)
def test_a_value_the_user_changed_later_is_marked_superseded_where_it_is_quoted(make: Callable[[], Summarizer]) -> None:
    summary = make().summarize(SummaryRequest(messages=tuple(_value_session()), max_chars=6_000))
    quoted = split_carried(summary)[1]
    old = quoted.index("use port 8080")
    assert quoted.index("(superseded by a later message: «actually use 9090»)") > old
    assert quoted.count("superseded by a later message") == 1  # the newer one stands
    # the mark outlives the newer message's leaving the verbatim part, and a sequence is not a change
    reports = [
        f"Here is report {n}; its third table has odd totals in the last column, see what is off." for n in range(12)
    ]
    later = tuple(m for text in reports for m in (user(text), said("ok")))
    after = make().summarize(SummaryRequest(messages=later, previous=summary, max_chars=6_000))
    kept = split_carried(after)[1]
    assert "use port 8080" in kept and "actually use 9090" not in kept.replace("«actually use 9090»", "")
    assert kept.count("superseded by a later message") == 1
    assert read_carried(after).first == "Build the API server; use port 8080 for it."  # the note is no part of it
