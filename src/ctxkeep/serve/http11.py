"""`Http11Transport`: the proxy's own HTTP/1.1 client for the upstream, an httpx transport on asyncio and
httptools (the C parser uvicorn already reads requests with).

httpx's default transport goes through httpcore's pool, h11 and anyio: under load that was a quarter
of the proxy's time, more than ctxkeep's own work on a request. A proxy needs little of it: one upstream,
HTTP/1.1, kept-alive connections, a body sent whole and an answer read as it comes. What is kept:

    open     a kept-alive idle connection, else a new one (TLS for https), within the connect timeout
    send     the head and the body in one write (`writelines`)
    read     the answer's head, then its body as it arrives (chunked, sized, or until the close), each
             piece within the read timeout; reading pauses while 1 MiB waits unread
    close    a connection whose answer was read whole and may be kept goes back to the pool; any other
             is closed

Failures are httpx's exceptions (`ConnectError`, `ConnectTimeout`, `ReadTimeout`, `ReadError`,
`RemoteProtocolError`), so callers handle them as they would httpx's own transport's.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, cast

import httptools
import httpx

_PAUSE_AT = 1 << 20  # bytes of answer waiting unread before the socket is no longer read


class _Connection(asyncio.Protocol):
    """One connection to the upstream, one request at a time; the parser's callbacks fill the answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False  # the connection is gone (or being closed)
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False  # the status line and headers are in
        self.keep = False  # the upstream keeps the connection open after this answer
        self.done = False  # the answer is in whole
        self.error: Exception | None = None
        self.chunks: deque[bytes] = deque()
        self.waiting = 0  # bytes in `chunks`
        self.sized = False  # a Content-Length or chunked answer: its end is known, a close before it is a cut
        self._wake: asyncio.Future[None] | None = None
        self._paused = False

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports (uvicorn runs on uvloop when it is installed) are not
        # subclasses of asyncio.Transport, though they do all it does.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"the upstream's answer is not HTTP/1.1 ({exc})"))
        self._notify()

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself: connection_lost says what that means

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.done and self.error is None:
            if self.head_done and not self.sized:
                self.done = True  # an answer without a length ends with its connection
            else:
                self.error = httpx.ReadError("the upstream closed the connection before the end of its answer")
        self._notify()

    def pause_writing(self) -> None:
        pass  # the body is handed to the transport whole: its buffer holds it

    def resume_writing(self) -> None:
        pass

    # --- httptools callbacks ---

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        lower = name.lower()
        if lower == b"content-length" or (lower == b"transfer-encoding" and b"chunked" in value.lower()):
            self.sized = True

    def on_headers_complete(self) -> None:
        self.head_done = True
        self.keep = self.parser.should_keep_alive()  # asked now: the parser forgets it once the answer ends

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.waiting += len(body)
        if self.waiting > _PAUSE_AT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        self.done = True

    # --- used by the transport and the answer's stream ---

    def _fail(self, error: Exception) -> None:
        self.error = self.error or error
        self.close()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until the parser has more (or the connection ended); `ReadTimeout` past `timeout` seconds."""
        self._wake = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self._wake, timeout)
        except TimeoutError:
            raise httpx.ReadTimeout(f"the upstream sent nothing for {timeout:g} s") from None
        finally:
            self._wake = None

    def take(self) -> bytes:
        """The body's bytes received so far (reading resumes once they are taken)."""
        data = b"".join(self.chunks)
        self.chunks.clear()
        self.waiting = 0
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        """Whether the connection can carry another request: its answer read whole, kept alive, still open."""
        return self.done and self.error is None and not self.closed and self.keep

    def close(self) -> None:
        """Close the connection (once)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Body(httpx.AsyncByteStream):
    """The answer's body as it arrives; closing it returns the connection to the pool or closes it."""

    def __init__(self, connection: _Connection, pool: list[_Connection], timeout: float | None) -> None:
        self._connection = connection
        self._pool = pool
        self._timeout = timeout
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        while True:
            if connection.chunks:
                yield connection.take()
                continue
            if connection.done:
                return
            if connection.error is not None:
                raise connection.error
            await connection.wait(self._timeout)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._connection.reusable() and not self._connection.chunks:
            self._connection._reset()
            self._pool.append(self._connection)
        else:
            self._connection.close()


class Http11Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 to the upstream over kept-alive connections (see the module's docstring); at most
    `keep` idle connections are kept per host."""

    def __init__(self, *, keep: int = 64) -> None:
        self._keep = keep
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._tls: ssl.SSLContext | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` and return its answer as soon as its head is in (the body is read as it is iterated)."""
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        url = request.url
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        idle = self._idle.setdefault(key, [])
        connection = await self._connection(idle, key, timeouts.get("connect"))
        head = [request.method.encode(), b" ", url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"\r\n")
        body = await request.aread()
        assert connection.transport is not None
        # One call: uvloop sends both in one writev, without copying the body behind the head (a megabyte at a
        # long history); asyncio's own loop joins them, as this did before.
        connection.transport.writelines((b"".join(head), body))
        read = timeouts.get("read")
        try:
            while not connection.head_done:
                if connection.error is not None:
                    raise connection.error
                await connection.wait(read)
        except BaseException:
            connection.close()
            raise
        stream = _Body(connection, idle if len(idle) < self._keep else [], read)
        return httpx.Response(
            connection.parser.get_status_code(),
            headers=connection.headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def _connection(
        self, idle: list[_Connection], key: tuple[str, str, int], timeout: float | None
    ) -> _Connection:
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        scheme, host, port = key
        if scheme == "https" and self._tls is None:
            self._tls = ssl.create_default_context()
        tls = self._tls if scheme == "https" else None
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(_Connection, host, port, ssl=tls, server_hostname=host if tls else None),
                timeout,
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to the upstream within {timeout:g} s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"the upstream could not be reached: {exc.strerror or exc}") from None
        return connection

    async def aclose(self) -> None:
        """Close the idle connections."""
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
