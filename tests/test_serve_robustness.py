"""`ctxkeep serve` when things go wrong: upstream errors, down, slow or cut off mid-stream; bad requests;
edited histories; many requests at once; a proxy that needs a token.

The upstream here is scripted (`ScriptedUpstream`): each request gets the next planned behaviour, else a
plain valid answer, and every request is recorded with its headers and body.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic import Anthropic
from openai import OpenAI
from tests.proxy_harness import running_proxy
from tests.validating_server import SEARCH_TOOL, ValidatingServer, held_ids, tool_output

from ctxkeep import Session, to_messages
from ctxkeep.cli import main
from ctxkeep.serve import ServeSettings

WINDOW = 16_000
SYSTEM = {"role": "system", "content": "You are terse."}
Behaviour = Callable[["Handler"], None]


def chat_answer(text: str = "ok") -> dict[str, Any]:
    message = {"role": "assistant", "content": text}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


class Handler(BaseHTTPRequestHandler):
    upstream: ScriptedUpstream

    def log_message(self, *args: object) -> None:
        pass

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.upstream.record(self, b"")
        self.send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]}, {"x-request-id": "r1"})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = self.upstream.record(self, raw)
        tag = first_user_text(body)
        with self.upstream.lock:
            self.upstream.active[tag] += 1
            self.upstream.peak[tag] = max(self.upstream.peak[tag], self.upstream.active[tag])
        try:
            behaviour = self.upstream.next_behaviour()
            if behaviour is None:
                self.send_json(200, chat_answer(f"ok: {tag}"))
            else:
                behaviour(self)
        finally:
            with self.upstream.lock:
                self.upstream.active[tag] -= 1


def first_user_text(body: Any) -> str:
    for msg in body.get("messages", []) if isinstance(body, dict) else []:
        if msg.get("role") == "user" and isinstance(msg.get("content"), str):
            return str(msg["content"])
    return ""


class ScriptedUpstream:
    """`with ScriptedUpstream() as up:` plan behaviours with `up.plan.append(...)`; read `up.calls`."""

    def __init__(self) -> None:
        self.plan: list[Behaviour] = []
        self.calls: list[tuple[dict[str, str], Any]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.active: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        handler = type("BoundHandler", (Handler,), {"upstream": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> ScriptedUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def record(self, handler: BaseHTTPRequestHandler, raw: bytes) -> Any:
        body = json.loads(raw) if raw else None
        with self.lock:
            self.paths.append(handler.path)
            self.calls.append(({k.lower(): v for k, v in handler.headers.items()}, body))
        return body

    def next_behaviour(self) -> Behaviour | None:
        with self.lock:
            return self.plan.pop(0) if self.plan else None


def history(n: int) -> list[dict[str, Any]]:
    """A conversation of `n` user/assistant exchanges, ending with a new user message."""
    out: list[dict[str, Any]] = [SYSTEM]
    for i in range(n):
        out += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    return [*out, {"role": "user", "content": f"question {n}"}]


def post(url: str, body: Any, path: str = "/v1/chat/completions", **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"content-type": "application/json", "authorization": "Bearer sk-test", **headers}
    return httpx.post(url + path, content=content, headers=hdrs, timeout=120)


def workspace_ids(root: Path, name: str) -> list[str]:
    with Session.open(root / name) as session:
        return held_ids(session)


def test_upstream_429_and_500_pass_through_unchanged(tmp_path: Path) -> None:
    limited = {"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit"}}
    broken = {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        up.plan.append(lambda h: h.send_json(429, limited, {"retry-after": "7", "x-ratelimit-remaining-requests": "0"}))
        up.plan.append(lambda h: h.send_json(500, broken))
        first = post(url, {"model": "m", "messages": history(1)}, **{"x-ctxkeep-session": "s"})
        assert (first.status_code, first.json()) == (429, limited)
        assert first.headers["retry-after"] == "7"
        assert first.headers["x-ratelimit-remaining-requests"] == "0"
        client = OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
        with pytest.raises(openai.InternalServerError) as raised:
            client.chat.completions.create(model="m", messages=history(1), extra_headers={"x-ctxkeep-session": "s"})
        assert raised.value.status_code == 500
        assert raised.value.body == broken["error"]
        done = client.chat.completions.create(model="m", messages=history(1), extra_headers={"x-ctxkeep-session": "s"})
        client.close()
        assert done.choices[0].message.content == "ok: question 0"
    assert len(up.calls) == 3
    assert all(h["authorization"] == "Bearer sk-test" for h, _ in up.calls)  # credentials forwarded
    assert all("x-ctxkeep-session" not in h for h, _ in up.calls)
    ids = workspace_ids(tmp_path / "s", "0")
    assert len(ids) == len(set(ids)) == 4  # the history's 3 messages once, and the recorded answer


def test_upstream_down_gives_502_json_and_keeps_the_history(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    with running_proxy(f"http://127.0.0.1:{port}/v1", tmp_path) as url:
        answer = post(url, {"model": "m", "messages": history(2)}, **{"x-ctxkeep-session": "s"})
    assert answer.status_code == 502
    assert "could not be reached" in answer.json()["error"]["message"]
    assert len(workspace_ids(tmp_path / "s", "0")) == 5


def test_slow_upstream_gives_504_json(tmp_path: Path) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path, timeout=1.0) as url:
        up.plan.append(lambda h: time.sleep(20))
        answer = post(url, {"model": "m", "messages": history(1)})
    assert answer.status_code == 504
    assert "did not answer within 1 s" in answer.json()["error"]["message"]


def die_mid_stream(handler: Handler) -> None:
    """A 200 event stream that stops after its first chunk: the connection is cut (the upstream was killed)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Content-Length", "100000")  # promised, never sent: the client sees a cut connection
    handler.end_headers()
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    delta = {"index": 0, "delta": {"role": "assistant", "content": "par"}, "finish_reason": None}
    handler.wfile.write(f"data: {json.dumps(chunk | {'choices': [delta]})}\n\n".encode())
    handler.wfile.flush()
    handler.connection.shutdown(socket.SHUT_RDWR)
    handler.close_connection = True


def test_upstream_killed_mid_stream(tmp_path: Path) -> None:
    """The client gets the first chunk, then an error its SDK raises; the partial reply is not recorded,
    and the retry goes on in the same workspace."""
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        up.plan.append(die_mid_stream)
        client = OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
        kw: dict[str, Any] = {"model": "m", "messages": history(1), "extra_headers": {"x-ctxkeep-session": "s"}}
        stream = client.chat.completions.create(stream=True, **kw)
        got = []
        with pytest.raises(openai.APIError, match="broke off the stream"):
            for chunk in stream:
                got.append(chunk.choices[0].delta.content)
        assert got == ["par"]
        retry = client.chat.completions.with_raw_response.create(**kw)
        assert retry.headers["x-ctxkeep-session"] == "s/0"
        assert retry.parse().choices[0].message.content == "ok: question 0"
        client.close()
    assert len(workspace_ids(tmp_path / "s", "0")) == 4  # the history's 3 messages and the whole answer only


@pytest.mark.parametrize(
    ("body", "headers", "says"),
    [
        (b"{not json", {}, "not valid JSON"),
        (b"[1, 2]", {}, "must be a JSON object"),
        ({"model": "m"}, {}, "'messages' must be a non-empty array"),
        ({"model": "m", "messages": ["hi"]}, {}, "messages[0] must be an object"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, {}, "messages[0].role must be one of"),
        (
            {"model": "m", "messages": [*history(0), {"role": "function", "name": "f", "content": "x"}]},
            {},
            "messages[2].role must be one of assistant, developer, system, tool, user; got 'function' (send a",
        ),
        ({"model": "m", "messages": history(0), "stream": "yes"}, {}, "'stream' must be true or false"),
        ({"model": "m", "messages": history(0), "tools": {"a": 1}}, {}, "'tools' must be an array"),
        ({"model": "m", "messages": history(0)}, {"x-ctxkeep-session": "../etc"}, "x-ctxkeep-session header must"),
        (
            {"model": "m", "messages": [{"role": "tool", "tool_call_id": "c1", "content": "orphan"}]},
            {},
            "the messages cannot be taken",
        ),
    ],
)
def test_malformed_request_gets_400_and_the_upstream_is_not_called(
    tmp_path: Path, body: Any, headers: dict[str, str], says: str
) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path / "root") as url:
        answer = post(url, body, **headers)
    assert answer.status_code == 400
    assert says in answer.json()["error"]["message"]
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert up.calls == []
    assert list((tmp_path / "root").iterdir()) == []  # a refused request leaves no folder
    assert [p for p in (tmp_path / "root").rglob("*") if p.is_file()] == []  # no workspace left behind


def test_anthropic_route_gives_errors_in_anthropic_shape(tmp_path: Path) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        client = Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        with pytest.raises(
            anthropic.BadRequestError, match=r"messages\[0\]\.role must be one of assistant, user"
        ) as raised:
            client.messages.create(model="m", max_tokens=5, messages=[{"role": "system", "content": "x"}])  # type: ignore[typeddict-item]
        client.close()
    assert raised.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages[0].role must be one of assistant, user; got 'system'",
        },
    }
    assert up.calls == []


def test_a_client_that_resends_an_edited_history(tmp_path: Path) -> None:
    """An earlier message edited: the upstream still gets a valid request, of the edited history; the
    original conversation stays whole in its workspace and the edited one gets a branch of its own."""
    root = tmp_path / "root"
    with ValidatingServer(window=WINDOW) as api, running_proxy(api.base_url, root) as url:
        client = OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
        messages: list[Any] = [SYSTEM, {"role": "user", "content": "Task: look at the flaky login test."}]
        for _ in range(5):
            reply = client.chat.completions.create(model="v", messages=messages, tools=[SEARCH_TOOL]).choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            for call in reply.tool_calls or []:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_output(call.id)})
            if not reply.tool_calls:
                messages.append({"role": "user", "content": "And the build time?"})
        at = [i for i, m in enumerate(messages) if m["role"] == "user"][1]  # the second request, long answered
        assert at < len(messages) - 3
        edited = [*messages[:at], {**messages[at], "content": "And the test time?"}, *messages[at + 1 :]]
        raw = client.chat.completions.with_raw_response.create(model="v", messages=edited, tools=[SEARCH_TOOL])
        key, branch = raw.headers["x-ctxkeep-session"].split("/")
        assert branch == "1"
        edited.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        edited.append({"role": "user", "content": "Thanks."})
        again = client.chat.completions.with_raw_response.create(model="v", messages=edited, tools=[SEARCH_TOOL])
        assert again.headers["x-ctxkeep-session"] == f"{key}/1"  # the edited branch goes on where it is
        edited.append(again.parse().choices[0].message.model_dump(exclude_none=True))
        original = client.chat.completions.with_raw_response.create(model="v", messages=messages, tools=[SEARCH_TOOL])
        assert original.headers["x-ctxkeep-session"] == f"{key}/0"  # and so does the original
        messages.append(original.parse().choices[0].message.model_dump(exclude_none=True))
        client.close()
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    for branch_name, sent in (("0", messages), ("1", edited)):
        with Session.open(root / key / branch_name) as session:
            assert session.sync(sent[1:]) == []  # all it was sent, and the answers, recognised
            held = held_ids(session)
        assert len(held) == len(set(held)) == len(to_messages(sent[1:]))


def test_concurrent_requests_on_one_session_are_serialised_and_sessions_run_in_parallel(tmp_path: Path) -> None:
    barrier = threading.Barrier(2, timeout=60)

    def meet(handler: Handler) -> None:
        barrier.wait()  # two sessions' requests must be at the upstream at once, or this times out
        time.sleep(0.2)
        handler.send_json(200, chat_answer())

    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        up.plan += [meet, meet, *[lambda h: (time.sleep(0.2), h.send_json(200, chat_answer()))] * 4]

        async def many() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=120) as client:

                async def one(session: str, text: str) -> httpx.Response:
                    body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": text}]}
                    return await client.post("/v1/chat/completions", json=body, headers={"x-ctxkeep-session": session})

                return await asyncio.gather(*(one(f"s{i % 2}", f"from s{i % 2}") for i in range(6)))

        answers = asyncio.run(many())
    assert [a.status_code for a in answers] == [200] * 6
    assert up.peak["from s0"] == up.peak["from s1"] == 1  # one request at a time per session


def test_a_hundred_concurrent_requests(tmp_path: Path) -> None:
    """100 requests at once over 20 conversations: every one answered, every upstream request valid."""
    with ValidatingServer(window=WINDOW) as api, running_proxy(api.base_url, tmp_path) as url:
        api._server.socket.listen(128)  # http.server queues 5 connections; a real API server takes 100 at once

        async def many() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=100)
            async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

                async def one(i: int) -> httpx.Response:
                    body = {"model": "v", "messages": [SYSTEM, {"role": "user", "content": f"conversation {i % 20}"}]}
                    return await client.post("/v1/chat/completions", json=body)

                return await asyncio.gather(*(one(i) for i in range(100)))

        answers = asyncio.run(many())
    assert [a.status_code for a in answers] == [200] * 100, [a.text for a in answers if a.status_code != 200][:3]
    assert api.refused == []
    assert len(api.records) == 100
    # Five identical requests per conversation (retries, as it were): each one workspace, no branch.
    sessions = {a.headers["x-ctxkeep-session"] for a in answers}
    assert len(sessions) == 20
    assert all(s.endswith("/0") for s in sessions)
    for name in sessions:
        assert len(workspace_ids(tmp_path, name)) == 2  # the user message, and one reply (the last)


def test_models_and_other_paths_pass_through(tmp_path: Path) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        with OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
            models = client.models.with_raw_response.list()
        health = httpx.get(url + "/healthz")
        post(url, {"model": "m", "messages": history(0)}, path="/v1/chat/completions?beta=true")
    assert [m.id for m in models.parse().data] == ["scripted"]
    assert models.headers["x-request-id"] == "r1"
    assert health.json() == {"status": "ok"}
    assert up.calls[0][0]["authorization"] == "Bearer sk-test"
    assert up.paths == ["/v1/models", "/v1/chat/completions?beta=true"]  # the query string goes along


def test_a_proxy_with_a_token_refuses_clients_without_it(tmp_path: Path) -> None:
    token = "t0k3n-" + "x" * 20
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path, auth_token=token) as url:
        refused = post(url, {"model": "m", "messages": history(0)})
        wrong = post(url, {"model": "m", "messages": history(0)}, **{"x-ctxkeep-token": "nope"})
        models = httpx.get(url + "/v1/models")
        ok = post(url, {"model": "m", "messages": history(0)}, **{"x-ctxkeep-token": token})
    assert (refused.status_code, wrong.status_code, models.status_code, ok.status_code) == (401, 401, 401, 200)
    assert (
        "X-Ctxkeep-Token" in refused.json()["error"]["message"]
        or "x-ctxkeep-token" in refused.json()["error"]["message"]
    )
    assert len(up.calls) == 1
    assert "x-ctxkeep-token" not in up.calls[0][0]  # the proxy's token is not the upstream's business


def test_serve_binds_elsewhere_only_with_a_flag_and_a_token(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = ["serve", "--upstream", "http://127.0.0.1:9/v1", "--root", str(tmp_path)]
    assert main([*base, "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert main([*base, "--host", "0.0.0.0", "--allow-remote"]) == 2
    assert "--auth-token" in capsys.readouterr().err
    assert main([*base, "--host", "0.0.0.0", "--allow-remote", "--auth-token", "short"]) == 2
    assert "at least 16 characters" in capsys.readouterr().err


def test_settings_refuse_a_bad_upstream_without_echoing_it() -> None:
    with pytest.raises(ValueError, match="http\\(s\\) base URL") as raised:
        ServeSettings(upstream="user:secret@example.com", root=Path("x"))
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize("token", ["tökén-" + "x" * 20, "tab\t" + "x" * 20, "x" * 20 + "\u2028"])
def test_an_auth_token_that_no_header_can_carry_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        ServeSettings(upstream="http://127.0.0.1:9/v1", root=Path("x"), auth_token=token)


def test_the_reply_is_recorded_and_recognised_after_a_restart(tmp_path: Path) -> None:
    """The reply a proxy gave is in the workspace once it stops; a new proxy recognises it when the client
    sends it back."""
    first = history(1)
    with ScriptedUpstream() as up:
        with running_proxy(up.base_url, tmp_path) as url:
            answer = post(url, {"model": "m", "messages": first}, **{"x-ctxkeep-session": "s"}).json()
        with Session.open(tmp_path / "s" / "0") as session:
            assert session.messages[-1].text == "ok: question 0"  # recorded when the proxy stopped
        with running_proxy(up.base_url, tmp_path) as url:
            went_on = [*first, answer["choices"][0]["message"], {"role": "user", "content": "next"}]
            later = post(url, {"model": "m", "messages": went_on}, **{"x-ctxkeep-session": "s"})
            assert later.headers["x-ctxkeep-session"] == "s/0"
    ids = workspace_ids(tmp_path / "s", "0")
    assert len(ids) == len(set(ids)) == 6  # 3 sent, the kept reply, "next", and the last reply


def test_the_command_serves_until_stopped(tmp_path: Path) -> None:
    """`ctxkeep serve` as a process: it answers, keeps its workspaces private, and stops cleanly on SIGTERM."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = tmp_path / "root"
    with ScriptedUpstream() as up:
        command = [sys.executable, "-m", "ctxkeep.cli", "serve", "--upstream", up.base_url, "--port", str(port)]
        process = subprocess.Popen([*command, "--root", str(root)], stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120  # generous: a loaded machine starts Python slowly
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline and process.poll() is None, "the proxy did not start"
                    time.sleep(0.1)
            answer = post(f"http://127.0.0.1:{port}", {"model": "m", "messages": history(0)})
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=120)
    assert answer.json()["choices"][0]["message"]["content"] == "ok: question 0"
    # uvicorn shuts down gracefully, then ends by the signal it caught, as an unhandled SIGTERM would.
    assert process.returncode in (0, -signal.SIGTERM), err.decode()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    state = next(p for p in root.rglob("state.json"))
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    with Session.open(state.parent) as session:  # the pending reply was added at the graceful shutdown
        assert [m.text for m in session.messages] == ["question 0", "ok: question 0"]


def test_a_stream_event_the_proxy_cannot_read_is_relayed_all_the_same(tmp_path: Path) -> None:
    events = [
        b'data: {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": ["not a call"]}}]}\n\n',
        b'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "fine"}, "finish_reason": "stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]

    def odd_stream(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        for event in events:
            handler.wfile.write(event)
        handler.close_connection = True

    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        up.plan.append(odd_stream)
        answer = post(url, {"model": "m", "messages": history(0), "stream": True}, **{"x-ctxkeep-session": "s"})
    assert answer.status_code == 200
    assert answer.content == b"".join(events)  # byte for byte
    assert len(workspace_ids(tmp_path / "s", "0")) == 1  # the question; no reply recorded from what it could not read


def test_a_stream_is_passed_on_as_it_arrives(tmp_path: Path) -> None:
    """The upstream sends its second event only once the client has the first: a proxy that buffered the
    stream would wait forever (here, until the upstream gives up and the test fails)."""
    first_seen = threading.Event()
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return f"data: {json.dumps(chunk | {'choices': [choice]})}\n\n".encode()

    def waits_for_the_client(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        handler.wfile.write(event({"role": "assistant", "content": "first"}))
        handler.wfile.flush()
        got = first_seen.wait(timeout=120)
        handler.wfile.write(event({"content": " then more" if got else " (too late)"}, "stop") + b"data: [DONE]\n\n")
        handler.close_connection = True

    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        up.plan.append(waits_for_the_client)
        with OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
            pieces = []
            for part in client.chat.completions.create(model="m", messages=history(0), stream=True):
                pieces.append(part.choices[0].delta.content)
                first_seen.set()
    assert "".join(p or "" for p in pieces) == "first then more"


def test_an_upstream_that_counts_more_tokens_gets_a_smaller_context(tmp_path: Path) -> None:
    """The upstream reports twice what ctxkeep counts (another tokenizer): once a prompt of some size shows
    it, the conversation's window shrinks so the upstream's own count stays inside its window."""
    from ctxkeep.tokens.encodings import TiktokenTokenizer

    tokenizer = TiktokenTokenizer("o200k_base")
    reported: list[int] = []

    def counts_double(handler: Handler, body: Any) -> None:
        texts = [m["content"] for m in body["messages"] if isinstance(m.get("content"), str) and m["content"]]
        tokens = 2 * sum(tokenizer.count_texts(texts))
        reported.append(tokens)
        answer = chat_answer("noted") | {"usage": {"prompt_tokens": tokens, "completion_tokens": 1}}
        handler.send_json(200, answer)

    messages: list[Any] = [SYSTEM]
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path, window=8_000) as url:
        for i in range(14):
            up.plan.append(lambda h: counts_double(h, up.calls[-1][1]))
            log_lines = "\n".join(f"{i:02d}-{n:04d} WARN cache miss for key {n * 7919 % 10007}" for n in range(90))
            messages.append({"role": "user", "content": f"Step {i}: what does this log say?\n{log_lines}"})
            answer = post(url, {"model": "m", "messages": messages}, **{"x-ctxkeep-session": "s"})
            assert answer.status_code == 200
            messages.append(answer.json()["choices"][0]["message"])
    whole = 2 * sum(tokenizer.count_texts([m["content"] for m in messages if m.get("content")]))
    assert whole > 3 * 8_000  # the whole history, by the upstream's count: compacted many times over
    # By ctxkeep's count the context may reach 0.7 x 8,000 before a compaction, twice that by the upstream's:
    # only the learned window keeps the upstream's own count inside its window.
    assert max(reported) <= 8_000


def test_many_conversations_past_the_open_limit_under_concurrency(tmp_path: Path) -> None:
    """More conversations than `max_open`, all at once: idle workspaces are closed while others are in use.

    Each conversation is an agent sending its turns one after the other (its history growing by the reply);
    every request is answered, no conversation branches (a closed workspace is found again, its last reply
    added), one request at a time reaches the upstream per conversation, and every workspace ends whole."""
    conversations, turns = 40, 4
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path, max_open=3) as url:
        up._server.socket.listen(128)

        async def agent(client: httpx.AsyncClient, i: int) -> list[httpx.Response]:
            messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": f"conversation {i}"}]
            answers = []
            for turn in range(turns):
                answer = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
                answers.append(answer)
                if answer.status_code != 200:
                    break
                reply = answer.json()["choices"][0]["message"]
                messages += [
                    {"role": "assistant", "content": reply["content"]},
                    {"role": "user", "content": f"t{turn}"},
                ]
            return answers

        async def everyone() -> list[list[httpx.Response]]:
            limits = httpx.Limits(max_connections=conversations)
            async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
                return await asyncio.gather(*(agent(client, i) for i in range(conversations)))

        answers = [a for agent_answers in asyncio.run(everyone()) for a in agent_answers]
    failed = [(a.status_code, a.text[:200]) for a in answers if a.status_code != 200]
    assert failed == [], failed[:3]
    assert len(answers) == conversations * turns
    sessions = {a.headers["x-ctxkeep-session"] for a in answers}
    assert len(sessions) == conversations and all(s.endswith("/0") for s in sessions)
    assert max(up.peak.values()) == 1
    for name in sessions:
        # the first ask, then each reply and the next ask, and the last reply (added when the proxy closed)
        assert len(workspace_ids(tmp_path, name)) == 2 * turns


def raw_get(url: str, target: str) -> tuple[int, Any]:
    """GET `target` exactly as written (httpx and the SDKs would resolve its dot segments first)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body.startswith(b"{") else body


@pytest.mark.parametrize(
    "target", ["/v1/../../admin", "/v1/%2e%2e/%2E%2E/admin", "/v1/models/../../admin", "/v1/..%2F..%2Fadmin"]
)
def test_a_passed_through_path_never_leaves_the_upstreams_base(tmp_path: Path, target: str) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        status, body = raw_get(url, target)
    assert status == 400
    assert "leaves the API's /v1" in body["error"]["message"]
    assert up.paths == []


def test_a_passed_through_path_is_normalised_under_the_base(tmp_path: Path) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        status, _ = raw_get(url, "/v1/files/./x/../../models?limit=2")
    assert status == 200
    assert up.paths == ["/v1/models?limit=2"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/files"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_gets_413_in_the_apis_shape(tmp_path: Path, path: str, chunked: bool) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 20_000}]}).encode()
    content: Any = iter([body[:5000], body[5000:]]) if chunked else body
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path, max_body=8192) as url:
        answer = httpx.post(url + path, content=content, headers={"content-type": "application/json"}, timeout=60)
        small = post(url, {"model": "m", "messages": history(0)})
    assert answer.status_code == 413
    error = answer.json()["error"]
    assert "over 8,192 bytes" in error["message"] and "--max-body" in error["message"]
    assert small.status_code == 200
    assert len(up.calls) == 1  # only the small one
    assert [p.name for p in tmp_path.iterdir()] == [small.headers["x-ctxkeep-session"].split("/")[0]]


def test_a_client_gone_before_its_body_ends_is_a_log_line_not_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ctxkeep")
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(head + b"Content-Length: 100000\r\n\r\n" + b'{"model": "m", "messages": [')
        deadline = time.monotonic() + 60
        while not any("went away" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.05)
        after = post(url, {"model": "m", "messages": history(0)})
    lines = [r.getMessage() for r in caplog.records]
    assert "POST /v1/chat/completions - (the client went away before the end of its request)" in lines
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    assert after.status_code == 200
    assert len(up.calls) == 1  # only the whole request went upstream


def test_a_conversation_under_a_root_path_is_still_one(tmp_path: Path) -> None:
    """Behind a reverse proxy's prefix (uvicorn's root path) the conversation routes are found by Starlette."""
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path, root_path="/prefix") as url:
        answers = [post(url, {"model": "m", "messages": history(n)}, **{"x-ctxkeep-session": "s"}) for n in (0, 1)]
    assert [a.status_code for a in answers] == [200, 200]
    assert [a.headers["x-ctxkeep-session"] for a in answers] == ["s/0", "s/0"]
    # the two asks, the reply between them, and the last reply (added when the proxy closed)
    assert len(workspace_ids(tmp_path, "s/0")) == 4


def cut_mid_event(handler: Handler) -> None:
    """One whole event, then half of the next, then the connection is cut."""
    die_mid_stream_after(handler, b'data: {"id": "c", "object": "chat.completion.chunk", "choi')


def die_mid_stream_after(handler: Handler, partial: bytes) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Content-Length", "100000")  # promised, never sent: the client sees a cut connection
    handler.end_headers()
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    delta = {"index": 0, "delta": {"role": "assistant", "content": "par"}, "finish_reason": None}
    handler.wfile.write(f"data: {json.dumps(chunk | {'choices': [delta]})}\n\n".encode() + partial)
    handler.wfile.flush()
    handler.connection.shutdown(socket.SHUT_RDWR)
    handler.close_connection = True


def closed_before_the_end(handler: Handler) -> None:
    """A stream delimited by the connection's close, closed cleanly before ``[DONE]``."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    delta = {"index": 0, "delta": {"role": "assistant", "content": "par"}, "finish_reason": None}
    handler.wfile.write(f"data: {json.dumps(chunk | {'choices': [delta]})}\n\n".encode())
    handler.close_connection = True


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [(cut_mid_event, "broke off the stream"), (closed_before_the_end, "stopped before its end")],
    ids=["cut-mid-event", "closed-before-done"],
)
def test_a_broken_stream_ends_with_an_error_event_the_sdk_reads(
    tmp_path: Path, behaviour: Behaviour, says: str
) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        up.plan.append(behaviour)
        with OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
            got = []
            with pytest.raises(openai.APIError, match=says):
                for chunk in client.chat.completions.create(
                    model="m", messages=history(0), stream=True, extra_headers={"x-ctxkeep-session": "s"}
                ):
                    got.append(chunk.choices[0].delta.content)
    assert got == ["par"]
    assert len(workspace_ids(tmp_path / "s", "0")) == 1  # the question; nothing recorded of a cut reply


def anthropic_cut_mid_event(handler: Handler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    start = {
        "type": "message_start",
        "message": {
            "id": "m1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "m",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 0},
        },
    }
    handler.wfile.write(f"event: message_start\ndata: {json.dumps(start)}\n\n".encode())
    handler.wfile.write(b'event: content_block_start\ndata: {"type": "content_block_st')
    handler.wfile.flush()
    handler.connection.shutdown(socket.SHUT_RDWR)
    handler.close_connection = True


def test_a_broken_anthropic_stream_ends_with_an_error_event_the_sdk_reads(tmp_path: Path) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        up.plan.append(anthropic_cut_mid_event)
        with (
            Anthropic(base_url=url, api_key="sk-test", max_retries=0) as client,
            pytest.raises(anthropic.APIStatusError, match="broke off the stream"),
        ):
            for _ in client.messages.create(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}], stream=True
            ):
                pass


@pytest.mark.parametrize(("path", "shape"), [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")])
def test_an_unexpected_error_is_a_json_500_in_the_routes_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, shape: str
) -> None:
    async def broken(*args: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr("ctxkeep.serve.sessions.Sessions.step", broken)
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        answer = post(url, body, path=path)
        monkeypatch.undo()
        after = post(url, body, path=path, **{"x-ctxkeep-session": "after"})  # the proxy goes on
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert "ctxkeep serve failed on this request (RuntimeError)" in error["message"]
    assert (answer.json().get("type") == "error") == (shape == "anthropic")
    assert after.status_code == 200
    assert len(up.calls) == 1  # the failed request never reached the upstream


def test_a_lone_surrogate_a_client_keeps_is_replaced_on_every_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A message holding a lone surrogate escape is accepted with U+FFFD in its place, turn after turn, and
    noted once for the conversation. The body is written as Node's JSON.stringify (the openai Node SDK)
    writes it, ``"\\ud800"``; the Python SDK cannot send one (its encoder raises first)."""
    caplog.set_level("WARNING", logger="ctxkeep")
    messages: list[Any] = [SYSTEM, {"role": "user", "content": "broken \ud800 text"}]
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        for turn in range(3):
            answer = post(url, {"model": "m", "messages": messages}, **{"x-ctxkeep-session": "s"})
            assert answer.status_code == 200, answer.text
            reply = openai.types.chat.ChatCompletion.model_validate(answer.json())  # as the SDK reads it
            messages += [
                reply.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": f"next {turn}"},
            ]
        sent = [body["messages"][1]["content"] for _, body in up.calls]
    assert sent == ["broken \ufffd text"] * 3  # forwarded, cleaned, on every turn
    with Session.open(tmp_path / "s" / "0") as session:
        assert [m.text for m in session.messages[:2]] == ["broken \ufffd text", "ok: broken \ufffd text"]
        assert len(session.messages) == 6  # one conversation: the cleaned message is recognised each turn
    noted = [r for r in caplog.records if "surrogates replaced" in r.getMessage()]
    assert len(noted) == 1


def test_a_body_with_a_surrogate_escape_and_another_error_is_still_refused(tmp_path: Path) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        nan = post(url, b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}], "x": NaN}')
        cut = post(url, b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}')
    assert (nan.status_code, cut.status_code) == (400, 400)
    assert "not valid JSON" in nan.json()["error"]["message"]
    assert up.calls == []


def _sse(name: str | None, data: Any) -> bytes:
    return (f"event: {name}\n" if name else "").encode() + b"data: " + json.dumps(data).encode() + b"\n\n"


def _answers_with_cache_usage(route: str, stream: bool) -> Behaviour:
    """An answer whose usage says 1,000 prompt tokens, 800 of them served by the upstream's cache."""
    openai_usage = {"prompt_tokens": 1_000, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 800}}
    anthropic_usage = {
        "input_tokens": 100,
        "cache_read_input_tokens": 800,
        "cache_creation_input_tokens": 100,
        "output_tokens": 1,
    }
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn"}

    def answer(handler: Handler) -> None:
        if not stream:
            if route == "openai":
                handler.send_json(200, chat_answer() | {"usage": openai_usage})
            else:
                body = message | {"content": [{"type": "text", "text": "ok"}], "usage": anthropic_usage}
                handler.send_json(200, body)
            return
        if route == "openai":
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
            delta = {"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            frames = [
                _sse(None, chunk | {"choices": [delta]}),
                _sse(None, chunk | {"choices": [], "usage": openai_usage}),
            ]
            frames.append(b"data: [DONE]\n\n")
        else:
            frames = [
                _sse(
                    "message_start",
                    {"type": "message_start", "message": message | {"content": [], "usage": anthropic_usage}},
                ),
                _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                ),
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
                ),
                _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
                _sse(
                    "message_delta",
                    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
                ),
                _sse("message_stop", {"type": "message_stop"}),
            ]
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        handler.wfile.write(b"".join(frames))
        handler.close_connection = True

    return answer


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_the_upstreams_cached_tokens_are_noted_for_each_step(tmp_path: Path, route: str, stream: bool) -> None:
    """Each step takes the cache's share of its request from the upstream's usage (OpenAI's
    ``prompt_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens``), not from the prefix kept:
    the first reply's when the next request comes, the last one's when the workspace is closed."""
    from ctxkeep.folder import LocalFolder
    from ctxkeep.workspace.view import read

    path = "/v1/chat/completions" if route == "openai" else "/v1/messages"
    reply: dict[str, Any] = (
        {"role": "assistant", "content": "ok"}
        if route == "openai"
        else {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
    )
    asks = [{"role": "user", "content": f"question {i}: " + "words " * 300} for i in range(2)]
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path / "root") as url:
        for messages in ([asks[0]], [asks[0], reply, asks[1]]):
            up.plan.append(_answers_with_cache_usage(route, stream))
            body: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": messages, "stream": stream}
            answer = post(url, body, path, **{"x-ctxkeep-session": "usage"})
            assert answer.status_code == 200, answer.text
    (state,) = (tmp_path / "root").rglob("state.json")
    view = read(LocalFolder(state.parent), name="usage")
    assert len(view.steps) == 2 and view.billed == 2
    assert list(view.cached) == [round(n * 800 / 1_000) for n in view.steps]
