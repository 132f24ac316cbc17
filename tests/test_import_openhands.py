"""OpenHands evaluation output: events to messages, parallel calls, pairing, bad lines."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import raw_params

from ctxkeep.errors import FormatError
from ctxkeep.formats import openhands
from ctxkeep.formats.source import Conversation, Source
from ctxkeep.messages import count_pairs, validate


def raw_counts(path: Path) -> dict[str, tuple[int, int, int]]:
    """instance_id -> (tool calls, tool results, finish actions), read with plain json."""
    counts: dict[str, tuple[int, int, int]] = {}
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        record = json.loads(line)
        calls: set[Any] = set()  # ids of actions made by a tool call
        results = finishes = 0
        for event in record["history"]:
            if "action" in event and event["action"] == "finish":
                finishes += 1  # OpenHands sends finish to the model as text: it never has a result
            elif "action" in event and event.get("tool_call_metadata"):
                calls.add(event["id"])
            elif "observation" in event and event.get("cause") in calls:
                results += 1
        counts[record["instance_id"]] = (len(calls), results, finishes)
    return counts


def load(text: str, *, lenient: bool = False) -> list[Conversation]:
    return openhands.parse(Source.from_bytes(text.encode(), path="out.jsonl", lenient=lenient))


@pytest.mark.parametrize("path", raw_params("openhands_output_jsonl"))
def test_real_file_counts_and_pairing(path: Path) -> None:
    source = Source.from_path(path)
    assert openhands.sniff(source)
    conversations = openhands.parse(source)
    expected = raw_counts(path)
    assert [c.id for c in conversations] == list(expected)
    for conv in conversations:
        calls, results, finishes = expected[conv.id]
        assert count_pairs(conv.messages) == (calls, results), conv.id
        assert validate(conv.messages) == [], conv.id
        finish_texts = [m for m in conv.messages if m.extra.get("openhands", {}).get("action") == "finish"]
        assert len(finish_texts) == finishes and all(m.role == "assistant" and m.text for m in finish_texts)
        assert all(m.timestamp is not None and m.timestamp.tzinfo is not None for m in conv.messages)
        assert conv.messages[0].role == "system"


@pytest.mark.parametrize("path", raw_params("openhands_output_jsonl"))
def test_real_file_ids_are_stable(path: Path) -> None:
    first = openhands.parse(Source.from_path(path))
    second = openhands.parse(Source.from_path(path))
    ids = [m.id for c in first for m in c.messages]
    assert ids == [m.id for c in second for m in c.messages]
    assert len(ids) == len(set(ids))


def action(event_id: int, kind: str, args: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "id": event_id,
        "timestamp": "2025-04-30T16:32:54.707474",
        "source": "agent",
        "action": kind,
        "message": f"{kind} action",
        "args": args,
        **more,
    }


def observation(event_id: int, kind: str, content: str, cause: int | None, **more: Any) -> dict[str, Any]:
    event = {
        "id": event_id,
        "timestamp": "2025-04-30T16:32:55",
        "source": "agent",
        "observation": kind,
        "message": f"{kind} observation",
        "content": content,
        "extras": more.pop("extras", {}),
        **more,
    }
    if cause is not None:
        event["cause"] = cause
    return event


def tool_meta(call_id: str, name: str, response_id: str, calls: list[tuple[str, str, str]], text: str = "") -> Any:
    """tool_call_metadata as OpenHands records it; `calls` are (id, name, arguments) of the response."""
    tool_calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    message = {"role": "assistant", "content": text, "tool_calls": tool_calls}
    return {
        "function_name": name,
        "tool_call_id": call_id,
        "model_response": {"id": response_id, "choices": [{"index": 0, "message": message}]},
        "total_calls_in_response": len(calls),
    }


def instance(instance_id: str, history: list[Any]) -> str:
    return json.dumps({"instance_id": instance_id, "instruction": "fix it", "history": history, "error": None})


def test_parallel_calls_share_one_assistant_message() -> None:
    calls = [("t1", "execute_bash", '{"command": "ls"}'), ("t2", "str_replace_editor", '{"command": "view"}')]
    history = [
        action(
            5,
            "run",
            {"command": "ls", "thought": "Look around."},
            tool_call_metadata=tool_meta("t1", "execute_bash", "resp-1", calls, "Look around."),
        ),
        observation(6, "run", "a.txt", 5, extras={"metadata": {"exit_code": 0, "suffix": "\n[exit 0]"}}),
        action(
            7,
            "read",
            {"path": "/a.txt", "thought": ""},
            tool_call_metadata=tool_meta("t2", "str_replace_editor", "resp-1", calls, "Look around."),
        ),
        observation(8, "read", "ERROR:\nno such file", 7),
    ]
    (conv,) = load(instance("i-1", history))
    assert [m.role for m in conv.messages] == ["assistant", "tool", "tool"]
    turn = conv.messages[0]
    assert turn.text == "Look around."
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == calls
    run, read = (m.tool_result for m in conv.messages[1:])
    assert run is not None and read is not None
    assert (run.call_id, run.content, run.exit_code, run.is_error) == ("t1", "a.txt\n[exit 0]", 0, False)
    assert (read.call_id, read.is_error, read.exit_code) == ("t2", True, None)
    assert validate(conv.messages) == []
    assert turn.source_id == "5" and conv.messages[1].source_id == "6"


def test_each_kind_of_event() -> None:
    finish_meta = tool_meta("t9", "finish", "resp-9", [("t9", "finish", '{"message": "Done."}')], "Wrapping up.")
    history = [
        action(0, "system", {"content": "You are OpenHands.", "tools": [{"type": "function"}]}),
        {**action(1, "message", {"content": "Fix the bug.", "image_urls": ["http://x/y.png"]}), "source": "user"},
        {**action(2, "recall", {"query": "Fix the bug."}), "source": "user"},
        observation(
            3,
            "recall",
            "Added workspace context",
            2,
            source="environment",
            extras={
                "repo_instructions": "Run make test.",
                "microagent_knowledge": [{"name": "github", "trigger": "git", "content": "Use the GITHUB_TOKEN."}],
            },
        ),
        observation(4, "agent_state_changed", "", None, extras={"agent_state": "running"}),
        observation(5, "error", "Parameter 'command' is expected", None),
        action(6, "message", {"content": "Which branch?", "wait_for_response": True}),
        action(7, "think", {"thought": "Plain thought, no tool call."}),
        action(
            8,
            "finish",
            {"final_thought": "Done.", "thought": "Wrapping up.", "task_completed": "true"},
            tool_call_metadata=finish_meta,
        ),
        observation(9, "null", "", None),
    ]
    (conv,) = load(instance("i-2", history))
    got = [(m.role, m.text) for m in conv.messages]
    assert got == [
        ("system", "You are OpenHands."),
        ("user", "Fix the bug."),
        ("user", "Run make test.\n\n<github>\nUse the GITHUB_TOKEN."),
        ("user", "Parameter 'command' is expected"),
        ("assistant", "Which branch?"),
        ("assistant", "Plain thought, no tool call.\n\nthink action"),
        ("assistant", "Wrapping up.\n\nDone."),
    ]
    assert conv.messages[0].extra["openhands"]["tools"] == [{"type": "function"}]
    assert [b.url for b in conv.messages[1].content if hasattr(b, "url")] == ["http://x/y.png"]
    assert conv.messages[3].extra["openhands"]["observation"] == "error"
    assert count_pairs(conv.messages) == (0, 0)
    assert conv.messages[1].timestamp is not None and conv.messages[1].timestamp.tzinfo == UTC


def test_result_matched_by_tool_call_id_when_cause_is_missing() -> None:
    calls = [("t1", "execute_bash", '{"command": "sleep 99"}')]
    meta = tool_meta("t1", "execute_bash", "r1", calls)
    history = [
        action(1, "run", {"command": "sleep 99"}, tool_call_metadata=meta),
        observation(2, "run", "still running", None, tool_call_metadata=meta, extras={"metadata": {"exit_code": -1}}),
        observation(3, "run", "a second observation for the same call", 1),
    ]
    (conv,) = load(instance("i-3", history))
    assert [m.role for m in conv.messages] == ["assistant", "tool", "user"]
    result = conv.messages[1].tool_result
    assert result is not None and result.exit_code == -1
    assert validate(conv.messages) == []


def test_older_pair_history_and_missing_model_response() -> None:
    history = [
        [
            action(
                1,
                "run",
                {"command": "pwd", "thought": "Where am I?"},
                tool_call_metadata={"function_name": "execute_bash", "tool_call_id": "c1"},
            ),
            observation(2, "run", "/work", 1),
        ],
    ]
    (conv,) = load(instance("i-4", history))
    call = conv.messages[0].tool_calls[0]
    assert conv.messages[0].text == "Where am I?"
    assert (call.name, json.loads(call.arguments)) == ("execute_bash", {"command": "pwd"})
    assert validate(conv.messages) == []


def test_several_instances_one_conversation_each() -> None:
    text = "\n".join(instance(f"i-{n}", [action(0, "system", {"content": "sys"})]) for n in range(3)) + "\n"
    conversations = load(text)
    assert [c.id for c in conversations] == ["i-0", "i-1", "i-2"]
    assert len({c.messages[0].id for c in conversations}) == 3


def test_malformed_lines_raise_with_line_number_or_are_skipped() -> None:
    good = instance("ok", [action(0, "system", {"content": "sys"})])
    text = f"{good}\n{{not json\n" + json.dumps({"instance_id": "x"}) + "\n"
    with pytest.raises(FormatError) as err:
        load(text)
    assert err.value.line == 2 and err.value.path == "out.jsonl"
    with pytest.raises(FormatError) as err:
        load(f"{good}\n" + json.dumps({"instance_id": "x"}) + "\n")
    assert err.value.line == 2 and "history" in err.value.reason
    with pytest.raises(FormatError) as err:
        load(instance("bad-event", [action(0, "system", {"content": "s"}), "oops"]))
    assert err.value.line == 1

    source = Source.from_bytes(text.encode(), path="out.jsonl", lenient=True)
    conversations = openhands.parse(source)
    assert [c.id for c in conversations] == ["ok"]
    assert [n.split(":")[0] for n in source.notes] == ["skipped line 2", "skipped line 3"]


def test_ids_are_stable_and_sniff_is_specific() -> None:
    text = instance("i-5", [action(0, "system", {"content": "sys"}), observation(1, "error", "boom", None)])
    assert [m.id for m in load(text)[0].messages] == [m.id for m in load(text)[0].messages]
    assert openhands.sniff(Source.from_bytes(text.encode()))
    assert not openhands.sniff(Source.from_bytes(b'[{"task_id": 0, "traj": []}]'))
    assert not openhands.sniff(Source.from_bytes(b'{"trajectory": [], "history": []}'))
