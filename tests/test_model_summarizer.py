"""The model-written summary: the prompts (English, Chinese), the bounded conversation, the validity checks."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import raw_params
from tests.scripted import Scripted

from ctxkeep import engine
from ctxkeep.errors import ProviderError, SummaryError
from ctxkeep.folder import MemoryFolder
from ctxkeep.formats import load
from ctxkeep.live import Live, add
from ctxkeep.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.providers import Turn
from ctxkeep.settings import CompactSettings, EngineSettings, ModelSummarySettings, OffloadSettings
from ctxkeep.summarize import PROGRESS_SUBSECTIONS, SECTIONS, ModelSummarizer, SummaryRequest, missing_sections
from ctxkeep.summarize.model.prompts import (
    omission_marker,
    render_conversation,
    shorten,
    summary_prompt,
    system_prompt,
)
from ctxkeep.summarize.model.summarizer import unwrap
from ctxkeep.summarize.testing import fixed_summary_model
from ctxkeep.summarize.verbatim import split_carried
from ctxkeep.tokens import get_counter

VALID = """\
## Goal
- Fix the failing test in `src/app.py`

## Constraints & Preferences
- Never push to main

## Progress
### Done
- (none)
### In Progress
- [ ] Editing `src/app.py`
### Blocked
- `pytest -q` fails (exit 1): 1 failed

## Key Decisions
- **Patch the parser**: the test input is valid

## Next Steps
1. Run the tests again
### Pending user asks
- Fix the failing test in `src/app.py`

## Critical Context
- The parser rejects the input
### Exact identifiers
- `src/app.py`, `tests/test_app.py`
"""


def calling(name: str, arguments: str) -> Message:
    return Message(role="assistant", content=(ToolCall(id=f"{name}-1", name=name, arguments=arguments),))


def conversation() -> tuple[Message, ...]:
    call = ToolCall(id="c1", name="bash", arguments=json.dumps({"command": "pytest -q"}))
    return (
        Message.of("user", "Fix the failing test in src/app.py. Never push to main."),
        Message(
            role="assistant",
            content=(ThinkingBlock(text="SECRET-REASONING about the plan"), TextBlock(text="Running the tests."), call),
        ),
        Message(role="tool", content=(ToolResult(call_id="c1", content="1 failed", is_error=True, exit_code=1),)),
        Message.of("assistant", "The parser rejects the input; I'll patch it."),
    )


# --- prompts -------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["en", "zh"])
def test_system_prompt_names_every_section_in_english(language: str) -> None:
    text = system_prompt(language)  # type: ignore[arg-type]
    for title in SECTIONS:
        assert f"## {title}\n" in text
    for sub in PROGRESS_SUBSECTIONS:
        assert f"### {sub}\n" in text
    assert missing_sections(text) == []  # the template itself is a valid outline
    assert "`## Goal`" in text  # where the reply must start


def test_system_prompt_language() -> None:
    en, zh = system_prompt("en"), system_prompt("zh")
    assert "Write the summary in English" in en and "中文" not in en
    assert "摘要内容用中文撰写" in zh and "英文原样" in zh  # content in Chinese, headings kept in English
    assert "（无）" in zh and "(none)" in en
    with pytest.raises(ValueError, match="resolve"):
        system_prompt("auto")  # type: ignore[arg-type]


def test_initial_prompt_has_the_conversation_and_no_previous_summary() -> None:
    prompt = summary_prompt(SummaryRequest(messages=conversation(), language="en", max_chars=9_000))
    assert "<conversation>\n[user]\nFix the failing test in src/app.py." in prompt.user
    assert "<previous-summary>" not in prompt.user
    assert "Summarize the conversation above" in prompt.user
    assert "at most 9,000 characters" in prompt.user
    assert prompt.system == system_prompt("en")


@pytest.mark.parametrize(
    ("language", "wording"),
    [
        ("en", ["still true", "add the new progress", "from In Progress to Done", "update Next Steps", "no longer"]),
        ("zh", ["仍然成立", "添加新的进展", "从 In Progress 移到 Done", "更新 Next Steps", "不再相关"]),
    ],
)
def test_update_prompt_carries_the_previous_summary_and_the_rules(language: str, wording: list[str]) -> None:
    request = SummaryRequest(messages=conversation(), previous=VALID, language=language)
    prompt = summary_prompt(request)
    assert f"<previous-summary>\n{VALID.strip()}\n</previous-summary>" in prompt.user
    assert prompt.user.index("</conversation>") < prompt.user.index("<previous-summary>")
    for phrase in wording:
        assert phrase in prompt.user
    initial = summary_prompt(SummaryRequest(messages=conversation(), language=language)).user
    assert not any(phrase in initial for phrase in wording)


@pytest.mark.parametrize(("language", "intro"), [("en", "instruction"), ("zh", "手动压缩")])
def test_focus_goes_into_the_prompt(language: str, intro: str) -> None:
    request = SummaryRequest(messages=conversation(), focus="  the database migration  ", language=language)
    user = summary_prompt(request).user
    assert intro in user and "the database migration" in user
    assert "the database migration  " not in user  # trimmed
    assert intro not in summary_prompt(SummaryRequest(messages=conversation(), language=language)).user


def test_auto_language_follows_the_messages() -> None:
    chinese = (Message.of("user", "请修复 src/app.py 中失败的测试，不要推送到主分支。"),)
    assert summary_prompt(SummaryRequest(messages=chinese)).system == system_prompt("zh")
    assert summary_prompt(SummaryRequest(messages=conversation())).system == system_prompt("en")
    # no words to go by: the previous summary's language stays
    silent = (Message.of("user", "src/app.py"),)
    zh_summary = (
        VALID.replace("(none)", "（无）")
        .replace("Never push to main", "不要推送到主分支")
        .replace("The parser rejects the input", "解析器拒绝了输入")
        .replace("Fix the failing test in", "修复失败的测试")
    )
    assert summary_prompt(SummaryRequest(messages=silent, previous=zh_summary)).system == system_prompt("zh")


def test_no_messages_says_so() -> None:
    user = summary_prompt(SummaryRequest(messages=(), previous=VALID, language="en")).user
    assert "<conversation>\n(no new messages)\n</conversation>" in user


# --- the conversation as text --------------------------------------------------------------


def test_render_shows_text_calls_results_and_images_but_not_thinking() -> None:
    messages = (
        *conversation(),
        Message(
            role="user", content=(TextBlock(text="see"), ImageBlock(media_type="image/png", width=640, height=480))
        ),
        Message(role="assistant", content=(ThinkingBlock(text="only thinking"),)),
        Message(role="system", content=(TextBlock(text="be brief"),)),
    )
    text = render_conversation(messages)
    assert "[user]\nFix the failing test in src/app.py. Never push to main." in text
    assert '[assistant]\nRunning the tests.\n[tool call] bash {"command": "pytest -q"}' in text
    assert "[tool result] bash (exit 1, error)\n1 failed" in text
    assert "[user]\nsee\n[image 640x480]" in text
    assert "[system]\nbe brief" in text
    assert "SECRET-REASONING" not in text and "only thinking" not in text
    assert "[assistant]\n\n" not in text and not text.endswith("[assistant]")  # a thinking-only message is gone


def test_render_result_parts_images_and_unknown_calls() -> None:
    result = ToolResult(
        call_id="lost", content=(TextBlock(text="screenshot taken"), ImageBlock(media_type="image/jpeg"))
    )
    text = render_conversation((Message(role="tool", content=(result,)),))
    assert text == "[tool result] unknown tool\nscreenshot taken\n[image image/jpeg]"
    empty = render_conversation((Message(role="tool", content=(ToolResult(call_id="x"),)),))
    assert empty == "[tool result] unknown tool\n(empty)"


def test_long_result_keeps_head_and_tail_around_a_marker() -> None:
    body = "".join(f"line {i:05d}\n" for i in range(5_000))  # 55,000 characters
    call = ToolCall(id="c", name="read", arguments='{"path": "big.txt"}')
    messages = (
        Message(role="assistant", content=(call,)),
        Message(role="tool", content=(ToolResult(call_id="c", content=body),)),
    )
    text = render_conversation(messages, result_chars=1_000)
    assert "line 00000" in text and "line 04999" in text
    assert "characters omitted …]" in text
    kept = text.split("[tool result] read\n", 1)[1]
    assert len(kept) <= 1_000 + len(omission_marker(len(body)))
    assert render_conversation(messages, result_chars=len(body)).endswith(body)  # fits: verbatim


def test_long_arguments_keep_short_values_whole() -> None:
    args = json.dumps({"content": "x" * 10_000, "path": "src/deep/module/file_name.py"})
    text = render_conversation((calling("write", args),), arguments_chars=200, result_chars=2_000)
    assert '"path": "src/deep/module/file_name.py"' in text
    assert "9,800 characters omitted" in text
    assert len(text) < 600
    # not JSON: bounded as text
    raw = render_conversation((calling("sh", "y" * 5_000),))
    assert "characters omitted" in raw and len(raw) < 2_200
    # short arguments are verbatim, even when not valid JSON
    odd = render_conversation((calling("sh", "{'a': 1}"),))
    assert odd == "[assistant]\n[tool call] sh {'a': 1}"


def test_text_bound_is_optional() -> None:
    messages = (Message.of("user", "z" * 5_000),)
    assert render_conversation(messages) == "[user]\n" + "z" * 5_000
    assert "4,900 characters omitted" in render_conversation(messages, text_chars=100)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("ab\n中"), max_size=400), limit=st.integers(0, 300))
def test_shorten_is_bounded_and_marked(text: str, limit: int) -> None:
    out = shorten(text, limit)
    if len(text) <= limit:
        assert out == text
        return
    marker = "characters omitted …]"
    assert out.count(marker) == 1
    head, rest = out.split("\n[… ", 1)
    count_text, tail = rest.split(" characters omitted …]\n", 1)
    assert text.startswith(head) and text.endswith(tail)
    assert int(count_text.replace(",", "")) == len(text) - len(head) - len(tail) > 0
    assert len(head) + len(tail) <= limit
    assert len(out) <= limit + len(omission_marker(len(text)))


@settings(max_examples=150, deadline=None)
@given(body=st.text(max_size=600), limit=st.integers(0, 400))
def test_rendered_result_is_marked_whenever_cut(body: str, limit: int) -> None:
    messages = (
        Message(role="assistant", content=(ToolCall(id="c", name="t"),)),
        Message(role="tool", content=(ToolResult(call_id="c", content=body),)),
    )
    text = render_conversation(messages, result_chars=limit)
    if not body.strip():
        assert text.endswith("(empty)")  # nothing to keep, so nothing is cut
    elif len(body) > limit:
        assert "characters omitted …]" in text
        assert len(text) <= len("[assistant]\n[tool call] t {}\n\n[tool result] t\n") + limit + len(
            omission_marker(len(body))
        )
    elif body.strip():
        assert text.endswith(body)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bounds_must_be_whole_numbers(bad: object) -> None:
    with pytest.raises(ValueError, match="whole number"):
        shorten("abc", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="result_chars"):
        render_conversation((), result_chars=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", raw_params())
def test_real_transcripts_render_bounded(path: Path) -> None:
    bound = 400
    for conv in load(path).conversations:
        messages = conv.messages
        text = render_conversation(messages, result_chars=bound, arguments_chars=10**9)
        long_results = sum(
            1
            for m in messages
            if m.tool_result is not None and len(_body(m.tool_result)) > bound and "characters omitted …]" not in m.text
        )
        assert text.count(" characters omitted …]\n") >= long_results
        thoughts = [b.text for m in messages for b in m.content if isinstance(b, ThinkingBlock) and len(b.text) > 80]
        visible = "\n".join(b.text for m in messages for b in m.content if isinstance(b, TextBlock))
        for thought in thoughts[:50]:
            if thought not in visible:
                assert thought not in text


def _body(result: ToolResult) -> str:
    if isinstance(result.content, str):
        return result.content
    return "\n".join(b.text if isinstance(b, TextBlock) else f"[image {b.media_type}]" for b in result.content)


# --- the summarizer ------------------------------------------------------------------------


def test_valid_reply_passes() -> None:
    model = Scripted(VALID)
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(max_tokens=1_000, result_chars=300))
    summary = summarizer.summarize(SummaryRequest(messages=conversation(), language="en"))
    # The model's text comes first, whole; the deterministic augmentation (ctxkeep.summarize.model.augment) follows.
    assert summary.startswith(VALID.rstrip("\n"))
    assert "### Tool failures\n- bash (exit 1): `pytest -q`" in summary
    (sent,) = model.requests
    assert sent.max_tokens == 1_000
    assert sent.system == system_prompt("en")
    assert sent.turns == (Turn(role="user", text=sent.turns[0].text),)
    assert "[tool result] bash (exit 1, error)" in sent.turns[0].text
    assert "scripted:test" in repr(summarizer)


@pytest.mark.parametrize(
    "reply",
    [
        f"```markdown\n{VALID}```",
        f"Here is the summary:\n\n```\n{VALID}```\n",
        f"<think>\n## Goal\nmaybe\n</think>\nSure! Below is the summary.\n{VALID}",
        f"~~~md\n{VALID}",  # the fence never closed (the reply was cut off)
    ],
)
def test_wrapped_reply_is_unwrapped(reply: str) -> None:
    summary = ModelSummarizer(Scripted(reply)).summarize(SummaryRequest(messages=conversation()))
    own = split_carried(summary)[0]  # the user's messages are appended verbatim, fenced
    assert own.startswith(VALID.rstrip("\n")) and "```" not in own and "<think>" not in summary


def test_unwrap_keeps_code_blocks_inside_the_summary() -> None:
    inner = VALID.replace("- `src/app.py`, `tests/test_app.py`\n", "- a command\n```sh\nmake test\n```\n")
    assert unwrap(f"```markdown\n{inner}```\nHope this helps.") == inner
    assert unwrap(inner) == inner
    assert unwrap("no headings here\n# only a title") == ""


def test_a_reply_whose_section_is_only_inside_a_code_fence_is_asked_again() -> None:
    fenced = VALID.replace("## Next Steps\n", "```\n## Next Steps\n```\n")
    model = Scripted(fenced, VALID)
    summary = ModelSummarizer(model, settings=ModelSummarySettings(audit=False)).summarize(
        SummaryRequest(messages=conversation(), language="en")
    )
    assert summary.startswith(VALID.rstrip("\n")) and len(model.requests) == 2
    assert "the summary lacks the sections Next Steps" in model.requests[1].turns[0].text


@pytest.mark.parametrize("reply", ["lorem ipsum, no sections at all", "", "   \n", "## Goal\n- half a summary"])
def test_invalid_reply_raises_with_request_and_response(reply: str) -> None:
    model = Scripted(reply)
    request = SummaryRequest(messages=conversation(), previous=VALID, focus="tests", language="en")
    with pytest.raises(SummaryError, match="scripted:test") as info:
        ModelSummarizer(model).summarize(request)
    error = info.value
    assert error.response == reply
    assert error.request is not None
    saved = json.loads(json.dumps(error.request))  # JSON-ready, as the workspace writes it
    assert saved["model"] == "scripted:test"
    assert len(model.requests) == 1 + ModelSummarySettings().retries  # asked again with the reason each time
    assert "write" in model.requests[1].turns[0].text.split("</previous-summary>")[-1]
    assert saved["system"] == model.requests[-1].system
    assert saved["turns"] == [{"role": "user", "text": model.requests[-1].turns[0].text}]
    assert saved["max_tokens"] == model.requests[-1].max_tokens
    if reply.strip() and "## Goal" in reply:
        assert "Constraints & Preferences" in str(error)  # names what is missing


def test_provider_error_becomes_summary_error() -> None:
    cause = ProviderError("the server at http://127.0.0.1:9 refused the connection; is it running?", provider="openai")
    with pytest.raises(SummaryError, match="refused the connection") as info:
        ModelSummarizer(Scripted(cause)).summarize(SummaryRequest(messages=conversation()))
    assert info.value.__cause__ is cause
    assert info.value.response is not None and "refused the connection" in info.value.response
    assert info.value.request is not None and info.value.request["turns"]


def test_other_exceptions_are_not_disguised() -> None:
    with pytest.raises(KeyboardInterrupt):
        ModelSummarizer(Scripted(KeyboardInterrupt())).summarize(SummaryRequest(messages=conversation()))


def test_previous_summary_reaches_the_update_prompt() -> None:
    model = Scripted(VALID, VALID)
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(audit=False))
    first = summarizer.summarize(SummaryRequest(messages=conversation()))
    later = (Message.of("user", "Now also update the changelog."),)
    summarizer.summarize(SummaryRequest(messages=later, previous=first))
    initial, update = (r.turns[0].text for r in model.requests)
    assert "<previous-summary>" not in initial
    # the model sees the previous summary without its verbatim parts, which are appended again after its text
    assert f"<previous-summary>\n{split_carried(first)[0].strip()}\n</previous-summary>" in update
    assert "Now also update the changelog." in update and "[user]\nFix the failing test" not in update


def test_a_reply_over_the_size_is_cut_to_fit_and_stays_valid() -> None:
    done = "".join(
        f"- [x] Ran step {i} of the migration with `tool --step {i}` [evidence: `c2` exit 0]\n" for i in range(200)
    )
    long = VALID.replace("### Done\n- (none)\n", f"### Done\n{done}")
    assert len(long) > 5_000
    migrated = (
        Message(role="assistant", content=(ToolCall(id="c2", name="bash", arguments='{"command": "tool --all"}'),)),
        Message(role="tool", content=(ToolResult(call_id="c2", content="200 steps", exit_code=0),)),
    )
    request = SummaryRequest(messages=(*conversation(), *migrated), max_chars=3_000)
    summary = ModelSummarizer(Scripted(long)).summarize(request)
    assert len(summary) <= 3_000
    assert missing_sections(summary) == []
    assert "step 199" in summary and "step 0 " not in summary  # the newest Done items stay
    assert "older items omitted" in summary


@pytest.mark.parametrize("bad", [{"max_tokens": 0}, {"result_chars": -5}, {"arguments_chars": 2.5}])
def test_settings_are_checked(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ModelSummarySettings(**bad)  # type: ignore[arg-type]


def test_summary_error_alone_still_works() -> None:
    error = SummaryError("the model timed out")
    assert str(error) == "the model timed out" and error.request is None and error.response is None


def test_engine_keeps_the_context_and_records_the_exchange_when_the_reply_is_invalid() -> None:
    counter = get_counter("o200k_base")
    small = EngineSettings(
        compact=CompactSettings(max_input_length=2_000, compact_ratio=0.7, reserve_ratio=0.2),
        offload=OffloadSettings(recent_n=2, recent_max_bytes=1_500, old_max_bytes=300),
    )
    messages = [Message.of("user" if i % 2 == 0 else "assistant", f"turn {i}: " + "word " * 60) for i in range(30)]
    live = add(Live(), messages, counter)
    summarizer = ModelSummarizer(Scripted("I cannot summarize this."))
    setup = engine.Setup(settings=small, counter=counter, summarizer=summarizer, store=MemoryFolder())
    step = engine.prepare(live, setup, system="be brief", now=datetime(2026, 12, 3, 9, 30, tzinfo=UTC))
    assert step.compaction is None and step.failure is not None
    assert step.context.messages == live.messages
    assert step.failure.response == "I cannot summarize this."
    assert step.failure.request is not None and step.failure.request["model"] == "scripted:test"


def test_at_a_squeezed_cap_every_identifier_is_in_the_summary_or_counted_by_its_note() -> None:
    from ctxkeep.summarize.facts.collect import collect_facts

    names = [f"WidgetNumber{n}FactoryImplementation" for n in range(150)]
    messages = (
        Message.of("user", "Port the widget layer. " + "Context line. " * 80),
        Message.of("assistant", "I found " + ", ".join(names) + " in the old layer."),
        Message.of("user", "Keep going."),
    )
    settings = ModelSummarySettings(window=8_192, max_tokens=1_024)
    summary = ModelSummarizer(fixed_summary_model(), settings=settings).summarize(
        SummaryRequest(messages=messages, max_chars=2_000)
    )
    assert missing_sections(summary) == []
    absent = [i for i in collect_facts(messages, identifier_limit=None).identifiers if i not in summary]
    counted = [int(n) for n in re.findall(r"\((\d+) more identifiers in the archive\)", summary)]
    assert absent and sum(counted) >= len(absent)  # dropped for room, never silently


def test_an_identifier_the_model_listed_in_two_subsections_is_listed_once() -> None:
    from ctxkeep.summarize.model.augment import augment

    reply = (
        "## Goal\n- Port it\n\n## Constraints & Preferences\n- (none)\n\n## Progress\n### Done\n- (none)\n"
        "### Exact identifiers\n- `ThinkingLevel`\n\n## Key Decisions\n- (none)\n\n## Next Steps\n- (none)\n\n"
        "## Critical Context\n### Exact identifiers\n- `ThinkingLevel`\n- `AgentSession`\n"
    )
    request = SummaryRequest(messages=(Message.of("user", "Port ThinkingLevel into AgentSession."),))
    out = augment(reply, request)
    assert out.count("- `ThinkingLevel`") == 1 and "- `AgentSession`" in out and missing_sections(out) == []
