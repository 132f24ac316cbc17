"""SWE-agent trajectories: history with tool calls, actions written in text, trajectory only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import raw_params

from ctxkeep.errors import FormatError
from ctxkeep.formats import swe_agent
from ctxkeep.formats.source import Conversation, Source
from ctxkeep.messages import ThinkingBlock
from ctxkeep.pairing import count_pairs, validate


def raw_counts(path: Path) -> tuple[int, int, int]:
    """(tool calls, tool results, repeated call ids) read with plain json."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    history = doc.get("history") or []
    if any(m.get("tool_calls") for m in history):
        ids = [c["id"] for m in history if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        results = sum(len(m.get("tool_call_ids") or []) for m in history if m["role"] == "tool")
        return len(ids), results, len(ids) - len(set(ids))
    # actions written in the text: each trajectory step is one command and its observation
    return len(doc["trajectory"]), len(doc["trajectory"]), 0


def load(doc: Any, *, lenient: bool = False) -> list[Conversation]:
    text = doc if isinstance(doc, str) else json.dumps(doc, indent=2)
    return swe_agent.parse(Source.from_bytes(text.encode(), path="run/x.traj", lenient=lenient))


@pytest.mark.parametrize("path", raw_params("swe_agent_traj"))
def test_real_file_counts_and_pairing(path: Path) -> None:
    source = Source.from_path(path)
    assert swe_agent.sniff(source)
    (conv,) = swe_agent.parse(source)
    calls, results, repeated = raw_counts(path)
    assert count_pairs(conv.messages) == (calls, results)
    assert validate(conv.messages) == []
    assert conv.messages[0].role == "system"
    if repeated:  # the replayed demonstration reuses call ids; they are renamed and noted
        assert source.notes == [f"gave {repeated} repeated tool-call or message id(s) a new one"]
    again = swe_agent.parse(Source.from_path(path))[0]
    assert [m.id for m in conv.messages] == [m.id for m in again.messages]


def test_function_calling_history() -> None:
    doc = {
        "trajectory": [],
        "history": [
            {"role": "system", "content": "You are SWE-agent.", "agent": "main", "message_type": "system_prompt"},
            {"role": "user", "content": [{"type": "text", "text": "Fix #12."}], "message_type": "observation"},
            {
                "role": "assistant",
                "content": "Look first.",
                "thought": "Look first.",
                "action": "ls",
                "thinking_blocks": [{"type": "thinking", "thinking": "Hmm.", "signature": "s1"}],
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
                "message_type": "action",
            },
            {"role": "tool", "content": "a.py", "tool_call_ids": ["c1"], "message_type": "observation"},
            {
                "role": "assistant",
                "content": "Again.",
                "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": '{"command": "ls -a"}'}}],
            },
            {"role": "tool", "content": ".git a.py", "tool_call_ids": ["c1"]},
        ],
    }
    source = Source.from_bytes(json.dumps(doc).encode(), path="x.traj")
    (conv,) = swe_agent.parse(source)
    assert [m.role for m in conv.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    first = conv.messages[2]
    assert isinstance(first.content[0], ThinkingBlock) and first.content[0].signature == "s1"
    assert first.text == "Look first." and first.extra["swe_agent"]["action"] == "ls"
    assert conv.messages[1].text == "Fix #12."
    assert validate(conv.messages) == []  # the reused id "c1" was renamed with its result
    second_call = conv.messages[4].tool_calls[0]
    assert second_call.id != "c1" and conv.messages[5].tool_result is not None
    assert conv.messages[5].tool_result.call_id == second_call.id
    assert source.notes == ["gave 1 repeated tool-call or message id(s) a new one"]


def test_actions_in_text_get_a_shell_call_answered_by_the_next_message() -> None:
    doc = {
        "environment": "swe_main",
        "trajectory": [
            {"action": "ls\n", "observation": "a.py\n", "response": "r", "thought": "t"},
            {"action": "submit\n", "observation": "diff --git a/a.py", "response": "r", "thought": "t"},
        ],
        "history": [
            {"role": "system", "content": "sys", "agent": "primary"},
            {"role": "user", "content": "DEMONSTRATION ...", "is_demo": True, "agent": "primary"},
            {"role": "user", "content": "ISSUE: fix it", "agent": "primary"},
            {"role": "assistant", "content": "List.\n```\nls\n```", "thought": "List.", "action": "ls\n"},
            {"role": "user", "content": "a.py\n(Open file: n/a)\nbash-$"},
            {"role": "assistant", "content": "Done.\n```\nsubmit\n```", "thought": "Done.", "action": "submit\n"},
        ],
    }
    (conv,) = load(doc)
    assert [m.role for m in conv.messages] == ["system", "user", "user", "assistant", "tool", "assistant", "tool"]
    assert conv.messages[1].extra["swe_agent"]["is_demo"] is True
    ls_call, submit_call = conv.messages[3].tool_calls[0], conv.messages[5].tool_calls[0]
    assert (ls_call.name, json.loads(ls_call.arguments)) == ("bash", {"command": "ls\n"})
    ls_result, submit_result = conv.messages[4].tool_result, conv.messages[6].tool_result
    assert ls_result is not None and ls_result.content == "a.py\n(Open file: n/a)\nbash-$"
    # the last action has no message after it: its observation comes from the trajectory
    assert submit_result is not None and submit_result.content == "diff --git a/a.py"
    assert submit_result.call_id == submit_call.id
    assert validate(conv.messages) == []


def test_text_action_with_no_observation_anywhere_stays_text() -> None:
    doc = {"history": [{"role": "assistant", "content": "x", "action": "ls", "message_type": "action"}]}
    (conv,) = load(doc)
    assert count_pairs(conv.messages) == (0, 0) and conv.messages[0].extra["swe_agent"]["action"] == "ls"


def test_trajectory_only() -> None:
    doc = {
        "trajectory": [
            {"action": "ls", "observation": "a.py", "response": "Look.", "thought": "Look."},
            {"action": "", "observation": "", "response": "Thinking only.", "thought": ""},
        ]
    }
    (conv,) = load(doc)
    assert [m.role for m in conv.messages] == ["assistant", "tool", "assistant"]
    assert conv.messages[0].text == "Look." and json.loads(conv.messages[0].tool_calls[0].arguments) == {
        "command": "ls"
    }
    assert validate(conv.messages) == []


def test_tool_message_without_ids_is_kept_as_user_text() -> None:
    source = Source.from_bytes(json.dumps({"history": [{"role": "tool", "content": "out"}]}).encode(), path="x.traj")
    (conv,) = swe_agent.parse(source)
    assert [(m.role, m.text) for m in conv.messages] == [("user", "out")]
    assert "no tool_call_ids" in source.notes[0]


def test_malformed_files() -> None:
    with pytest.raises(FormatError) as err:
        load('{\n  "trajectory": [\n    oops\n  ]\n}')
    assert err.value.line == 3 and err.value.path == "run/x.traj"
    with pytest.raises(FormatError, match="trajectory object"):
        load([1, 2])
    with pytest.raises(FormatError, match="history or trajectory"):
        load({"info": {}})
    bad = {"history": [{"role": "user", "content": "hi"}, "oops", {"role": "robot", "content": "?"}]}
    with pytest.raises(FormatError, match="history item 1"):
        load(bad)
    source = Source.from_bytes(json.dumps(bad).encode(), path="x.traj", lenient=True)
    (conv,) = swe_agent.parse(source)
    assert [m.text for m in conv.messages] == ["hi"]
    assert [n.split(":")[0] for n in source.notes] == ["skipped record", "skipped record"]


def test_ids_stable_and_sniff() -> None:
    doc = {"trajectory": [{"action": "ls", "observation": "a", "response": "r"}]}
    assert [m.id for m in load(doc)[0].messages] == [m.id for m in load(doc)[0].messages]
    assert load(doc)[0].id == "x"
    assert swe_agent.sniff(Source.from_bytes(json.dumps(doc, indent=2).encode()))
    assert not swe_agent.sniff(Source.from_bytes(b'[{"task_id": 0, "traj": []}]'))
    assert not swe_agent.sniff(Source.from_bytes(b'{"instance_id": "a", "history": []}\n'))


def test_values_of_the_wrong_type_are_format_errors_not_crashes() -> None:
    # a role that is a list once crashed the set lookup with "unhashable type"
    bad = {"history": [{"role": "user", "content": "hi"}, {"role": ["assistant"], "content": "?"}]}
    with pytest.raises(FormatError, match="history item 1"):
        load(bad)
    steps = {"trajectory": [{"action": "ls", "observation": "a", "response": ["not", "text"], "thought": 7}, 3]}
    with pytest.raises(FormatError, match="trajectory step 1"):
        load(steps)
    source = Source.from_bytes(json.dumps(steps).encode(), path="x.traj", lenient=True)
    (conv,) = swe_agent.parse(source)
    assert count_pairs(conv.messages) == (1, 1) and len(source.notes) == 1
    weird = {"trajectory": [{"action": "ls", "observation": "a", "state": {"k": [1]}}, {"action": "pwd", "thought": 1}]}
    (conv,) = load(weird)
    assert [m.role for m in conv.messages] == ["assistant", "tool", "assistant"]
