"""`OpenAIModel`: the chat completions API on the official openai SDK, for OpenAI and every server
that speaks it (DashScope/Qwen, vLLM, Ollama, llama.cpp's llama-server)."""

from __future__ import annotations

from typing import Any

import openai
from openai.types.chat import ChatCompletion

from ctxkeep.errors import ProviderError
from ctxkeep.providers import Completion, Reply
from ctxkeep.providers.sdk import SDKErrors, SDKModel


class OpenAIModel(SDKModel[openai.OpenAI]):
    """A `Model` on an OpenAI-compatible server; `name` is ``"openai:<model>"``.

    ``OpenAIModel("qwen2.5-7b-instruct", Connection(base_url="http://127.0.0.1:8080/v1"))``
    """

    provider = "openai"
    key_variable = "OPENAI_API_KEY"
    example = "gpt-4o-mini"
    errors = SDKErrors(
        status=openai.APIStatusError, timeout=openai.APITimeoutError, connection=openai.APIConnectionError
    )
    _tokens_field: str

    def _connect(self, key: str, base_url: str | None) -> openai.OpenAI:
        # OpenAI's own newer models refuse max_tokens; the compatible servers know only max_tokens
        self._tokens_field = "max_completion_tokens" if base_url is None else "max_tokens"
        return openai.OpenAI(api_key=key, base_url=base_url, max_retries=0)

    def _aconnect(self, key: str, base_url: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(api_key=key, base_url=base_url, max_retries=0)

    def _send(self, request: Completion, timeout: float) -> Reply:
        return self._reply(self._client.chat.completions.create(**self._arguments(request, timeout)))

    async def _asend(self, request: Completion, timeout: float) -> Reply:
        return self._reply(await self._aclient.chat.completions.create(**self._arguments(request, timeout)))

    def _arguments(self, request: Completion, timeout: float) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for `request`."""
        messages: list[Any] = [{"role": "system", "content": request.system}] if request.system else []
        messages += [{"role": turn.role, "content": turn.text} for turn in request.turns]
        options: dict[str, Any] = {self._tokens_field: request.max_tokens}
        if request.schema is not None:
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": dict(request.schema), "strict": True},
            }
        return {
            "model": self.model,
            "messages": messages,
            "temperature": request.temperature,
            "timeout": timeout,
            **options,
        }

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
