"""`ctxkeep serve --store URL`: proxies that keep their conversations in one PostgreSQL database.

A conversation's workspace is closed after each request, so the next may go to any process: one conversation
alternates between two real `ctxkeep serve` processes, one of them killed (SIGKILL) while a request is in flight
and the client retrying on the other. Asserted: nothing refused, one branch, and every message of the client's
history held exactly once, live or archived.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from openai import APIConnectionError, OpenAI
from tests.proxy_harness import running_proxy
from tests.validating_server import SEARCH_TOOL, ValidatingServer, held_ids, task, tool_output

from ctxkeep import Session, to_messages
from ctxkeep.postgres.database import workspaces

pytestmark = [pytest.mark.extra("postgres"), pytest.mark.extra("serve")]

WINDOW = 16_000
SYSTEM = "You are a build engineer. Use the tools, then answer briefly."
START_SECONDS = 120  # a proxy process starts in a second or two; sized for a very busy machine


class HoldingServer(ValidatingServer):
    """The validating upstream, able to hold one request until told: a proxy can be killed while it waits."""

    def __init__(self, window: int) -> None:
        super().__init__(window)
        self.hold = False
        self.arrived = threading.Event()
        self.go_on = threading.Event()

    def answer(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        if self.hold:
            self.hold = False
            self.arrived.set()
            self.go_on.wait(timeout=START_SECONDS)
        return super().answer(raw)


def _turn(client: OpenAI, history: list[Any]) -> dict[str, Any]:
    reply = client.chat.completions.create(model="validating", messages=history, tools=[SEARCH_TOOL])
    return reply.choices[0].message.model_dump(exclude_none=True)


def _tool_results(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "role": "tool",
            "tool_call_id": c["id"],
            "content": tool_output(json.loads(c["function"]["arguments"])["query"]),
        }
        for c in reply.get("tool_calls") or []
    ]


def _held_once(url: str, name: str, history: list[Any]) -> None:
    with Session.open(name, store=url) as session:
        assert session.sync(history) == []  # nothing new: all of it is recognised
        held = held_ids(session)
    assert len(held) == len(set(held)) == len(to_messages(history))


def test_the_proxy_keeps_conversations_in_the_database(postgres_url: str, tmp_path: Path) -> None:
    key = f"in-db-{os.getpid()}-{time.monotonic_ns()}"
    history: list[Any] = [{"role": "system", "content": SYSTEM}]
    with (
        ValidatingServer(window=WINDOW) as api,
        running_proxy(api.base_url, tmp_path / "unused", store=postgres_url) as url,
        OpenAI(
            base_url=url + "/v1", api_key="sk-local", max_retries=0, default_headers={"X-Ctxkeep-Session": key}
        ) as c,
    ):
        for i in range(4):
            history.append({"role": "user", "content": task(i)})
            while True:
                reply = _turn(c, history)
                history.append(reply)
                if not reply.get("tool_calls"):
                    break
                history += _tool_results(reply)
            # Closed after the request (once its answer is sent): another process (this test) takes the workspace.
            with Session.open(f"{key}/0", store=postgres_url, lock_timeout=30):
                pass
    assert api.refused == [] and api.peak_tokens <= WINDOW
    assert not (tmp_path / "unused").exists()
    assert workspaces(postgres_url, f"{key}/") == [f"{key}/0"]
    _held_once(postgres_url, f"{key}/0", history[1:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _serve(upstream: str, store: str, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A `ctxkeep serve --store` process on a free port; yields it and its base URL; stopped afterwards."""
    port = _free_port()
    command = [sys.executable, "-m", "ctxkeep.cli", "serve", "--upstream", upstream, "--port", str(port)]
    command += ["--store", store, "--window", str(WINDOW)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    with log.open("ab") as out, subprocess.Popen(command, stdout=out, stderr=out, env=env) as proc:
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + START_SECONDS
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/v1/models", timeout=5):
                        break
                except OSError:
                    assert proc.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, "the proxy did not start"
                    time.sleep(0.1)
            yield proc, url
        finally:
            # Stopped as a user stops it (SIGTERM): the last reply, recorded when its workspace closes after the
            # answer was sent, is in the database then. (Killed, the client would bring it back next request.)
            proc.terminate()
            try:
                proc.wait(timeout=START_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()


def _client(url: str, key: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="sk-local", max_retries=0, default_headers={"X-Ctxkeep-Session": key})


def _task(i: int, history: list[Any], clients: Callable[[], OpenAI]) -> None:
    """The client's i-th task, each request to the client `clients` gives, until the model answers in words."""
    history.append({"role": "user", "content": task(i)})
    _answered(history, clients)


def _answered(history: list[Any], clients: Callable[[], OpenAI]) -> None:
    """Send `history` (then the tools' results) until the model answers in words."""
    while True:
        reply = _turn(clients(), history)
        history.append(reply)
        if not reply.get("tool_calls"):
            return
        history += _tool_results(reply)


def _killed_mid_request(api: HoldingServer, proc: subprocess.Popen[bytes], client: OpenAI, history: list[Any]) -> None:
    """Send the next request through `proc`, and kill it while the upstream holds the request."""
    api.hold = True
    failed: list[BaseException] = []

    def send() -> None:
        try:
            _turn(client, history)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    assert api.arrived.wait(START_SECONDS)
    os.kill(proc.pid, signal.SIGKILL)
    thread.join(START_SECONDS)
    api.go_on.set()
    assert failed and isinstance(failed[0], APIConnectionError)


@pytest.mark.slow
def test_one_conversation_alternates_between_two_processes_and_survives_a_kill(
    postgres_url: str, tmp_path: Path
) -> None:
    key = f"fleet-{os.getpid()}-{time.monotonic_ns()}"
    history: list[Any] = [{"role": "system", "content": SYSTEM}]
    log = tmp_path / "serve.log"
    with (
        HoldingServer(window=WINDOW) as api,
        _serve(api.base_url, postgres_url, log) as (_, b_url),
        _client(b_url, key) as b,
    ):
        for round_ in range(2):  # a process A that takes every other request; the first one is killed
            with _serve(api.base_url, postgres_url, log) as (a_proc, a_url), _client(a_url, key) as a:
                alternate = itertools.cycle((a, b)).__next__
                for i in range(3 * round_, 3 * round_ + 3):
                    _task(i, history, alternate)
                if round_ == 0:
                    _killed_mid_request(api, a_proc, a, history)
                    _task(
                        99, history, itertools.repeat(b).__next__
                    )  # the client retries on the other process, then goes on
    assert api.refused == [] and api.peak_tokens <= WINDOW, log.read_text()[-3000:]
    assert workspaces(postgres_url, f"{key}/") == [f"{key}/0"]  # every request extended the one branch
    _held_once(postgres_url, f"{key}/0", history[1:])


def test_a_store_is_a_postgresql_url_and_not_beside_a_root(tmp_path: Path) -> None:
    from ctxkeep.serve import ServeSettings

    with pytest.raises(ValueError, match="store must be a PostgreSQL URL"):
        ServeSettings(upstream="http://127.0.0.1:9/v1", root=tmp_path, store=str(tmp_path))
    command = [sys.executable, "-m", "ctxkeep.cli", "serve", "--upstream", "http://127.0.0.1:9/v1"]
    out = subprocess.run(
        [*command, "--root", str(tmp_path), "--store", "postgresql://h/db"], capture_output=True, text=True
    )
    assert out.returncode == 2 and "not both" in out.stderr


def test_sessions_lists_the_conversations_of_the_database(postgres_url: str, tmp_path: Path) -> None:
    key = f"listed-{os.getpid()}-{time.monotonic_ns()}"
    with (
        ValidatingServer(window=WINDOW) as api,
        running_proxy(api.base_url, tmp_path / "unused", store=postgres_url) as url,
        _client(url, key) as client,
    ):
        _task(0, [{"role": "system", "content": SYSTEM}], itertools.repeat(client).__next__)
    out = subprocess.run(
        [sys.executable, "-m", "ctxkeep.cli", "sessions", "--store", postgres_url, "--json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    (listed,) = [c for c in json.loads(out.stdout) if c["name"] == key]
    assert listed["branches"] == 1 and listed["bytes"] > 30_000  # the tool output's original is kept
