"""The pydantic-ai capability's memory tools (``memory=True``): a real agent over real HTTP, against the
validating server, which calls the first tool offered with the task's text.

pydantic-ai lists a capability's tools after the agent's own; these agents have none of their own, so the
model calls memory_write, then (after a restart, memory_search alone) a search that finds what it wrote.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from tests.test_adapter_pydantic_ai import SYSTEM, WINDOW, check_held
from tests.validating_server import ValidatingServer, task

from ctxkeep import memory_tools
from ctxkeep.adapters.pydantic_ai import CtxkeepCapability

pytestmark = pytest.mark.extra("pydantic-ai")


def tool_results(api: ValidatingServer, request: int) -> list[str]:
    """The tool results the `request`-th request sent the model."""
    return [m["content"] for m in api.records[request].body["messages"] if m["role"] == "tool"]


def agent_with(capability: CtxkeepCapability, base_url: str) -> Agent[None, str]:
    """An agent with no tool of its own: the capability's come first."""
    model = OpenAIChatModel("validating", provider=OpenAIProvider(base_url=base_url, api_key="sk-local"))
    return Agent(model, system_prompt=SYSTEM, capabilities=[capability])


def test_memory_tools_of_the_capability_write_and_search_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"

    async def go(base_url: str) -> list[ModelMessage]:
        capability = CtxkeepCapability(ws, window=WINDOW, memory=True)
        first = await agent_with(capability, base_url).run(task(0))
        await capability.aclose()
        # The scripted model's query shares few words with what it wrote: every candidate is shown.
        tools = memory_tools(ws, embedder=None, min_relevance=0)
        search = next(t for t in tools if t.name == "memory_search")
        capability = CtxkeepCapability(ws, window=WINDOW, memory=[search])
        second = await agent_with(capability, base_url).run(task(1), message_history=first.all_messages())
        await capability.aclose()
        return second.all_messages()

    with ValidatingServer(window=WINDOW) as api:
        history = asyncio.run(go(api.base_url))
    assert api.refused == []
    sent = {t["function"]["name"]: t["function"]["parameters"] for t in api.records[0].body["tools"]}
    assert list(sent) == ["memory_write", "memory_read", "memory_search", "dialog_search", "recall"]
    assert all(sent[t.name] == t.parameters for t in memory_tools(ws))  # each tool's JSON schema, as it is

    # The model's memory_write reached today's log, and its answer came back to the model.
    (log,) = (ws / "memory").glob("*.md")
    day_log = f"memory/{log.name}"
    written = f"{task(0)[:40]} #0"
    assert f" {written}\n" in log.read_text()
    assert f"saved to {day_log}" in tool_results(api, 1)
    # After the restart the model's memory_search found it, and was sent the hit with its file and line.
    assert [t["function"]["name"] for t in api.records[2].body["tools"]] == ["memory_search"]
    hits = [r for r in tool_results(api, 3) if r.startswith(f"[{day_log}:")]
    assert len(hits) == 2 and all(written in hit for hit in hits)  # both of the task's parallel searches
    check_held(ws, history)


def test_memory_tools_answer_a_bad_call_with_an_error_text(tmp_path: Path) -> None:
    capability = CtxkeepCapability(tmp_path / "ws", memory=True)
    assert capability.get_toolset() is not None
    read = next(t for t in capability.tools if t.name == "memory_read")
    answer = asyncio.run(read.function(path="state.json"))  # the workspace's own files are not memory's
    assert answer.startswith(
        "error: only MEMORY.md, memory/YYYY-MM-DD.md, dialog/YYYY-MM-DD.jsonl and tool_result/<uuid>.txt can be read"
    )
    assert CtxkeepCapability(tmp_path / "ws").get_toolset() is None
    with pytest.raises(TypeError, match="memory must be True, False or a list of MemoryTools"):
        CtxkeepCapability(tmp_path / "ws", memory="yes")
