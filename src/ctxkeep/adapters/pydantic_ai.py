"""ctxkeep for pydantic-ai 2.x: one capability, ``Agent(..., capabilities=[CtxkeepCapability("./ws", window=16_000)])``.

Before every model request the capability syncs the run's whole history into a workspace, runs the
pre-reasoning pass and sends the model the compacted context: the standing system prompt, ctxkeep's
summary as a `CompactionPart` (pydantic-ai's own place for a summary another model wrote; every
provider model sends it as user-voice text) and the recent messages, big tool results cut. Only the
request changes: the run keeps its full history, so ``result.all_messages()`` is the whole conversation
and the host can hand it back as ``message_history=`` (after a restart too). That is why this is a
capability of its own and not a `ProcessHistory` processor: `ProcessHistory` writes its output into the
run's history (``ctx.messages``), which would leave the host holding ctxkeep's compacted view.

`from_pydantic_ai` and `to_pydantic_ai` (`ctxkeep.formats.pydantic_ai`) convert between pydantic-ai's
`ModelMessage`s and ctxkeep messages; the capability takes only a history's new messages through them
(an `Intake` of `ctxkeep.host.core`).

With ``memory=True`` the capability also gives its agent the workspace's memory tools
(`ctxkeep.memory_tools`), through `get_toolset`, pydantic-ai's hook for the tools a capability brings.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    SystemPromptPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.tools import RunContext, Tool
from pydantic_ai.toolsets import FunctionToolset

from ctxkeep.async_session import AsyncSession
from ctxkeep.content_ids import Entry
from ctxkeep.context import Context
from ctxkeep.formats.pydantic_ai import (
    Converted,
    Made,
    from_pydantic_ai,
    head_of,
    message_entries,
    to_pydantic_ai,
)
from ctxkeep.host import core as _core
from ctxkeep.host.core import Intake, Memory, SessionSource, Workspace
from ctxkeep.memory.tools import MemoryTool

__all__ = [
    "Converted",
    "CtxkeepCapability",
    "Made",
    "from_pydantic_ai",
    "to_pydantic_ai",
    "to_pydantic_ai_tool",
    "tool_schemas",
]


def context_messages(
    context: Context, head: Sequence[SystemPromptPart], made: Made | None = None
) -> list[ModelMessage]:
    """The context ctxkeep prepared, as the messages of the model request: head, summary, recent messages."""
    return to_pydantic_ai(context.messages, head=head, summary=context.summary, made=made)


def tool_schemas(params: ModelRequestParameters) -> list[dict[str, Any]]:
    """The request's tools in OpenAI's form, for `prepare` to count against the window."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description or "",
                "parameters": t.parameters_json_schema,
            },
        }
        for t in (*params.function_tools, *params.output_tools)
    ]


# --- the capability ----------------------------------------------------------------------


@dataclass(init=False)
class CtxkeepCapability(AbstractCapability[Any]):
    """Runs ctxkeep before every model request of a pydantic-ai agent; one conversation per workspace.

    `workspace` is a folder (opened on the first request, with `settings` passed to `Session.open`, e.g.
    ``window=16_000``), or an open `Session` or `AsyncSession`. The session's disk work and summaries
    run in a worker thread, so the run's event loop is never blocked. `memory=True` gives the agent the
    workspace's memory tools (after its own); a list of `MemoryTool`s (``memory_tools(ws, embedder=None)``)
    gives those instead. `close()` (or `aclose()`) releases the workspace; a session passed in stays the
    caller's to close.
    """

    def __init__(self, workspace: Workspace, *, memory: Memory = False, **settings: Any) -> None:
        self._source = SessionSource(workspace, settings)
        self.tools: list[Tool[Any]] = [
            to_pydantic_ai_tool(t) for t in _core.memory_tools_of(workspace, memory, settings)
        ]
        """The memory tools as pydantic-ai tools (empty without `memory`); `get_toolset` gives them to the agent."""
        self._toolset = FunctionToolset(self.tools) if self.tools else None
        self._head: tuple[SystemPromptPart, ...] = ()  # the standing system prompt of the history being taken
        self._intake = Intake(self._entries)  # the run's messages, converted and synced once each
        self._made = Made()  # and the context's, converted back once each

    def get_toolset(self) -> FunctionToolset[Any] | None:
        """The memory tools, for the agent to register (None without `memory`)."""
        return self._toolset

    async def session(self) -> AsyncSession:
        """The workspace's session, opened on first use (in a worker thread)."""
        return await self._source.asession()

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Sync the run's history, run the pass, and send the compacted context: this request only."""
        session = await self.session()
        history = list(request_context.messages)
        head = self._head = head_of(history)
        params = request_context.model_request_parameters
        standing = "\n\n".join(p.content for p in head)
        system = "\n\n".join([standing, *(p.content for p in params.instruction_parts or ())]).strip()
        step, _ = await self._intake.aprepare(session, history, system or None, tool_schemas(params))
        # Assigned, not changed in place: `request_context.messages` is this request's own list, so the
        # run's history (`ctx.messages`) stays whole.
        request_context.messages = await asyncio.to_thread(context_messages, step.context, head, self._made)
        return request_context

    def _entries(self, history: Sequence[object], start: int) -> list[Entry]:
        return message_entries(history, start, head=self._head)

    async def aclose(self) -> None:
        """Release the workspace, once the calls already made have finished (a session passed in stays open)."""
        await self._source.aclose()

    def close(self) -> None:
        """`aclose` for code outside an event loop (after ``agent.run_sync``)."""
        self._source.close()

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not in agent specs: it holds an open workspace."""
        return None


def to_pydantic_ai_tool(tool: MemoryTool) -> Tool[Any]:
    """A memory tool as a pydantic-ai tool: its JSON schema as the tool's, the model's arguments going to
    `tool.invoke` in a worker thread (which answers a bad call with an error text for the model, so
    pydantic-ai's own validation is not needed)."""

    async def run(**arguments: Any) -> str:
        return await asyncio.to_thread(tool.invoke, arguments)

    # A copy of its own: the MemoryTool's schema is shared with whoever else uses it.
    schema = copy.deepcopy(dict(tool.parameters))
    return Tool.from_schema(run, name=tool.name, description=tool.description, json_schema=schema)
