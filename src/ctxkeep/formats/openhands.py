"""OpenHands evaluation output (``output.jsonl``): one conversation per instance.

Each line is one instance: ``instance_id`` and ``history``, the events the agent controller
recorded (older outputs store ``history`` as ``[action, observation]`` pairs; both are read).
An event is an *action* (``action`` key) or an *observation* (``observation`` key) from
``source`` user, agent or environment. What becomes of each:

    agent action with tool_call_metadata   a ToolCall; the actions of one model response (same
                                           ``model_response.id``) are parallel calls in one
                                           assistant message, whose text is the response's text
    observation answering such an action   its tool message, matched by ``cause`` (else by the
                                           metadata's ``tool_call_id``); ``extras.metadata``
                                           gives ``exit_code`` and the prefix/suffix lines the
                                           model saw around a command's output
    ``system``                             system message (the tools offered kept in extra)
    ``message``                            user or assistant text; ``image_urls`` as images
    ``finish``                             user or assistant text (thought and final message):
                                           OpenHands itself sends it to the model this way, the
                                           finish call never gets a result
    ``recall`` observation                 user text with the microagent knowledge and the
                                           instructions it injected; nothing when it has none
    any other action or observation        text of its source's role (agent -> assistant, user and
                                           environment -> user), from its content or ``message``

Left out on purpose, as state rather than conversation: ``recall`` actions (the query repeats
the user's message), ``change_agent_state``, ``agent_state_changed`` and ``null`` events, and an
instance's ``test_result``, ``metadata``, ``metrics``, ``error`` and ``instance`` fields.
Browser screenshots are left out (the page text is kept). Timestamps carry no offset (OpenHands
writes the machine's local time); they are read as UTC.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxkeep.formats.source import Conversation, Source, parse_timestamp
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    make_id,
    renumber_duplicates,
)

NAME = "openhands"

__all__ = ["parse", "sniff"]

_STATE_ACTIONS = frozenset({"recall", "change_agent_state", "null"})
_STATE_OBSERVATIONS = frozenset({"agent_state_changed", "null"})
_EDITOR_OBSERVATIONS = frozenset({"edit", "read"})


def sniff(source: Source) -> bool:
    """A JSONL line holding ``instance_id`` and an event ``history`` (or its evaluation fields)."""
    head = source.head()
    if not head.lstrip().startswith("{") or '"instance_id"' not in head:
        return False
    # "history" can sit after a long test_result patch, beyond the head
    return any(key in head for key in ('"history"', '"instruction"', '"test_result"'))


def parse(source: Source) -> list[Conversation]:
    """One conversation per instance line."""
    conversations: list[Conversation] = []
    renamed = 0
    for lineno, record in source.records():
        if not isinstance(record, dict):
            source.skip(lineno, "expected an instance object")
            continue
        instance_id = record.get("instance_id")
        history = record.get("history")
        if not isinstance(instance_id, str | int) or not isinstance(history, list):
            source.skip(lineno, "expected an object with instance_id and a history list")
            continue
        conv_id = str(instance_id)
        builder = _Builder(conv_id)
        for index, event in enumerate(_events(history)):
            if not isinstance(event, dict) or ("action" not in event and "observation" not in event):
                source.skip(lineno, f"history event {index} of {conv_id} is not an action or observation")
                continue
            try:
                builder.add(event, index)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                source.skip(lineno, f"history event {index} of {conv_id} is malformed ({exc})")
        messages, changes = renumber_duplicates(builder.messages())
        renamed += len(changes)
        conversations.append(Conversation(id=conv_id, messages=tuple(messages), title=conv_id))
    if renamed:
        source.notes.append(f"gave {renamed} repeated tool-call or message id(s) a new one")
    return conversations


def _events(history: list[Any]) -> Iterator[Any]:
    """The events in order; older outputs pair each action with its observation."""
    for item in history:
        if isinstance(item, list):
            yield from item
        else:
            yield item


# --- building one conversation --------------------------------------------------------


@dataclass
class _Turn:
    """One model response: its tool calls (in order) and the tool messages answering them."""

    head: Message  # the assistant message without the calls, filled in as actions arrive
    calls: list[ToolCall] = field(default_factory=list)
    results: dict[str, Message] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)

    def message(self) -> Message:
        extra = dict(self.head.extra)
        extra[NAME] = {**extra.get(NAME, {}), "events": self.events}
        return Message(
            role="assistant",
            id=self.head.id,
            timestamp=self.head.timestamp,
            source_id=self.head.source_id,
            content=(*self.head.content, *self.calls),
            extra=extra,
        )


class _Builder:
    """Turns one instance's events into messages, keeping parallel calls together."""

    def __init__(self, conv_id: str) -> None:
        self.conv_id = conv_id
        self.slots: list[Message | _Turn] = []
        self.turns: dict[str, _Turn] = {}  # model response id -> its turn
        self.by_event: dict[Any, tuple[_Turn, str]] = {}  # action event id -> (turn, call id)
        self.by_call: dict[str, _Turn] = {}

    def messages(self) -> list[Message]:
        out: list[Message] = []
        for slot in self.slots:
            if isinstance(slot, Message):
                out.append(slot)
                continue
            out.append(slot.message())
            out.extend(slot.results[c.id] for c in slot.calls if c.id in slot.results)
        return out

    def add(self, event: dict[str, Any], index: int) -> None:
        if "action" in event:
            self._action(event, index)
        else:
            self._observation(event, index)

    def _ids(self, event: dict[str, Any], index: int) -> tuple[str, str | None]:
        event_id = event.get("id")
        if event_id is None:
            return make_id(NAME, self.conv_id, "index", index), None
        return make_id(NAME, self.conv_id, event_id), str(event_id)

    def _text(self, role: Role, text: str, event: dict[str, Any], index: int, **extra: Any) -> None:
        msg_id, source_id = self._ids(event, index)
        blocks: list[Block] = [TextBlock(text=text)]
        if role == "user":
            blocks.extend(_images(_dict(event.get("args")).get("image_urls")))
        self.slots.append(
            Message(
                role=role,
                id=msg_id,
                source_id=source_id,
                timestamp=parse_timestamp(event.get("timestamp")),
                content=tuple(blocks),
                extra={NAME: extra} if extra else {},
            )
        )

    # --- actions ---

    def _action(self, event: dict[str, Any], index: int) -> None:
        kind = event.get("action")
        args = _dict(event.get("args"))
        meta = _dict(event.get("tool_call_metadata"))
        role: Role = "user" if event.get("source") in ("user", "environment") else "assistant"
        if kind in _STATE_ACTIONS:
            return
        if kind == "system":
            tools = args.get("tools")
            text = _str(args.get("content")) or _str(event.get("message"))
            self._text("system", text, event, index, **({"tools": tools} if tools else {}))
        elif kind == "message":
            self._text(role, _str(args.get("content")), event, index, action="message")
        elif kind == "finish":
            self._text(role, _finish_text(event, args, meta), event, index, action="finish", args=args)
        elif meta.get("tool_call_id") and role == "assistant":
            self._call(event, index, args, meta)
        else:
            text = _describe(event, args)
            if text:
                self._text(role, text, event, index, action=kind)

    def _call(self, event: dict[str, Any], index: int, args: dict[str, Any], meta: dict[str, Any]) -> None:
        call_id = str(meta["tool_call_id"])
        response = _dict(meta.get("model_response"))
        key = _str(response.get("id")) or f"call:{call_id}"
        turn = self.turns.get(key)
        if turn is None:
            turn = _Turn(head=self._head(event, index, response, args))
            self.turns[key] = turn
            self.slots.append(turn)
        name = _str(meta.get("function_name")) or _str(event.get("action")) or "tool"
        call = ToolCall(id=call_id, name=name, arguments=_arguments(response, call_id, args))
        turn.calls.append(call)
        turn.events.append(event.get("id"))
        self.by_event[event.get("id")] = (turn, call_id)
        self.by_call[call_id] = turn

    def _head(self, event: dict[str, Any], index: int, response: dict[str, Any], args: dict[str, Any]) -> Message:
        msg_id, source_id = self._ids(event, index)
        said = _response_message(response)
        blocks: list[Block] = []
        reasoning = _str(said.get("reasoning_content"))
        if reasoning.strip():
            blocks.append(ThinkingBlock(text=reasoning))
        text = _str(said.get("content")) or _thought(args)
        if text.strip():
            blocks.append(TextBlock(text=text))
        extra = {NAME: {"model_response": response["id"]}} if response.get("id") else {}
        return Message(
            role="assistant",
            id=msg_id,
            source_id=source_id,
            timestamp=parse_timestamp(event.get("timestamp")),
            content=tuple(blocks),
            extra=extra,
        )

    # --- observations ---

    def _observation(self, event: dict[str, Any], index: int) -> None:
        kind = event.get("observation")
        if kind in _STATE_OBSERVATIONS:
            return
        target = self._answered_call(event)
        if target is not None:
            turn, call_id = target
            turn.results[call_id] = self._result(event, index, call_id)
            return
        extras = _dict(event.get("extras"))
        if kind == "recall":
            text = _recall_text(extras)
            if text:
                self._text("user", text, event, index, observation="recall")
            return
        text = _str(event.get("content")) or _str(event.get("message"))
        if text:
            self._text("user", text, event, index, observation=kind)

    def _answered_call(self, event: dict[str, Any]) -> tuple[_Turn, str] | None:
        found = self.by_event.get(event.get("cause")) if event.get("cause") is not None else None
        if found is None:
            call_id = _str(_dict(event.get("tool_call_metadata")).get("tool_call_id"))
            turn = self.by_call.get(call_id)
            found = (turn, call_id) if turn is not None else None
        if found is None or found[1] in found[0].results:
            return None  # a second observation for one call is kept as plain text
        return found

    def _result(self, event: dict[str, Any], index: int, call_id: str) -> Message:
        msg_id, source_id = self._ids(event, index)
        kind = event.get("observation")
        extras = _dict(event.get("extras"))
        meta = _dict(extras.get("metadata"))
        text = _str(meta.get("prefix")) + _str(event.get("content")) + _str(meta.get("suffix"))
        images = _images(extras.get("image_urls"))
        exit_code = meta.get("exit_code")
        is_error = kind == "error" or (kind in _EDITOR_OBSERVATIONS and text.lstrip().startswith("ERROR:"))
        result = ToolResult(
            call_id=call_id,
            content=(TextBlock(text=text), *images) if images else text,
            is_error=is_error,
            exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
        )
        return Message(
            role="tool",
            id=msg_id,
            source_id=source_id,
            timestamp=parse_timestamp(event.get("timestamp")),
            content=(result,),
            extra={NAME: {"observation": kind}},
        )


# --- small readers ----------------------------------------------------------------------


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _thought(args: Mapping[str, Any]) -> str:
    # newer OpenHands stores the thought as {"text": ..., "reasoning_content": ...}
    thought = args.get("thought")
    return _str(thought.get("text")) if isinstance(thought, dict) else _str(thought)


def _describe(event: Mapping[str, Any], args: Mapping[str, Any]) -> str:
    """An action with no better mapping: its content, else its thought and its one-line message."""
    content = _str(args.get("content"))
    if content:
        return content
    thought, message = _thought(args), _str(event.get("message"))
    if thought and message and thought not in message:
        return f"{thought}\n\n{message}"
    return message or thought


def _response_message(response: Mapping[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return _dict(choices[0].get("message"))
    return {}


def _arguments(response: Mapping[str, Any], call_id: str, args: Mapping[str, Any]) -> str:
    """The arguments as the model wrote them; rebuilt from the action's args when not recorded."""
    for call in _response_message(response).get("tool_calls") or ():
        if isinstance(call, dict) and call.get("id") == call_id:
            raw = _dict(call.get("function")).get("arguments")
            if isinstance(raw, str):
                return raw
    return json.dumps({k: v for k, v in args.items() if k != "thought"}, ensure_ascii=False)


def _finish_text(event: Mapping[str, Any], args: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    said = _str(_response_message(_dict(meta.get("model_response"))).get("content"))
    parts: list[str] = []
    for part in (_thought(args), said, _str(args.get("final_thought")), _str(args.get("message"))):
        if part.strip() and part not in parts:
            parts.append(part)
    return "\n\n".join(parts) or _str(event.get("message"))


def _recall_text(extras: Mapping[str, Any]) -> str:
    """What a recall observation added to the prompt: instructions and microagent knowledge."""
    parts = [
        _str(extras.get(key)).strip()
        for key in ("repo_instructions", "additional_agent_instructions", "conversation_instructions")
    ]
    for agent in extras.get("microagent_knowledge") or ():
        if isinstance(agent, dict) and _str(agent.get("content")).strip():
            parts.append(f"<{_str(agent.get('name')) or 'microagent'}>\n{agent['content'].strip()}")
    return "\n\n".join(p for p in parts if p)


def _images(urls: Any) -> list[ImageBlock]:
    blocks: list[ImageBlock] = []
    for url in urls if isinstance(urls, list) else ():
        if not isinstance(url, str) or not url.strip():
            continue
        blocks.append(ImageBlock.from_url(url))
    return blocks
