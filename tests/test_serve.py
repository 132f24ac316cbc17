"""`ctxkeep serve` with the official SDKs as clients (sync, async, streaming) and a validating upstream.

The clients keep their whole history and send all of it every turn, as an agent does; the proxy forwards
the compacted context to a local server that refuses what the API would refuse and counts every
request's tokens independently. Asserted: no request refused, none over the window, the conversation
kept in one workspace (the recorded replies are recognised: no branch), and every message of the
client's history held there exactly once, live or archived.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic, AsyncAnthropic
from openai import AsyncOpenAI, OpenAI
from tests.proxy_harness import LOOPS, running_proxy
from tests.validating_anthropic import ValidatingAnthropicServer
from tests.validating_server import SEARCH_TOOL, ValidatingServer, held_ids, task, tool_output

from ctxkeep import Session, to_messages

WINDOW = 16_000
SYSTEM = "You are a build engineer. Use the tools, then answer briefly."
ANTHROPIC_TOOL = {
    "name": SEARCH_TOOL["function"]["name"],
    "description": SEARCH_TOOL["function"]["description"],
    "input_schema": SEARCH_TOOL["function"]["parameters"],
}


class Reply:
    """An assistant message put together from streamed chat chunks, as a client does."""

    def __init__(self) -> None:
        self.content = ""
        self.calls: dict[int, dict[str, Any]] = {}

    def take(self, chunk: Any) -> None:
        for choice in chunk.choices:
            self.content += choice.delta.content or ""
            for c in choice.delta.tool_calls or []:
                self.calls[c.index] = c.model_dump(exclude_none=True, exclude={"index"})

    def message(self) -> dict[str, Any]:
        reply: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            reply["tool_calls"] = list(self.calls.values())
        return reply


class OpenAIAgent:
    """The README's loop on the openai SDK, through the proxy; every other request streamed when `stream`."""

    def __init__(self, client: OpenAI, *, stream: bool) -> None:
        self.client = client
        self.stream = stream
        self.history: list[Any] = [{"role": "system", "content": SYSTEM}]
        self.sessions: set[str] = set()
        self.requests = 0

    def turn(self) -> Any:
        kw: dict[str, Any] = {"model": "validating", "messages": self.history, "tools": [SEARCH_TOOL]}
        self.requests += 1
        if self.stream and self.requests % 2 == 0:
            stream = self.client.chat.completions.create(**kw, stream=True)
            self.sessions.add(stream.response.headers["x-ctxkeep-session"])
            reply = Reply()
            for chunk in stream:
                reply.take(chunk)
            return reply.message()
        raw = self.client.chat.completions.with_raw_response.create(**kw)
        self.sessions.add(raw.headers["x-ctxkeep-session"])
        return raw.parse().choices[0].message.model_dump(exclude_none=True)

    def task(self, i: int) -> None:
        self.history.append({"role": "user", "content": task(i)})
        for _ in range(10):
            reply = self.turn()
            self.history.append(reply)
            if not reply.get("tool_calls"):
                return
            for call in reply["tool_calls"]:
                query = json.loads(call["function"]["arguments"])["query"]
                self.history.append({"role": "tool", "tool_call_id": call["id"], "content": tool_output(query)})
        raise AssertionError(f"task {i} did not finish")


class AnthropicAgent:
    """The same loop on the anthropic SDK; every other request streamed when `stream`."""

    def __init__(self, client: Anthropic, *, stream: bool) -> None:
        self.client = client
        self.stream = stream
        self.history: list[Any] = []
        self.sessions: set[str] = set()
        self.requests = 0

    def turn(self) -> Any:
        kw: dict[str, Any] = {
            "model": "validating",
            "max_tokens": 512,
            "system": SYSTEM,
            "messages": self.history,
            "tools": [ANTHROPIC_TOOL],
        }
        self.requests += 1
        if self.stream and self.requests % 2 == 0:
            with self.client.messages.stream(**kw) as events:
                message = events.get_final_message()
                self.sessions.add(events.response.headers["x-ctxkeep-session"])
                return message
        raw = self.client.messages.with_raw_response.create(**kw)
        self.sessions.add(raw.headers["x-ctxkeep-session"])
        return raw.parse()

    def task(self, i: int) -> None:
        self.history.append({"role": "user", "content": task(i)})
        for _ in range(10):
            reply = self.turn()
            # As dicts: ctxkeep takes SDK message objects, not SDK blocks inside a dict (held_once syncs these).
            self.history.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
            )
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                return
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": tool_output(b.input["query"])} for b in calls
            ]
            self.history.append({"role": "user", "content": results})
        raise AssertionError(f"task {i} did not finish")


def workspace_of(root: Path, sessions: set[str]) -> Path:
    """The one workspace a conversation used (its `X-Ctxkeep-Session` answers all name it)."""
    assert len(sessions) == 1, sessions
    key, branch = next(iter(sessions)).split("/")
    assert branch == "0"  # every request extended what the workspace held: no branch was started
    return root / key / branch


def held_once(workspace: Path, history: list[Any]) -> None:
    """Every message of the client's history is in the workspace exactly once, live or archived."""
    with Session.open(workspace) as session:
        assert session.sync(history) == []  # nothing new: all of it is recognised
        held = held_ids(session)
    assert len(held) == len(set(held)) == len(to_messages(history))


def run_openai(tmp_path: Path, tasks: int, *, stream: bool, **settings: object) -> None:
    with (
        ValidatingServer(window=WINDOW) as api,
        running_proxy(api.base_url, tmp_path / "root", **settings) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-local", max_retries=0) as client,
    ):
        agent = OpenAIAgent(client, stream=stream)
        for i in range(tasks):
            agent.task(i)
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    assert len(api.records) == agent.requests >= 2 * tasks
    held_once(workspace_of(tmp_path / "root", agent.sessions), agent.history[1:])


def run_anthropic(tmp_path: Path, tasks: int, *, stream: bool, loop: str = "auto") -> None:
    with (
        ValidatingAnthropicServer(window=WINDOW) as api,
        running_proxy(api.base_url + "/v1", tmp_path / "root", loop=loop) as url,
        Anthropic(base_url=url, api_key="sk-ant-local", max_retries=0) as client,
    ):
        agent = AnthropicAgent(client, stream=stream)
        for i in range(tasks):
            agent.task(i)
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    assert len(api.records) == agent.requests >= 2 * tasks
    held_once(workspace_of(tmp_path / "root", agent.sessions), agent.history)


def test_openai_sdk_through_the_proxy_compacts_and_keeps_every_message(tmp_path: Path) -> None:
    run_openai(tmp_path, 6, stream=False)


@pytest.mark.parametrize("loop", LOOPS)
def test_openai_sdk_streaming_through_the_proxy(tmp_path: Path, loop: str) -> None:
    run_openai(tmp_path, 6, stream=True, loop=loop)


def test_the_proxy_writes_summaries_in_the_background(tmp_path: Path) -> None:
    run_openai(tmp_path, 12, stream=True, background=True)  # the first steps may jump past the soft threshold
    (path,) = (tmp_path / "root").glob("*/0/compactions.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    compactions = [r for r in records if r["kind"] == "compaction"]
    assert compactions and any(r["background"] for r in compactions)


def test_anthropic_sdk_through_the_proxy_compacts_and_keeps_every_message(tmp_path: Path) -> None:
    run_anthropic(tmp_path, 6, stream=False)


@pytest.mark.parametrize("loop", LOOPS)
def test_anthropic_sdk_streaming_through_the_proxy(tmp_path: Path, loop: str) -> None:
    run_anthropic(tmp_path, 6, stream=True, loop=loop)


@pytest.mark.slow
def test_openai_sdk_150_turns_at_16k(tmp_path: Path) -> None:
    run_openai(tmp_path, 75, stream=True)


@pytest.mark.slow
def test_anthropic_sdk_150_turns_at_16k(tmp_path: Path) -> None:
    run_anthropic(tmp_path, 75, stream=True)


async def openai_async_task(client: AsyncOpenAI, name: str, i: int) -> list[str]:
    """One task of an async agent in its own conversation (named by the header); the sessions it saw."""
    history: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task(i)}]
    seen = []
    for n in range(10):
        kw: dict[str, Any] = {"model": "validating", "messages": history, "tools": [SEARCH_TOOL]}
        headers = {"X-Ctxkeep-Session": name}
        if n % 2:
            stream = await client.chat.completions.create(**kw, stream=True, extra_headers=headers)
            seen.append(stream.response.headers["x-ctxkeep-session"])
            collected = Reply()
            async for chunk in stream:
                collected.take(chunk)
            reply = collected.message()
        else:
            raw = await client.chat.completions.with_raw_response.create(**kw, extra_headers=headers)
            seen.append(raw.headers["x-ctxkeep-session"])
            reply = raw.parse().choices[0].message.model_dump(exclude_none=True)
        history.append(reply)
        if not reply.get("tool_calls"):
            return seen
        for call in reply["tool_calls"]:
            query = json.loads(call["function"]["arguments"])["query"]
            history.append({"role": "tool", "tool_call_id": call["id"], "content": tool_output(query)})
    raise AssertionError("the task did not finish")


def test_async_clients_on_two_sessions_at_once(tmp_path: Path) -> None:
    """Two async conversations interleaved on one proxy: each keeps its own workspace, nothing refused."""
    with ValidatingServer(window=WINDOW) as api, running_proxy(api.base_url, tmp_path / "root") as url:

        async def both() -> list[list[str]]:
            client = AsyncOpenAI(base_url=url + "/v1", api_key="sk-local", max_retries=0)
            runs = []
            for i in range(3):
                runs += await asyncio.gather(
                    openai_async_task(client, f"alpha-{i}", i), openai_async_task(client, f"beta-{i}", i)
                )
            await client.close()
            return runs

        runs = asyncio.run(both())
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    assert [set(run) for run in runs] == [{f"{name}-{i}/0"} for i in range(3) for name in ("alpha", "beta")]


def test_anthropic_async_client(tmp_path: Path) -> None:
    with ValidatingAnthropicServer(window=WINDOW) as api, running_proxy(api.base_url + "/v1", tmp_path / "root") as url:

        async def run() -> None:
            client = AsyncAnthropic(base_url=url, api_key="sk-ant-local", max_retries=0)
            history: list[Any] = [{"role": "user", "content": task(0)}]
            kw: dict[str, Any] = {"model": "validating", "max_tokens": 256, "system": SYSTEM, "tools": [ANTHROPIC_TOOL]}
            for _ in range(4):
                async with client.messages.stream(messages=history, **kw) as events:
                    reply = await events.get_final_message()
                history.append({"role": "assistant", "content": reply.content})
                calls = [b for b in reply.content if b.type == "tool_use"]
                if not calls:
                    history.append({"role": "user", "content": "Thanks. " + task(len(history))})
                    continue
                results = [{"type": "tool_result", "tool_use_id": b.id, "content": tool_output(b.id)} for b in calls]
                history.append({"role": "user", "content": results})
            await client.close()

        asyncio.run(run())
    assert api.refused == []
    assert len(api.records) == 4
    # The client's credentials went upstream (this SDK sends them as a bearer token to a base URL it does not know).
    assert all("sk-ant-local" in h.get("x-api-key", "") + h.get("authorization", "") for h in api.headers)
    assert all(h["anthropic-version"] for h in api.headers)
