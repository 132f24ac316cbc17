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
from ctxkeep.pairing import count_pairs, validate


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


# --- tau2-bench -----------------------------------------------------------------------------


def tau2_call(call_id: str, name: str, arguments: dict[str, Any], requestor: str = "assistant") -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments, "requestor": requestor}


def tau2_result(call_id: str, content: str, requestor: str = "assistant", error: bool = False) -> dict[str, Any]:
    return {"id": call_id, "role": "tool", "content": content, "requestor": requestor, "error": error, "turn_idx": 3}


def said(role: str, content: str | None, calls: list[dict[str, Any]] | None = None, **more: Any) -> dict[str, Any]:
    stamp = "2025-10-06T19:24:17.400002"
    return {"role": role, "content": content, "tool_calls": calls, "turn_idx": 0, "timestamp": stamp, **more}


TAU2_MESSAGES = [
    said("assistant", "Hi! How can I help you today?", cost=0.0, raw_data={"message": {"content": "Hi!"}}),
    said("user", "My phone has no signal."),
    said("assistant", "", [tau2_call("c1", "get_customer", {"phone": "555"}), tau2_call("c2", "get_line", {"id": 1})]),
    {
        "role": "tool",
        "tool_messages": [tau2_result("c1", '{"name": "Ana"}'), tau2_result("c2", "not found", error=True)],
    },
    said("assistant", "Please toggle airplane mode."),
    said("user", None, [tau2_call("u1", "toggle_airplane_mode", {}, requestor="user")]),
    tau2_result("u1", "Airplane mode is now OFF.", requestor="user"),
    said("user", "Done, it works.", [tau2_call("u2", "check_status_bar", {}, requestor="user")]),
    tau2_result("u2", "4 bars", requestor="user"),
    said("assistant", "Glad to help.", audio_path=None, is_audio=False),
]


def results(*simulations: dict[str, Any]) -> dict[str, Any]:
    info = {"git_commit": "abc", "num_trials": 1, "max_steps": 200, "user_info": {"llm": "m"}, "agent_info": {}}
    tasks = [{"id": "8", "description": {"purpose": "x" * 70000}}]  # pushes "simulations" beyond the sniffed head
    return {"timestamp": "2025-10-06T19:24:16", "info": info, "tasks": tasks, "simulations": list(simulations)}


def simulation(sim_id: str, task: str, trial: int, messages: list[Any] | None = None, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": sim_id, "task_id": task, "trial": trial, "termination_reason": "user_stop", **more}
    if messages is not None:
        out["messages"] = messages
    return out


def test_tau2_results_one_conversation_per_simulation() -> None:
    doc = results(simulation("sim-a", "8", 0, TAU2_MESSAGES), simulation("sim-b", "8", 1, TAU2_MESSAGES[:2]))
    text = json.dumps(doc, indent=2)
    assert tau_bench.sniff(Source.from_bytes(text.encode()))
    conversations, notes = load(text)
    assert [(c.id, c.title) for c in conversations] == [("sim-a", "task 8 trial 0"), ("sim-b", "task 8 trial 1")]
    conv = conversations[0]
    assert [m.role for m in conv.messages] == [
        "assistant",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "assistant",  # the user's own tool call, in an assistant message of its own
        "tool",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    calls = conv.messages[2].tool_calls
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("c1", "get_customer", {"phone": "555"}),
        ("c2", "get_line", {"id": 1}),
    ]
    tool_results = [m.tool_result for m in conv.messages if m.tool_result is not None]
    assert [(r.call_id, r.text, r.is_error) for r in tool_results] == [
        ("c1", '{"name": "Ana"}', False),
        ("c2", "not found", True),
        ("u1", "Airplane mode is now OFF.", False),
        ("u2", "4 bars", False),
    ]
    user_calls = conv.messages[6]
    assert (
        user_calls.extra["tau_bench"]["requestor"] == "user" and user_calls.tool_calls[0].name == "toggle_airplane_mode"
    )
    assert conv.messages[7].extra["tau_bench"]["requestor"] == "user"
    assert conv.messages[8].text == "Done, it works." and conv.messages[9].tool_calls[0].id == "u2"
    assert conv.messages[0].timestamp is not None and conv.messages[0].timestamp.tzinfo is not None
    assert "raw_data" not in conv.messages[0].extra["tau_bench"] and conv.messages[0].extra["tau_bench"]["cost"] == 0.0
    assert "audio_path" not in conv.messages[-1].extra["tau_bench"]
    assert validate(conv.messages) == [] and notes == []
    again, _ = load(text)
    assert [m.id for c in again for m in c.messages] == [m.id for c in conversations for m in c.messages]


def test_tau2_single_simulation_shapes() -> None:
    example = {
        "_about": "example",
        "task": {"id": "1"},
        "simulation_run": simulation("run-1", "1", 0, TAU2_MESSAGES[:4]),
    }
    text = json.dumps(example, indent=2)
    assert tau_bench.sniff(Source.from_bytes(text.encode()))
    conversations, _ = load(text)
    assert [c.id for c in conversations] == ["run-1"] and count_pairs(conversations[0].messages) == (2, 2)
    bare = json.dumps(simulation("run-2", "1", 0, TAU2_MESSAGES[:2], mode="half_duplex"))
    assert tau_bench.sniff(Source.from_bytes(bare.encode()))
    assert [c.id for c in load(bare)[0]] == ["run-2"]


def test_tau2_voice_ticks_are_a_clear_error() -> None:
    ticks = [{"tick_id": 0, "timestamp": "t", "agent_chunk": {"role": "assistant", "content": "Hi"}}]
    voice = json.dumps(simulation("v", "40", 0, None, mode="full_duplex", ticks=ticks))
    assert tau_bench.sniff(Source.from_bytes(voice.encode()))
    with pytest.raises(
        FormatError, match=r"full-duplex \(voice\) simulations that record only ticks are not supported"
    ):
        load(voice)
    with pytest.raises(FormatError, match="only ticks"):
        load(voice, lenient=True)
    mixed = results(simulation("ok", "1", 0, TAU2_MESSAGES[:2]), simulation("v", "40", 0, None, ticks=ticks))
    with pytest.raises(FormatError, match=r"simulation 1 \(task 40 trial 0\) has only ticks"):
        load(mixed)
    conversations, notes = load(mixed, lenient=True)
    assert [c.id for c in conversations] == ["ok"] and len(notes) == 1


def test_tau2_malformed_messages_are_format_errors() -> None:
    bad = [TAU2_MESSAGES[1], {"role": "robot", "content": "?"}, said("assistant", "x", [{"name": "f"}]), "oops"]
    doc = results(simulation("s", "1", 0, bad))
    with pytest.raises(FormatError, match="message 1 is malformed"):
        load(doc)
    conversations, notes = load(doc, lenient=True)
    assert [m.text for m in conversations[0].messages] == ["My phone has no signal."]
    assert [n.split(": message ")[1][:1] for n in notes] == ["1", "2", "3"]
    with pytest.raises(FormatError, match="list of simulations"):
        load({"timestamp": "t", "simulations": {}})
