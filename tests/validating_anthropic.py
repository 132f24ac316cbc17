"""A local Anthropic messages server that checks every request the way the API does, and plays an agent.

The Anthropic twin of `tests.validating_server` (same scripted agent, same records): it refuses, with
the API's status and error shape, what the API would refuse: a missing ``max_tokens`` or
``anthropic-version`` header, a ``system`` role inside ``messages`` (the system prompt is a top-level
field), roles that do not alternate user/assistant starting with user, block types a role cannot carry,
empty text blocks, a ``tool_use`` not answered by a ``tool_result`` in the very next user message (or a
result without its call), and a prompt over the window (o200k, independently of ctxkeep's counter).
Streaming answers are the API's events: message_start, content_block_start/delta/stop (tool input as
input_json_delta pieces), message_delta, message_stop.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests.validating_server import JSONHandler, Record, RecordingServer, Refused, wants_stream

from ctxkeep.tokens.encodings import TiktokenTokenizer

BLOCK_KEYS = {
    "text": {"type", "text", "cache_control", "citations"},
    "image": {"type", "source", "cache_control"},
    "document": {"type", "source", "cache_control", "title", "context", "citations"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "thinking": {"type", "thinking", "signature"},
    "redacted_thinking": {"type", "data"},
}
ROLE_BLOCKS = {
    "user": {"text", "image", "document", "tool_result"},
    "assistant": {"text", "tool_use", "thinking", "redacted_thinking"},
}
PER_MESSAGE = 3


def check_request(body: Any, headers: Any, window: int, tokenizer: TiktokenTokenizer) -> int:
    """Raise `Refused` for what the messages API refuses; the prompt's tokens otherwise."""
    if not headers.get("anthropic-version"):
        raise Refused("anthropic-version: header is required")
    if not isinstance(body, dict):
        raise Refused("request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Refused("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise Refused("max_tokens: Field required (an integer >= 1)")
    system = body.get("system")
    text_blocks = isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in system)
    if system is not None and not isinstance(system, str) and not text_blocks:
        raise Refused("system: Input should be a valid string or a list of text blocks")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused("messages: at least one message is required")
    for i, msg in enumerate(messages):
        check_message(msg, i)
    check_turns(messages)
    tools = body.get("tools")
    if tools is not None:
        check_tools(tools)
    tokens = count_prompt(system, messages, tools, tokenizer)
    if tokens + max_tokens > window:
        raise Refused(f"prompt is too long: {tokens + max_tokens} tokens > {window} maximum")
    return tokens


def check_message(msg: Any, i: int) -> None:
    where = f"messages.{i}"
    if not isinstance(msg, dict) or set(msg) - {"role", "content"}:
        raise Refused(f"{where}: expected an object with 'role' and 'content' only")
    role = msg.get("role")
    if role not in ROLE_BLOCKS:
        raise Refused(f"{where}.role: Input should be 'user' or 'assistant' (got {role!r})")
    content = msg.get("content")
    if isinstance(content, str):
        if not content:
            raise Refused(f"{where}: text content blocks must be non-empty")
        return
    if not isinstance(content, list) or not content:
        raise Refused(f"{where}.content: Input should be a non-empty string or a list of blocks")
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in ROLE_BLOCKS[role]:
            raise Refused(f"{where}.content.{j}: block type {kind!r} is not allowed for role {role!r}")
        extra = set(block) - BLOCK_KEYS[kind]
        if extra:
            raise Refused(f"{where}.content.{j}.{sorted(extra)[0]}: Extra inputs are not permitted")
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
            raise Refused(f"{where}.content.{j}: text content blocks must be non-empty")
        if kind == "tool_use" and not (
            isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
            and isinstance(block.get("input"), dict)
        ):
            raise Refused(f"{where}.content.{j}: tool_use needs id, name and an object input")
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise Refused(f"{where}.content.{j}.tool_use_id: Field required")


def blocks_of(msg: dict[str, Any]) -> list[dict[str, Any]]:
    content = msg["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def check_turns(messages: list[dict[str, Any]]) -> None:
    """User first, then alternating; every tool_use answered in the very next user message, and only there."""
    if messages[0]["role"] != "user":
        raise Refused("messages: the first message must use the 'user' role")
    for i in range(1, len(messages)):
        if messages[i]["role"] == messages[i - 1]["role"]:
            raise Refused(f"messages: roles must alternate between 'user' and 'assistant' (messages.{i})")
    for i, msg in enumerate(messages):
        results = [b["tool_use_id"] for b in blocks_of(msg) if b.get("type") == "tool_result"]
        calls = [b["id"] for b in blocks_of(messages[i - 1]) if b.get("type") == "tool_use"] if i else []
        unknown = [r for r in results if r not in calls]
        if unknown:
            raise Refused(
                f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {unknown[0]}. Each"
                " `tool_result` block must have a corresponding `tool_use` block in the previous message."
            )
        if msg["role"] == "assistant":
            mine = [b["id"] for b in blocks_of(msg) if b.get("type") == "tool_use"]
            answered = (
                [b.get("tool_use_id") for b in blocks_of(messages[i + 1]) if b.get("type") == "tool_result"]
                if i + 1 < len(messages)
                else mine  # a trailing assistant message is a prefill: nothing to answer yet
            )
            missing = [c for c in mine if c not in answered]
            if missing:
                raise Refused(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after:"
                    f" {', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block"
                    " in the next message."
                )


def check_tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise Refused("tools: Input should be a valid list")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or "input_schema" not in tool:
            raise Refused(f"tools.{i}: expected {{name, input_schema, ...}}")


def count_prompt(system: Any, messages: list[dict[str, Any]], tools: Any, tokenizer: TiktokenTokenizer) -> int:
    texts: list[str] = []
    if isinstance(system, str):
        texts.append(system)
    elif isinstance(system, list):
        texts.extend(b["text"] for b in system)
    for msg in messages:
        for block in blocks_of(msg):
            if block["type"] == "text":
                texts.append(block["text"])
            elif block["type"] == "tool_use":
                texts.append(block["name"] + json.dumps(block["input"]))
            elif block["type"] == "tool_result":
                content = block.get("content", "")
                texts.append(content if isinstance(content, str) else json.dumps(content))
            else:
                texts.append(json.dumps(block))
    if tools:
        texts.append(json.dumps(tools))
    counted = sum(tokenizer.count_texts([t for t in texts if t])) if any(texts) else 0
    return counted + PER_MESSAGE * (len(messages) + 1)


def reply_to(body: dict[str, Any], tokens: int, serial: int) -> dict[str, Any]:
    """The scripted agent's turn: tool_use blocks for a new task, a short answer once the results are in."""
    last = body["messages"][-1]
    tools = [t["name"] for t in body.get("tools") or []]
    texts = [b["text"] for b in blocks_of(last) if b["type"] == "text"]
    asks = last["role"] == "user" and not any(b["type"] == "tool_result" for b in blocks_of(last))
    if asks and tools:
        task = " ".join(texts)
        calls = 2 if int(hashlib.sha256(task.encode()).hexdigest(), 16) % 3 == 0 else 1
        content: list[dict[str, Any]] = [
            {
                "type": "tool_use",
                "id": f"toolu_{serial}_{k}",
                "name": tools[k % len(tools)],
                "input": {"query": f"{task[:40]} #{k}"},
            }
            for k in range(calls)
        ]
        stop = "tool_use"
    else:
        asked = next(
            (
                " ".join(b["text"] for b in blocks_of(m) if b["type"] == "text")
                for m in reversed(body["messages"])
                if m["role"] == "user" and any(b["type"] == "text" for b in blocks_of(m))
            ),
            "",
        )
        content = [{"type": "text", "text": f"Done with: {asked[-80:]}"}]
        stop = "end_turn"
    return {
        "id": f"msg_{serial:06d}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": tokens, "output_tokens": 12},
    }


def stream_events(reply: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The reply as the API's stream events."""
    start = {**reply, "content": [], "stop_reason": None, "usage": {**reply["usage"], "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(reply["content"]):
        if block["type"] == "text":
            first, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
        else:
            raw = json.dumps(block["input"])
            first = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": raw[k : k + 7]} for k in range(0, len(raw), 7)]
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": first}))
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": reply["stop_reason"], "stop_sequence": None}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 12}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class ValidatingAnthropicServer(RecordingServer):
    """`with ValidatingAnthropicServer(window=16_000) as api:` then point a client at `api.base_url`."""

    def __init__(self, window: int) -> None:
        super().__init__(self._handler(), window)
        self.headers: list[dict[str, str]] = []  # every request's headers, for the forwarding tests
        self.base_url = self.url  # the SDK adds /v1

    def answer(self, raw: bytes, headers: Any) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for a messages request."""
        with self._lock:
            self.headers.append({k.lower(): v for k, v in headers.items()})
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return self._refuse(Refused(f"could not parse the JSON body: {exc}"), {})
        try:
            tokens = check_request(body, headers, self.window, self._tokenizer)
        except Refused as exc:
            return self._refuse(exc, body)
        serial = self._note(Record(tokens, None, len(body["messages"]), body))
        return 200, reply_to(body, tokens, serial)

    def _refuse(self, exc: Refused, body: Any) -> tuple[int, dict[str, Any]]:
        size = len(body.get("messages") or []) if isinstance(body, dict) else 0
        self._note(Record(0, str(exc), size, body if isinstance(body, dict) else {}))
        return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": str(exc)}}

    def _handler(self) -> type[JSONHandler]:
        server = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/v1/messages":
                    self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
                    return
                status, body = server.answer(raw, self.headers)
                if wants_stream(status, raw):
                    self.send_events(
                        f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in stream_events(body)
                    )
                else:
                    self.send_json(status, body)

        return Handler
