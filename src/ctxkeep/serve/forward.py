"""The upstream, over one pooled transport (`Http11Transport`): what is sent, what comes back, and its failures.

Headers pass through both ways except those that describe one hop (connection, length, encoding) and
ctxkeep's own; the client's credentials go upstream and nowhere else (never stored, never logged).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import unquote

import httpx

from .http11 import Http11Transport
from .settings import ServeSettings

# Headers of one hop, recomputed by each side; and ctxkeep's own, which the upstream has no use for. As bytes:
# a request's headers are compared as the ASGI server gives them.
_REQUEST_DROP = frozenset(
    {
        b"host",
        b"content-length",
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"upgrade",
        b"proxy-authorization",
        b"proxy-connection",
        b"accept-encoding",  # httpx asks for what it can decode, and the body is relayed decoded
        b"x-ctxkeep-session",
        b"x-ctxkeep-token",
    }
)
_RESPONSE_DROP = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "date", "server"}
)


class UpstreamUnreachable(Exception):
    """The upstream could not be reached or broke the connection (the client gets a 502)."""


class UpstreamTimeout(Exception):
    """The upstream did not answer in time (the client gets a 504)."""


# What httpx's client would add when the client did not send them. Only the encodings httpx decodes on
# every install: the body is relayed decoded.
_DEFAULT_HEADERS = ((b"accept", b"*/*"), (b"accept-encoding", b"gzip, deflate"), (b"user-agent", b"ctxkeep-serve"))
# The upstream URLs kept parsed (httpx parses a URL in 20 µs): the few paths clients use, not every query string.
_URLS_KEPT = 64


class Upstream:
    """Sends requests to the upstream and opens its answers as streams."""

    def __init__(self, settings: ServeSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._settings = settings
        # A transport itself, not an `httpx.AsyncClient` over it: the client's layers (cookies, auth,
        # redirects, hooks, URL merging) do nothing a proxy wants and cost a third of a millisecond a request;
        # and the proxy's own (`Http11Transport`) rather than httpcore's pool. No proxy variable is read:
        # the upstream is the one named.
        self._transport = transport or Http11Transport(keep=64)
        self._timeout = httpx.Timeout(settings.timeout, connect=min(settings.timeout, 30.0)).as_dict()
        self._urls: dict[str, httpx.URL] = {}

    async def open(self, method: str, path: str, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> httpx.Response:
        """Send a request for `path` (the part after ``/v1``) with the client's `headers` (as the ASGI scope
        holds them) and return the answer with its body not yet read.

        Raises `UpstreamUnreachable` or `UpstreamTimeout`; the caller must close the answer (`aclose`).
        """
        sent = forwarded(headers)
        names = {k for k, _ in sent}
        sent += [(k, v) for k, v in _DEFAULT_HEADERS if k not in names]
        request = httpx.Request(
            method,
            self._url(path),
            headers=sent,
            content=body or None,
            extensions={"timeout": self._timeout},
        )
        try:
            answer = await self._transport.handle_async_request(request)
            answer.request = request
            return answer
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(_timeout_text(self._settings.timeout)) from exc
        except httpx.ConnectError as exc:
            raise UpstreamUnreachable(f"the upstream could not be reached ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(f"the upstream broke off the connection ({type(exc).__name__})") from exc

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._transport.aclose()

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL(self._settings.upstream_url(path))
            if len(self._urls) < _URLS_KEPT:
                self._urls[path] = url
        return url


def under_base(raw_path: str) -> str | None:
    """The part of a proxy path after ``/v1`` that the upstream gets, its dot segments resolved; None when
    it would leave the upstream's base (``/v1/../../admin``) or hides a separator in a segment (``%2F``).

    `raw_path` is the path as sent, still percent-encoded: the segments are judged by what they decode to
    (``%2e%2e`` is ``..``) and forwarded as they were spelled.
    """
    segments = raw_path.split("/")
    if len(segments) < 2 or segments[0] != "" or unquote(segments[1]) != "v1":
        return None
    kept: list[str] = []
    for segment in segments[2:]:
        name = unquote(segment)
        if "/" in name or "\\" in name:
            return None  # an upstream that decodes it would read two segments, perhaps a `..`
        if name == "..":
            if not kept:
                return None
            kept.pop()
        elif name != ".":
            kept.append(segment)
    return "/" + "/".join(kept)


def forwarded(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The client's headers that go upstream, names in lower case: all but one hop's and ctxkeep's own."""
    return [(name, v) for k, v in headers if (name := k.lower()) not in _REQUEST_DROP]


def returned(headers: Mapping[str, str] | httpx.Headers) -> dict[str, str]:
    """The upstream's headers that go back to the client (rate limits, request ids, content type, ...)."""
    return {k: v for k, v in headers.items() if k.lower() not in _RESPONSE_DROP}


def _timeout_text(seconds: float) -> str:
    return f"the upstream did not answer within {seconds:g} s (ctxkeep serve --timeout)"
