"""The window is a promise: sizes follow it, compaction keeps going at small windows, an overflow is never silent."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType

import pytest
from tests.conftest import ROOT

from ctxkeep.archive import Archive, ArchiveFile, guide, short_guide
from ctxkeep.context import system_tokens_of
from ctxkeep.folder import MemoryFolder
from ctxkeep.formats import load
from ctxkeep.messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.pairing import repair
from ctxkeep.replay import split_system, turns
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings
from ctxkeep.step import Step
from ctxkeep.summarize import ModelSummarizer, SummaryRequest, missing_sections
from ctxkeep.summarize.minimal import minimal_summary
from ctxkeep.summarize.testing import fixed_summary_model
from ctxkeep.summarize.verbatim import LEFT_OUT_NOTES, words_left_out
from ctxkeep.tokens import get_counter

NOW = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
COUNTER = get_counter("o200k_base")
OVER = "over the model's window"


def test_the_seed_window_gives_the_seed_numbers() -> None:
    assert EngineSettings.for_window(128_000) == EngineSettings()
    assert EngineSettings.for_window(1_000_000).summary_max_chars == 16_000


@pytest.mark.parametrize("window", [4_096, 8_192, 16_000, 32_000])
def test_every_size_shrinks_with_the_window(window: int) -> None:
    settings = EngineSettings.for_window(window, language="en")
    threshold = settings.compact.compact_threshold
    assert settings.compact.max_input_length == window and settings.language == "en"
    # Neither the summary nor a recent tool result can fill the threshold alone (at 3 characters a token).
    assert settings.summary_max_chars / 3 < threshold / 2
    assert settings.offload.recent_max_bytes / 3 < threshold / 2
    assert settings.offload.old_max_bytes <= settings.offload.recent_max_bytes


@pytest.mark.parametrize("window", [4_096, 8_192, 16_000, 32_000])
def test_at_a_small_window_five_steps_of_recent_results_fit_between_compactions(window: int) -> None:
    # Every step's results pass the recent cut at a small window: what a compaction leaves under the threshold
    # (the summary cap and the kept tail, counted at 3 characters a token) holds 5 of them.
    settings = EngineSettings.for_window(window)
    room = settings.compact.compact_threshold * 3 - settings.summary_max_chars - settings.compact.reserve * 3
    assert 5 * settings.offload.recent_max_bytes <= room < 6 * settings.offload.recent_max_bytes + 5


def test_where_five_big_steps_fit_the_recent_cut_follows_the_summary_alone() -> None:
    # From about 54,000 tokens the room holds 5 steps of 16,000-byte results: the cut is a fifth of what the
    # threshold leaves beside the summary cap (at most 50,000 bytes), as it was.
    for window, recent in ((64_000, (44_800 * 3 - 16_000) // 5), (128_000, 50_000), (200_000, 50_000)):
        assert EngineSettings.for_window(window).offload.recent_max_bytes == recent


@pytest.mark.parametrize("window", [4_096, 8_192])
def test_a_small_window_keeps_compacting(window: int) -> None:
    # With the seed's absolute sizes the summary alone passed the threshold at these windows and
    # compaction stopped for good; with sizes that follow the window every step fits.
    conv = load(ROOT / "examples" / "agent_session.jsonl").conversations[0]
    system, messages = split_system(repair(conv.messages)[0])
    settings = EngineSettings.for_window(window)
    compactions = 0
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        for group in turns(messages):
            session.add(group)
            step = session.prepare(system, now=NOW)
            compactions += step.compaction is not None
            must_send = system_tokens_of(system, COUNTER) + sum(session.live.counts[-len(group) :])
            if must_send <= window // 2:
                assert step.context.tokens <= window, f"step over the window at {len(session.messages)} messages"
            if step.context.tokens > window:
                assert any(OVER in w for w in step.warnings)
    assert compactions >= 3


def test_every_step_over_the_window_says_so() -> None:
    settings = EngineSettings(compact=CompactSettings(max_input_length=1_000))
    system = "Follow every rule below. " * 400  # alone over the window
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        for i in range(4):
            session.add(Message.of("user", f"question {i}"))
            step = session.prepare(system, now=NOW)
            assert step.context.tokens > 1_000
            assert sum(OVER in w for w in step.warnings) == 1, step.warnings


def test_a_session_opened_for_a_window_takes_its_sizes(tmp_path: Path) -> None:
    with Session.open(tmp_path / "a", window=16_000) as session:
        assert session.settings == EngineSettings.for_window(16_000)
    mine = EngineSettings(compact=CompactSettings(max_input_length=9_000))
    with Session.open(tmp_path / "b", window=16_000, settings=mine) as session:
        assert session.settings is mine  # explicit settings win


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "Runs a command in the workspace and returns what it printed. " * 4,
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
    for i in range(20)
]


def test_tool_schemas_count_against_the_window() -> None:
    settings = EngineSettings(compact=CompactSettings(max_input_length=4_000))
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        session.add(Message.of("user", "word " * 1_500))
        bare = session.prepare("be brief", now=NOW)
        assert bare.compaction is None
        with_tools = session.prepare("be brief", tools=TOOLS, now=NOW)
        # The schemas are what the request carries beside the messages: they count, once per change.
        assert with_tools.context.tokens > bare.context.tokens + 1_000
        assert session.live.tools_tokens == with_tools.context.tokens - bare.context.tokens
        session.add(Message.of("assistant", "done " * 600))
        session.add(Message.of("user", "next"))
        step = session.prepare("be brief", tools=TOOLS, now=NOW)
        assert step.compaction is not None  # the tools pushed it over the threshold; without them it fits
        assert step.context.tokens <= settings.compact.compact_threshold


def _prompt(tokens: int) -> str:
    """A system prompt of about `tokens` tokens (o200k_base)."""
    text = "Rule: keep every answer short and cite the file you changed. " * (tokens // 12 + 1)
    while system_tokens_of(text, COUNTER) > tokens:
        text = text[: -max(1, len(text) // 200)]
    return text


def _agent_step(i: int, result_lines: int) -> list[Message]:
    """One step of a coding agent: a request, a tool call, its result (`result_lines` lines), the answer."""
    call = ToolCall(id=f"c{i}", name="bash", arguments=f'{{"command": "grep -rn handler src/mod{i}"}}')
    output = "".join(
        f"src/mod{i}/file{j}.py:{j}: def handler_{j}(request): return route(request)\n" for j in range(result_lines)
    )
    return [
        Message.of("user", f"step {i}: find where handler {i} is defined and fix its routing", id=f"u{i}"),
        Message(role="assistant", content=(TextBlock(text=f"searching mod{i}"), call), id=f"a{i}"),
        Message(role="tool", content=(ToolResult(call_id=f"c{i}", content=output),), id=f"r{i}"),
        Message.of("assistant", f"handler {i} fixed in src/mod{i}/file0.py", id=f"d{i}"),
    ]


def _replay_steps(window: int, fixed: int, steps: int, *, tools_share: float = 0.0) -> tuple[int, int, list[Step]]:
    """`steps` tool-call steps replayed at `window` with about `fixed` tokens of system prompt and tool schemas
    (the schemas `tools_share` of it): how many steps went over the window, the peak, and the steps."""
    tools = None
    if tools_share:
        schema = {"name": "bash", "description": _prompt(int(fixed * tools_share)), "parameters": {}}
        tools = [{"type": "function", "function": schema}]
    system = _prompt(int(fixed * (1 - tools_share)))
    over, peak, taken = 0, 0, []
    with Session(MemoryFolder(), settings=EngineSettings.for_window(window), counter=COUNTER) as session:
        for i in range(steps):
            session.add(_agent_step(i, result_lines=5 + (i * 7) % 30))
            step = session.prepare(system, tools=tools, now=NOW)
            peak = max(peak, step.context.tokens)
            over += step.context.tokens > window
            taken.append(step)
    return over, peak, taken


def test_a_large_system_prompt_at_8192_never_sends_over_the_window() -> None:
    # 5,450 tokens of system prompt leave the 5,734-token threshold too little for the summary: compaction
    # must go on with a squeezed summary and a shorter kept tail, not stop for good.
    over, peak, steps = _replay_steps(8_192, 5_450, 100)
    assert over == 0, f"{over} steps over the window, peak {peak}"
    assert sum(s.compaction is not None for s in steps) >= 5
    assert not any("compaction skipped" in w for s in steps for w in s.warnings)


def test_system_and_tools_of_23k_at_32k_never_send_over_the_window() -> None:
    over, peak, _ = _replay_steps(32_000, 23_000, 120, tools_share=0.3)
    assert over == 0, f"{over} steps over the window, peak {peak}"


@pytest.mark.parametrize(("window", "fixed"), [(2_048, 900), (3_000, 1_500), (4_096, 2_600)])
def test_small_windows_with_a_large_prompt_keep_compacting(window: int, fixed: int) -> None:
    over, peak, steps = _replay_steps(window, fixed, 60)
    assert over == 0, f"{over} steps over the window, peak {peak}"
    assert sum(s.compaction is not None for s in steps) >= 3


def test_what_cannot_fit_is_said_once_and_the_smallest_context_is_sent() -> None:
    # The system prompt and the newest message group alone are over the window: one warning a step says so, and
    # the context sent is the smallest there is (everything older compacted, no summary sent).
    settings = EngineSettings.for_window(4_096)
    system = _prompt(4_100)
    with Session(MemoryFolder(), settings=settings, counter=COUNTER) as session:
        for i in range(6):
            session.add(_agent_step(i, result_lines=20))
            step = session.prepare(system, now=NOW)
        assert step.context.tokens > 4_096 and step.context.summary is None
        assert len(step.warnings) == 1 and OVER in step.warnings[0]
        assert session.live.messages == tuple(_agent_step(5, 20))[-len(session.live.messages) :]
        assert len(session.live.messages) <= 4


def test_a_recent_file_read_too_big_for_the_window_is_cut_when_no_compaction_applies() -> None:
    """A file read is whole while recent; when a compaction cannot help (its summary refused), a read bigger than
    the window gets its older cut rather than the request going over the window, and says where the rest is."""

    class Refusing:
        def summarize(self, request: object) -> str:
            raise RuntimeError("no summary today")

    settings = EngineSettings.for_window(8_000)
    text = "\n".join(f"line {k}: " + "abcdef " * 12 for k in range(700))  # ~60 KB, ~17,000 tokens
    with Session(MemoryFolder(), settings=settings, summarizer=Refusing()) as session:
        session.add(
            [
                Message.of("user", "read it", id="u"),
                Message(role="assistant", content=(ToolCall(id="c", name="read_file"),), id="a"),
                Message(role="tool", content=(ToolResult(call_id="c", content=text),), id="r"),
            ]
        )
        step = session.prepare("sys", now=datetime(2026, 12, 3, tzinfo=UTC))
        assert step.failure is not None  # the compaction was refused...
        assert step.context.tokens <= settings.compact.max_input_length  # ...and the read was cut anyway
        result = step.context.messages[-1].tool_result
        assert result is not None and "tool_result/" in result.text


@pytest.mark.parametrize(("window", "share"), [(2_048, 0.3), (2_048, 0.6), (3_000, 0.6), (4_096, 0.6)])
def test_a_room_below_the_summarizers_floor_still_compacts(window: int, share: float) -> None:
    # System prompt and tools take `share` of the window: what is left for a summary is at times below the
    # summarizer's floor. The compaction then writes the smallest summary that fits rather than failing and
    # sending everything over the window.
    over, peak, steps = _replay_steps(window, int(window * share), 40, tools_share=0.5)
    assert over == 0, f"{over} steps over the window, peak {peak}"
    assert not [s.failure.reason for s in steps if s.failure is not None]


def test_the_smallest_summary_is_sent_and_the_full_one_is_built_on() -> None:
    # Each step's long answer, beside a system prompt of 1,400 tokens, leaves no room in the window for a summary
    # of the summarizer's floor: the smallest one is sent (the user's words and the archive guide), while the
    # summarizer's, with its lists, stays the one the next compaction builds on. With room again (the workspace
    # opened with a larger window), the summary sent has the lists of the steps compacted while it was squeezed.
    answer = "The routing table maps each path to its handler, checked one entry at a time. " * 12
    folder = MemoryFolder()
    with Session(folder, settings=EngineSettings.for_window(2_048), counter=COUNTER) as session:
        steps = []
        for i in range(6):
            session.add([*_agent_step(i, result_lines=5), Message.of("assistant", answer, id=f"e{i}")])
            steps.append(session.prepare(_prompt(1_400), now=NOW))
        body = session.live.summary_body or ""
    assert all(s.context.tokens <= 2_048 and s.failure is None for s in steps)
    squeezed = [s for s in steps if s.compaction is not None and s.compaction.smallest]
    assert len(squeezed) >= 2, "no compaction needed the smallest summary"
    sent = squeezed[-1].context.summary or ""
    assert "archive" in sent and LEFT_OUT_NOTES["en"] in sent and "### Done" not in sent
    assert squeezed[-1].compaction is not None and squeezed[-1].compaction.summary_chars == len(sent)
    assert "step 0: find where handler 0 is defined" in sent  # the first ask, carried verbatim
    assert missing_sections(body) == [] and "handler 0 fixed in src/mod0/file0.py" in body
    with Session(folder, settings=EngineSettings.for_window(32_000), counter=COUNTER) as session:
        session.add([*_agent_step(6, result_lines=5), Message.of("assistant", answer, id="e6")])
        step = session.compact(system="be brief", now=NOW)
    summary = step.context.summary or ""
    assert step.compaction is not None and not step.compaction.smallest and LEFT_OUT_NOTES["en"] not in summary
    assert "handler 0 fixed in src/mod0/file0.py" in summary and "`grep -rn handler src/mod2`" in summary


def test_a_model_summarizer_is_asked_when_only_the_smallest_summary_fits() -> None:
    # The room left is below the summarizer's floor: the model still writes the summary the workspace keeps.
    settings = EngineSettings.for_window(2_048)
    answer = "The routing table maps each path to its handler, checked one entry at a time. " * 12
    summarizer = ModelSummarizer(fixed_summary_model())
    with Session(MemoryFolder(), settings=settings, counter=COUNTER, summarizer=summarizer) as session:
        steps = []
        for i in range(6):
            session.add([*_agent_step(i, result_lines=5), Message.of("assistant", answer, id=f"e{i}")])
            steps.append(session.prepare(_prompt(1_400), now=NOW))
        body = session.live.summary_body or ""
    squeezed = [s.compaction for s in steps if s.compaction is not None and s.compaction.smallest]
    assert squeezed and all(c.usage is not None and c.usage.calls for c in squeezed)
    assert all(s.context.tokens <= 2_048 and s.failure is None for s in steps)
    assert missing_sections(body) == [] and LEFT_OUT_NOTES["en"] not in body


def test_the_smallest_summary_fits_any_room_and_says_what_it_left_out() -> None:
    messages = [msg for i in range(3) for msg in _agent_step(i, result_lines=3)]
    request = SummaryRequest(messages=tuple(messages), language="en")
    for room in (0, 100, 400, 1_500):
        text = minimal_summary(request, room)
        assert len(text) <= max(room, len(LEFT_OUT_NOTES["en"]) + 1)
        assert words_left_out(text)  # the next summary with more room reads the user's words back
    assert "step 0: find where handler 0" in minimal_summary(request, 1_500)
    assert "step 2: find where handler 2" in minimal_summary(request, 1_500)


@pytest.mark.parametrize("window", [2_048, 4_096])
def test_standing_instructions_and_a_large_prompt_never_stop_compaction(window: int) -> None:
    # A harness that injects its rules as it goes (a policy each few steps) beside a system prompt and tools
    # of 60% of the window: the summary's room is below the summarizer's floor, and its verbatim parts alone
    # outgrew it. Every compaction applies, and no step goes over the window.
    system = _prompt(int(window * 0.6))
    with Session(MemoryFolder(), settings=EngineSettings.for_window(window), counter=COUNTER) as session:
        steps = []
        for i in range(30):
            policy = f"Policy {i % 5}: always run the checks of part {i} before a commit, and never skip them. " * 4
            session.add([Message.of("system", policy, id=f"p{i}"), *_agent_step(i, result_lines=5 + (i * 7) % 30)])
            steps.append(session.prepare(system, now=NOW))
    assert not [s.failure.reason for s in steps if s.failure is not None]
    assert max(s.context.tokens for s in steps) <= window
    assert sum(s.compaction is not None for s in steps) >= 3


@pytest.mark.parametrize("signature", [None, "c2lnbmVk"])
def test_a_thinking_block_too_big_for_the_window_in_the_current_loop(signature: str | None) -> None:
    # The newest tool call's reasoning alone is over the window. Unsigned (a local model's), it keeps its head and
    # tail and the rest is saved; signed, a provider refuses it changed: it stays whole and one warning says so.
    thought = "\n".join(f"step {k}: consider the parser's state and what the next token may be" for k in range(2_000))
    call = ToolCall(id="c", name="read_file", arguments='{"path": "src/parser.py"}')
    reply = Message(role="assistant", content=(ThinkingBlock(text=thought, signature=signature), call), id="a")
    with Session(MemoryFolder(), settings=EngineSettings.for_window(8_192), counter=COUNTER) as session:
        session.add([Message.of("user", "fix the parser", id="u"), reply])
        session.add(Message(role="tool", content=(ToolResult(call_id="c", content="def parse(): ..."),), id="r"))
        step = session.prepare("be brief", now=NOW)
        sent = next(m for m in step.context.messages if m.id == "a")
        block = next(b for b in sent.content if isinstance(b, ThinkingBlock))
    if signature is None:
        assert step.context.tokens <= 8_192 and not step.warnings
        assert "the full text is in" in block.text and block.text.startswith("step 0:")
    else:
        assert block.text == thought and step.context.tokens > 8_192
        assert sum(OVER in w for w in step.warnings) == 1


def test_a_summary_that_no_longer_fits_is_sent_smaller_when_nothing_can_be_compacted() -> None:
    # A system prompt that grew (tools added by the harness) leaves no room for the summary, and the newest message
    # group is all that is live: nothing can be compacted, so the summary sent shrinks (the one built on stays).
    answer = "The routing table maps each path to its handler, checked one entry at a time. " * 12
    with Session(MemoryFolder(), settings=EngineSettings.for_window(2_048), counter=COUNTER) as session:
        for i in range(4):
            session.add([*_agent_step(i, result_lines=5), Message.of("assistant", answer, id=f"e{i}")])
            session.prepare("be brief", now=NOW)
        session.add([*_agent_step(4, result_lines=5), Message.of("assistant", answer, id="e4")])
        session.compact(system="be brief", now=NOW)
        body = session.live.summary_body
        newest = session.live.total
        step = session.prepare(_prompt(2_000 - newest), now=NOW)
    assert step.compaction is None and step.context.tokens <= 2_048 and not [w for w in step.warnings if OVER in w]
    assert step.live.summary_body == body and body and missing_sections(body) == []


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_shortest_guide_says_where_the_archive_is_in_a_third_of_the_guide(language: str) -> None:
    archive = Archive(
        MappingProxyType(
            {"dialog/2026-12-02.jsonl": ArchiveFile(9_000, 40), "dialog/2026-12-03.jsonl": ArchiveFile(900, 4)}
        )
    )
    short = short_guide(archive, language=language)
    assert "dialog/" in short and "44" in short
    assert COUNTER.count_text(short) * 2 < COUNTER.count_text(guide(archive, language=language))
    assert short_guide(Archive(), language=language) == ""
