"""The validating server refuses what the API refuses, so the adapters' tests that pass through it can fail."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI
from tests.validating_server import SEARCH_TOOL, ValidatingServer

CALL = {"id": "c1", "type": "function", "function": {"name": "search_logs", "arguments": "{}"}}
BAD: dict[str, list[dict[str, Any]]] = {
    "unknown role": [{"role": "robot", "content": "hi"}],
    "unknown key": [{"role": "assistant", "content": "hi", "annotations": []}],
    "None on a user field": [{"role": "user", "content": "hi", "name": None}],
    "result without its call": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "x", "content": "r"},
    ],
    "call without its result": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [CALL]}],
    "result after another message": [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "user", "content": "wait"},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ],
    "image in a tool message": [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
    ],
    "arguments as an object": [
        {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ],
    "over the window": [{"role": "user", "content": "word " * 2_000}],
}


@pytest.fixture(scope="module")
def client() -> Any:
    with ValidatingServer(window=1_000) as api:
        yield OpenAI(base_url=api.base_url, api_key="sk-local", max_retries=0), api


@pytest.mark.parametrize("case", sorted(BAD))
def test_it_refuses_what_the_api_refuses(client: Any, case: str) -> None:
    sdk, api = client
    with pytest.raises(openai.BadRequestError) as err:
        sdk.chat.completions.create(model="m", messages=BAD[case])
    assert err.value.status_code == 400
    assert api.refused


def test_it_answers_a_task_with_tool_calls_then_text(client: Any) -> None:
    sdk, _ = client
    msgs: list[Any] = [{"role": "user", "content": "Task 1: find the bug"}]
    first = sdk.chat.completions.create(model="m", messages=msgs, tools=[SEARCH_TOOL]).choices[0].message
    assert first.tool_calls
    msgs.append(first.model_dump(exclude_none=True, exclude={"annotations"}))
    msgs += [{"role": "tool", "tool_call_id": c.id, "content": "found"} for c in first.tool_calls]
    second = sdk.chat.completions.create(model="m", messages=msgs, tools=[SEARCH_TOOL]).choices[0].message
    assert second.content and not second.tool_calls


def test_it_streams(client: Any) -> None:
    sdk, _ = client
    chunks = list(sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Done with")
