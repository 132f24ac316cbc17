"""The proxy as an ASGI application: routes, the request's path through ctxkeep, and its errors.

client ──► POST /v1/chat/completions | /v1/messages                       plain ASGI (`Proxy.converse`)
             parse ─► conversation's turn (lock) ─► sync + prepare ─► upstream ─► relay ─► record reply
           GET /v1/models and every other /v1 path: passed through unchanged   ┐ Starlette (and the
             (never above the upstream's /v1)                                  │ lifespan, the 404s)
           GET /healthz                                                        ┘

A conversation's request is read from its ASGI scope and answered with one response start and its body:
no framework request object, middleware or router runs on it (with them and the parsing trimmed, the
event loop's CPU a request at 100,000 tokens went from 1.0 to 0.75 ms; docs/serve.md, Numbers).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import quote

import anyio
import httpx
import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ctxkeep.errors import CtxkeepError, WorkspaceLockedError
from ctxkeep.step import Step
from ctxkeep.summarize import Summarizer

from .access import Exchange
from .chat import ChatCompletions
from .dialect import BadRequest, Dialect, Reassembler, Reply
from .forward import Upstream, UpstreamTimeout, UpstreamUnreachable, returned, under_base
from .known import KnownBodies
from .messages_api import AnthropicMessages
from .sessions import HEADER, Lease, Sessions
from .settings import ServeSettings
from .sse import Event, EventReader

log = logging.getLogger("ctxkeep")

TOKEN_HEADER = "x-ctxkeep-token"
_HEADER = HEADER.encode()
_TOKEN_HEADER = TOKEN_HEADER.encode()
_CHAT = ChatCompletions()
_MESSAGES = AnthropicMessages()


def create_app(
    settings: ServeSettings,
    *,
    summarizer: Callable[[], Summarizer | None] = lambda: None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ASGIApp:
    """The proxy for `settings`, an ASGI application. `summarizer` makes each workspace's summarizer (None:
    the extractive one); `transport` replaces the network under the upstream client (for tests)."""
    if settings.store is None:
        settings.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    proxy = Proxy(settings, Sessions(settings, summarizer), Upstream(settings, transport))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await proxy.close()

    conversations = {
        "/v1/chat/completions": _Conversation(proxy, _CHAT, "/chat/completions"),
        "/v1/messages": _Conversation(proxy, _MESSAGES, "/messages"),
    }
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        # Routed by Starlette too, for what the front leaves to it (a scope with a root path).
        *(Route(path, route, methods=["POST"]) for path, route in conversations.items()),
        Route("/v1/{rest:path}", proxy.passthrough, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
    rest = Starlette(routes=routes, lifespan=lifespan, exception_handlers={Exception: internal_error})
    return _Front(conversations, rest)


class _Front:
    """The application: a conversation's ``POST`` straight to its route, everything else to Starlette."""

    def __init__(self, conversations: dict[str, _Conversation], rest: Starlette) -> None:
        self._conversations = conversations
        self._rest = rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            route = self._conversations.get(scope["path"])
            if route is not None:
                await route(scope, receive, send)
                return
        await self._rest(scope, receive, send)


class _Conversation:
    """``POST /v1/chat/completions`` or ``/v1/messages`` as a plain ASGI application (`Proxy.converse`)."""

    def __init__(self, proxy: Proxy, dialect: Dialect, path: str) -> None:
        self._proxy = proxy
        self._dialect = dialect
        self._path = path  # the part after /v1, which the upstream gets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._proxy.converse(scope, receive, send, self._dialect, self._path)


@dataclass(frozen=True, slots=True)
class Incoming:
    """What the handlers read of a request, straight from its ASGI scope."""

    method: str
    path: str  # decoded, as the log line shows it
    raw_path: bytes | None  # as sent, still percent-encoded, when the server says
    query: str  # the query string, without its '?'
    headers: list[tuple[bytes, bytes]]  # as the server gives them, names in lower case (ASGI's rule)
    receive: Receive

    @classmethod
    def of(cls, scope: Scope, receive: Receive) -> Incoming:
        """The request of an HTTP `scope`."""
        query: bytes = scope.get("query_string", b"")
        return cls(scope["method"], scope["path"], scope.get("raw_path"), query.decode(), scope["headers"], receive)

    def header(self, name: bytes) -> str | None:
        """The first value of the header `name` (lower case), decoded as HTTP's are (latin-1); None without one."""
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None


async def internal_error(request: Request, exc: Exception) -> Response:
    """What no handler expected (a bug) on a route Starlette answers: a 500 in the route's error shape."""
    dialect = _MESSAGES if request.url.path == "/v1/messages" else _CHAT
    return _internal_error(Incoming.of(request.scope, request.receive), dialect, exc)


def _internal_error(incoming: Incoming, dialect: Dialect, exc: Exception) -> Response:
    """A 500 in `dialect`'s error shape, which the SDKs read, not plain text; the error logged."""
    log.error("%s %s failed: %s: %s", incoming.method, incoming.path, type(exc).__name__, exc)
    message = f"ctxkeep serve failed on this request ({type(exc).__name__}); its log says more"
    return JSONResponse(dialect.error("api_error", message), status_code=500)


async def healthz(request: Request) -> Response:
    """Alive: no upstream call, no token needed, nothing about the sessions."""
    return JSONResponse({"status": "ok"})


class Proxy:
    """The request handlers, over the conversations' sessions and the upstream."""

    def __init__(self, settings: ServeSettings, sessions: Sessions, upstream: Upstream) -> None:
        self._settings = settings
        self._sessions = sessions
        self._upstream = upstream
        self._surrogates_noted: set[str] = set()  # conversations whose lone surrogates were noted
        # Per route: each conversation's last body, so a request is parsed by its new messages alone.
        self._known = {route: KnownBodies(settings.max_open) for route in ("/chat/completions", "/messages")}

    async def close(self) -> None:
        """Close the workspaces and the upstream's connections."""
        try:
            await self._sessions.close()
        finally:
            await self._upstream.aclose()

    async def converse(self, scope: Scope, receive: Receive, send: Send, dialect: Dialect, path: str) -> None:
        """A conversation's request, as an ASGI application (``POST /v1/chat/completions`` in `dialect`
        OpenAI's, ``/v1/messages`` Anthropic's; `path` the part after ``/v1``), and its log line: now, or when
        its stream ends. Idle workspaces past the limit are closed once the answer is sent (`Sessions.tidy`)."""
        incoming = Incoming.of(scope, receive)
        exchange = Exchange(method=incoming.method, path=incoming.path, started=time.monotonic())
        try:
            response = await self._converse(incoming, dialect, path, exchange)
        except ClientDisconnect:
            exchange.error = "the client went away before the end of its request"
            exchange.done()
            return
        except Exception as exc:
            # What no handler expected (a bug): a 500 in the route's error shape, then raised for the server's
            # log, as Starlette's error middleware does for the other routes.
            exchange.error = type(exc).__name__
            exchange.done(500)
            await _internal_error(incoming, dialect, exc)(scope, receive, send)
            raise
        if isinstance(response, _Relay):
            response.exchange = exchange
            await response(scope, receive, send)
            return
        try:
            await response(scope, receive, send)
        finally:
            exchange.done(response.status_code)  # once the answer is out: its line costs the client no time
        await self._sessions.tidy()

    async def passthrough(self, request: Request) -> Response:
        """Any other ``/v1`` request (``GET /v1/models``, ...), forwarded and answered unchanged."""
        incoming = Incoming.of(request.scope, request.receive)
        return await self._watched(incoming, lambda exchange: self._pass(incoming, exchange))

    async def _watched(self, incoming: Incoming, handle: Callable[[Exchange], Awaitable[Response]]) -> Response:
        """`handle`'s response, and the request's log line: now, or when its stream ends. Idle workspaces
        past the limit are closed after the answer is sent (`Sessions.tidy`), so no answer waits for them."""
        exchange = Exchange(method=incoming.method, path=incoming.path, started=time.monotonic())
        try:
            response = await handle(exchange)
        except Exception as exc:
            exchange.error = type(exc).__name__
            exchange.done(500)  # `internal_error` answers it
            raise
        if isinstance(response, _Relay):
            response.exchange = exchange
        else:
            exchange.done(response.status_code)
            if response.background is None:
                response.background = BackgroundTask(self._sessions.tidy)
        return response

    async def _pass(self, incoming: Incoming, exchange: Exchange) -> Response:
        if (refused := self._refuse_unauthorized(incoming, _CHAT)) is not None:
            return refused
        raw = incoming.raw_path
        path = under_base(raw.decode("latin-1") if isinstance(raw, bytes) else quote(incoming.path))
        if path is None:
            return _bad_request(_CHAT, "the path leaves the API's /v1 (a '..' or an encoded '/'); ask for a /v1 path")
        if incoming.query:
            path += "?" + incoming.query
        try:
            body = await _body(incoming, self._settings.max_body)
        except _TooLarge as exc:
            return _too_large(_CHAT, exc)
        exchange.forwarded()
        try:
            answer = await self._upstream.open(incoming.method, path, incoming.headers, body)
        except (UpstreamTimeout, UpstreamUnreachable) as exc:
            return _upstream_failure(_CHAT, exc)
        return _Relay(_relay(answer, None), answer, status_code=answer.status_code, headers=returned(answer.headers))

    async def _converse(self, incoming: Incoming, dialect: Dialect, path: str, exchange: Exchange) -> Response:
        if (refused := self._refuse_unauthorized(incoming, dialect)) is not None:
            return refused
        header = incoming.header(_HEADER)
        try:
            raw = await _body(incoming, self._settings.max_body)
            known = self._known[path]
            body, replaced = known.parse(raw, header)
            if not isinstance(body, dict):
                raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
            turn = dialect.parse(body, checked=known.accepted(body))
            known.accept(body)
            exchange.stream = turn.stream
            key = self._sessions.key(header, path, turn)
        except _TooLarge as exc:
            return _too_large(dialect, exc)
        except orjson.JSONDecodeError as exc:
            return _bad_request(dialect, f"the request body is not valid JSON: {exc}")
        except BadRequest as exc:
            return _bad_request(dialect, str(exc))
        exchange.conversation = key
        if replaced and key not in self._surrogates_noted:
            # Once per conversation: a client that keeps the message sends it again on every turn.
            self._surrogates_noted.add(key)
            log.warning("conversation %s: lone UTF-16 surrogates replaced with U+FFFD; the messages are kept", key)
        lease = await self._sessions.enter(key)
        handed_over = False  # to a relay, which releases the lease when the stream ends, however it ends
        try:
            try:
                # Shielded: the session's worker thread runs on whatever happens to this request, and the
                # conversation's next request must not start before it is done.
                with anyio.CancelScope(shield=True):
                    step = await lease.step(turn)
            except BadRequest as exc:
                return _bad_request(dialect, str(exc))
            except WorkspaceLockedError:
                message = f"another process holds the workspace of conversation {key}; try again"
                return JSONResponse(dialect.error("overloaded_error", message), status_code=503)
            except CtxkeepError as exc:
                log.error("conversation %s: the workspace could not be used: %s", key, exc)
                message = f"ctxkeep could not use the workspace of conversation {key}: {exc}"
                return JSONResponse(dialect.error("api_error", message), status_code=500)
            exchange.conversation = f"{key}/{lease.branch}"
            exchange.tokens_in = step.context.tokens
            if step.compaction is not None:
                exchange.compacted, exchange.tokens_before = True, step.compaction.tokens_before
            for warning in step.warnings:
                log.warning("conversation %s: %s", key, warning)
            outgoing = orjson.dumps(dialect.outgoing(body, turn, step, lease.forms))
            target = f"{path}?{incoming.query}" if incoming.query else path  # e.g. ?beta=true
            exchange.forwarded()
            try:
                answer = await self._upstream.open("POST", target, incoming.headers, outgoing)
            except (UpstreamTimeout, UpstreamUnreachable) as exc:
                return _upstream_failure(dialect, exc)
            headers = returned(answer.headers) | _ctxkeep_headers(lease, step)
            streamed = turn.stream and answer.status_code == 200
            if streamed and answer.headers.get("content-type", "").startswith("text/event-stream"):

                async def finish() -> None:  # when the stream ends, however it ends
                    await lease.release()
                    await self._sessions.tidy()

                relay = _relay(answer, _Recorder(dialect, lease, step, exchange))
                response: Response = _Relay(relay, answer, status_code=200, headers=headers, on_close=finish)
                handed_over = True
                return response
            try:
                content = await answer.aread()
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                return _upstream_failure(dialect, _failure_of(exc, self._settings))
            finally:
                await answer.aclose()
            if answer.status_code == 200:
                _record_json(content, _Recorder(dialect, lease, step, exchange))
            return Response(content, status_code=answer.status_code, headers=headers)
        finally:
            if not handed_over:
                await lease.release()

    def _refuse_unauthorized(self, incoming: Incoming, dialect: Dialect) -> Response | None:
        token = self._settings.auth_token
        if token is None:
            return None
        sent = incoming.header(_TOKEN_HEADER) or ""
        if hmac.compare_digest(sent.encode(), token.encode()):
            return None
        message = f"this ctxkeep proxy needs its token in the {TOKEN_HEADER} header"
        return JSONResponse(dialect.error("authentication_error", message), status_code=401)


class _Recorder:
    """Records a conversation's reply once the upstream's answer is whole."""

    def __init__(self, dialect: Dialect, lease: Lease, step: Step, exchange: Exchange) -> None:
        self.dialect = dialect
        self.key = lease.key
        self.exchange = exchange
        self._lease = lease
        self._step = step

    def record(self, reply: Reply | None) -> None:
        """Keep a whole reply for the conversation (`Lease.record`); note the upstream's count beside ctxkeep's."""
        if reply is None:
            return
        self.exchange.tokens_out = reply.output_tokens
        if reply.prompt_tokens is not None:
            log.debug(
                "conversation %s: ctxkeep counted %d tokens, the upstream %d",
                self._lease.key,
                self._step.context.tokens,
                reply.prompt_tokens,
            )
        self._lease.record(reply, self._step.context.tokens)


def _record_json(content: bytes, recorder: _Recorder) -> None:
    try:
        answer = orjson.loads(content)
    except orjson.JSONDecodeError:
        log.warning("conversation %s: the upstream's answer is not JSON; no reply recorded", recorder.key)
        return
    recorder.record(recorder.dialect.reply(answer))


async def _relay(answer: httpx.Response, recorder: _Recorder | None) -> AsyncIterator[bytes]:
    """The upstream's bytes as they arrive; with a recorder, the stream's whole events as they arrive, the reply
    put together and recorded at the end, and a stream that broke or stopped short ended with an error event."""
    if recorder is None:
        try:
            async for chunk in answer.aiter_bytes():
                yield chunk
        except (httpx.TimeoutException, httpx.TransportError):
            log.warning("the upstream broke off a passed-through answer")
        return
    reader = EventReader()
    assembler: Reassembler | None = recorder.dialect.reassembler()
    last: Event | None = None
    try:
        async for chunk in answer.aiter_bytes():
            events = reader.feed(chunk)
            if whole := reader.whole():
                yield whole
            last = events[-1] if events else last
            if assembler is not None:
                assembler = _fed(assembler, events)
    except (httpx.TimeoutException, httpx.TransportError) as exc:
        # The status line is long gone: the stream ends with an error event, which the SDKs raise. Half an
        # event was held back (never sent), so the error event is read alone.
        kind = "timeout_error" if isinstance(exc, httpx.TimeoutException) else "api_error"
        recorder.exchange.error = f"the upstream broke off the stream ({type(exc).__name__})"
        yield recorder.dialect.stream_error(kind, f"the upstream broke off the stream ({type(exc).__name__})")
        return
    # The connection closed. An event its blank line never ended may still be the stream's last one.
    tail = reader.feed(b"\n\n") if reader.partial().strip() else []
    if tail and recorder.dialect.ends(tail[-1]):
        last = tail[-1]
        yield reader.whole()
        if assembler is not None:
            assembler = _fed(assembler, tail)
    if last is None or not recorder.dialect.ends(last):
        # A close before the API's closing event is a cut, not a finished reply: said so, not recorded.
        recorder.exchange.error = "the upstream's stream stopped before its end"
        yield recorder.dialect.stream_error("api_error", "the upstream's stream stopped before its end (cut short)")
        return
    if assembler is not None:
        recorder.record(assembler.reply())


def _fed(assembler: Reassembler, events: list[Event]) -> Reassembler | None:
    """`assembler` after `events`; None when an event is not what the API sends: the stream is relayed on as
    it is, only its reply is not recorded (the client sends it back with its next request anyway)."""
    try:
        for event in events:
            assembler.feed(event)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        log.warning("an event of the upstream's stream could not be read; its reply is not recorded")
        return None
    return assembler


class _Relay(StreamingResponse):
    """A streamed answer that closes the upstream's answer, and runs `on_close`, however the stream ends
    (finished, broken, or the client gone), even when it never started."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        answer: httpx.Response,
        *,
        status_code: int,
        headers: dict[str, str],
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(self._tracked(content), status_code=status_code, headers=headers)
        self._answer = answer
        self._on_close = on_close
        self._finished = False  # the whole answer went to the client
        self.exchange: Exchange | None = None  # its log line is written when the stream ends (`Proxy._watched`)

    async def _tracked(self, content: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in content:
            yield chunk
        self._finished = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except (ClientDisconnect, OSError):
            pass  # the client went away mid-stream: said in the request's line below, not in a traceback
        finally:
            if not self._finished and self.exchange is not None and self.exchange.error is None:
                self.exchange.error = "the client went away before the end"
            with anyio.CancelScope(shield=True):
                try:
                    await self._answer.aclose()
                finally:
                    try:
                        if self._on_close is not None:
                            await self._on_close()
                    finally:
                        if self.exchange is not None:
                            self.exchange.done(self.status_code)


def _ctxkeep_headers(lease: Lease, step: Step) -> dict[str, str]:
    """Where the conversation is kept and what was sent, for the client's logs."""
    return {HEADER: f"{lease.key}/{lease.branch}", "x-ctxkeep-context-tokens": str(step.context.tokens)}


class _TooLarge(Exception):
    """A request body over `ServeSettings.max_body`."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


async def _body(incoming: Incoming, limit: int) -> bytes:
    """The request's body, read up to `limit` bytes: past it `_TooLarge`, before more is held in memory;
    `ClientDisconnect` when the client goes away first."""
    declared = incoming.header(b"content-length") or ""
    if declared.isdigit() and int(declared) > limit:
        raise _TooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await incoming.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _too_large(dialect: Dialect, exc: _TooLarge) -> Response:
    message = f"the request body is over {exc.limit:,} bytes, the proxy's limit (ctxkeep serve --max-body)"
    return JSONResponse(dialect.error("request_too_large", message), status_code=413)


def _bad_request(dialect: Dialect, message: str) -> Response:
    return JSONResponse(dialect.error("invalid_request_error", message), status_code=400)


def _upstream_failure(dialect: Dialect, exc: Exception) -> Response:
    if isinstance(exc, UpstreamTimeout):
        return JSONResponse(dialect.error("timeout_error", str(exc)), status_code=504)
    return JSONResponse(dialect.error("api_error", str(exc)), status_code=502)


def _failure_of(exc: Exception, settings: ServeSettings) -> Exception:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"the upstream did not finish its answer within {settings.timeout:g} s")
    return UpstreamUnreachable(f"the upstream broke off its answer ({type(exc).__name__})")
