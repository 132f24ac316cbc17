"""tau-bench and tau2-bench results: one conversation per run (tau-bench) or simulation (tau2).

tau-bench runs are OpenAI chat messages, read with the OpenAI converter; tau2 simulations have their
own message shape, and the calls its simulated user makes go into assistant messages of their own,
marked. Repeated tool-call ids are renamed; rewards and grading are left out. What every message
becomes and what is left out on purpose: docs/formats.md#tau-bench-and-tau2-bench.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ctxkeep.formats.openai import from_openai
from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source, describe, parse_timestamp
from ctxkeep.messages import Block, Message, Role, TextBlock, ToolCall, ToolResult, make_id
from ctxkeep.pairing import renumber_duplicates

NAME = "tau_bench"


_TAU2_RESULTS = re.compile(r'"simulations"\s*:\s*\[')
_TAU2_KEYS = frozenset({"role", "content", "tool_calls", "raw_data", "timestamp", "id", "tool_messages"})


def sniff(source: Source) -> bool:
    """A tau-bench list of runs with ``task_id`` and ``traj``, or a tau2-bench results/simulation object."""
    head = source.head()
    start = head.lstrip()[:1]
    if start == "[":
        return '"task_id"' in head and ('"traj"' in head or '"reward"' in head)
    if start != "{":
        return False
    if _TAU2_RESULTS.search(head) or '"simulation_run"' in head:
        return True
    # the simulations list can sit beyond the head, after the task definitions; the run info comes first
    if '"num_trials"' in head and ('"user_info"' in head or '"agent_info"' in head):
        return True
    return '"task_id"' in head and '"termination_reason"' in head and ('"messages"' in head or '"ticks"' in head)


def parse(source: Source) -> list[Conversation]:
    """One conversation per run (tau-bench) or per simulation (tau2-bench)."""
    doc = source.document()
    if isinstance(doc, list):
        return _tau1(source, doc)
    if isinstance(doc, dict):
        return _tau2(source, doc)
    raise source.error("expected a JSON list of tau-bench runs or a tau2-bench results object")


# --- tau-bench ----------------------------------------------------------------------------


def _tau1(source: Source, runs: list[Any]) -> list[Conversation]:
    conversations: list[Conversation] = []
    seen: set[str] = set()
    renamed = 0
    for index, run in enumerate(runs):
        if not isinstance(run, dict) or not isinstance(run.get("traj"), list):
            source.skip(None, f"run {index} has no traj list")
            continue
        conv_id, title = _names(run, index, seen)
        try:
            messages = from_openai(run["traj"], conversation_id=f"{NAME}:{conv_id}")
        except RECORD_ERRORS as exc:
            source.skip(None, f"run {index} ({title}): {describe(exc)}")
            continue
        messages, changes = renumber_duplicates(messages)
        renamed += len(changes)
        conversations.append(Conversation(id=conv_id, messages=tuple(messages), title=title))
    if renamed:
        source.notes.append(f"gave {renamed} repeated tool-call id(s) a new one")
    return conversations


def _names(run: dict[str, Any], index: int, seen: set[str]) -> tuple[str, str]:
    """(id, title) of a run; the id is made unique when a task and trial repeat."""
    task, trial = run.get("task_id", index), run.get("trial")
    conv_id = f"task-{task}" + (f"-trial-{trial}" if trial is not None else "")
    title = f"task {task}" + (f" trial {trial}" if trial is not None else "")
    if conv_id in seen:
        conv_id = f"{conv_id}-run-{index}"
    seen.add(conv_id)
    return conv_id, title


# --- tau2-bench ---------------------------------------------------------------------------


def _tau2(source: Source, doc: dict[str, Any]) -> list[Conversation]:
    """The simulations of a results file, or the one simulation of a simulation file."""
    if "simulations" in doc:
        simulations = doc["simulations"]
        if not isinstance(simulations, list):
            raise source.error("expected tau2-bench results with a list of simulations")
    elif isinstance(doc.get("simulation_run"), dict):
        simulations = [doc["simulation_run"]]
    elif "messages" in doc or "ticks" in doc:
        if not isinstance(doc.get("messages"), list) and doc.get("ticks"):
            raise source.error(f"this tau2-bench simulation has only ticks: {_VOICE}")
        simulations = [doc]
    else:
        raise source.error("expected a JSON list of tau-bench runs or a tau2-bench results object")
    conversations: list[Conversation] = []
    seen: set[str] = set()
    renamed = 0
    for index, sim in enumerate(simulations):
        if not isinstance(sim, dict):
            source.skip(None, f"simulation {index} is not an object")
            continue
        title = _title(sim, index)
        if not isinstance(sim.get("messages"), list):
            reason = f"has only ticks: {_VOICE}" if sim.get("ticks") else "has no messages list"
            source.skip(None, f"simulation {index} ({title}) {reason}")
            continue
        conv_id = _sim_id(sim, index, seen)
        messages = _simulation(source, conv_id, f"simulation {index} ({title})", sim["messages"])
        messages, changes = renumber_duplicates(messages)
        renamed += len(changes)
        conversations.append(Conversation(id=conv_id, messages=tuple(messages), title=title))
    if renamed:
        source.notes.append(f"gave {renamed} repeated tool-call id(s) a new one")
    return conversations


_VOICE = (
    "full-duplex (voice) simulations that record only ticks are not supported; "
    "ctxkeep reads tau2-bench simulations that have a messages list"
)


def _title(sim: Mapping[str, Any], index: int) -> str:
    task, trial = sim.get("task_id", index), sim.get("trial")
    return f"task {task}" + (f" trial {trial}" if trial is not None else "")


def _sim_id(sim: Mapping[str, Any], index: int, seen: set[str]) -> str:
    """The simulation's own id, else one built from task and trial; unique within the file."""
    own = sim.get("id")
    conv_id = own if isinstance(own, str) and own else _title(sim, index).replace(" ", "-")
    if conv_id in seen:
        conv_id = f"{conv_id}-run-{index}"
    seen.add(conv_id)
    return conv_id


def _simulation(source: Source, conv_id: str, title: str, raw: list[Any]) -> list[Message]:
    out: list[Message] = []
    for index, item in enumerate(raw):
        try:
            out.extend(_message(conv_id, index, item))
        except RECORD_ERRORS as exc:
            source.skip(None, f"{title}: message {index} is malformed ({describe(exc)})")
    return out


def _message(conv_id: str, index: int, item: Any) -> list[Message]:
    if not isinstance(item, dict):
        raise TypeError("not an object")
    role = item.get("role")
    if role in ("system", "user", "assistant"):
        return _participant(conv_id, index, role, item)
    if role != "tool":
        raise ValueError(f"unknown role {role!r}")
    if "tool_messages" not in item:
        return [_tool_message(make_id(NAME, conv_id, index), item)]
    entries = item["tool_messages"]  # tau2's MultiToolMessage
    if not isinstance(entries, list):
        raise TypeError("tool_messages must be a list")
    return [_tool_message(make_id(NAME, conv_id, index, n), entry) for n, entry in enumerate(entries)]


def _participant(conv_id: str, index: int, role: Role, item: Mapping[str, Any]) -> list[Message]:
    """A system, user or assistant message; a user's own tool calls go in an assistant message."""
    content = item.get("content")
    if content is not None and not isinstance(content, str):
        raise TypeError(f"message {index} content must be text, got {type(content).__name__}")
    blocks: list[Block] = [TextBlock(text=content)] if content else []
    raw_calls = item.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise TypeError(f"message {index} tool_calls must be a list")
    calls = [_call(c) for c in raw_calls]
    stamp = parse_timestamp(item.get("timestamp"))
    extra = _extra(item)
    msg_id = make_id(NAME, conv_id, index)
    if role == "assistant":
        return [Message(role=role, id=msg_id, timestamp=stamp, content=(*blocks, *calls), extra=extra)]
    if calls and role != "user":
        raise ValueError(f"message {index}: a {role} message with tool calls")
    out = [Message(role=role, id=msg_id, timestamp=stamp, content=tuple(blocks), extra=extra)] if blocks else []
    if calls or not out:
        out.append(
            Message(
                role="assistant" if calls else role,
                id=make_id(NAME, conv_id, index, "user-calls") if calls else msg_id,
                timestamp=stamp,
                content=tuple(calls),
                extra={NAME: {**extra.get(NAME, {}), "requestor": "user"}} if calls else extra,
            )
        )
    return out


def _call(raw: Any) -> ToolCall:
    arguments = raw.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=raw["id"], name=raw["name"], arguments=text)


def _tool_message(msg_id: str, entry: Any) -> Message:
    content = entry.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    result = ToolResult(call_id=entry["id"], content=content or "", is_error=entry.get("error") is True)
    extra = {k: v for k, v in entry.items() if k in ("requestor", "turn_idx") and v is not None}
    return Message(
        role="tool",
        id=msg_id,
        timestamp=parse_timestamp(entry.get("timestamp")),
        content=(result,),
        extra={NAME: extra} if extra else {},
    )


def _extra(item: Mapping[str, Any]) -> dict[str, Any]:
    """The message's other fields (turn index, cost, usage...), without empty voice fields."""
    rest = {k: v for k, v in item.items() if k not in _TAU2_KEYS and v is not None}
    return {NAME: rest} if rest else {}
