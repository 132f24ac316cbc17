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
from ctxkeep.messages import Message, ThinkingBlock
from ctxkeep.pairing import count_pairs, validate


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


def said(message: Message) -> tuple[str, str]:
    """(role, text), the text of a tool message being its result's."""
    result = message.tool_result
    return message.role, result.text if result is not None else message.text


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


def instance(instance_id: str, history: list[Any], **more: Any) -> str:
    return json.dumps({"instance_id": instance_id, "history": history, "error": None, **more})


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


# --- V1 (agent SDK) events ----------------------------------------------------------------


def v1(kind: str, event_id: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "id": event_id, "timestamp": "2025-10-30T03:50:30.915175", **fields}


def v1_action(event_id: str, call_id: str, name: str, arguments: str, response: str, **fields: Any) -> dict[str, Any]:
    fields.setdefault("thought", [])
    return v1(
        "ActionEvent",
        event_id,
        source="agent",
        action={"kind": "ExecuteBashAction", "command": "ls"},
        tool_name=name,
        tool_call_id=call_id,
        tool_call={"id": call_id, "name": name, "arguments": arguments, "origin": "completion"},
        llm_response_id=response,
        **fields,
    )


def v1_observation(event_id: str, call_id: str, observation: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return v1(
        "ObservationEvent",
        event_id,
        source="environment",
        tool_name="execute_bash",
        tool_call_id=call_id,
        observation=observation,
        action_id="a-" + call_id,
        **fields,
    )


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def test_v1_events() -> None:
    history = [
        v1("SystemPromptEvent", "e0", source="agent", system_prompt=text("You are OpenHands."), tools=[{"n": 1}]),
        v1(
            "MessageEvent",
            "e1",
            source="user",
            llm_message={
                "role": "user",
                "content": [text("Fix the bug."), {"type": "image", "image_urls": ["http://x/a.png"]}],
            },
            extended_content=[text("<skill>Run tests.</skill>")],
            activated_skills=["testing"],
        ),
        v1_action(
            "a-c1",
            "c1",
            "execute_bash",
            '{"command":"ls"}',
            "resp-1",
            thought=[text("Look around.")],
            reasoning_content="I should list files.",
        ),
        v1_action("a-c2", "c2", "str_replace_editor", '{"command":"view","path":"/a"}', "resp-1"),
        v1_observation(
            "o1", "c1", {"kind": "TerminalObservation", "content": [text("a.txt")], "is_error": False, "exit_code": 0}
        ),
        v1_observation(
            "o2",
            "c2",
            {"kind": "FileEditorObservation", "output": "", "error": "Invalid path"},
            extended_content=[text("rule for /a")],
        ),
        v1_action("a-c3", "c3", "execute_bash", '{"command":"make"}', "resp-2"),
        v1_observation(
            "o3",
            "c3",
            {
                "kind": "ExecuteBashObservation",
                "output": "ok",
                "error": False,
                "exit_code": None,
                "metadata": {"exit_code": 2, "prefix": "", "suffix": "\n[exit code 2]"},
            },
        ),
        v1_action("a-c4", "c4", "execute_bash", '{"command":"rm -rf /"}', "resp-3"),
        v1(
            "UserRejectObservation",
            "o4",
            tool_name="execute_bash",
            tool_call_id="c4",
            action_id="a-c4",
            rejection_reason="No.",
        ),
        v1_action("a-c5", "c5", "execute_bash", "{bad json", "resp-4"),
        v1("AgentErrorEvent", "o5", source="agent", tool_name="execute_bash", tool_call_id="c5", error="Bad arguments"),
        v1("AgentErrorEvent", "o6", source="agent", tool_name="x", tool_call_id="nope", error="No such call"),
        v1("PauseEvent", "p1", source="user"),
        v1("Condensation", "k1", source="environment", forgotten_event_ids=["e1"], summary="Earlier: listed files."),
        v1("MysteryEvent", "m1", source="environment"),
        v1_action("a-c6", "c6", "finish", '{"message":"Done."}', "resp-5"),
        v1_observation("o7", "c6", {"kind": "FinishObservation", "message": "Done."}),
        v1(
            "MessageEvent",
            "e9",
            source="agent",
            llm_message={
                "role": "assistant",
                "content": [text("Bye.")],
                "thinking_blocks": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
            },
        ),
    ]
    source = Source.from_bytes(instance("v1-task", history, instruction="Fix the bug.").encode(), path="out.jsonl")
    assert openhands.sniff(source)
    (conv,) = openhands.parse(source)
    roles = [m.role for m in conv.messages]
    assert roles == ["system", "user"] + ["assistant", "tool", "tool"] + ["assistant", "tool"] * 3 + [
        "user",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    system, user, turn = conv.messages[:3]
    assert system.text == "You are OpenHands." and system.extra["openhands"]["tools"] == [{"n": 1}]
    assert user.text == "Fix the bug.\n<skill>Run tests.</skill>" and user.extra["openhands"]["activated_skills"] == [
        "testing"
    ]
    assert [getattr(b, "url", None) for b in user.content] == [None, "http://x/a.png", None]
    assert isinstance(turn.content[0], ThinkingBlock) and turn.content[0].text == "I should list files."
    assert turn.text == "Look around." and [c.id for c in turn.tool_calls] == ["c1", "c2"]
    assert turn.source_id == "a-c1" and turn.timestamp is not None and turn.timestamp.tzinfo == UTC
    results = [m.tool_result for m in conv.messages if m.tool_result is not None]
    got = [(r.call_id, r.text, r.is_error, r.exit_code) for r in results]
    assert got == [
        ("c1", "a.txt", False, 0),
        ("c2", "Invalid path\nrule for /a", True, None),
        ("c3", "ok\n[exit code 2]", False, 2),
        ("c4", "Action rejected: No.", True, None),
        ("c5", "Bad arguments", True, None),
        ("c6", "Done.", False, None),
    ]
    assert conv.messages[11].text == "No such call"  # an error answering no known call stays visible
    assert conv.messages[12].text == "Earlier: listed files."
    assert isinstance(conv.messages[-1].content[0], ThinkingBlock) and conv.messages[-1].text == "Bye."
    assert validate(conv.messages) == []
    assert source.notes == ["v1-task: left out 1 MysteryEvent event(s), which carry no message"]


def test_v1_output_without_a_user_message_gets_the_instruction() -> None:
    history = [
        v1_action("a1", "c1", "execute_bash", '{"command":"ls"}', "r1"),
        v1_observation("o1", "c1", {"kind": "ExecuteBashObservation", "output": "a.txt"}),
    ]
    (conv,) = load(instance("safety-1", history, instruction="# Task\nClean up."))
    assert [(m.role, m.text) for m in conv.messages][:1] == [("user", "# Task\nClean up.")]
    assert conv.messages[0].extra["openhands"] == {"from": "instruction"}
    assert count_pairs(conv.messages) == (1, 1)
    with_user = [
        action(0, "system", {"content": "sys"}),
        {**action(1, "message", {"content": "Hi."}), "source": "user"},
    ]
    (conv,) = load(instance("has-user", with_user, instruction="Hi."))
    assert [m.role for m in conv.messages] == ["system", "user"]
    (conv,) = load(instance("sys-only", with_user[:1], instruction="Do it."))
    assert [(m.role, m.text) for m in conv.messages] == [("system", "sys"), ("user", "Do it.")]


def test_v1_unanswered_call_at_the_end_stays_a_call() -> None:
    (conv,) = load(instance("cut", [v1_action("a1", "c1", "browser_click", '{"index":7}', "r1")]))
    assert count_pairs(conv.messages) == (1, 0) and len(validate(conv.messages)) == 1


# --- older output shapes ------------------------------------------------------------------


def test_2024_output_with_id_and_pairs_and_actions_in_text() -> None:
    """Before function calling, CodeAct wrote its commands in the text: they become calls when answered."""
    user = {**action(0, "message", {"content": "Solve it.", "image_urls": None}), "source": "user"}
    run = action(3, "run_ipython", {"code": "print(1)", "thought": "Let me compute.", "kernel_init_code": ""})
    think = action(5, "think", {"thought": "Hmm."})
    final = action(7, "message", {"content": "The answer is 1.", "wait_for_response": True})
    history = [
        [user, observation(1, "null", "", None)],
        [run, observation(4, "run_ipython", "1", 3)],
        [think, {"message": "No observation", "observation": "null", "content": "", "extras": {}}],
        [final, {"message": "No observation", "observation": "null", "content": "", "extras": {}}],
    ]
    record = {"id": "Logic_1", "instance": {"id": "Logic_1"}, "instruction": "Solve it.", "history": history}
    source = Source.from_bytes(json.dumps(record).encode(), path="out.jsonl")
    assert openhands.sniff(source)
    (conv,) = openhands.parse(source)
    assert conv.id == "Logic_1"
    assert [said(m) for m in conv.messages] == [
        ("user", "Solve it."),
        ("assistant", "Let me compute."),
        ("tool", "1"),
        ("assistant", "Hmm.\n\nthink action"),
        ("assistant", "The answer is 1."),
    ]
    call = conv.messages[1].tool_calls[0]
    assert (call.name, json.loads(call.arguments)) == ("run_ipython", {"code": "print(1)", "kernel_init_code": ""})
    assert validate(conv.messages) == []
    by_instance = {"instance": {"instance_id": "nested-1"}, "history": [user]}
    assert load(json.dumps(by_instance))[0].id == "nested-1"


def test_resolver_output_flat_events_without_source() -> None:
    history = [
        {"content": "Fix issue #5.", "images_urls": None, "wait_for_response": False, "action": "message"},
        {"command": "touch LICENSE", "thought": "Create it.", "keep_prompt": True, "action": "run"},
        {"content": "$ ", "command_id": -1, "command": "touch LICENSE", "exit_code": 0, "observation": "run"},
        {"code": "open('x')", "thought": "Open it.", "action": "run_ipython", "is_confirmed": "confirmed"},
        {"content": "[File: x]", "code": "open('x')", "observation": "run_ipython"},
        {"outputs": {}, "thought": "All done.", "action": "finish"},
    ]
    record = {
        "issue": {"owner": "acme", "repo": "widgets", "number": 5, "title": "t", "body": "b"},
        "issue_type": "issue",
        "instruction": "Fix issue #5.",
        "history": history,
        "success": True,
    }
    source = Source.from_bytes(json.dumps(record).encode(), path="output.jsonl")
    assert openhands.sniff(source)
    (conv,) = openhands.parse(source)
    assert (conv.id, conv.title) == ("5", "acme/widgets#5")
    assert [said(m) for m in conv.messages] == [
        ("user", "Fix issue #5."),
        ("assistant", "Create it."),
        ("tool", "$ "),
        ("assistant", "Open it."),
        ("tool", "[File: x]"),
        ("assistant", "All done."),
    ]
    first, second = conv.messages[1].tool_calls[0], conv.messages[3].tool_calls[0]
    assert (first.name, json.loads(first.arguments)) == ("run", {"command": "touch LICENSE", "keep_prompt": True})
    assert (second.name, json.loads(second.arguments)) == ("run_ipython", {"code": "open('x')"})
    result = conv.messages[2].tool_result
    assert result is not None and result.exit_code == 0
    assert validate(conv.messages) == []


def test_trajectory_file_is_one_conversation() -> None:
    meta = tool_meta("t1", "execute_bash", "r1", [("t1", "execute_bash", '{"command": "ls"}')], "Listing.")
    events = [
        {**action(0, "message", {"content": "List files.", "image_urls": None}), "source": "user"},
        observation(1, "agent_state_changed", "", None, extras={"agent_state": "running"}),
        action(2, "run", {"command": "ls", "thought": "Listing."}, tool_call_metadata=meta),
        observation(3, "run", "a.txt", 2, tool_call_metadata=meta),
        action(4, "finish", {"final_thought": "Done."}),
    ]
    source = Source.from_bytes(json.dumps(events, indent=2).encode(), path="trajs/basic.json")
    assert openhands.sniff(source)
    (conv,) = openhands.parse(source)
    assert conv.id == "basic"
    assert [m.role for m in conv.messages] == ["user", "assistant", "tool", "assistant"]
    assert validate(conv.messages) == []
    v1_events = [v1_action("a1", "c1", "execute_bash", "{}", "r1"), v1_observation("o1", "c1", {"output": "x"})]
    v1_source = Source.from_bytes(json.dumps(v1_events, indent=2).encode(), path="events.json")
    assert openhands.sniff(v1_source)
    assert count_pairs(openhands.parse(v1_source)[0].messages) == (1, 1)
    with pytest.raises(FormatError, match="not an OpenHands event"):
        openhands.parse(Source.from_bytes(b'[{"id": 1, "action": "run"}, 5]', path="t.json"))


def test_sniff_leaves_other_formats_alone() -> None:
    swe = {"trajectory": [{"action": "ls", "observation": "a"}], "history": [{"role": "system", "content": "x"}]}
    assert not openhands.sniff(Source.from_bytes(json.dumps(swe, indent=2).encode()))
    assert not openhands.sniff(Source.from_bytes(b'[{"role": "user", "content": "hi"}]'))
    tau2 = {"timestamp": "t", "info": {"num_trials": 1}, "simulations": [{"id": "s", "messages": []}]}
    assert not openhands.sniff(Source.from_bytes(json.dumps(tau2).encode()))
    use = {"type": "tool_use", "id": "t1", "name": "browser", "input": {"action": "click"}}
    agentscope = [{"id": "m1", "name": "bot", "role": "assistant", "content": [use], "timestamp": "t"}]
    assert not openhands.sniff(Source.from_bytes(json.dumps(agentscope, indent=2).encode()))
