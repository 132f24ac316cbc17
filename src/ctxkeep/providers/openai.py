"""`OpenAIModel`: the chat completions API on the official openai SDK.

One provider for every server that speaks that API: OpenAI itself, DashScope/Qwen's compatible
mode, vLLM, Ollama, llama.cpp's llama-server. The key comes from an environment variable
(``OPENAI_API_KEY`` unless `api_key_env` names another); a local server given by `base_url` needs
none, and gets a placeholder when the variable is unset.

    model = OpenAIModel("qwen2.5-7b-instruct", base_url="http://127.0.0.1:8080/v1")
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import openai
from openai.types.chat import ChatCompletion

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

__all__ = ["PLACEHOLDER_KEY", "OpenAIModel"]


class OpenAIModel:
    """A `Model` on an OpenAI-compatible server; `name` is ``"openai:<model>"``.

    `timeout` (seconds per attempt) replaces each request's own when given. `retry`, `sleep` and
    `environ` (where the key is looked up) are there for tests.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float | None = None,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 -- frozen, so one shared default is safe
        sleep: Callable[[float], None] = time.sleep,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        check_options(model, timeout, example="gpt-4o-mini")
        key = client_key("openai", api_key_env, base_url, environ)
        self.model = model
        self.timeout = timeout
        self.retry = retry
        self._sleep = sleep
        self._client = openai.OpenAI(api_key=key, base_url=base_url, max_retries=0)
        self.endpoint = Endpoint(
            provider="openai", model=model, base_url=str(self._client.base_url).rstrip("/"), api_key_env=api_key_env
        )
        # OpenAI's own newer models refuse max_tokens; the compatible servers know only max_tokens
        self._tokens_field = "max_completion_tokens" if base_url is None else "max_tokens"

    def __repr__(self) -> str:
        return (
            f"OpenAIModel({self.model!r}, base_url={self.endpoint.base_url!r}, "
            f"api_key_env={self.endpoint.api_key_env!r})"
        )

    @property
    def name(self) -> str:
        """``"openai:<model>"``."""
        return f"openai:{self.model}"

    def close(self) -> None:
        """Close the client's connections to the server (they are reopened if the model is used again)."""
        self._client.close()

    def complete(self, request: Completion) -> Reply:
        """The model's reply to `request`, trying again on timeouts, 429 and 5xx; raises `ProviderError`."""
        reply, attempts = call_with_retry(lambda: self._attempt(request), policy=self.retry, sleep=self._sleep)
        return dataclasses.replace(reply, attempts=attempts)

    def _attempt(self, request: Completion) -> Reply:
        timeout = self.timeout if self.timeout is not None else request.timeout
        messages: list[Any] = [{"role": "system", "content": request.system}] if request.system else []
        messages += [{"role": turn.role, "content": turn.text} for turn in request.turns]
        options: dict[str, Any] = {self._tokens_field: request.max_tokens}
        if request.schema is not None:
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": dict(request.schema), "strict": True},
            }
        failure: ProviderError
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=request.temperature,
                timeout=timeout,
                **options,
            )
        except openai.APIStatusError as error:
            failure = status_error(
                self.endpoint,
                error.status_code,
                detail=server_detail(error.body, error.message),
                headers=error.response.headers,
                now=time.time(),
                secret=self._client.api_key,
            )
        except openai.APITimeoutError:
            failure = timeout_error(self.endpoint, timeout)
        except openai.APIConnectionError as error:
            failure = connection_error(self.endpoint, error.__cause__, secret=self._client.api_key)
        else:
            return self._reply(response)
        # raised here, outside the except clauses, so the SDK's exception (whose text may quote the
        # server's echo of the key) does not ride along as its context
        raise failure

    def _reply(self, response: ChatCompletion) -> Reply:
        if not response.choices:
            raise ProviderError(
                f"openai at {self.endpoint.base_url} answered with no choices for {self.model!r}: "
                "check that the server serves chat completions",
                provider="openai",
            )
        usage = response.usage
        return Reply(
            text=response.choices[0].message.content or "",
            model=response.model or self.model,
            input_tokens=usage.prompt_tokens if usage is not None else None,
            output_tokens=usage.completion_tokens if usage is not None else None,
        )
