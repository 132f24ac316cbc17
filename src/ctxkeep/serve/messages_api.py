"""Anthropic messages (``POST /v1/messages``) as the proxy reads and writes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ctxkeep.formats.anthropic import group_message, groups
from ctxkeep.messages import Message
from ctxkeep.step import Step

from .dialect import (
    BadRequest,
    Reply,
    Turn,
    WireForms,
    check_messages,
    check_stream,
    check_tools,
    text_of,
    without_none,
)
from .sse import Event

ROLES = frozenset({"user", "assistant"})


class AnthropicMessages:
    """The `Dialect` of Anthropic's messages API."""

    def parse(self, body: dict[str, Any], *, checked: int = 0) -> Turn:
        """The top-level ``system`` is the system prompt; ``messages`` the history."""
        messages = check_messages(body, ROLES, checked=checked)
        system = body.get("system")
        if system is not None and not (
            isinstance(system, str) or (isinstance(system, list) and all(isinstance(b, dict) for b in system))
        ):
            raise BadRequest("'system' must be a string or an array of text blocks", param="system")
        text = text_of(system) if system is not None else None
        return Turn(system=text or None, history=messages, tools=check_tools(body), stream=check_stream(body))

    def outgoing(self, body: dict[str, Any], turn: Turn, step: Step, forms: WireForms) -> dict[str, Any]:
        """The client's ``system`` as sent; the summary and the recent messages, roles alternating. Each Anthropic
        message (a group of ctxkeep's: tool results joined, `groups`) is converted and serialized once while it
        stays; only a run of one role, joined here, is serialized again."""
        # Only the context's last run of one role and what follows it are grouped and joined again (`_fold`).
        return {**body, "messages": forms.of_folded(forms.context(step.context), _fold)}

    def reply(self, answer: Any) -> Reply | None:
        """The answer's content blocks as the assistant message a client sends back."""
        if not isinstance(answer, dict) or answer.get("type") != "message":
            return None
        if not isinstance(answer.get("content"), list):
            return None
        usage = answer.get("usage")
        return Reply(_message(answer["content"]), _prompt_tokens(usage), _output_tokens(usage), *_cache(usage))

    def reassembler(self) -> EventReassembler:
        """A reassembler for the messages API's stream events."""
        return EventReassembler()

    def error(self, kind: str, message: str) -> dict[str, Any]:
        """Anthropic's error shape."""
        return {"type": "error", "error": {"type": kind, "message": message}}

    def stream_error(self, kind: str, message: str) -> bytes:
        """An ``error`` event, which the anthropic SDK raises as an `APIStatusError`."""
        return b"event: error\ndata: " + orjson.dumps(self.error(kind, message)) + b"\n\n"

    def ends(self, event: Event) -> bool:
        """``message_stop``, or an ``error`` event: what a whole stream ends with."""
        return event.name in ("message_stop", "error")


def alternate(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of one role joined into one (the summary, a user message, before a user message):
    the API takes only alternating roles, and joins such runs itself where it accepts them."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        if out and out[-1]["role"] == msg["role"]:
            out[-1] = {**out[-1], "content": _blocks(out[-1]["content"]) + _blocks(msg["content"])}
        else:
            out.append(msg)
    return out


def _fold(forms: WireForms, messages: list[Message], adding: bool) -> tuple[list[Any], int, int]:
    """`messages` as the API's, roles alternating (a `Fold` of `WireForms.of_folded`), and where the last run of
    one role begins: no later message joins a group or a run before it."""
    grouped = groups(messages)
    forms_of = forms.of_groups(grouped, _wire, adding=adding)
    wire = [(group, form) for group, form in zip(grouped, forms_of, strict=True) if form is not None]
    out, last = _alternated([form for _, form in wire])
    if last is None:
        return out, 0, 0  # nothing to send: folded whole again next time
    first = wire[last][0][0]
    # Looked for from the end, by identity: the last run is near it.
    at = next(i for i in range(len(messages) - 1, -1, -1) if messages[i] is first)
    return out, at, len(out) - 1


def _wire(group: Sequence[Message]) -> tuple[dict[str, Any], orjson.Fragment] | None:
    message = group_message(group)
    return None if message is None else (message, orjson.Fragment(orjson.dumps(message)))


def _alternated(wire: list[tuple[dict[str, Any], orjson.Fragment]]) -> tuple[list[Any], int | None]:
    """`alternate` over messages kept with their JSON: a message alone in its role's run goes as its JSON, a run
    as the one message it is joined into; and where the last run begins in `wire` (None when it is empty)."""
    out: list[Any] = []
    start, last = 0, None
    for end in range(1, len(wire) + 1):
        if end < len(wire) and wire[end][0]["role"] == wire[start][0]["role"]:
            continue
        out += [wire[start][1]] if end - start == 1 else alternate([m for m, _ in wire[start:end]])
        start, last = end, start
    return out, last


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


class EventReassembler:
    """The reply of a streamed message: its content blocks put back together from the deltas."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._stopped = False
        self._broken = False
        self._prompt_tokens: int | None = None
        self._output_tokens: int | None = None
        self._cache: tuple[int | None, int | None] = (None, None)

    def feed(self, event: Event) -> None:
        """Take one event (``message_stop`` ends the stream; ``error`` breaks it)."""
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            self._broken = True
            return
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "message_start":
            usage = (data.get("message") or {}).get("usage")
            self._prompt_tokens, self._cache = _prompt_tokens(usage), _cache(usage)
        elif kind == "content_block_start":
            self._blocks[int(data["index"])] = dict(data["content_block"])
        elif kind == "content_block_delta":
            self._delta(int(data["index"]), data.get("delta") or {})
        elif kind == "message_delta":
            usage = data.get("usage")
            self._output_tokens = _output_tokens(usage) or self._output_tokens
            # The final counts, where the API sends them again at the end: they replace the first ones.
            self._prompt_tokens = _prompt_tokens(usage) or self._prompt_tokens
            self._cache = _cache(usage) if _cache(usage)[0] is not None else self._cache
        elif kind == "message_stop":
            self._stopped = True
        elif kind == "error":
            self._broken = True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(delta.get("partial_json", ""))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
        elif kind == "compaction_delta":
            # The provider's summary (and its opaque metadata) comes whole in one delta; the SDK sets the
            # block's fields from it, so a later one replaces, never appends.
            block.update({k: v for k, v in delta.items() if k != "type"})

    def reply(self) -> Reply | None:
        """The assistant message, once ``message_stop`` came and nothing broke."""
        if not self._stopped or self._broken:
            return None
        blocks = []
        for index, block in sorted(self._blocks.items()):
            if index in self._json:
                raw = "".join(self._json[index])
                try:
                    block = {**block, "input": orjson.loads(raw) if raw else {}}
                except orjson.JSONDecodeError:
                    return None
            blocks.append(block)
        return Reply(_message(blocks), self._prompt_tokens, self._output_tokens, *self._cache)


def _message(blocks: list[Any]) -> dict[str, Any]:
    """An assistant message of `blocks` as a client sends it back: no None fields."""
    return {"role": "assistant", "content": without_none(blocks)}


def _prompt_tokens(usage: Any) -> int | None:
    if not isinstance(usage, dict):
        return None
    counts = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    whole = [n for n in counts if isinstance(n, int)]
    return sum(whole) if whole else None


def _cache(usage: Any) -> tuple[int | None, int | None]:
    """The prompt's tokens read from the upstream's cache and written to it, when it said (the read count is
    what says it: without it, neither is taken)."""
    if not isinstance(usage, dict):
        return None, None
    read, written = (usage.get(k) for k in ("cache_read_input_tokens", "cache_creation_input_tokens"))
    if not isinstance(read, int) or isinstance(read, bool):
        return None, None
    return read, written if isinstance(written, int) and not isinstance(written, bool) else None


def _output_tokens(usage: Any) -> int | None:
    tokens = usage.get("output_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
