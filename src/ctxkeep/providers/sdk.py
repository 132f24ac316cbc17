"""What the two SDK providers share: where to connect, the key, the retry loop, the SDK's errors in our words.

A provider on an SDK subclasses `SDKModel` and says only what differs: the SDK's client and exceptions,
and in `_send` how a `Completion` becomes the SDK's request and the SDK's answer a `Reply`.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from ctxkeep.errors import ProviderError
from ctxkeep.providers import Completion, Reply
from ctxkeep.providers.config import api_key
from ctxkeep.providers.failures import (
    Endpoint,
    connection_error,
    missing_key_error,
    redact,
    server_detail,
    status_error,
    timeout_error,
    url_secrets,
)
from ctxkeep.providers.retry import RetryPolicy, call_with_retry

if TYPE_CHECKING:  # types only: an OpenAIModel must not import the anthropic SDK, nor the reverse
    import anthropic
    import openai

# a local or stand-in server ignores the key, but the SDKs refuse to start without one
PLACEHOLDER_KEY = "no-key-needed"


@dataclass(frozen=True, kw_only=True, slots=True)
class Connection:
    """How an SDK provider reaches its server; None leaves each choice to the provider or the request."""

    base_url: str | None = None  # the server; None is the provider's own API
    api_key_env: str | None = None  # the variable holding the key; None is OPENAI_API_KEY, ANTHROPIC_API_KEY
    timeout: float | None = None  # seconds one attempt may take; None keeps each request's own

    def __post_init__(self) -> None:
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds; got {self.timeout!r}")
        if self.base_url is not None and not self.base_url.strip().lower().startswith(("http://", "https://")):
            # not echoed: without a scheme, "user:password@host" is no URL `redact` would recognise
            raise ValueError("base_url must be an http:// or https:// URL, like http://127.0.0.1:8080/v1")

    def __repr__(self) -> str:  # the base URL without the password it may carry
        base_url = None if self.base_url is None else redact(self.base_url)
        return f"Connection(base_url={base_url!r}, api_key_env={self.api_key_env!r}, timeout={self.timeout!r})"


@dataclass(frozen=True, kw_only=True, slots=True)
class SDKErrors:
    """An SDK's exceptions for a failed call; both SDKs name them alike and give them the same fields."""

    status: type[openai.APIStatusError | anthropic.APIStatusError]  # the server answered with an HTTP error
    timeout: type[openai.APITimeoutError | anthropic.APITimeoutError]  # it did not answer in time
    connection: type[openai.APIConnectionError | anthropic.APIConnectionError]  # it could not be reached


class Client(Protocol):
    """What `SDKModel` uses of an SDK's client."""

    @property
    def base_url(self) -> object: ...

    @property
    def api_key(self) -> str | None: ...

    def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=Client)


def client_key(provider: str, api_key_env: str, base_url: str | None, environ: Mapping[str, str] | None) -> str:
    """The key an SDK client starts with: the variable's value, or a placeholder for a server at `base_url`."""
    key = api_key(api_key_env, environ)
    if key is not None:
        return key
    if base_url is None:
        raise missing_key_error(provider, api_key_env)
    return PLACEHOLDER_KEY


class SDKModel(Generic[ClientT]):
    """A `Model` on an SDK whose own retries are off: `retry` is the one retry loop.

    `sleep` (how the loop waits) and `environ` (where the key is looked up) are there for tests.
    `on_loop(loop)` gives a copy whose requests go through the SDK's async client on an event loop.
    """

    provider: ClassVar[str]  # the first part of `name`, and of every error message
    key_variable: ClassVar[str]  # the variable holding the key when the connection names none
    example: ClassVar[str]  # a model name, for the message about an empty one
    errors: ClassVar[SDKErrors]

    def __init__(
        self,
        model: str,
        connection: Connection = Connection(),
        *,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 -- frozen, so one shared default is safe
        sleep: Callable[[float], None] = time.sleep,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if not model.strip():
            raise ValueError(f"the model name is empty: give one, like {self.example!r}")
        api_key_env = self.key_variable if connection.api_key_env is None else connection.api_key_env
        key = client_key(self.provider, api_key_env, connection.base_url, environ)
        self.model = model
        self.timeout = connection.timeout
        self.retry = retry
        self._sleep = sleep
        self._client = self._connect(key, connection.base_url)
        self._loop: asyncio.AbstractEventLoop | None = None  # set on a copy by `on_loop`
        self._aclient: Any = None
        # What a server may echo back and no message may show: the key, and a password in the base URL.
        self._secrets = (key, *url_secrets(connection.base_url), *url_secrets(str(self._client.base_url)))
        self.endpoint = Endpoint(
            provider=self.provider,
            model=model,
            base_url=redact(str(self._client.base_url).rstrip("/"), *self._secrets),
            api_key_env=api_key_env,
        )

    def __repr__(self) -> str:  # the variable's name, never the key
        return (
            f"{type(self).__name__}({self.model!r}, base_url={self.endpoint.base_url!r}, "
            f"api_key_env={self.endpoint.api_key_env!r})"
        )

    @property
    def name(self) -> str:
        """``"<provider>:<model>"``."""
        return f"{self.provider}:{self.model}"

    def close(self) -> None:
        """Close the client's connections to the server (they are reopened if the model is used again)."""
        self._client.close()

    def complete(self, request: Completion) -> Reply:
        """The model's reply to `request`, trying again on timeouts, 429 and 5xx; raises `ProviderError`."""
        reply, attempts = call_with_retry(lambda: self._attempt(request), policy=self.retry, sleep=self._sleep)
        return replace(reply, attempts=attempts)

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> SDKModel[ClientT]:
        """A copy of this model whose requests run on the SDK's async client, as coroutines on `loop`.

        For an `AsyncSession`: the summarizer runs in a worker thread, and each model request it makes
        is handed to the host's event loop (which awaits the HTTP exchange alongside its other work)
        while the thread waits for the answer. Called on `loop`'s own thread, `complete` would wait
        for itself, so it raises `ProviderError` there instead.
        """
        bound = copy.copy(self)
        bound._loop = loop
        bound._aclient = self._aconnect(self._client.api_key or PLACEHOLDER_KEY, str(self._client.base_url))
        return bound

    async def aclose(self) -> None:
        """Close the async client of a model from `on_loop` (call it on that loop)."""
        if self._aclient is not None:
            await self._aclient.close()

    def _connect(self, key: str, base_url: str | None) -> ClientT:
        """The SDK's client for the server at `base_url` (None: the provider's own), with its retries off."""
        raise NotImplementedError

    def _aconnect(self, key: str, base_url: str) -> Any:
        """The SDK's async client for the same server, with its retries off."""
        raise NotImplementedError

    def _send(self, request: Completion, timeout: float) -> Reply:
        """One call of the SDK for `request`, its answer as a `Reply`; the SDK's exceptions pass through."""
        raise NotImplementedError

    async def _asend(self, request: Completion, timeout: float) -> Reply:
        """`_send` on the async client."""
        raise NotImplementedError

    def _send_on_loop(self, request: Completion, timeout: float) -> Reply:
        loop = self._loop
        assert loop is not None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise ProviderError(
                f"{self.name} is bound to this event loop (on_loop) and was called on it: it would wait for "
                "itself; run the summarizer in a worker thread, as AsyncSession does",
                provider=self.provider,
            )
        return asyncio.run_coroutine_threadsafe(self._asend(request, timeout), loop).result()

    def _attempt(self, request: Completion) -> Reply:
        timeout = self.timeout if self.timeout is not None else request.timeout
        failure: ProviderError
        try:
            if self._loop is not None:
                return self._send_on_loop(request, timeout)
            return self._send(request, timeout)
        except self.errors.status as error:
            failure = status_error(
                self.endpoint,
                error.status_code,
                detail=server_detail(error.body, error.message),
                headers=error.response.headers,
                now=time.time(),
                secrets=(self._client.api_key, *self._secrets),
            )
        except self.errors.timeout:
            failure = timeout_error(self.endpoint, timeout)
        except self.errors.connection as error:
            failure = connection_error(self.endpoint, error.__cause__, secrets=(self._client.api_key, *self._secrets))
        # raised here, outside the except clauses, so the SDK's exception (whose text may quote the
        # server's echo of the key) does not ride along as its context
        raise failure
