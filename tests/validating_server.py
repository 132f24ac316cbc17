"""A local OpenAI-compatible chat server that checks every request the way the API does, and plays an agent.

The adapters' and the proxy's tests point a real framework (or the official SDK) at it over HTTP. It
refuses, with the API's status and error shape, what the API would refuse: unknown roles or keys,
content parts a role cannot carry, malformed tool calls, a tool call without its result (or a result
without its call), and a prompt over the window (counted with tiktoken's o200k, independently of
ctxkeep's counter). Every request is recorded, refused or not, with its token count.

As the model it is a scripted agent: to a user message it answers with one tool call (two, in
parallel, for every third task), to the results with a short text naming the task. The tools it calls
are the first ones the request offers, so any framework's tool set works.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from ctxkeep import Session
from ctxkeep.codec import ids_in
from ctxkeep.tokens.encodings import TiktokenTokenizer

MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"},
    "tool": {"role", "content", "tool_call_id", "name"},  # `name` is not in the spec, but the API takes it
}
PART_TYPES = {
    "system": {"text"},
    "developer": {"text"},
    "user": {"text", "image_url", "input_audio", "file"},
    "assistant": {"text", "refusal"},
    "tool": {"text"},
}
NULLABLE = {"content", "refusal", "audio", "function_call", "name"}  # on assistant messages
PER_MESSAGE = 3  # tokens the chat format adds to each message, and 3 to prime the reply


class Refused(Exception):
    """What the API would answer with a 400."""

    def __init__(self, message: str, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


@dataclass
class Record:
    """One request the server received."""

    tokens: int
    refused: str | None
    messages: int
    body: dict[str, Any] = field(repr=False)


def check_request(body: Any, window: int, tokenizer: TiktokenTokenizer) -> int:
    """Raise `Refused` for what the chat completions API refuses; the prompt's tokens otherwise."""
    if not isinstance(body, dict):
        raise Refused("request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Refused("you must provide a model parameter", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused("'messages' must be a non-empty array", param="messages")
    for i, msg in enumerate(messages):
        check_message(msg, f"messages[{i}]")
    check_pairing(messages)
    tools = body.get("tools")
    if tools is not None:
        check_tools(tools)
    tokens = count_prompt(messages, tools, tokenizer)
    reply = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    if tokens + reply > window:
        raise Refused(
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{tokens + reply} tokens ({tokens} in the messages, {reply} in the completion).",
            code="context_length_exceeded",
            param="messages",
        )
    return tokens


def check_message(msg: Any, where: str) -> None:
    if not isinstance(msg, dict):
        raise Refused(f"{where}: expected an object")
    role = msg.get("role")
    if role not in MESSAGE_KEYS:
        raise Refused(f"{where}.role: invalid value {role!r}", param=f"{where}.role")
    extra = set(msg) - MESSAGE_KEYS[role]
    if extra:
        raise Refused(f"{where}: unrecognized key(s) {sorted(extra)} for role {role!r}", param=where)
    for key, value in msg.items():
        if value is None and not (role == "assistant" and key in NULLABLE):
            raise Refused(f"{where}.{key}: None is not of type 'string'", param=f"{where}.{key}")
    content = msg.get("content")
    if role == "assistant" and content is None and not msg.get("tool_calls"):
        raise Refused(f"{where}: assistant content is required unless tool_calls is given", param=where)
    if isinstance(content, list):
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in PART_TYPES[role]:
                raise Refused(f"{where}.content[{j}]: type {kind!r} is not allowed for role {role!r}")
            if kind == "text" and not isinstance(part.get("text"), str):
                raise Refused(f"{where}.content[{j}].text: expected a string")
    elif content is not None and not isinstance(content, str):
        raise Refused(f"{where}.content: expected a string or an array of parts")
    if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
        raise Refused(f"{where}.tool_call_id: required for role 'tool'", param=f"{where}.tool_call_id")
    for k, call in enumerate(msg.get("tool_calls") or []):
        check_call(call, f"{where}.tool_calls[{k}]")


def check_call(call: Any, where: str) -> None:
    ok = (
        isinstance(call, dict)
        and set(call) <= {"id", "type", "function"}
        and isinstance(call.get("id"), str)
        and call.get("type") == "function"
        and isinstance(call.get("function"), dict)
        and set(call["function"]) <= {"name", "arguments"}
        and isinstance(call["function"].get("name"), str)
        and isinstance(call["function"].get("arguments"), str)
    )
    if not ok:
        raise Refused(f"{where}: expected {{id, type: 'function', function: {{name, arguments: string}}}}")


def check_pairing(messages: list[dict[str, Any]]) -> None:
    """Each assistant tool call answered by tool messages right after it; no tool message without its call."""
    pending: list[str] = []
    for i, msg in enumerate(messages):
        if msg["role"] == "tool":
            if msg["tool_call_id"] not in pending:
                raise Refused(
                    f"messages[{i}]: messages with role 'tool' must be a response to a preceding message "
                    f"with 'tool_calls' (tool_call_id {msg['tool_call_id']!r})",
                    param=f"messages.[{i}].role",
                )
            pending.remove(msg["tool_call_id"])
            continue
        if pending:
            raise Refused(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
                param=f"messages.[{i}].role",
            )
        pending = [c["id"] for c in msg.get("tool_calls") or []]
    if pending:
        raise Refused(f"tool_call_ids without response messages: {', '.join(pending)}", param="messages")


def check_tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise Refused("'tools' must be an array", param="tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise Refused(f"tools[{i}]: expected {{type: 'function', function: {{name, ...}}}}", param="tools")


def count_prompt(messages: list[dict[str, Any]], tools: Any, tokenizer: TiktokenTokenizer) -> int:
    texts: list[str] = []
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list):
            texts.extend(p.get("text") or json.dumps(p) for p in content)
        elif content:
            texts.append(content)
        texts.extend(c["function"]["name"] + c["function"]["arguments"] for c in msg.get("tool_calls") or [])
    if tools:
        texts.append(json.dumps(tools))
    counted = sum(tokenizer.count_texts(texts)) if texts else 0
    return counted + PER_MESSAGE * (len(messages) + 1)


def reply_to(body: dict[str, Any], tokens: int, serial: int) -> dict[str, Any]:
    """The scripted agent's turn: tool calls for a new task, a short answer once the results are in."""
    messages = body["messages"]
    last = messages[-1]
    tools = [t["function"] for t in body.get("tools") or []]
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if last["role"] == "user" and tools:
        task = text_of(last)
        calls = 2 if int(hashlib.sha256(task.encode()).hexdigest(), 16) % 3 == 0 else 1
        message["tool_calls"] = [
            call(tools[k % len(tools)], f"{task[:40]} #{k}", f"call_{serial}_{k}") for k in range(calls)
        ]
        finish = "tool_calls"
    else:
        asked = next((text_of(m) for m in reversed(messages) if m["role"] == "user"), "")
        message["content"] = f"Done with: {asked[:80]}"
        finish = "stop"
    return {
        "id": f"chatcmpl-{serial}",
        "object": "chat.completion",
        "created": 1_700_000_000 + serial,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 12, "total_tokens": tokens + 12},
    }


def call(tool: dict[str, Any], value: str, call_id: str) -> dict[str, Any]:
    """A call of `tool` with `value` as its first required (else first) string parameter."""
    params = tool.get("parameters") or {}
    names = list(params.get("required") or []) + list(params.get("properties") or {})
    arguments = {names[0] if names else "query": value}
    return {"id": call_id, "type": "function", "function": {"name": tool["name"], "arguments": json.dumps(arguments)}}


def text_of(msg: dict[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def stream_chunks(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The reply as chat.completion.chunk events: role, content or each tool call, then finish and usage."""
    base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = reply["choices"][0]
    msg = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if msg.get("content"):
        deltas.append({"content": msg["content"]})
    for k, call in enumerate(msg.get("tool_calls") or []):
        deltas.append({"tool_calls": [{"index": k, **call}]})
    chunks = [base | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    chunks.append(base | {"choices": [], "usage": reply["usage"]})
    return chunks


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # http.server's default of 5 resets connections when many clients call at once
    daemon_threads = True


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers with JSON or with server-sent events."""

    def log_message(self, *args: object) -> None:
        pass

    def send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, frames: Iterable[str]) -> None:
        """A 200 event stream of `frames` (each a whole ``...\n\n`` frame), then the connection closed."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for frame in frames:
            self.wfile.write(frame.encode())
        self.close_connection = True


def wants_stream(status: int, raw: bytes) -> bool:
    """Whether a request answered with `status` asked for a stream."""
    try:
        return status == 200 and json.loads(raw).get("stream") is True
    except ValueError:
        return False


class RecordingServer:
    """A local HTTP server for a test, started by `with` and stopped after, noting each request as a `Record`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], window: int) -> None:
        self.window = window
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self._tokenizer = TiktokenTokenizer("o200k_base")
        self._server = _Server(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def refused(self) -> list[str]:
        return [r.refused for r in self.records if r.refused]

    @property
    def peak_tokens(self) -> int:
        return max((r.tokens for r in self.records), default=0)

    def _note(self, record: Record) -> int:
        """Keep `record`; its serial number (1 for the first)."""
        with self._lock:
            self.records.append(record)
            return len(self.records)


class ValidatingServer(RecordingServer):
    """`with ValidatingServer(window=16_000) as api:` then point a client at `api.base_url`."""

    def __init__(self, window: int) -> None:
        super().__init__(self._handler(), window)
        self.base_url = self.url + "/v1"

    def answer(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for a chat completions request."""
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return self._refuse(Refused(f"could not parse the JSON body: {exc}"), {}, 0)
        try:
            tokens = check_request(body, self.window, self._tokenizer)
        except Refused as exc:
            return self._refuse(exc, body, 0)
        serial = self._note(Record(tokens, None, len(body["messages"]), body))
        return 200, reply_to(body, tokens, serial)

    def _refuse(self, exc: Refused, body: Any, tokens: int) -> tuple[int, dict[str, Any]]:
        size = len(body.get("messages") or []) if isinstance(body, dict) else 0
        self._note(Record(tokens, str(exc), size, body if isinstance(body, dict) else {}))
        error = {"message": str(exc), "type": "invalid_request_error", "param": exc.param, "code": exc.code}
        return 400, {"error": error}

    def _handler(self) -> type[JSONHandler]:
        server = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self.send_json(200, {"object": "list", "data": [{"id": "validating", "object": "model"}]})
                else:
                    self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                status, body = server.answer(raw)
                if wants_stream(status, raw):
                    frames = [f"data: {json.dumps(chunk)}\n\n" for chunk in stream_chunks(body)]
                    self.send_events([*frames, "data: [DONE]\n\n"])
                else:
                    self.send_json(status, body)

        return Handler


def tool_output(query: str, size: int = 30_000) -> str:
    """A tool's ~`size`-byte output, different for every query: log lines with paths, numbers and ids."""
    seed = hashlib.sha256(query.encode()).hexdigest()
    lines = [f"# results for {query}"]
    n = 0
    while sum(len(x) + 1 for x in lines) < size:
        digest = hashlib.sha256(f"{seed}:{n}".encode()).hexdigest()
        where = f"src/module_{digest[:3]}/file_{digest[3:6]}.py:{int(digest[6:9], 16)}"
        lines.append(f"{n:05d} INFO {where} {digest[9:41]}")
        n += 1
    lines.append(f"exit code: 0 ({n} lines)")
    return "\n".join(lines)


def held_ids(session: Session) -> list[str]:
    """Every message id a session's workspace holds, live then archived, duplicates kept so a test finds them."""
    ids = [m.id for m in session.messages]
    for info in session.store.archive_files():
        ids.extend(ids_in(session.store.read_archive(info.name)))
    return ids


SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_logs",
        "description": "Search the build logs; returns the matching lines.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


def task(i: int) -> str:
    """The user's i-th request in the long-run tests."""
    topics = ("the flaky login test", "why the build is slow", "the failing migration", "memory growth in the worker")
    return f"Task {i}: look into {topics[i % len(topics)]} and tell me what you find."
