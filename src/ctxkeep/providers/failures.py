"""What went wrong with a call to a provider, as a `ProviderError` whose message says the fix.

`SDKModel` turns the SDKs' exceptions into these. What the server said is kept (cut to
`DETAIL_CHARS`) with the secrets blanked out of it by `redact`, the one redaction of the providers,
since a server may echo the key it rejected and a base URL may carry a password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ctxkeep.errors import ProviderError
from ctxkeep.providers.retry import parse_retry_after, retryable_status

DETAIL_CHARS = 300


@dataclass(frozen=True, kw_only=True, slots=True)
class Endpoint:
    """Where a provider sends its calls, for messages: never holds the key, only the variable's name,
    and a `base_url` without its credentials (see `redact`)."""

    provider: str
    model: str
    base_url: str
    api_key_env: str


# The userinfo of a URL: from the scheme's "//" to the last "@" before the host ends (a password may hold "@").
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#\s]*@")
# A secret shorter than this is not looked for in free text: it would blank out ordinary words.
_SHORTEST_SECRET = 4


def redact(text: str, *secrets: str | None) -> str:
    """`text` with the credentials of every URL (``http://***@host``) and every occurrence of each secret,
    in any letter case (a server may echo a key upper-cased), replaced by ``***``.

    Everything ctxkeep prints or stores about a provider passes through here: its error messages,
    its repr and endpoint, and so what a summarizer saves of a failed request.
    """
    text = _USERINFO.sub(r"\1***@", text)
    for secret in secrets:
        if secret and len(secret) >= _SHORTEST_SECRET:
            text = re.sub(re.escape(secret), "***", text, flags=re.IGNORECASE)
    return text


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The password of `url`'s userinfo, as written and decoded (what a server may echo); none without one."""
    if not url:
        return ()
    try:
        password = urlsplit(url).password
    except ValueError:
        return ()
    return tuple({password, unquote(password)}) if password else ()


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


def _said(detail: str, secrets: Sequence[str | None]) -> str:
    text = " ".join(redact(detail, *secrets).split())
    if len(text) > DETAIL_CHARS:
        text = text[: DETAIL_CHARS - 1] + "…"
    return f" ({text})" if text else ""


def status_error(
    at: Endpoint, status: int, *, detail: str, headers: Mapping[str, str], now: float, secrets: Sequence[str | None]
) -> ProviderError:
    """The error for an HTTP `status` reply; `detail` is what the server said (`secrets` blanked out of it),
    `now` the Unix time."""
    said = _said(detail, secrets)
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


def connection_error(at: Endpoint, cause: BaseException | None, *, secrets: Sequence[str | None]) -> ProviderError:
    """The error for a call that could not reach the server; `cause` is the network library's error."""
    said = _said(str(cause), secrets) if cause is not None else ""
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
