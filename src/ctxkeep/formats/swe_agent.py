"""SWE-agent trajectories (``.traj``): one JSON object, one conversation per file.

Read from ``history`` (the messages the model was sent) when present, else from the trajectory
steps; an action written in text gets a synthesized ``bash`` call. What every record becomes and
what is left out on purpose: docs/formats.md#swe-agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source, describe
from ctxkeep.messages import (
    ROLES,
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    make_id,
    result_content,
)
from ctxkeep.pairing import renumber_duplicates

NAME = "swe_agent"


_SHELL_TOOL = "bash"
_KNOWN = frozenset({"role", "content", "tool_calls", "tool_call_ids", "tool_call_id", "thinking_blocks"})
_TRAJECTORY = re.compile(r'"trajectory"\s*:\s*\[')
_HISTORY = re.compile(r'"history"\s*:\s*\[')


def sniff(source: Source) -> bool:
    """A JSON object with a ``trajectory`` list, or a ``history`` of SWE-agent messages."""
    head = source.head()
    if not head.lstrip().startswith("{"):
        return False
    return bool(_TRAJECTORY.search(head)) or (bool(_HISTORY.search(head)) and '"message_type"' in head)


def parse(source: Source) -> list[Conversation]:
    """The file's one conversation."""
    doc = source.document()
    if not isinstance(doc, dict):
        raise source.error("expected a SWE-agent trajectory object")
    conv_id = Path(source.path).stem
    history = doc.get("history")
    steps = doc.get("trajectory")
    steps = steps if isinstance(steps, list) else []
    if isinstance(history, list) and history:
        messages = _from_history(source, conv_id, history, steps)
    elif steps:
        messages = _from_trajectory(source, conv_id, steps)
    else:
        raise source.error("expected a non-empty history or trajectory list")
    messages, changes = renumber_duplicates(messages)
    if changes:
        source.notes.append(f"gave {len(changes)} repeated tool-call or message id(s) a new one")
    return [Conversation(id=conv_id, messages=tuple(messages))]


# --- history --------------------------------------------------------------------------


def _from_history(source: Source, conv_id: str, history: list[Any], steps: list[Any]) -> list[Message]:
    out: list[Message] = []
    step = 0  # the trajectory step of the next text action (demonstrations have none)
    i = 0
    while i < len(history):
        item = history[i]
        # a role of the wrong type (a list, a dict) must not reach the set lookup
        if not isinstance(item, dict) or _str(item.get("role")) not in ROLES:
            source.skip(None, f"history item {i} is not a message with a known role")
            i += 1
            continue
        try:
            if item["role"] == "tool":
                out.extend(_tool_messages(source, conv_id, i, item))
            elif item["role"] == "assistant" and not item.get("tool_calls") and _str(item.get("action")).strip():
                nxt = history[i + 1] if i + 1 < len(history) else None
                answered = isinstance(nxt, dict) and nxt.get("role") == "user"
                fallback = None
                if not item.get("is_demo"):
                    fallback = _step_observation(steps, step, item["action"])
                    step += 1
                out.extend(_text_action(conv_id, i, item, nxt if answered else None, fallback))
                i += 1 if answered else 0
            else:
                out.append(_message(conv_id, i, item))
        except RECORD_ERRORS as exc:
            source.skip(None, f"history item {i} is malformed ({describe(exc)})")
        i += 1
    return out


def _message(conv_id: str, index: int, item: Mapping[str, Any]) -> Message:
    blocks: list[Block] = [*_thinking(item.get("thinking_blocks")), *_content(item.get("content"))]
    if item["role"] == "assistant":
        blocks.extend(_call(c) for c in item.get("tool_calls") or ())
    return Message(role=item["role"], id=make_id(NAME, conv_id, index), content=tuple(blocks), extra=_extra(item))


def _tool_messages(source: Source, conv_id: str, index: int, item: Mapping[str, Any]) -> list[Message]:
    ids = item.get("tool_call_ids") or item.get("tool_call_id") or []
    ids = [ids] if isinstance(ids, str) else ids
    content = _content(item.get("content"))
    if not ids:
        source.notes.append(f"history item {index}: a tool message with no tool_call_ids, kept as user text")
        return [Message(role="user", id=make_id(NAME, conv_id, index), content=tuple(content), extra=_extra(item))]
    return [
        Message(
            role="tool",
            id=make_id(NAME, conv_id, index) if n == 0 else make_id(NAME, conv_id, index, n),
            content=(ToolResult(call_id=str(call_id), content=result_content(content)),),
            extra=_extra(item),
        )
        for n, call_id in enumerate(ids)
    ]


def _text_action(
    conv_id: str, index: int, item: Mapping[str, Any], observation: Mapping[str, Any] | None, fallback: str | None
) -> list[Message]:
    """An action written in the text: the assistant message, a synthesized call, its result."""
    msg = _message(conv_id, index, item)
    if observation is None and fallback is None:
        return [msg]  # nothing answered it: no call to leave dangling
    call = ToolCall(
        id=make_id(NAME, conv_id, index, "call"),
        name=_SHELL_TOOL,
        arguments=json.dumps({"command": item["action"]}, ensure_ascii=False),
    )
    msg = Message(role="assistant", id=msg.id, content=(*msg.content, call), extra=msg.extra)
    if observation is not None:
        content = result_content(_content(observation.get("content")))
        result_id, extra = make_id(NAME, conv_id, index + 1), _extra(observation)
    else:
        content, result_id, extra = fallback or "", make_id(NAME, conv_id, index, "result"), {"from": "trajectory"}
    result = Message(
        role="tool", id=result_id, content=(ToolResult(call_id=call.id, content=content),), extra={NAME: extra}
    )
    return [msg, result]


def _step_observation(steps: list[Any], k: int, action: str) -> str | None:
    step = steps[k] if k < len(steps) else None
    if isinstance(step, dict) and step.get("action") == action and isinstance(step.get("observation"), str):
        return str(step["observation"])
    return None


# --- trajectory -----------------------------------------------------------------------


def _from_trajectory(source: Source, conv_id: str, steps: list[Any]) -> list[Message]:
    out: list[Message] = []
    for k, step in enumerate(steps):
        if not isinstance(step, dict):
            source.skip(None, f"trajectory step {k} is not an object")
            continue
        try:
            out.extend(_step_messages(conv_id, k, step))
        except RECORD_ERRORS as exc:
            source.skip(None, f"trajectory step {k} is malformed ({describe(exc)})")
    return out


def _step_messages(conv_id: str, k: int, step: Mapping[str, Any]) -> list[Message]:
    """One trajectory step: the response with a shell call of its action, and the observation."""
    text = _str(step.get("response")) or _str(step.get("thought"))
    action, observation = step.get("action"), step.get("observation")
    extra = {NAME: {key: step[key] for key in ("thought", "action", "state") if key in step}}
    blocks: list[Block] = [TextBlock(text=text)] if text else []
    msg_id = make_id(NAME, conv_id, "step", k)
    observation_id = make_id(NAME, conv_id, "step", k, "observation")
    if not (isinstance(action, str) and action.strip() and isinstance(observation, str)):
        out = [Message(role="assistant", id=msg_id, content=tuple(blocks), extra=extra)]
        if isinstance(observation, str) and observation:
            out.append(Message.of("user", observation, id=observation_id))
        return out
    call = ToolCall(
        id=make_id(NAME, conv_id, "step", k, "call"),
        name=_SHELL_TOOL,
        arguments=json.dumps({"command": action}, ensure_ascii=False),
    )
    return [
        Message(role="assistant", id=msg_id, content=(*blocks, call), extra=extra),
        Message(role="tool", id=observation_id, content=(ToolResult(call_id=call.id, content=observation),)),
    ]


# --- blocks ---------------------------------------------------------------------------


def _extra(item: Mapping[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in item.items() if k not in _KNOWN}
    return {NAME: rest} if rest else {}


def _call(raw: Mapping[str, Any]) -> ToolCall:
    function = raw["function"]
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=str(raw["id"]), name=str(function["name"]), arguments=arguments)


def _content(content: Any) -> list[TextBlock | ImageBlock]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)]
    blocks: list[TextBlock | ImageBlock] = []
    for part in content:
        kind = part.get("type")
        if kind == "image_url":
            blocks.append(ImageBlock.from_url(part["image_url"]["url"]))
        elif kind == "text" or "text" in part:
            blocks.append(TextBlock(text=str(part.get("text", ""))))
        else:
            blocks.append(TextBlock(text=json.dumps(part, ensure_ascii=False)))
    return blocks


def _thinking(raw: Any) -> list[ThinkingBlock]:
    blocks: list[ThinkingBlock] = []
    for block in raw or ():
        if block.get("type") == "redacted_thinking":
            blocks.append(ThinkingBlock(text="", signature=block.get("data"), redacted=True))
        else:
            blocks.append(ThinkingBlock(text=_str(block.get("thinking")), signature=block.get("signature")))
    return blocks


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
