"""The model summarizer on long histories: parts and a merge within the model's window, gaps named,
the audit's retries with feedback, the best reply kept, and JSON replies held to a schema."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.conftest import ROOT, raw_params
from tests.scripted import Scripted

from ctxkeep.errors import ProviderError, SummaryError
from ctxkeep.formats import load
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.providers import Completion, Turn
from ctxkeep.providers.deterministic import DeterministicModel
from ctxkeep.settings import SAFETY_MARGIN, ModelSummarySettings
from ctxkeep.summarize import ModelSummarizer, SummaryRequest, missing_sections
from ctxkeep.summarize.sections.structured import SCHEMA, to_markdown
from ctxkeep.summarize.testing import fixed_summary, fixed_summary_model
from ctxkeep.tokens import get_counter

COUNTER = get_counter("o200k_base")
WINDOW = 8_192
MAX_TOKENS = 1_024

GOOD = """\
## Goal
- Migrate every service to the new config loader

## Constraints & Preferences
- (none)

## Progress
### Done
- [x] Migrated services [evidence: `c0` exit 0]
### In Progress
- (none)
### Blocked
- (none)

## Key Decisions
- (none)

## Next Steps
1. Migrate the next service
### Pending user asks
- Migrate every service to the new config loader

## Critical Context
- (none)
### Exact identifiers
- `services/svc0/config.py`
"""


def history(n: int, *, result_chars: int = 1_800) -> tuple[Message, ...]:
    """A long session: the user asks, then `n` rounds of a shell call on one service's file and its output."""
    messages = [Message.of("user", "Migrate every service to the new config loader, one at a time.")]
    for i in range(n):
        path = f"services/svc{i}/config.py"
        call = ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": f"python -m migrate {path}"}))
        messages.append(Message(role="assistant", content=(call,)))
        output = f"migrated {path}\n" + "".join(f"  key_{k} = value_{i}_{k}\n" for k in range(result_chars // 24))
        messages.append(Message(role="tool", content=(ToolResult(call_id=f"c{i}", content=output, exit_code=0),)))
    messages.append(Message.of("assistant", f"Migrated {n} services; next I will run the full test suite."))
    return tuple(messages)


def tokens(request: Completion) -> int:
    return COUNTER.count_text(request.system) + sum(COUNTER.count_text(t.text) for t in request.turns)


def fits(request: Completion) -> bool:
    return math.ceil(tokens(request) * SAFETY_MARGIN) + request.max_tokens <= WINDOW


def test_a_long_history_is_summarized_in_parts_then_merged_within_the_window() -> None:
    model = fixed_summary_model()
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=WINDOW, max_tokens=MAX_TOKENS))
    messages = history(60)
    summary = summarizer.summarize(SummaryRequest(messages=messages, language="en"))
    run = summarizer.last_run
    assert run is not None and run.parts > 2
    parts = [r for r in model.requests if "of a long history" in r.turns[0].text]
    merges = [r for r in model.requests if "<partial-summary" in r.turns[0].text]
    assert len(parts) == run.parts and merges and run.calls == len(model.requests)
    assert all(fits(r) for r in model.requests), "a request exceeded the model's window"
    assert all(f"of {run.parts} of a long history" in r.turns[0].text for r in parts)
    assert missing_sections(summary) == []
    for i in range(60):  # no identifier of the compacted part is lost, whatever the model wrote
        assert f"services/svc{i}/config.py" in summary or "more identifiers in the archive" in summary
    assert run.input_tokens == sum(tokens(r) for r in model.requests)


def test_many_parts_are_merged_in_rounds() -> None:
    model = fixed_summary_model()
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=WINDOW, max_tokens=MAX_TOKENS))
    summarizer.summarize(SummaryRequest(messages=history(240), language="en"))
    merges = [r for r in model.requests if "<partial-summary" in r.turns[0].text]
    assert len(merges) > 1  # intermediate merges, then the final one
    assert all(fits(r) for r in model.requests)
    final = merges[-1].turns[0].text
    assert "Merge them into one summary" in final


def test_a_failed_part_leaves_a_named_gap_and_the_others_are_kept() -> None:
    down = ProviderError("the server is overloaded", provider="openai", retryable=True)
    model = Scripted(GOOD, down, *([GOOD] * 10))
    summarizer = ModelSummarizer(
        model, settings=ModelSummarySettings(window=WINDOW, max_tokens=MAX_TOKENS, audit=False)
    )
    summary = summarizer.summarize(SummaryRequest(messages=history(30), language="en"))
    run = summarizer.last_run
    assert run is not None and len(run.gaps) == 1
    assert "part 2 of" in run.gaps[0] and "read them in the archive" in run.gaps[0]
    assert run.gaps[0] in summary  # said in the summary, never cut
    merge = next(r for r in model.requests if "<partial-summary" in r.turns[0].text)
    assert "could not be summarized" in merge.turns[0].text
    assert merge.turns[0].text.count("<partial-summary") == run.parts - 1


def test_when_every_part_fails_the_summary_fails() -> None:
    model = Scripted("I am a tiny model and cannot do this.")
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=WINDOW, max_tokens=MAX_TOKENS))
    with pytest.raises(SummaryError, match=r"none of the \d+ parts") as info:
        summarizer.summarize(SummaryRequest(messages=history(30), language="en"))
    assert info.value.response == "I am a tiny model and cannot do this."
    assert info.value.request is not None and info.value.request["turns"]


def test_a_reply_that_fails_the_audit_is_retried_with_the_reasons() -> None:
    lacking = GOOD.replace("### Pending user asks\n- Migrate every service to the new config loader\n", "")
    model = Scripted(lacking, GOOD)
    summarizer = ModelSummarizer(model)
    messages = history(1)
    summary = summarizer.summarize(SummaryRequest(messages=messages, language="en"))
    assert "### Pending user asks" in summary
    first, second = model.requests
    assert "failed these checks" not in first.turns[0].text
    assert "failed these checks" in second.turns[0].text and "Pending user asks" in second.turns[0].text
    assert summarizer.last_run is not None and summarizer.last_run.attempts == 2
    assert summarizer.last_run.audit == ()


def test_the_valid_reply_with_the_fewest_failures_is_kept() -> None:
    worst = GOOD.replace("### Pending user asks\n- Migrate every service to the new config loader\n", "").replace(
        "### Exact identifiers\n- `services/svc0/config.py`\n", ""
    )
    better = GOOD.replace("### Pending user asks\n- Migrate every service to the new config loader\n", "")
    model = Scripted(worst, "not a summary", better, worst)
    summarizer = ModelSummarizer(model)
    summary = summarizer.summarize(SummaryRequest(messages=history(1), language="en"))
    assert len(model.requests) == 4  # 1 + 3 retries, none passed
    run = summarizer.last_run
    assert run is not None and len(run.audit) == 1 and "Pending user asks" in run.audit[0]
    assert summary.startswith(better.split("### Exact identifiers")[0].rstrip("\n"))


def test_a_message_over_half_the_window_is_sent_truncated() -> None:
    huge = "\n".join(f"row {i}: {'x' * 40}" for i in range(3_000))
    messages = (Message.of("user", "Load the table"), Message.of("user", huge), Message.of("assistant", "Loaded."))
    model = fixed_summary_model()
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=WINDOW, max_tokens=MAX_TOKENS))
    summarizer.summarize(SummaryRequest(messages=messages, language="en"))
    assert summarizer.last_run is not None and summarizer.last_run.shortened == 1
    sent = "".join(r.turns[0].text for r in model.requests)
    assert "too large to send whole" in sent and "characters omitted" in sent
    assert all(fits(r) for r in model.requests)


def test_json_replies_are_held_to_the_schema_and_rendered_as_sections() -> None:
    model = fixed_summary_model()
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(reply_format="json"))
    summary = summarizer.summarize(SummaryRequest(messages=history(3), language="en"))
    assert all(r.schema == SCHEMA for r in model.requests)
    assert "JSON object" in model.requests[0].system
    assert missing_sections(summary) == []
    assert "services/svc2/config.py" in summary

    bad = Scripted('{"goal": ["x"]}')
    with pytest.raises(SummaryError, match="lacks the fields"):
        ModelSummarizer(bad, settings=ModelSummarySettings(reply_format="json")).summarize(
            SummaryRequest(messages=history(1))
        )


def test_to_markdown_checks_the_reply() -> None:
    fields = {name: [] for name in SCHEMA["required"]}
    fields["goal"] = ["Ship  the\nrelease"]
    text = to_markdown(json.dumps(fields))
    assert missing_sections(text) == [] and "- Ship the release" in text
    for reply, error in [("[1, 2]", "not an object"), ("{", "not JSON"), ('{"goal": 3}', "lacks the fields")]:
        with pytest.raises(ValueError, match=error):
            to_markdown(reply)
    with pytest.raises(ValueError, match="list of strings"):
        to_markdown(json.dumps({**fields, "done": [1]}))


def test_a_window_too_small_for_the_reply_is_refused() -> None:
    with pytest.raises(ValueError, match="leaves no room"):
        ModelSummarySettings(window=4_000, max_tokens=1_024)
    with pytest.raises(ValueError, match="reply_format"):
        ModelSummarySettings(reply_format="yaml")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ModelSummarySettings"):
        ModelSummarizer(fixed_summary_model(), settings={"window": 8_192})  # type: ignore[arg-type]


@pytest.mark.parametrize("path", raw_params())
def test_every_transcript_fits_the_window_of_a_small_model(path: Path) -> None:
    for conversation in load(path).conversations[:3]:
        messages = conversation.messages
        if len(messages) < 4:
            continue
        model = fixed_summary_model()
        summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=WINDOW, max_tokens=MAX_TOKENS))
        summary = summarizer.summarize(SummaryRequest(messages=messages))
        assert missing_sections(summary) == []
        assert all(fits(r) for r in model.requests), f"{path.name}: a request exceeded {WINDOW} tokens"


@pytest.mark.parametrize("findings", [250, 600])
def test_a_large_previous_summary_never_pushes_a_request_past_the_window(findings: int) -> None:
    lines = "".join(f"- finding {i}: value {i * 7}\n" for i in range(findings))
    previous = GOOD.replace("- (none)\n### Exact identifiers", lines + "### Exact identifiers")
    model = fixed_summary_model()
    summarizer = ModelSummarizer(model, settings=ModelSummarySettings(window=WINDOW, max_tokens=2_048))
    request = SummaryRequest(messages=history(40), previous=previous, language="en")
    summary = summarizer.summarize(request)
    assert all(fits(r) for r in model.requests) and missing_sections(summary) == []
    if findings > 500:  # the previous summary alone would leave no room: the prompts show it fitted, never fail
        shown = model.requests[-1].turns[0].text.split("</previous-summary>")[0]
        assert "older items omitted" in shown and len(shown) < len(previous)
        return
    assert "finding 0: value 0" in model.requests[-1].turns[0].text
    assert summarizer.last_run is not None and summarizer.last_run.parts > 1
    assert all(fits(r) for r in model.requests)


def test_the_fixed_summary_model_answers_with_the_fixed_summary_and_a_bare_one_raises() -> None:
    request = Completion(system="Summarize.", turns=(Turn(role="user", text="[user]\nShip `app.py` today"),))
    summary = fixed_summary_model().complete(request).text
    assert summary == fixed_summary(request) and missing_sections(summary) == []
    assert DeterministicModel(default=lambda r: "mine").complete(request).text == "mine"
    with pytest.raises(ProviderError, match="fixed_summary_model"):
        DeterministicModel().complete(request)


IMPORT_ORDERS = {
    "summarize first": "import ctxkeep.summarize\nfrom ctxkeep.providers.deterministic import DeterministicModel\n",
    "model alone": "from ctxkeep.providers.deterministic import DeterministicModel\n",
    "model first": "from ctxkeep.providers.deterministic import DeterministicModel\nimport ctxkeep.summarize\n",
}


@pytest.mark.parametrize("imports", IMPORT_ORDERS.values(), ids=IMPORT_ORDERS.keys())
def test_a_deterministic_model_answers_the_same_whatever_was_imported_first(imports: str) -> None:
    probe = imports + textwrap.dedent("""\
        from ctxkeep.errors import ProviderError
        from ctxkeep.providers import Completion, Turn
        request = Completion(system="s", turns=(Turn(role="user", text="hi"),))
        try:
            DeterministicModel().complete(request)
        except ProviderError:
            print("raises")
        from ctxkeep.summarize.testing import fixed_summary_model
        print(fixed_summary_model().complete(request).text.startswith("## Goal"))
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["raises", "True"]
