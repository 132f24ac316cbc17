"""OpenAI chat completions (``POST /v1/chat/completions``) as the proxy reads and writes it."""

from __future__ import annotations

from typing import Any

import orjson

from ctxkeep.formats.openai import to_openai
from ctxkeep.messages import Message
from ctxkeep.step import Step

from .dialect import Reply, Turn, WireForms, check_messages, check_stream, check_tools, text_of, without_none
from .sse import Event

# Not the legacy "function" role: ctxkeep holds tool calls and their results as `tool` messages, and a
# history with one is refused up front, with the roles it takes (`check_messages`), not after parsing.
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_SYSTEM_ROLES = ("system", "developer")


class ChatCompletions:
    """The `Dialect` of OpenAI's chat completions API (and every server compatible with it)."""

    def parse(self, body: dict[str, Any], *, checked: int = 0) -> Turn:
        """The leading system and developer messages are the system prompt; the rest is the history."""
        messages = check_messages(body, ROLES, checked=checked)
        tools = check_tools(body)
        stream = check_stream(body)
        lead = 0
        while lead < len(messages) and messages[lead]["role"] in _SYSTEM_ROLES:
            lead += 1
        prefix = messages[:lead]
        system = "\n\n".join(text_of(m.get("content")) for m in prefix) if prefix else None
        return Turn(system=system, history=messages[lead:], tools=tools, stream=stream, prefix=prefix)

    def outgoing(self, body: dict[str, Any], turn: Turn, step: Step, forms: WireForms) -> dict[str, Any]:
        """The client's system messages exactly as sent, then the summary and the recent messages
        (`Step.to_openai` without the system prompt, each message converted and serialized once while it
        stays: its JSON is an `orjson.Fragment`, copied as it is into every body that sends it)."""
        return {**body, "messages": [*turn.prefix, *forms.of(forms.context(step.context), _wire)]}

    def reply(self, answer: Any) -> Reply | None:
        """The first choice's message, without the fields a request does not carry back."""
        try:
            message = answer["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            return None
        if not isinstance(message, dict):
            return None
        usage = answer.get("usage")
        return Reply(
            _sendable(message), _prompt_tokens(usage), _usage(usage, "completion_tokens"), cached_tokens=_cached(usage)
        )

    def reassembler(self) -> ChunkReassembler:
        """A reassembler for ``chat.completion.chunk`` events."""
        return ChunkReassembler()

    def error(self, kind: str, message: str) -> dict[str, Any]:
        """OpenAI's error shape."""
        return {"error": {"message": message, "type": kind, "param": None, "code": kind}}

    def stream_error(self, kind: str, message: str) -> bytes:
        """An error as a data event, which the openai SDK raises as an `APIError`."""
        return b"data: " + orjson.dumps(self.error(kind, message)) + b"\n\n"

    def ends(self, event: Event) -> bool:
        """``data: [DONE]``, or an error chunk: what a whole stream ends with."""
        if event.data == "[DONE]":
            return True
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return False
        return isinstance(chunk, dict) and "error" in chunk


class ChunkReassembler:
    """The reply of a streamed chat completion: content and tool calls put back together from the deltas."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finished = False
        self._broken = False
        self._prompt_tokens: int | None = None
        self._output_tokens: int | None = None
        self._cached_tokens: int | None = None

    def feed(self, event: Event) -> None:
        """Take one ``data:`` event (``[DONE]`` ends the stream)."""
        if event.data == "[DONE]":
            return
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            self._broken = True
            return
        if not isinstance(chunk, dict) or "error" in chunk:
            self._broken = True
            return
        self._prompt_tokens = _prompt_tokens(chunk.get("usage")) or self._prompt_tokens
        self._output_tokens = _usage(chunk.get("usage"), "completion_tokens") or self._output_tokens
        self._cached_tokens = _cached(chunk.get("usage")) if chunk.get("usage") else self._cached_tokens
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._take(choice)

    def _take(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            self._content.append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            self._refusal.append(delta["refusal"])
        for piece in delta.get("tool_calls") or []:
            call = self._calls.setdefault(int(piece.get("index", 0)), {"type": "function", "function": {}})
            if piece.get("id"):
                call["id"] = piece["id"]
            fn = piece.get("function") or {}
            if fn.get("name"):
                call["function"]["name"] = call["function"].get("name", "") + fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["function"]["arguments"] = call["function"].get("arguments", "") + fn["arguments"]
        if choice.get("finish_reason"):
            self._finished = True

    def reply(self) -> Reply | None:
        """The assistant message, once a finish reason came and nothing broke."""
        if not self._finished or self._broken:
            return None
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content)}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            calls = [c for _, c in sorted(self._calls.items())]
            message["tool_calls"] = [{**c, "function": {"name": "", "arguments": "", **c["function"]}} for c in calls]
        return Reply(_sendable(message), self._prompt_tokens, self._output_tokens, cached_tokens=self._cached_tokens)


def _wire(message: Message) -> orjson.Fragment:
    return orjson.Fragment(orjson.dumps(to_openai([message])[0]))


def _sendable(message: dict[str, Any]) -> dict[str, Any]:
    """A response message as a client sends it back: no None fields, no response-only ones."""
    out = without_none({k: v for k, v in message.items() if k not in ("annotations", "audio", "reasoning_content")})
    if not isinstance(out, dict):
        return {"role": "assistant", "content": ""}
    out.setdefault("role", "assistant")
    if "content" not in out and not out.get("tool_calls"):
        out["content"] = ""
    return out


def _prompt_tokens(usage: Any) -> int | None:
    return _usage(usage, "prompt_tokens")


def _cached(usage: Any) -> int | None:
    """The prompt's tokens the upstream's cache served (``prompt_tokens_details.cached_tokens``), when it said."""
    return _usage(usage.get("prompt_tokens_details") if isinstance(usage, dict) else None, "cached_tokens")


def _usage(usage: Any, field: str) -> int | None:
    tokens = usage.get(field) if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
