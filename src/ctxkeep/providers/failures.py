"""What went wrong with a call to a provider, as a `ProviderError` whose message says the fix.

`SDKModel` turns the SDKs' exceptions into these. What the server said is kept (cut to
`DETAIL_CHARS`) with the API key blanked out of it, since a server may echo the key it rejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctxkeep.errors import ProviderError
from ctxkeep.providers.retry import parse_retry_after, retryable_status

DETAIL_CHARS = 300


@dataclass(frozen=True, kw_only=True, slots=True)
class Endpoint:
    """Where a provider sends its calls, for messages: never holds the key, only the variable's name."""

    provider: str
    model: str
    base_url: str
    api_key_env: str


def redact(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` replaced by ``***``."""
    return text.replace(secret, "***") if secret else text


def server_detail(body: object, fallback: str) -> str:
    """The server's own words about an error: ``error.message`` of an OpenAI or Anthropic error body,
    else ``message``, else `fallback`."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return fallback


def _said(detail: str, secret: str | None) -> str:
    text = " ".join(redact(detail, secret).split())
    if len(text) > DETAIL_CHARS:
        text = text[: DETAIL_CHARS - 1] + "…"
    return f" ({text})" if text else ""


def status_error(
    at: Endpoint, status: int, *, detail: str, headers: Mapping[str, str], now: float, secret: str | None
) -> ProviderError:
    """The error for an HTTP `status` reply; `detail` is what the server said, `now` the Unix time."""
    said = _said(detail, secret)
    where = f"{at.provider} at {at.base_url}"
    if status == 401:
        message = f"{where} rejected the API key (HTTP 401){said}: set {at.api_key_env} to a valid key for this server"
    elif status == 403:
        message = f"{where} refused access (HTTP 403){said}: check the key in {at.api_key_env} can use {at.model!r}"
    elif status == 404:
        message = f"{where} has no model {at.model!r} (HTTP 404){said}: check the model name and base_url"
    elif status == 429:
        message = f"{where} is rate limiting (HTTP 429){said}: wait, or send fewer requests"
    elif retryable_status(status):
        message = f"{where} failed (HTTP {status}){said}: the server is in trouble; try again later"
    else:
        message = (
            f"{where} rejected the request for {at.model!r} (HTTP {status}){said}: "
            "check the request against the model's limits (max_tokens, context length)"
        )
    retryable = retryable_status(status)
    return ProviderError(
        message,
        provider=at.provider,
        status_code=status,
        retryable=retryable,
        retry_after=parse_retry_after(headers, now=now) if retryable else None,
    )


def timeout_error(at: Endpoint, timeout: float) -> ProviderError:
    """The error for a call that took longer than `timeout` seconds."""
    return ProviderError(
        f"{at.provider} at {at.base_url} did not answer within {timeout:g} s: "
        "raise the timeout (timeout= in code, `timeout` in ctxkeep.toml) if the model is slow",
        provider=at.provider,
        retryable=True,
    )


def connection_error(at: Endpoint, cause: BaseException | None, *, secret: str | None) -> ProviderError:
    """The error for a call that could not reach the server; `cause` is the network library's error."""
    said = _said(str(cause), secret) if cause is not None else ""
    return ProviderError(
        f"cannot connect to {at.provider} at {at.base_url}{said}: is the server at base_url running?",
        provider=at.provider,
        retryable=True,
    )


def missing_key_error(provider: str, api_key_env: str) -> ProviderError:
    """The error for a provider made without a key in `api_key_env` and no base_url of a local server."""
    return ProviderError(
        f"no API key for {provider}: set the environment variable {api_key_env}, or pass api_key_env= naming "
        "the variable that holds it (a local server given by base_url needs none)",
        provider=provider,
    )
