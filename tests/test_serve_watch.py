"""A proxy you can watch: one log line per request (never the messages), readable conversation names, and
`ctxkeep sessions` / `ctxkeep serve ls` to list them."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.proxy_harness import running_proxy
from tests.test_serve_robustness import SYSTEM, Handler, ScriptedUpstream, history, post

from ctxkeep.cli import main
from ctxkeep.serve.access import FIELDS, Exchange, JsonFormatter
from ctxkeep.serve.dialect import Turn
from ctxkeep.serve.sessions import conversation_key

SECRET = "zebra-octopus-4471"  # in every message: it must appear in no log line


def long_history(turns: int) -> list[dict[str, Any]]:
    """A conversation over the 16k window's threshold: its first request compacts."""
    out: list[dict[str, Any]] = [SYSTEM]
    for i in range(turns):
        out += [
            {"role": "user", "content": f"step {i} {SECRET} " + "detail " * 700},
            {"role": "assistant", "content": f"done {i} {SECRET}"},
        ]
    return [*out, {"role": "user", "content": f"and now {SECRET}"}]


def request_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [getattr(r, FIELDS) for r in caplog.records if r.name == "ctxkeep" and hasattr(r, FIELDS)]


def test_one_line_per_request_with_counts_and_no_content(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ctxkeep")
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        big = post(url, {"model": "m", "messages": long_history(20)}, **{"x-ctxkeep-session": "big"})
        # The name of a conversation without a header holds the first ask's first words (docs/serve.md).
        asks = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": SECRET}]
        small = post(url, {"model": "m", "messages": [SYSTEM, *asks, {"role": "user", "content": SECRET}]})
        refused = post(url, {"model": "m", "messages": [{"role": "robot", "content": SECRET}]})
        models = httpx.get(url + "/v1/models")
    assert [a.status_code for a in (big, small, refused, models)] == [200, 200, 400, 200]
    lines = request_lines(caplog)
    assert [(line["path"], line["status"]) for line in lines] == [
        ("/v1/chat/completions", 200),
        ("/v1/chat/completions", 200),
        ("/v1/chat/completions", 400),
        ("/v1/models", 200),
    ]
    compacted, plain = lines[0], lines[1]
    assert compacted["conversation"] == "big/0" and compacted["compacted"] is True
    assert compacted["tokens_before"] > 11_200 > compacted["tokens_in"] > 0
    assert compacted["tokens_out"] == 1  # the upstream's usage
    assert plain["compacted"] is False and plain["conversation"] == small.headers["x-ctxkeep-session"]
    assert all(line["added_ms"] >= 0 for line in (compacted, plain, lines[3]))
    texts = [r.getMessage() for r in caplog.records]
    assert any("big/0: " in t and "tokens in (compacted), 1 out, +" in t for t in texts), texts
    assert not [t for t in texts if SECRET in t]  # no message content, at any level
    assert not [t for t in texts if "detail detail" in t]


def test_json_lines_carry_the_same_fields() -> None:
    exchange = Exchange(method="POST", path="/v1/messages", started=time.monotonic(), status=200)
    exchange.conversation, exchange.tokens_in, exchange.tokens_out = "s/0", 1200, 30
    record = logging.LogRecord("ctxkeep", logging.INFO, __file__, 1, "%s", (exchange.text(),), None)
    setattr(record, FIELDS, {"conversation": "s/0", "tokens_in": 1200, "tokens_out": 30, "compacted": False})
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "info" and line["logger"] == "ctxkeep"
    assert line["message"] == "POST /v1/messages 200 s/0: 1,200 tokens in, 30 out"
    assert (line["conversation"], line["tokens_in"], line["tokens_out"]) == ("s/0", 1200, 30)


def test_the_command_logs_json_lines(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with ScriptedUpstream() as up:
        command = [sys.executable, "-m", "ctxkeep.cli", "serve", "--upstream", up.base_url, "--port", str(port)]
        process = subprocess.Popen(
            [*command, "--root", str(tmp_path), "--log-format", "json"], stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline and process.poll() is None, "the proxy did not start"
                    time.sleep(0.1)
            post(f"http://127.0.0.1:{port}", {"model": "m", "messages": history(0)}, **{"x-ctxkeep-session": "j"})
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=120)
    lines = [json.loads(line) for line in err.splitlines()]  # every line, the first one too
    requests = [line for line in lines if line.get("path") == "/v1/chat/completions"]
    assert len(requests) == 1, err
    assert requests[0]["conversation"] == "j/0" and requests[0]["status"] == 200
    assert "question 0" not in err
    assert lines[0]["message"].startswith(f"serving http://127.0.0.1:{port}/v1 -> the upstream; workspaces in")


def turn(first: str) -> Turn:
    return Turn(system="s", history=[{"role": "user", "content": first}], tools=None, stream=False)


def test_a_conversation_is_named_by_its_first_ask_and_a_hash(tmp_path: Path) -> None:
    name = conversation_key(None, "/chat/completions", turn("Fix the login bug in auth.py, please!"), root=tmp_path)
    assert name.startswith("fix-the-login-bug-in-auth-py-") and len(name.rsplit("-", 1)[1]) == 10
    again = conversation_key(None, "/chat/completions", turn("Fix the login bug in auth.py, please!"), root=tmp_path)
    other = conversation_key(None, "/chat/completions", turn("Fix the login bug in auth.py, please?"), root=tmp_path)
    assert again == name != other
    assert conversation_key(None, "/messages", turn("日本語だけ"), root=tmp_path).startswith("conversation-")


def test_a_folder_named_the_old_way_is_found_by_its_old_name(tmp_path: Path) -> None:
    new = conversation_key(None, "/chat/completions", turn("hello"), root=tmp_path)
    import hashlib

    import orjson

    seed = orjson.dumps(["/chat/completions", "s", {"role": "user", "content": "hello"}], option=orjson.OPT_SORT_KEYS)
    old = "c-" + hashlib.sha256(seed).hexdigest()[:32]
    (tmp_path / old).mkdir()
    assert conversation_key(None, "/chat/completions", turn("hello"), root=tmp_path) == old != new


@pytest.mark.parametrize(
    ("header", "prefix"),
    [("fix-login", None), ("My session: fix #3", "My-session-fix-3-"), (".hidden", "hidden-"), ("x" * 200, "x" * 32)],
)
def test_a_header_is_kept_or_made_a_readable_folder_name(header: str, prefix: str | None) -> None:
    name = conversation_key(header, "/chat/completions", turn("hi"))
    if prefix is None:
        assert name == header
    else:
        assert name.startswith(prefix) and len(name) <= 48 and name != header
        assert name == conversation_key(header, "/chat/completions", turn("other"))  # the header decides


def test_sessions_lists_the_conversations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        post(url, {"model": "m", "messages": long_history(20)}, **{"x-ctxkeep-session": "big"})
        time.sleep(1.1)  # the listing's order is by last use, to the second
        post(url, {"model": "m", "messages": history(0)}, **{"x-ctxkeep-session": "small"})
    assert main(["sessions", "--root", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in listed] == ["small", "big"]
    assert [c["compactions"] for c in listed] == [0, 1]
    assert all(c["branches"] == 1 and c["bytes"] > 0 for c in listed)
    assert main(["serve", "ls", "--root", str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:2] == ["conversation", "last"]
    assert [row.split()[0] for row in table[1:]] == ["small", "big"]


def test_sessions_names_a_missing_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "--root", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "--root" in err


def slow_stream(handler: Handler) -> None:
    """Twenty events a tenth of a second apart, for a client that leaves after the first."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    for i in range(20):
        delta = {"index": 0, "delta": {"content": f"p{i}"}, "finish_reason": None}
        try:
            handler.wfile.write(f"data: {json.dumps(chunk | {'choices': [delta]})}\n\n".encode())
            handler.wfile.flush()
        except OSError:
            return
        time.sleep(0.1)
    handler.close_connection = True


def test_a_client_gone_mid_stream_is_noted_in_its_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with ScriptedUpstream() as up, running_proxy(up.base_url, tmp_path) as url:
        up.plan.append(slow_stream)
        body = {"model": "m", "messages": history(0), "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as answer:
            next(answer.iter_bytes())
        deadline = time.monotonic() + 60
        while not request_lines(caplog) and time.monotonic() < deadline:
            time.sleep(0.05)
    (line,) = request_lines(caplog)
    assert line["error"] == "the client went away before the end" and line["stream"] is True
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
