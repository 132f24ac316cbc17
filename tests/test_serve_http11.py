"""The proxy's HTTP/1.1 client for the upstream (`Http11Transport`), against a real server on 127.0.0.1, on
asyncio's own event loop and on uvloop (which `ctxkeep serve` runs on where it is installed)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest
from tests.proxy_harness import LOOPS

from ctxkeep.serve.http11 import Http11Transport

pytestmark = pytest.mark.extra("serve")

TIMEOUT = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
Runs = Callable[[Callable[[Http11Transport], Awaitable[Any]]], Any]


@pytest.fixture(params=LOOPS)
def run(request: pytest.FixtureRequest) -> Runs:
    """Runs a call on a fresh transport on the event loop the test is parametrized with."""
    if request.param == "uvloop":
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop

    def running(call: Callable[[Http11Transport], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            transport = Http11Transport()
            try:
                return await call(transport)
            finally:
                await transport.aclose()

        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main())

    return running


class Handler(BaseHTTPRequestHandler):
    """Answers by path: /sized, /chunked, /until-close (HTTP/1.0, no length), /cut, /slow."""

    protocol_version = "HTTP/1.1"
    connections: ClassVar[set[tuple[str, int]]] = set()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        Handler.connections.add(self.client_address)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/sized":
            self._head(200, [("Content-Length", str(len(body) + 5))])
            self.wfile.write(b"echo:" + body)
        elif self.path == "/chunked":
            self._head(200, [("Transfer-Encoding", "chunked")])
            for piece in (b"data: 1\n\n", b"data: 2\n\n"):
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/until-close":
            self.close_connection = True
            self._head(200, [("Connection", "close")])
            self.wfile.write(b"all of it")
        elif self.path == "/cut":
            self.close_connection = True
            self._head(200, [("Content-Length", "1000")])
            self.wfile.write(b"only this")
        elif self.path == "/slow":
            self._head(200, [("Content-Length", "2")])
            self.wfile.flush()
            time.sleep(1.0)
            self.wfile.write(b"ok")

    def _head(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()


@contextmanager
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    Handler.connections.clear()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


async def post(transport: Http11Transport, url: str, body: bytes = b"", read: float = 5.0) -> httpx.Response:
    request = httpx.Request("POST", url, content=body, extensions={"timeout": {**TIMEOUT, "read": read}})
    answer = await transport.handle_async_request(request)
    try:
        await answer.aread()
    finally:
        await answer.aclose()
    return answer


def test_sized_answers_come_back_over_one_kept_alive_connection(run: Runs) -> None:
    with server() as url:

        async def two(transport: Http11Transport) -> list[bytes]:
            return [(await post(transport, url + "/sized", body)).content for body in (b"one", b"two" * 100_000)]

        assert run(two) == [b"echo:one", b"echo:" + b"two" * 100_000]
        assert len(Handler.connections) == 1


def test_chunked_and_close_delimited_answers_are_read_whole(run: Runs) -> None:
    with server() as url:

        async def both(transport: Http11Transport) -> list[bytes]:
            return [(await post(transport, url + path)).content for path in ("/chunked", "/until-close", "/sized")]

        assert run(both) == [b"data: 1\n\ndata: 2\n\n", b"all of it", b"echo:"]
        assert len(Handler.connections) == 2  # the closed one was not reused


def test_an_answer_cut_before_its_length_is_a_read_error(run: Runs) -> None:
    with server() as url, pytest.raises(httpx.ReadError):
        run(lambda transport: post(transport, url + "/cut"))


def test_an_upstream_silent_past_the_read_timeout_is_a_read_timeout(run: Runs) -> None:
    with server() as url, pytest.raises(httpx.ReadTimeout):
        run(lambda transport: post(transport, url + "/slow", read=0.2))


def test_nothing_listening_is_a_connect_error(run: Runs) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        run(lambda transport: post(transport, f"http://127.0.0.1:{port}/sized"))
