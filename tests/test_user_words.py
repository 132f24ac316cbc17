"""The user's words on every shared transcript at 32k and 128k: the first real ask and the newest asks within the
user budget verbatim after every compaction, and the rules the user stated (read by tests/user_words.py's oracle)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

import pytest
from tests.conftest import RAW, raw_files
from tests.user_words import KINDS, Tally, measure

from ctxkeep.archive import Archive, append, user_messages
from ctxkeep.folder import MemoryFolder
from ctxkeep.live import Live
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.plan import Plan
from ctxkeep.settings import MIN_SUMMARY_CHARS
from ctxkeep.split import Split
from ctxkeep.summarize import ExtractiveSummarizer, ModelSummarizer, SummaryRequest
from ctxkeep.summarize.facts.collect import RULE_CHARS
from ctxkeep.summarize.testing import fixed_summary_model
from ctxkeep.summarize.verbatim import budgets, newest_within, split_carried, with_recalled, words_left_out
from ctxkeep.workspace.recall import recall
from ctxkeep.writer import WriteNow

# Every rule, whole, in every summary; a squeezed one (a huge newest message leaves it little room) keeps the
# newest within the user's budget, and the next compaction restores the rest from the archive (below).
RULES_FLOOR = {32_000: 100.0, 128_000: 100.0}


@pytest.mark.parametrize("window", [32_000, 128_000])
def test_the_first_and_newest_asks_and_the_rules_are_kept_verbatim(window: int) -> None:
    files = [p for p in raw_files() if p.exists()]
    if not files:
        pytest.skip(f"no transcripts in {RAW}")
    total = Tally()
    for path in files:
        total.add(measure(path, window))
    assert total.wanted["first"] and total.wanted["newest"] and total.wanted["rules"]
    shares = {k: round(total.share(k), 1) for k in KINDS}
    assert shares["first"] == 100.0 and shares["newest"] == 100.0, (shares, total.missed[:5])
    assert shares["rules"] >= RULES_FLOOR[window], (shares, total.missed[:5])


# The rules of one session, each a sentence the user typed in a message of its own.
RULES = [f"Never touch `module_{n}.py`: it belongs to team {n}, who review every change to it." for n in range(24)]

TASK = "Refactor the billing service into small modules. " + " ".join(
    f"Step {n}: move the {n}th group of invoice helpers into a module named after what it does." for n in range(12)
)


def _rules_session() -> list[Message]:
    msgs = [Message(role="user", content=(TextBlock(text=TASK),))]
    for rule in RULES:
        msgs.append(Message(role="user", content=(TextBlock(text=rule),)))
        msgs.append(Message(role="assistant", content=(TextBlock(text="Understood."),)))
    return msgs


def test_a_squeezed_summary_keeps_the_newest_rules_and_the_next_one_restores_the_rest_from_the_archive() -> None:
    messages = _rules_session()
    squeezed = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(messages), max_chars=MIN_SUMMARY_CHARS))
    assert words_left_out(squeezed)
    kept = [r for r in RULES if r in squeezed]
    assert kept and kept == RULES[-len(kept) :]  # the newest, within the user's budget
    assert set(newest_within(RULES, budgets(MIN_SUMMARY_CHARS)[0])) <= set(kept)
    # room returns: the archive has every word, and the writer hands the user's messages to the summarizer
    store = MemoryFolder()
    append(store, Archive(), messages, date(2026, 12, 5))
    later = (Message(role="user", content=(TextBlock(text="Now run the tests."),)),)
    request = with_recalled(SummaryRequest(messages=later, previous=squeezed), lambda: user_messages(store))
    assert len(request.recalled) == len(RULES) + 1
    restored = ExtractiveSummarizer().summarize(request)
    assert all(r in restored for r in RULES)
    assert TASK not in squeezed and TASK in restored  # the task a squeezed summary cut to its head and tail, whole
    assert not words_left_out(restored)
    # without the archive the dropped rules stay lost: the recall is what brings them back
    alone = ExtractiveSummarizer().summarize(SummaryRequest(messages=later, previous=squeezed))
    assert not all(r in alone for r in RULES) and TASK not in alone


@pytest.mark.parametrize("first", ["extractive", "model"])
def test_a_model_summary_after_a_squeeze_keeps_every_rule_the_extractive_one_keeps(first: str) -> None:
    messages = _rules_session()
    model = ModelSummarizer(fixed_summary_model())
    squeezing = ExtractiveSummarizer() if first == "extractive" else model
    squeezed = squeezing.summarize(SummaryRequest(messages=tuple(messages), max_chars=MIN_SUMMARY_CHARS))
    # squeezed, the model's summary keeps the extractive floor: the newest rules within the user's budget
    assert set(newest_within(RULES, budgets(MIN_SUMMARY_CHARS)[0])) <= {r for r in RULES if r in squeezed}
    store = MemoryFolder()
    append(store, Archive(), messages, date(2026, 12, 5))
    later = (Message(role="user", content=(TextBlock(text="Now run the tests."),)),)
    request = with_recalled(SummaryRequest(messages=later, previous=squeezed), lambda: user_messages(store))
    floor = ExtractiveSummarizer().summarize(request)
    restored = model.summarize(request)
    assert all(r in floor for r in RULES)
    assert [r for r in RULES if r not in restored] == []  # what the model's text drops is put back, every rule


def test_the_writer_hands_the_summarizer_the_archived_words_a_squeezed_summary_left_out() -> None:
    messages = _rules_session()
    squeezed = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(messages), max_chars=MIN_SUMMARY_CHARS))
    store = MemoryFolder()
    append(store, Archive(), messages, date(2026, 12, 5))
    later = (Message(role="user", content=(TextBlock(text="Now run the tests."),)),)
    cut = Split(to_compact=later, pinned=(), to_keep=(), is_valid=True, moved=0)
    request = SummaryRequest(messages=later, previous=squeezed)
    plan = Plan(cut=cut, request=request, reason="threshold", tokens=0, at=datetime(2026, 12, 5, tzinfo=UTC))
    written = WriteNow(summarizer=ExtractiveSummarizer(), store=store).write(plan, Live())
    assert written is not None and isinstance(written.summary, str)
    assert len(written.plan.request.recalled) == len(RULES) + 1
    assert all(r in written.summary for r in RULES)


def test_the_archive_is_read_only_when_the_previous_summary_left_words_out() -> None:
    messages = tuple(_rules_session()[:5])
    whole = ExtractiveSummarizer().summarize(SummaryRequest(messages=messages))
    assert not words_left_out(whole)

    def archived() -> list[Message]:
        raise AssertionError("the archive was read though nothing was left out")

    request = SummaryRequest(messages=messages, previous=whole)
    assert with_recalled(request, archived) is request


def test_a_rule_stays_whole_in_constraints_however_long() -> None:
    rule = "Always keep the wire format stable: " + ", ".join(f"field_{n} stays an int" for n in range(20)) + "."
    assert 300 < len(rule) < RULE_CHARS
    later = [
        f"Here is report {n}; its third table has odd totals in the last column, see what is off." for n in range(30)
    ]
    messages = tuple(Message(role="user", content=(TextBlock(text=t),)) for t in ["Fix the exporter.", rule, *later])
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=messages, max_chars=4_000))
    assert rule not in split_carried(summary)[1]  # its message left the verbatim part (newer ones fill it) ...
    assert rule in split_carried(summary)[0]  # ... so Constraints lists it, whole


def test_a_rule_the_verbatim_part_shows_whole_is_said_once() -> None:
    rule = "Never log the customer's card number, not even its last four digits."
    messages = (Message(role="user", content=(TextBlock(text=f"Fix the exporter. {rule}"),)),)
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=messages))
    assert summary.count(rule) == 1 and rule in split_carried(summary)[1]


def test_each_done_and_blocked_item_names_its_lines_in_the_archive_and_recall_gives_them_back() -> None:
    def run(cid: str, command: str, output: str, code: int) -> list[Message]:
        call = ToolCall.from_input(id=cid, name="Bash", input={"command": command})
        result = ToolResult(call_id=cid, content=output, is_error=code != 0, extra={"exit_code": code})
        return [Message(role="assistant", content=(call,)), Message(role="tool", content=(result,))]

    turns_ = [
        [Message(role="user", content=(TextBlock(text="Fix the flaky parser test."),))],
        run("c1", "pytest tests/test_parser.py", "FAILED tests/test_parser.py::test_dates - ValueError: bad month", 1),
        [Message(role="assistant", content=(TextBlock(text="The cause is a month off by one."),))],
        run("c2", "sed -i 's/month/month + 1/' parser.py", "", 0),
        run("c3", "pytest tests/test_parser.py", "3 passed", 0),
    ]
    messages = tuple(m for group in turns_ for m in group)
    store = MemoryFolder()
    day = date(2026, 12, 5)
    append(store, append(store, Archive(), _rules_session()[:3], day), messages, day)  # lines 4 on
    request = SummaryRequest(messages=messages, source=f"dialog/2026-12-05.jsonl:4-{3 + len(messages)}")
    summary = ExtractiveSummarizer().summarize(request)
    sources = re.findall(r"dialog/\d{4}-\d{2}-\d{2}\.jsonl:\d+(?:-\d+)?", summary)
    assert len(sources) >= 2, summary  # the Done item and the Blocked one
    done = next(line for line in summary.splitlines() if "[evidence:" in line)
    source = re.search(r"dialog/\S+?:\d+(?:-\d+)?(?=\])", done)
    assert source is not None
    shown = {m.message.tool_result.call_id for m in recall(store, source.group(0)) if m.message.tool_result}
    assert shown & {"c2", "c3"}  # the lines hold the calls the item cites as evidence
    blocked = next(line for line in summary.splitlines() if line.startswith("- Bash (error, dialog/"))
    line = re.search(r"dialog/\S+?:\d+", blocked)
    assert line is not None
    assert [c.id for m in recall(store, line.group(0)) for c in m.message.tool_calls] == ["c1"]  # the failed call
