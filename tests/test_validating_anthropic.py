"""The validating Anthropic server refuses what the messages API refuses, so the proxy's tests through it can fail."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic
from tests.validating_anthropic import ValidatingAnthropicServer

TOOL = {"name": "search_logs", "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
USE = {"type": "tool_use", "id": "t1", "name": "search_logs", "input": {"query": "x"}}
RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "found"}
BAD: dict[str, list[dict[str, Any]]] = {
    "system role in messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    "assistant first": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "hi"}],
    "two user messages in a row": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}],
    "empty text": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
    "tool_use without its result": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [USE]},
        {"role": "user", "content": "no result"},
    ],
    "tool_result without its call": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [RESULT]},
    ],
    "tool_use in a user message": [{"role": "user", "content": [USE]}],
    "unknown block key": [{"role": "user", "content": [{"type": "text", "text": "hi", "id": "x"}]}],
    "over the window": [{"role": "user", "content": "word " * 2_000}],
}


@pytest.fixture(scope="module")
def api() -> Iterator[ValidatingAnthropicServer]:
    with ValidatingAnthropicServer(window=1_000) as server:
        yield server


@pytest.mark.parametrize("case", sorted(BAD))
def test_refuses_what_the_api_refuses(api: ValidatingAnthropicServer, case: str) -> None:
    client = Anthropic(base_url=api.base_url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="v", max_tokens=10, messages=BAD[case], tools=[TOOL])  # type: ignore[arg-type]
    assert api.records[-1].refused


def test_refuses_a_missing_max_tokens_and_version(api: ValidatingAnthropicServer) -> None:
    client = Anthropic(base_url=api.base_url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.post(
            "/v1/messages", body={"model": "v", "messages": [{"role": "user", "content": "hi"}]}, cast_to=object
        )
    unversioned = Anthropic(
        base_url=api.base_url, api_key="k", max_retries=0, default_headers={"anthropic-version": ""}
    )
    with pytest.raises(anthropic.BadRequestError, match="anthropic-version"):
        unversioned.messages.create(model="v", max_tokens=5, messages=[{"role": "user", "content": "hi"}])


def test_plays_a_tool_using_agent_streamed_or_not(api: ValidatingAnthropicServer) -> None:
    client = Anthropic(base_url=api.base_url, api_key="k", max_retries=0)
    ask: list[Any] = [{"role": "user", "content": "Task 1: look into the build."}]
    reply = client.messages.create(model="v", max_tokens=50, messages=ask, tools=[TOOL])  # type: ignore[list-item]
    with client.messages.stream(model="v", max_tokens=50, messages=ask, tools=[TOOL]) as events:  # type: ignore[list-item]
        streamed = events.get_final_message()
    calls = [b for b in reply.content if b.type == "tool_use"]
    assert reply.stop_reason == streamed.stop_reason == "tool_use"
    assert [b.input for b in calls] == [b.input for b in streamed.content if b.type == "tool_use"]
    answered = [
        *ask,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"} for b in calls]},
    ]
    done = client.messages.create(model="v", max_tokens=50, messages=answered, tools=[TOOL])  # type: ignore[arg-type]
    assert done.content[0].type == "text"
    assert done.content[0].text.startswith("Done with: Task 1")
