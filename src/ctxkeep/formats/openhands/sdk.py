"""V1 events of the OpenHands agent SDK: system prompt, messages, actions and their observations."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ctxkeep.formats.openhands.content import _content_blocks, _content_text
from ctxkeep.formats.openhands.records import _dict, _int, _key, _str
from ctxkeep.formats.openhands.turns import _Assembly, _Turn
from ctxkeep.messages import Block, ImageBlock, Role, TextBlock, ThinkingBlock, ToolCall, ToolResult, result_content

_V1_STATE = frozenset(
    {"PauseEvent", "ConversationStateUpdateEvent", "CondensationRequest", "TokenEvent", "StreamingDeltaEvent"}
)
_V1_RESULTS = frozenset({"ObservationEvent", "AgentErrorEvent", "UserRejectObservation"})


class _SdkEvents(_Assembly):
    """Reads V1 events, which name their class in ``kind``."""

    def _v1(self, event: dict[str, Any], index: int) -> None:
        kind = event["kind"]
        if kind == "ActionEvent":
            self._v1_action(event, index)
        elif kind in _V1_RESULTS:
            self._v1_result(event, index)
        elif kind == "SystemPromptEvent":
            self._v1_system(event, index)
        elif kind in ("CondensationSummaryEvent", "Condensation"):
            summary = _str(event.get("summary"))
            if summary.strip():
                self._append(self._message("user", [TextBlock(text=summary)], event, index, kind=kind))
        elif kind == "MessageEvent" or isinstance(event.get("llm_message"), dict):
            self._v1_message(event, index)
        elif kind not in _V1_STATE:
            self.left_out[kind] += 1

    def _v1_system(self, event: Mapping[str, Any], index: int) -> None:
        texts = [_content_text(event.get(key)) for key in ("system_prompt", "dynamic_context")]
        blocks: list[Block] = [TextBlock(text=t) for t in texts if t]
        tools = event.get("tools")
        self._append(self._message("system", blocks, event, index, **({"tools": tools} if tools else {})))

    def _v1_message(self, event: Mapping[str, Any], index: int) -> None:
        said = _dict(event.get("llm_message"))
        role: Role = "user" if event.get("source") in ("user", "environment") else "assistant"
        if said.get("role") in ("system", "user", "assistant"):
            role = said["role"]
        blocks: list[Block] = _v1_reasoning(said) if role == "assistant" else []
        blocks.extend(_content_blocks(said.get("content")))
        blocks.extend(_content_blocks(event.get("extended_content")))
        extra = {key: event[key] for key in ("activated_skills", "sender") if event.get(key)}
        self._append(self._message(role, blocks, event, index, **extra))

    def _v1_action(self, event: dict[str, Any], index: int) -> None:
        raw = _dict(event.get("tool_call"))
        call_id = _str(raw.get("id")) or _str(event.get("tool_call_id"))
        action = _dict(event.get("action"))
        name = _str(raw.get("name")) or _str(event.get("tool_name")) or _str(action.get("kind")) or "tool"
        arguments = raw.get("arguments")
        if not isinstance(arguments, str):
            given = arguments if isinstance(arguments, dict) else {k: v for k, v in action.items() if k != "kind"}
            arguments = json.dumps(given, ensure_ascii=False)
        call = ToolCall(id=call_id, name=name, arguments=arguments)
        said = [*_v1_reasoning(event), *_content_blocks(event.get("thought"))]
        key = _str(event.get("llm_response_id")) or f"call:{call_id}"
        turn = self.turns.get(key)
        if turn is None:
            extra = {"llm_response_id": key} if event.get("llm_response_id") else {}
            turn = _Turn(head=self._message("assistant", said, event, index, **extra))
            self.turns[key] = turn
            self._append(turn)
        else:  # later actions of a response usually repeat nothing; keep what they add
            added = [b for b in said if b not in turn.head.content]
            turn.head = replace(turn.head, content=(*turn.head.content, *added))
        self._register(turn, call, event)

    def _v1_result(self, event: Mapping[str, Any], index: int) -> None:
        kind = event["kind"]
        call_id = _str(event.get("tool_call_id"))
        turn = self.by_call.get(call_id)
        if turn is None:
            found = self.by_event.get(_key(event.get("action_id")) or "")
            turn, call_id = found if found is not None else (None, call_id)
        if kind == "ObservationEvent":
            content, is_error, exit_code = _v1_observation(_dict(event.get("observation")))
            content = [*content, *_content_blocks(event.get("extended_content"))]
        elif kind == "AgentErrorEvent":
            content, is_error, exit_code = [TextBlock(text=_str(event.get("error")))], True, None
        else:
            reason = _str(event.get("rejection_reason")) or "User rejected the action"
            content, is_error, exit_code = [TextBlock(text=f"Action rejected: {reason}")], True, None
        if turn is None or call_id in turn.results:
            text = "\n".join(b.text for b in content if isinstance(b, TextBlock))
            self._append(self._message("user", [TextBlock(text=text)], event, index, kind=kind))
            return
        result = ToolResult(call_id=call_id, content=result_content(content), is_error=is_error, exit_code=exit_code)
        turn.results[call_id] = self._message("tool", [result], event, index, kind=kind)


def _v1_reasoning(said: Mapping[str, Any]) -> list[Block]:
    """Thinking blocks (Anthropic), else the reasoning text, of a V1 action or LLM message."""
    blocks: list[Block] = []
    raw = said.get("thinking_blocks")
    for block in raw if isinstance(raw, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "redacted_thinking":
            blocks.append(ThinkingBlock(text="", signature=_str(block.get("data")) or None, redacted=True))
        elif _str(block.get("thinking")):
            blocks.append(ThinkingBlock(text=block["thinking"], signature=_str(block.get("signature")) or None))
    reasoning = _str(said.get("reasoning_content"))
    if not blocks and reasoning.strip():
        blocks.append(ThinkingBlock(text=reasoning))
    return blocks


def _v1_observation(obs: Mapping[str, Any]) -> tuple[list[TextBlock | ImageBlock], bool, int | None]:
    """(content, is_error, exit_code) of a V1 observation, as the model was shown it."""
    content = _content_blocks(obs.get("content"))
    meta = _dict(obs.get("metadata"))
    if not content and _str(obs.get("output")):  # SDK versions before ``content``: the command's output
        text = _str(meta.get("prefix")) + obs["output"] + _str(meta.get("suffix"))
        content = [TextBlock(text=text)]
    if not content and _str(obs.get("message")):  # FinishObservation
        content = [TextBlock(text=obs["message"])]
    error = _str(obs.get("error"))  # older SDK observations: the error text, or a flag
    if error and not any(isinstance(b, TextBlock) and error in b.text for b in content):
        content.append(TextBlock(text=error))
    is_error = obs.get("is_error") is True or obs.get("error") is True or bool(error)
    exit_code = _int(obs.get("exit_code"))
    return content, is_error, exit_code if exit_code is not None else _int(meta.get("exit_code"))
