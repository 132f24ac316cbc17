"""tau-bench results: one conversation per run, OpenAI chat messages, reused call ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import raw_params

from ctxkeep.errors import FormatError
from ctxkeep.formats import tau_bench
from ctxkeep.formats.source import Conversation, Source
from ctxkeep.messages import count_pairs, validate


def raw_counts(path: Path) -> tuple[list[tuple[int, int]], int]:
    """((tool calls, tool results) per run, call ids repeated within a run), read with plain json."""
    per_run: list[tuple[int, int]] = []
    repeated = 0
    for run in json.loads(path.read_text(encoding="utf-8")):
        ids = [c["id"] for m in run["traj"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        per_run.append((len(ids), sum(1 for m in run["traj"] if m["role"] == "tool")))
        repeated += len(ids) - len(set(ids))
    return per_run, repeated


def load(doc: Any, *, lenient: bool = False) -> tuple[list[Conversation], list[str]]:
    text = doc if isinstance(doc, str) else json.dumps(doc, indent=2)
    source = Source.from_bytes(text.encode(), path="results.json", lenient=lenient)
    return tau_bench.parse(source), source.notes


@pytest.mark.parametrize("path", raw_params("tau_bench_results"))
def test_real_file_counts_and_pairing(path: Path) -> None:
    source = Source.from_path(path)
    assert tau_bench.sniff(source)
    conversations = tau_bench.parse(source)
    per_run, repeated = raw_counts(path)
    assert [count_pairs(c.messages) for c in conversations] == per_run
    assert all(validate(c.messages) == [] for c in conversations)
    # gpt-4o reused call ids inside runs of this file; each was renamed and the total noted
    assert source.notes == ([f"gave {repeated} repeated tool-call id(s) a new one"] if repeated else [])
    assert len({c.id for c in conversations}) == len(conversations)
    again = tau_bench.parse(Source.from_path(path))
    assert [m.id for c in again for m in c.messages] == [m.id for c in conversations for m in c.messages]


def run(task: int, trial: int | None, traj: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"task_id": task, "reward": 1.0, "info": {"task": {}}, "traj": traj}
    if trial is not None:
        out["trial"] = trial
    return out


def call(call_id: str, name: str, args: str, text: str | None = None) -> dict[str, Any]:
    function = {"name": name, "arguments": args}
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def result(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


TRAJ = [
    {"role": "system", "content": "# Airline Agent Policy"},
    {"role": "user", "content": "Book me a flight."},
    call("c1", "get_user_details", '{"user_id": "u1"}', text="Let me look you up."),
    result("c1", "get_user_details", '{"name": "Mia"}'),
    call("c1", "calculate", '{"expression": "1 + 2"}'),
    result("c1", "calculate", "3.0"),
    {"role": "assistant", "content": "Done."},
]


def test_runs_become_conversations() -> None:
    conversations, notes = load([run(0, 0, TRAJ), run(0, 1, TRAJ[:4]), run(7, None, TRAJ[:2])])
    assert [(c.id, c.title) for c in conversations] == [
        ("task-0-trial-0", "task 0 trial 0"),
        ("task-0-trial-1", "task 0 trial 1"),
        ("task-7", "task 7"),
    ]
    first = conversations[0]
    assert [m.role for m in first.messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert first.messages[2].text == "Let me look you up."
    assert [(c.name, c.arguments) for c in first.messages[2].tool_calls] == [("get_user_details", '{"user_id": "u1"}')]
    assert first.messages[3].extra["openai"] == {"name": "get_user_details"}
    assert validate(first.messages) == []  # the reused "c1" was renamed together with its result
    renamed = first.messages[4].tool_calls[0].id
    assert renamed != "c1" and first.messages[5].tool_result is not None
    assert first.messages[5].tool_result.call_id == renamed
    assert notes == ["gave 1 repeated tool-call id(s) a new one"]
    ids = [m.id for c in conversations for m in c.messages]
    assert len(ids) == len(set(ids))


def test_repeated_task_and_trial_get_distinct_ids() -> None:
    conversations, _ = load([run(3, 0, TRAJ[:2]), run(3, 0, TRAJ[:2])])
    assert [c.id for c in conversations] == ["task-3-trial-0", "task-3-trial-0-run-1"]


def test_malformed_files() -> None:
    with pytest.raises(FormatError) as err:
        load('[\n  {"task_id": 0,\n   "traj": [}\n]')
    assert err.value.line == 3 and err.value.path == "results.json"
    with pytest.raises(FormatError, match="JSON list"):
        load({"task_id": 0})
    bad = [run(0, 0, TRAJ[:2]), {"task_id": 1}, run(2, 0, [{"role": "robot", "content": "?"}])]
    with pytest.raises(FormatError, match="run 1 has no traj"):
        load(bad)
    conversations, notes = load(bad, lenient=True)
    assert [c.id for c in conversations] == ["task-0-trial-0"]
    assert len(notes) == 2 and "run 2 (task 2 trial 0)" in notes[1] and "unknown role" in notes[1]


def test_ids_stable_and_sniff() -> None:
    doc = [run(0, 0, TRAJ)]
    first, _ = load(doc)
    second, _ = load(doc)
    assert [m.id for m in first[0].messages] == [m.id for m in second[0].messages]
    assert tau_bench.sniff(Source.from_bytes(json.dumps(doc, indent=2).encode()))
    assert not tau_bench.sniff(Source.from_bytes(b'[{"role": "user", "content": "hi"}]'))
    assert not tau_bench.sniff(Source.from_bytes(b'{"trajectory": []}'))
