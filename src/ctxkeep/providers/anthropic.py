"""`AnthropicModel`: the Messages API on the official anthropic SDK."""

from __future__ import annotations

from typing import Any

import anthropic
from anthropic.types import Message

from ctxkeep.providers import Completion, Reply
from ctxkeep.providers.sdk import SDKErrors, SDKModel


class AnthropicModel(SDKModel[anthropic.Anthropic]):
    """A `Model` on Anthropic's Messages API; `name` is ``"anthropic:<model>"``."""

    provider = "anthropic"
    key_variable = "ANTHROPIC_API_KEY"
    example = "claude-haiku-4-5"
    errors = SDKErrors(
        status=anthropic.APIStatusError, timeout=anthropic.APITimeoutError, connection=anthropic.APIConnectionError
    )

    def _connect(self, key: str, base_url: str | None) -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=0)

    def _aconnect(self, key: str, base_url: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(api_key=key, base_url=base_url, max_retries=0)

    def _send(self, request: Completion, timeout: float) -> Reply:
        return self._reply(self._client.messages.create(**self._arguments(request, timeout)))

    async def _asend(self, request: Completion, timeout: float) -> Reply:
        return self._reply(await self._aclient.messages.create(**self._arguments(request, timeout)))

    def _arguments(self, request: Completion, timeout: float) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for `request`."""
        # the API rejects an empty system text, so it is left out rather than sent blank; temperature
        # is not sent: the Messages API of the current SDK (2.x) has no such parameter
        options: dict[str, Any] = {"system": request.system} if request.system else {}
        if request.schema is not None:  # structured outputs
            options["output_config"] = {"format": {"type": "json_schema", "schema": dict(request.schema)}}
        messages: list[Any] = [{"role": turn.role, "content": turn.text} for turn in request.turns]
        return {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": messages,
            "timeout": timeout,
            **options,
        }

    def _reply(self, response: Message) -> Reply:
        return Reply(
            text="".join(block.text for block in response.content if block.type == "text"),
            model=response.model or self.model,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
        )
