"""The classic (V0) event stream: actions and observations, linked by ``cause`` or ``tool_call_metadata``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ctxkeep.formats.openhands.content import _images
from ctxkeep.formats.openhands.records import _args, _dict, _extras, _int, _key, _str
from ctxkeep.formats.openhands.turns import NAME, _Action, _Answer, _Assembly, _Turn
from ctxkeep.messages import Block, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, make_id

_EDITOR_OBSERVATIONS = frozenset({"edit", "read"})


class _ClassicEvents(_Assembly):
    """Reads V0 events: agent actions (tool calls or text) and the observations answering them."""

    # --- V0 actions ---

    def _action(self, event: dict[str, Any], index: int) -> None:
        kind = event.get("action")
        args = _args(event)
        meta = _dict(event.get("tool_call_metadata"))
        role = self._role(event, kind)
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
        elif role == "assistant":
            self._uncalled_action(event, index, args)
        else:
            text = _describe(event, args)
            if text:
                self._text(role, text, event, index, action=kind)

    def _call(self, event: dict[str, Any], index: int, args: dict[str, Any], meta: dict[str, Any]) -> None:
        call_id = str(meta["tool_call_id"])
        response = _dict(meta.get("model_response"))
        name = _str(meta.get("function_name")) or _str(event.get("action")) or "tool"
        call = ToolCall(id=call_id, name=name, arguments=_arguments(response, call_id, args))
        key = _str(response.get("id")) or f"call:{call_id}"
        turn = self.turns.get(key)
        if turn is None:
            turn = _Turn(head=self._head(event, index, response, args))
            self.turns[key] = turn
            self._append(turn)
        self._register(turn, call, event)

    def _head(self, event: dict[str, Any], index: int, response: dict[str, Any], args: dict[str, Any]) -> Message:
        said = _response_message(response)
        blocks: list[Block] = []
        reasoning = _str(said.get("reasoning_content"))
        if reasoning.strip():
            blocks.append(ThinkingBlock(text=reasoning))
        text = _str(said.get("content")) or _thought(args)
        if text.strip():
            blocks.append(TextBlock(text=text))
        response_id = _str(response.get("id"))
        return self._message(
            "assistant", blocks, event, index, **({"model_response": response_id} if response_id else {})
        )

    def _uncalled_action(self, event: dict[str, Any], index: int, args: dict[str, Any]) -> None:
        """An action the model wrote in its text (CodeAct's ``<execute_bash>``): a call once answered."""
        kind = _str(event.get("action")) or "action"
        text = _describe(event, args)
        shown = self._message("assistant", [TextBlock(text=text)], event, index, action=kind) if text else None
        thought = _thought(args)
        head = self._message("assistant", [TextBlock(text=thought)] if thought.strip() else [], event, index)
        source_id = self._ids(event, index)[1]
        call = ToolCall(
            id=make_id(NAME, self.conv_id, "call", source_id if source_id is not None else index),
            name=kind,
            arguments=json.dumps({k: v for k, v in args.items() if k != "thought"}, ensure_ascii=False),
        )
        turn = _Turn(head=replace(head, extra={NAME: {"action": kind, "call": "from the action's args"}}))
        self._append(_Action(text=shown, turn=turn))
        self._register(turn, call, event)

    # --- V0 observations ---

    def _observation(self, event: dict[str, Any], index: int, pending: _Answer | None) -> None:
        kind = event.get("observation")
        target = self._answered_call(event, pending)
        if target is not None:
            turn, call_id = target
            turn.results[call_id] = self._result(event, index, call_id)
            return
        extras = _extras(event)
        if kind == "recall":
            text = _recall_text(extras)
            if text:
                self._text("user", text, event, index, observation="recall")
            return
        text = _str(event.get("content")) or _str(event.get("message"))
        if text:
            self._text("user", text, event, index, observation=kind)

    def _answered_call(self, event: Mapping[str, Any], pending: _Answer | None) -> _Answer | None:
        cause = _key(event.get("cause"))
        found = self.by_event.get(cause) if cause is not None else None
        call_id = _str(_dict(event.get("tool_call_metadata")).get("tool_call_id"))
        if found is None and call_id:
            turn = self.by_call.get(call_id)
            found = (turn, call_id) if turn is not None else None
        if found is None and event.get("cause") is None and not call_id:
            found = pending  # no link recorded (the resolver's output): it answers the action before it
        if found is None or found[1] in found[0].results:
            return None  # a second observation for one call is kept as plain text
        return found

    def _result(self, event: Mapping[str, Any], index: int, call_id: str) -> Message:
        kind = event.get("observation")
        extras = _extras(event)
        meta = _dict(extras.get("metadata"))
        text = _str(meta.get("prefix")) + _str(event.get("content")) + _str(meta.get("suffix"))
        images = _images(extras.get("image_urls"))
        exit_code = _int(meta.get("exit_code"))
        is_error = kind == "error" or (kind in _EDITOR_OBSERVATIONS and text.lstrip().startswith("ERROR:"))
        result = ToolResult(
            call_id=call_id,
            content=(TextBlock(text=text), *images) if images else text,
            is_error=is_error,
            exit_code=exit_code if exit_code is not None else _int(extras.get("exit_code")),
        )
        return self._message("tool", [result], event, index, observation=kind)


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
    calls = _response_message(response).get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
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
    agents = extras.get("microagent_knowledge")
    for agent in agents if isinstance(agents, list) else ():
        if isinstance(agent, dict) and _str(agent.get("content")).strip():
            parts.append(f"<{_str(agent.get('name')) or 'microagent'}>\n{agent['content'].strip()}")
    return "\n\n".join(p for p in parts if p)
