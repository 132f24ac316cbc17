"""The quality audit: what a model summary must carry, as reasons a model can act on."""

from __future__ import annotations

from ctxkeep.summarize.facts.collect import Facts
from ctxkeep.summarize.model.audit import AUDIT_IDENTIFIERS, audit, reflects

GOOD = """\
## Goal
- Make the coupon endpoint return 410 for expired coupons (#482)

## Constraints & Preferences
- Never touch the migrations folder

## Progress
### Done
- [x] Ran `pytest tests/test_coupons.py` (exit 1)
### In Progress
- [ ] Editing `app/coupons.py`
### Blocked
- (none)

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
