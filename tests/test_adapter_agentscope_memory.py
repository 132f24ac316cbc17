"""The AgentScope 2.x middleware's memory tools (``memory=True``): the framework's agent over real HTTP,
against the validating server, which calls the first tool offered with the last user message's text.

The toolkit lists the middleware's tools first (a plain `Agent` does not register a middleware's tools by
itself): the model calls memory_write, then (after a restart, memory_search first) a search that finds it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agentscope
import pytest
from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.message import ToolResultState, UserMsg
from agentscope.model import OpenAIChatModel
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.state import AgentState
from agentscope.tool import FunctionTool, ToolBase, Toolkit
from tests.test_adapter_agentscope import SYSTEM, WINDOW, ToolNamelessFormatter, search_logs
from tests.validating_server import ValidatingServer, task

from ctxkeep import memory_tools
from ctxkeep.adapters.agentscope import ContextMiddleware

pytestmark = pytest.mark.extra("agentscope")
if not agentscope.__version__.startswith("2."):
    pytest.skip(f"the memory tools are for AgentScope 2.x; found {agentscope.__version__}", allow_module_level=True)


def build_agent(
    base_url: str, middleware: ContextMiddleware, memory: Sequence[ToolBase], state: AgentState | None = None
) -> Agent:
    """The framework's agent with the middleware's `memory` tools first in its toolkit, then its own tool."""
    model = OpenAIChatModel(
        credential=OpenAICredential(api_key="sk-local", base_url=base_url),
        model="validating",
        stream=False,
        max_retries=0,
        context_size=WINDOW,
        formatter=ToolNamelessFormatter(),
    )
    allowed = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="read-only search")
    toolkit = Toolkit(tools=[*memory, FunctionTool(search_logs, permission=allowed)])
    return Agent(
        name="builder", system_prompt=SYSTEM, model=model, toolkit=toolkit, middlewares=[middleware], state=state
    )


def tool_results(api: ValidatingServer, request: int) -> list[str]:
    """The tool results the `request`-th request sent the model."""
    return [m["content"] for m in api.records[request].body["messages"] if m["role"] == "tool"]


def called(api: ValidatingServer, request: int, name: str) -> dict[str, Any]:
    """The arguments of the model's call of `name` that the `request`-th request carries back."""
    calls = [c["function"] for m in api.records[request].body["messages"] for c in m.get("tool_calls") or []]
    arguments: dict[str, Any] = json.loads(next(c["arguments"] for c in calls if c["name"] == name))
    return arguments


def test_memory_tools_of_the_middleware_write_and_search_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"

    async def go(base_url: str) -> None:
        middleware = ContextMiddleware(ws, window=WINDOW, memory=True)
        agent = build_agent(base_url, middleware, await middleware.list_tools())
        await agent.reply(UserMsg(name="user", content=task(0)))
        await middleware.close()
        saved = AgentState.model_validate_json(agent.state.model_dump_json())
        # The scripted model's query shares few words with what it wrote: every candidate is shown.
        tools = memory_tools(ws, embedder=None, min_relevance=0)
        search = next(t for t in tools if t.name == "memory_search")
        middleware = ContextMiddleware(ws, window=WINDOW, memory=[search])
        agent = build_agent(base_url, middleware, await middleware.list_tools(), saved)
        await agent.reply(UserMsg(name="user", content=task(1)))
        await middleware.close()

    with ValidatingServer(window=WINDOW) as api:
        asyncio.run(go(api.base_url))
    assert api.refused == []
    sent = {t["function"]["name"]: t["function"]["parameters"] for t in api.records[0].body["tools"]}
    assert list(sent) == ["memory_write", "memory_read", "memory_search", "dialog_search", "recall", "search_logs"]
    assert all(sent[t.name] == t.parameters for t in memory_tools(ws))  # each tool's JSON schema, as it is

    # The model's memory_write reached today's log, and its answer came back to the model.
    (log,) = (ws / "memory").glob("*.md")
    day_log = f"memory/{log.name}"
    written = called(api, 1, "memory_write")["text"]
    assert f" {written}\n" in log.read_text()
    assert f"saved to {day_log}" in tool_results(api, 1)
    # After the restart the model's memory_search found it, and was sent the hit with its file and line.
    assert [t["function"]["name"] for t in api.records[2].body["tools"]] == ["memory_search", "search_logs"]
    (hit,) = [r for r in tool_results(api, 3) if r.startswith(f"[{day_log}:")]
    assert written in hit


def test_a_memory_tool_answers_a_bad_call_with_an_error_result(tmp_path: Path) -> None:
    async def tools(memory: Any) -> list[ToolBase]:
        return await ContextMiddleware(tmp_path / "ws", memory=memory).list_tools()

    assert asyncio.run(tools(False)) == []
    read = next(t for t in asyncio.run(tools(True)) if t.name == "memory_read")
    chunk = asyncio.run(read.call(path="state.json"))  # the workspace's own files are not memory's
    assert chunk.state == ToolResultState.ERROR
    assert chunk.content[0].text.startswith("error: only MEMORY.md, memory/YYYY-MM-DD.md, dialog/")
    with pytest.raises(TypeError, match="memory must be True, False or a list of MemoryTools"):
        ContextMiddleware(tmp_path / "ws", memory="yes")
