"""The quality audit: what a model summary must carry, as reasons a model can act on."""

from __future__ import annotations

import json

import pytest
from tests.scripted import Scripted

from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.settings import ModelSummarySettings
from ctxkeep.summarize import ModelSummarizer, SummaryRequest
from ctxkeep.summarize.facts.collect import Facts, collect_facts
from ctxkeep.summarize.model.audit import AUDIT_IDENTIFIERS, audit, reflects
from ctxkeep.summarize.model.evidence import backed_done, span_of, unbacked, without_unarchived
from ctxkeep.summarize.model.prompts import system_prompt, uncite
from ctxkeep.summarize.request import Language
from ctxkeep.summarize.sections.markdown import parse_sections

GOOD = """\
## Goal
- Make the coupon endpoint return 410 for expired coupons (#482)

## Constraints & Preferences
- Never touch the migrations folder

## Progress
### Done
- (none)
### In Progress
- [ ] Editing `app/coupons.py`
### Blocked
- `pytest tests/test_coupons.py` fails (exit 1)

## Key Decisions
- **Return 410, not 404**: the coupon existed

## Next Steps
1. Run the tests again
### Pending user asks
- Make expired coupons return 410

## Critical Context
- The server runs on `localhost:8081`
### Exact identifiers
- `app/coupons.py`
- `#482`
"""

FACTS = Facts(
    asks=("Make the coupon endpoint return 410 for expired coupons, see #482",),
    constraints=("Never touch the migrations folder",),
    decisions=("Return 410, not 404",),
    plans=("Run the tests again",),
    identifiers=("app/coupons.py", "#482", "localhost:8081"),
)


def test_a_summary_that_carries_everything_passes() -> None:
    assert audit(GOOD, FACTS) == []


def test_a_summary_of_nothing_in_particular_passes_when_the_facts_are_empty() -> None:
    bare = GOOD.replace("- **Return 410, not 404**: the coupon existed", "- (none)")
    assert audit(bare, Facts()) == []


def test_each_missing_item_is_a_reason_that_names_what_to_add() -> None:
    empty_decisions = GOOD.replace("- **Return 410, not 404**: the coupon existed", "- (none)")
    assert audit(empty_decisions, FACTS) == [
        "`## Key Decisions` is empty but should hold the assistant's decisions, such as «Return 410, not 404»"
    ]
    empty_rules = GOOD.replace("- Never touch the migrations folder", "- (none)")
    assert "Never touch the migrations folder" in audit(empty_rules, FACTS)[0]
    no_steps = GOOD.replace("1. Run the tests again", "- (none)")
    assert "open TODOs" in audit(no_steps, FACTS)[0]


def test_pending_user_asks_must_exist_and_hold_an_open_ask() -> None:
    without = GOOD.replace("### Pending user asks\n- Make expired coupons return 410\n", "")
    assert any("`### Pending user asks`" in r and "missing" in r for r in audit(without, FACTS))
    emptied = GOOD.replace("- Make expired coupons return 410\n", "- (none)\n")
    assert any("still open" in r for r in audit(emptied, FACTS))
    answered = Facts(asks=FACTS.asks, answered=True, identifiers=FACTS.identifiers)
    assert audit(emptied, answered) == []


def test_the_top_identifiers_must_be_verbatim_and_listed() -> None:
    facts = Facts(identifiers=("app/coupons.py", "#482", "localhost:8081", "deadbeef1234"))
    reasons = audit(GOOD, facts)
    assert reasons == [
        "these exact identifiers are missing; copy them verbatim under Exact identifiers: `deadbeef1234`"
    ]
    beyond = Facts(identifiers=(*FACTS.identifiers, *(f"src/m{i}.py" for i in range(AUDIT_IDENTIFIERS))))
    assert len(audit(GOOD, beyond)[0].split("`, `")) == AUDIT_IDENTIFIERS - len(FACTS.identifiers)
    unlisted = GOOD.replace("### Exact identifiers\n- `app/coupons.py`\n- `#482`\n", "- `app/coupons.py` `#482`\n")
    assert audit(unlisted, FACTS) == ["the `### Exact identifiers` subsection under `## Critical Context` is missing"]


def test_the_chinese_subsection_names_count() -> None:
    chinese = GOOD.replace("### Exact identifiers", "### 精确标识符").replace(
        "### Pending user asks", "### 待回复的用户请求"
    )
    assert audit(chinese, FACTS, "zh") == []


def test_the_latest_ask_must_be_reflected() -> None:
    facts = Facts(asks=("Rename the billing module and update every import of it",), answered=True)
    reasons = audit(GOOD, facts)
    assert reasons == [f"the summary does not reflect the latest user request: «{facts.asks[0]}»"]
    assert reflects("- rename `billing` module, then imports", facts.asks[0])
    assert reflects("see src/billing.py", "please look at src/billing.py")  # one identifier is enough
    assert reflects("anything", "ok")  # too short to check
    assert reflects("- 重构计费模块", "请重构计费模块并更新导入")
    assert not reflects("- 修复登录页面", "请重构计费模块并更新导入")


def test_a_subsection_inside_a_code_fence_does_not_count() -> None:
    fenced = GOOD.replace(
        "### Pending user asks\n- Make expired coupons return 410\n",
        "- an example reply\n```\n### Pending user asks\n- Make expired coupons return 410\n```\n",
    )
    assert any("`### Pending user asks`" in r and "missing" in r for r in audit(fenced, FACTS))
    no_decisions = GOOD.replace("- **Return 410, not 404**: the coupon existed", "- (none)").replace(
        "- The server runs on `localhost:8081`\n",
        "- The server runs on `localhost:8081`\n~~~\n## Key Decisions\n- **Return 410, not 404**\n~~~\n",
    )
    assert audit(no_decisions, FACTS)[0].startswith("`## Key Decisions` is empty")


# --- held to the log: evidence on Done items, cited lines within the archive ------------------------------------

SOURCE = "dialog/2026-12-05.jsonl:10-13"  # the four messages of `_session`


def _session() -> tuple[Message, ...]:
    def call(cid: str, command: str) -> Message:
        return Message(
            role="assistant", content=(ToolCall(id=cid, name="bash", arguments=json.dumps({"command": command})),)
        )

    return (
        call("call_ok", "make build"),
        Message(role="tool", content=(ToolResult(call_id="call_ok", content="built", exit_code=0),)),
        call("call_bad", "pytest -q"),
        Message(role="tool", content=(ToolResult(call_id="call_bad", content="1 failed", exit_code=1),)),
    )


def _reply(done: str, blocked: str = "- (none)") -> str:
    return GOOD.replace("### Done\n- (none)\n", f"### Done\n{done}\n").replace(
        "### Blocked\n- `pytest tests/test_coupons.py` fails (exit 1)\n", f"### Blocked\n{blocked}\n"
    )


@pytest.mark.parametrize(
    "item",
    [
        "- [x] Built the app [evidence: `call_ok` exit 0]",  # the call id of a successful call
        "- [x] Built the app (dialog/2026-12-05.jsonl:10-11)",  # archived lines holding a successful call
        "- [x] Built the app (dialog/2026-12-05.jsonl:11)",  # its result's line
    ],
)
def test_a_done_item_the_log_backs_stays_done(item: str) -> None:
    request = SummaryRequest(messages=_session(), source=SOURCE)
    text = _reply(item)
    assert backed_done(text, collect_facts(request.messages), request=request, language="en") == text


@pytest.mark.parametrize(
    "item",
    [
        "- [x] All tests pass",  # a claim with nothing behind it: the issue's «Found: End-to-end test passes»
        "- [x] Tests pass [evidence: `call_bad` exit 0]",  # the call it names failed
        "- [x] Tests pass (dialog/2026-12-05.jsonl:12-13)",  # the lines it cites hold only the failed call
    ],
)
def test_a_done_item_the_log_does_not_back_is_moved_to_in_progress_and_flagged(item: str) -> None:
    request = SummaryRequest(messages=_session(), source=SOURCE)
    facts = collect_facts(request.messages)
    assert unbacked(_reply(item), facts) == ([] if "dialog/" in item else [item.removeprefix("- [x] ")])
    out = parse_sections(backed_done(_reply(item), facts, request=request, language="en"))["Progress"]
    assert out["Done"] == []
    claim = item.removeprefix("- [x] ")
    assert out["In Progress"][-1] == f"{claim} (not shown done in the log)"


def test_a_done_item_the_previous_summary_listed_keeps_its_place() -> None:
    previous = _reply("- [x] Wrote the design doc [evidence: `old_call` ok]")
    request = SummaryRequest(messages=_session(), source=SOURCE, previous=previous)
    assert backed_done(previous, collect_facts(request.messages), request=request, language="en") == previous


def test_a_cited_line_range_outside_the_archived_span_is_dropped() -> None:
    text = _reply(
        "- [x] Built the app [evidence: `call_ok` exit 0; dialog/2026-12-05.jsonl:10-11]",
        "- `pytest -q` fails (dialog/2026-12-05.jsonl:12-40)\n- earlier (dialog/2026-12-01.jsonl:5-9)"
        "\n- later (dialog/2026-12-06.jsonl:1-2; dialog/2026-12-05.jsonl:13)\n- reversed (dialog/2026-12-05.jsonl:9-3)"
        "\n- `main()` fails (dialog/2026-12-05.jsonl:50)",
    )
    out, dropped = without_unarchived(text, span_of(SummaryRequest(messages=_session(), source=SOURCE)))
    assert dropped == 4
    assert "- `main()` fails\n" in out  # what the citation left is tidied, not a call's "()"
    assert "[evidence: `call_ok` exit 0; dialog/2026-12-05.jsonl:10-11]" in out  # within the span
    assert "- `pytest -q` fails\n" in out  # past the span's last line: no brackets left behind
    assert "- earlier (dialog/2026-12-01.jsonl:5-9)" in out  # an earlier dialog file is archived
    assert "- later (dialog/2026-12-05.jsonl:13)" in out and "2026-12-06" not in out and "9-3" not in out
    assert without_unarchived(text, None) == (text, 0)  # no place known: nothing to check against


def test_the_model_sees_each_message_s_lines_and_call_ids_and_its_summary_is_held_to_the_log() -> None:
    reply = _reply("- [x] Built the app [evidence: `call_ok` exit 0]\n- [x] Tests pass (dialog/2026-12-05.jsonl:12-99)")
    model = Scripted(reply)
    summary = ModelSummarizer(model, settings=ModelSummarySettings(audit=False)).summarize(
        SummaryRequest(messages=_session(), source=SOURCE)
    )
    sent = model.requests[0].turns[0].text
    assert "[assistant] @ dialog/2026-12-05.jsonl:10\n" in sent
    assert "[tool result] bash (exit 1) `call_bad` @ dialog/2026-12-05.jsonl:13\n" in sent
    assert "[tool result] bash (exit 1)\n1 failed" in uncite(sent) and "@ dialog/" not in uncite(sent)
    progress = parse_sections(summary)["Progress"]
    assert progress["Done"] == ["Built the app [evidence: `call_ok` exit 0]"]
    assert "Tests pass (not shown done in the log)" in progress["In Progress"]  # its lines past the span dropped too


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_prompt_asks_for_the_ledger_evidence_and_provenance(language: Language) -> None:
    text = system_prompt(language)
    assert "### Plan\n" in text and "### Background jobs\n" in text
    assert "dialog/DATE.jsonl:FROM-TO" in text and "call id" in text
