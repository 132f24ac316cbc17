"""`AnthropicModel`: the Messages API on the official anthropic SDK.

The key comes from ``ANTHROPIC_API_KEY`` unless `api_key_env` names another variable; a server
given by `base_url` (a proxy, a local stand-in) gets a placeholder when the variable is unset.

    model = AnthropicModel("claude-haiku-4-5")
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import anthropic

from ctxkeep.errors import ProviderError
from ctxkeep.providers import Completion, Reply
from ctxkeep.providers.failures import (
    PLACEHOLDER_KEY,
    Endpoint,
    check_options,
    client_key,
    connection_error,
    server_detail,
    status_error,
    timeout_error,
)
from ctxkeep.providers.retry import RetryPolicy, call_with_retry

__all__ = ["PLACEHOLDER_KEY", "AnthropicModel"]


class AnthropicModel:
    """A `Model` on Anthropic's Messages API; `name` is ``"anthropic:<model>"``.

    `timeout` (seconds per attempt) replaces each request's own when given. `retry`, `sleep` and
    `environ` (where the key is looked up) are there for tests.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "ANTHROPIC_API_KEY",
        timeout: float | None = None,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 -- frozen, so one shared default is safe
        sleep: Callable[[float], None] = time.sleep,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        check_options(model, timeout, example="claude-haiku-4-5")
        key = client_key("anthropic", api_key_env, base_url, environ)
        self.model = model
        self.timeout = timeout
        self.retry = retry
        self._sleep = sleep
        self._client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=0)
        self.endpoint = Endpoint(
            provider="anthropic", model=model, base_url=str(self._client.base_url).rstrip("/"), api_key_env=api_key_env
        )

    def __repr__(self) -> str:
        return (
            f"AnthropicModel({self.model!r}, base_url={self.endpoint.base_url!r}, "
            f"api_key_env={self.endpoint.api_key_env!r})"
        )

    @property
    def name(self) -> str:
        """``"anthropic:<model>"``."""
        return f"anthropic:{self.model}"

    def close(self) -> None:
        """Close the client's connections to the server (they are reopened if the model is used again)."""
        self._client.close()

    def complete(self, request: Completion) -> Reply:
        """The model's reply to `request`, trying again on timeouts, 429 and 5xx; raises `ProviderError`."""
        reply, attempts = call_with_retry(lambda: self._attempt(request), policy=self.retry, sleep=self._sleep)
        return dataclasses.replace(reply, attempts=attempts)

    def _attempt(self, request: Completion) -> Reply:
        timeout = self.timeout if self.timeout is not None else request.timeout
        # the API rejects an empty system text, so it is left out rather than sent blank; temperature
        # is not sent: the Messages API of the current SDK (2.x) has no such parameter
        options: dict[str, Any] = {"system": request.system} if request.system else {}
        if request.schema is not None:  # structured outputs
            options["output_config"] = {"format": {"type": "json_schema", "schema": dict(request.schema)}}
        messages: list[Any] = [{"role": turn.role, "content": turn.text} for turn in request.turns]
        failure: ProviderError
        try:
            response = self._client.messages.create(
                model=self.model,
                max_tokens=request.max_tokens,
                messages=messages,
                timeout=timeout,
                **options,
            )
        except anthropic.APIStatusError as error:
            failure = status_error(
                self.endpoint,
                error.status_code,
                detail=server_detail(error.body, error.message),
                headers=error.response.headers,
                now=time.time(),
                secret=self._client.api_key,
            )
        except anthropic.APITimeoutError:
            failure = timeout_error(self.endpoint, timeout)
        except anthropic.APIConnectionError as error:
            failure = connection_error(self.endpoint, error.__cause__, secret=self._client.api_key)
        else:
            return Reply(
                text="".join(block.text for block in response.content if block.type == "text"),
                model=response.model or self.model,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
            )
        # raised here, outside the except clauses, so the SDK's exception (whose text may quote the
        # server's echo of the key) does not ride along as its context
        raise failure
