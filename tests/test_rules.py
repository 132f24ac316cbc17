"""Rules whole, newest value wins: what the user requires, as stated, in both summarizers."""

from __future__ import annotations

import pytest

from ctxkeep.messages import Message
from ctxkeep.settings import ModelSummarySettings
from ctxkeep.summarize import ExtractiveSummarizer, ModelSummarizer, SummaryRequest
from ctxkeep.summarize.facts.collect import rules_in
from ctxkeep.summarize.facts.decisions import REJECTED
from ctxkeep.summarize.facts.superseded import SUPERSEDED, mark_superseded, superseded_by
from ctxkeep.summarize.sections.markdown import parse_sections
from ctxkeep.summarize.testing import fixed_summary_model


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The budget cap is $500. Never exceed it.", ["The budget cap is $500. Never exceed it."]),
        ("I would like the public API to stay as it is.", ["I would like the public API to stay as it is."]),
        ("It is important not to add dependencies.", ["It is important not to add dependencies."]),
        ("Use ruff instead of flake8 for linting.", ["Use ruff instead of flake8 for linting."]),
        ("I prefer small commits.", ["I prefer small commits."]),
        ("希望保持接口不变。", ["希望保持接口不变。"]),
        # not rules: questions, pasted logs, "instead of" in a bug report, a rule with its own value
        ("Should we always use tox?", []),
        ("2026-01-01T10:00:00 ERROR value must not be null", []),
        ("Checkout answers 500 instead of COUPON_EXPIRED.", []),
        ("Port is 8080. Never change port 9090.", ["Never change port 9090."]),
    ],
)
def test_rules_are_taken_whole_with_their_values(text: str, expected: list[str]) -> None:
    assert rules_in(text) == expected


def test_a_later_value_of_the_same_rule_supersedes_the_earlier() -> None:
    rules = ["Budget cap is $500, never exceed it.", "Use pytest -q.", "Budget cap is $800, never exceed it."]
    assert mark_superseded(rules) == [f"{rules[0]} {SUPERSEDED}", rules[1], rules[2]]
    # different rules with different values, and the same words with no value, are left alone
    assert mark_superseded(["Keep the timeout at 30 s.", "Retry at most 3 times."])[0].endswith("30 s.")
    assert mark_superseded(["Always run the linter.", "Always run the linter first."])[0] == "Always run the linter."


@pytest.mark.parametrize(
    ("older", "newer", "replaces"),
    [
        # the same rule about different things: both stand
        ("Never touch `module_19.py` without asking.", "Never touch `module_20.py` without asking.", False),
        ("Do not edit src/legacy_v1/api.py.", "Do not edit src/legacy_v2/api.py.", False),
        ("Never push to release-7 directly.", "Never push to hotfix-7 directly.", False),
        # a setting said again with another amount, or a change said as one: the newer wins
        ("Always use port 8080 for the server.", "Always use port 9090 for the server.", True),
        ("Keep the timeout at 30s, always.", "Keep the timeout at 45s, always.", True),
        ("Never touch `module_19.py` without asking.", "Actually, never touch `module_20.py` without asking.", True),
    ],
)
def test_a_rule_is_superseded_only_by_a_change_not_by_a_sibling(older: str, newer: str, replaces: bool) -> None:
    marked = mark_superseded([older, newer])
    assert marked[0].endswith(SUPERSEDED) is replaces, marked
    assert marked[1] == newer
    assert (superseded_by([older, newer])[0] is not None) is replaces


def conversation() -> list[Message]:
    return [
        Message.of("user", "Book the flights. The budget cap is $500. Never exceed it."),
        Message.of("assistant", "Searching flights now."),
        Message.of("user", "Change of plan: the budget cap is $800. Never exceed it."),
        Message.of("assistant", "Understood."),
    ]


def test_the_extractive_summary_marks_the_superseded_value() -> None:
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(conversation())))
    rules = parse_sections(summary)["Constraints & Preferences"][""]
    assert rules[-1].endswith("the budget cap is $800. Never exceed it.")
    assert any("$500" in r and r.endswith(SUPERSEDED) for r in rules)


def test_the_model_summary_gets_the_rules_it_left_out_appended_verbatim() -> None:
    model = fixed_summary_model()
    model.enqueue(
        "".join(f"## {t}\n- (none)\n\n" for t in ("Goal", "Constraints & Preferences", "Progress"))
        + "".join(f"## {t}\n- (none)\n\n" for t in ("Key Decisions", "Next Steps", "Critical Context"))
    )
    settings = ModelSummarySettings(window=8_192, max_tokens=1_024, audit=False, retries=0)
    summary = ModelSummarizer(model, settings=settings).summarize(SummaryRequest(messages=tuple(conversation())))
    assert "the budget cap is $800. Never exceed it." in summary
    assert f"The budget cap is $500. Never exceed it. {SUPERSEDED}" in summary


def test_a_decision_the_user_turned_down_is_marked_superseded() -> None:
    messages = [
        Message.of("user", "Speed up the cache."),
        Message.of("assistant", "I decided to switch to Redis instead of the in-memory dict."),
        Message.of("user", "No, keep it in memory; no new services."),
        Message.of("assistant", "Understood, keeping the dict."),
    ]
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(messages)))
    [decision] = parse_sections(summary)["Key Decisions"][""]
    assert decision == f"I decided to switch to Redis instead of the in-memory dict. {REJECTED}"
    agreed = [messages[0], messages[1], Message.of("user", "Great, go ahead."), messages[3]]
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(agreed)))
    assert not parse_sections(summary)["Key Decisions"][""][0].endswith(REJECTED)


EMPTY_REPLY = "".join(
    f"## {t}\n- (none)\n\n"
    for t in ("Goal", "Constraints & Preferences", "Progress", "Key Decisions", "Next Steps", "Critical Context")
)


def test_the_model_summary_states_a_listed_rule_once_and_again_when_its_message_leaves() -> None:
    settings = ModelSummarySettings(window=8_192, max_tokens=1_024, audit=False, retries=0)
    model = fixed_summary_model()
    summarizer = ModelSummarizer(model, settings=settings)
    rule = "never retry more than 3 times"
    also = f"Also:\n- {rule}\n\n" + "Some background on the client. " * 12  # too long to fit beside the newest
    model.enqueue(EMPTY_REPLY)
    first = summarizer.summarize(
        SummaryRequest(messages=(Message.of("user", "Port the client."), Message.of("user", also)))
    )
    assert first.count(rule) == 1  # in the user's message, carried verbatim; not under "Rules the user stated"
    model.enqueue(EMPTY_REPLY)
    newer = tuple(Message.of("user", f"Look at module {n}: " + "details " * 120) for n in range(3))
    second = summarizer.summarize(SummaryRequest(messages=newer, previous=first, max_chars=6_000))
    assert f"Also:\n- {rule}" not in second and second.count(rule) == 1  # its message left: the rule is stated


def test_a_rule_restated_after_it_was_superseded_stays_beside_its_marked_statement() -> None:
    messages = [
        Message.of("user", "Book it. The budget cap is $500. Never exceed it."),
        Message.of("assistant", "Searching."),
        Message.of("user", "Change of plan: the budget cap is $800. Never exceed it."),
        Message.of("assistant", "Understood."),
    ]
    first = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(messages)))
    back = [Message.of("user", "The budget cap is $500. Never exceed it."), Message.of("assistant", "Ok.")]
    second = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(back), previous=first))
    rules = parse_sections(second)["Constraints & Preferences"][""]
    assert rules[-1] == "The budget cap is $500. Never exceed it."  # the newest value, unmarked
    assert any(r.startswith("Change of plan: the budget cap is $800.") and r.endswith(SUPERSEDED) for r in rules)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "i actually want you to:\n- never push to main\n- run the tests first",
            ["never push to main", "run the tests first"],
        ),
        ("Please do the following:\n1. keep replies short\n2. use pytest", ["keep replies short", "use pytest"]),
        ("What I need you to do:\n* write docs in English\n\nThat is all.", ["write docs in English"]),
        ("I'd like you to:\nanswer in French", ["answer in French"]),
        ("You must follow these rules:\n- no emojis", ["no emojis"]),
        ("Make sure of this, always:\n- one commit per change", ["one commit per change"]),
    ],
)
def test_a_lead_in_is_no_rule_alone_its_items_are(text: str, expected: list[str]) -> None:
    assert rules_in(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Here is the log:\n- error 1\n- error 2",  # no ask: the items are data
        "Could you look at this:\n- the login page",  # a one-off ask, not a standing rule
        "Never do this:",  # nothing follows: no rule to take
    ],
)
def test_a_lead_in_that_asks_nothing_makes_no_rule(text: str) -> None:
    assert rules_in(text) == []
