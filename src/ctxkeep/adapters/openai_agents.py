"""ctxkeep for the OpenAI Agents SDK: a model-input filter, and a `Session` kept in a ctxkeep workspace.

    run_config=RunConfig(call_model_input_filter=CtxkeepInputFilter("./ws", window=16_000))

The filter gets the whole input of every model call (Responses-API items) and the agent's
instructions; it syncs the items into the workspace, runs the pre-reasoning pass with the
instructions and the agent's tool schemas, and returns the compacted items: the summary first (a user
message), then the recent items as the host's own dicts (an offloaded result as a copy with the cut
text). The host keeps its full history (``result.to_input_list()``, an SDK session...).

`CtxkeepSession` is the SDK's `Session` protocol over the workspace itself, for a host that keeps no
history: ``Runner.run(agent, text, session=s, run_config=RunConfig(call_model_input_filter=s.input_filter))``.
Its `get_items` returns the compacted view; ctxkeep never deletes what it holds, so `pop_item` and
`clear_session` refuse (see their docstrings).

A filter cannot add tools to a call, so the memory tools go to the agent: with ``memory=True`` the
filter's (or session's) `tools` are the workspace's memory tools as `FunctionTool`s, for
``Agent(tools=[*yours, *input_filter.tools])``. Needs ``pip install 'ctxkeep[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agents import Agent, FunctionTool, Handoff, handoff
from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.run_config import CallModelData, ModelInputData
from agents.tool_context import ToolContext

from ctxkeep.async_session import AsyncSession
from ctxkeep.context import SYSTEM_ID
from ctxkeep.context import of as context_of
from ctxkeep.errors import WorkspaceError
from ctxkeep.formats.responses import to_responses
from ctxkeep.host import core as _core
from ctxkeep.host.core import Intake, Memory, Piece, SessionSource, Workspace
from ctxkeep.host.inputs import convert
from ctxkeep.live import Tools
from ctxkeep.memory.tools import MemoryTool
from ctxkeep.session import Session
from ctxkeep.step import Step

__all__ = ["CtxkeepInputFilter", "CtxkeepSession", "to_function_tool", "tool_schemas"]


class CtxkeepInputFilter:
    """``RunConfig(call_model_input_filter=CtxkeepInputFilter("./ws", window=16_000))``.

    `workspace` is a folder (opened on the first model call, off the event loop; created when missing)
    or an open `Session`/`AsyncSession`; keyword `settings` go to `Session.open`. `memory=True` makes
    `tools` the workspace's memory tools, for ``Agent(tools=[..., *input_filter.tools])``; a list of
    `MemoryTool`s (``memory_tools(ws, embedder=None)``) gives those instead. One filter serves one
    conversation: a workspace holds one history. `aclose()` releases a workspace the filter opened.
    """

    def __init__(self, workspace: Workspace, *, memory: Memory = False, **settings: Any) -> None:
        self._source = SessionSource(workspace, settings)
        self.tools: list[FunctionTool] = [
            to_function_tool(t) for t in _core.memory_tools_of(workspace, memory, settings)
        ]
        """The memory tools as `FunctionTool`s for the agent (empty without `memory`): a filter cannot add them."""
        self.last_step: Step | None = None
        """What the last pass did (`Step.compaction`, `.warnings`...), None before the first model call."""
        self._intake = Intake()  # the run's items, converted and synced once each

    @property
    def session(self) -> Session | None:
        """The workspace's session once open (None before the first model call when given a path)."""
        return self._source.opened

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """The compacted input for this model call; the instructions are sent as they are."""
        items = list(data.model_data.input)
        instructions = data.model_data.instructions
        session = await self._source.asession()
        step, pieces = await self._prepare(session, items, instructions, tool_schemas(data.agent))
        self.last_step = step
        out = await asyncio.to_thread(handback, pieces, items)
        return ModelInputData(input=out, instructions=instructions)

    async def aclose(self) -> None:
        """Release the workspace if this filter opened it (everything is already on disk)."""
        await self._source.aclose()

    async def _prepare(
        self, session: AsyncSession, items: list[Any], instructions: str | None, tools: Tools
    ) -> tuple[Step, list[Piece]]:
        return await self._intake.aprepare(session, items, instructions, tools)


class _SessionFilter(CtxkeepInputFilter):
    """A `CtxkeepSession`'s filter: every item of the input was added by `add_items` before the call (the
    SDK saves each turn before the next), so there is nothing to sync, only to prepare."""

    def __init__(self, source: SessionSource, tools: list[FunctionTool]) -> None:
        self._source = source
        self.tools = tools
        self.last_step = None

    async def _prepare(
        self, session: AsyncSession, items: list[Any], instructions: str | None, tools: Tools
    ) -> tuple[Step, list[Piece]]:
        step = await session.prepare(instructions, tools=tools)
        return step, await asyncio.to_thread(lambda: _core.pieces(step.context, convert(items), len(items)))


class CtxkeepSession:
    """The Agents SDK's `Session` protocol over a ctxkeep workspace: the conversation is kept there.

    ``Runner.run(agent, text, session=s, run_config=RunConfig(call_model_input_filter=s.input_filter))``.
    `get_items` is the compacted view (summary, then the recent items); `add_items` appends to the
    workspace; `input_filter` compacts before each model call (without it nothing is compacted during
    a run). Arguments as for `CtxkeepInputFilter` (`tools`: the memory tools for the agent, with
    `memory`); `session_id` names the conversation for the SDK.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self, workspace: Workspace, *, session_id: str = "ctxkeep", memory: Memory = False, **settings: Any
    ) -> None:
        self.session_id = session_id
        self._source = SessionSource(workspace, settings)
        self.tools: list[FunctionTool] = [
            to_function_tool(t) for t in _core.memory_tools_of(workspace, memory, settings)
        ]
        """The memory tools as `FunctionTool`s for the agent (empty without `memory`)."""
        self.input_filter: CtxkeepInputFilter = _SessionFilter(self._source, self.tools)
        """The `call_model_input_filter` for runs on this session."""

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The summary (as a user message) and the live messages as Responses input items, the latest
        `limit` when given. Offloaded results are cut, with the path of their full text."""
        session = await self._source.asession()
        items = await asyncio.to_thread(_view, session.session)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items to the workspace, durably (ids from content, past those it holds)."""
        session = await self._source.asession()
        await session.add(list(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Refused: ctxkeep never removes a message it holds (it may be archived, summarized or offloaded
        already, and the archive is the conversation's record). Raises `WorkspaceError`; add a correcting
        message instead, or start a new workspace."""
        raise WorkspaceError(
            "ctxkeep never removes a message it holds (the archive is the conversation's record);"
            " add a correcting message instead, or open a new workspace for a new conversation"
        )

    async def clear_session(self) -> None:
        """Refused: clearing would delete the archive and summary. Raises `WorkspaceError`; open a new
        workspace (a new folder) for a new conversation, and remove the old folder yourself if you mean to."""
        raise WorkspaceError(
            "ctxkeep does not delete a workspace's history (its archive and summary); open a new workspace"
            " for a new conversation, and remove the old folder yourself if you mean to"
        )

    async def aclose(self) -> None:
        """Release the workspace if this session opened it."""
        await self._source.aclose()


def _view(session: Session) -> list[dict[str, Any]]:
    """The context of the live messages, without ctxkeep's system prompt (the agent has its instructions)."""
    context = context_of(session.live, session.counter)
    return to_responses([m for m in context.as_messages() if m.id != SYSTEM_ID])


def handback(pieces: Sequence[Piece], items: Sequence[Any]) -> list[TResponseInputItem]:
    """The context as input items: the host's own items where ctxkeep kept them as they were."""
    out: list[Any] = []
    for piece, span in _core.emit_once(pieces):
        if not span:
            out.extend(to_responses([piece.message]))
        elif piece.changed and len(span) == 1 and _is_output(items[span.start]):
            out.append({**items[span.start], "output": to_responses([piece.message])[0]["output"]})
        elif piece.changed:
            out.extend(to_responses([piece.message]))
        else:
            out.extend(items[i] for i in span)
    return cast("list[TResponseInputItem]", out)


def _is_output(item: object) -> bool:
    return isinstance(item, Mapping) and item.get("type") == "function_call_output"


def to_function_tool(tool: MemoryTool) -> FunctionTool:
    """A memory tool as the SDK's `FunctionTool`: its JSON schema as the parameters, the model's arguments
    going to `tool.invoke` in a worker thread (disk and search never block the event loop; a bad call is
    answered with an error text for the model)."""

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        # The SDK's own function tools read no arguments at all as an empty object; so does this one.
        return await asyncio.to_thread(tool.invoke, arguments or "{}")

    # Not strict: strict mode would make every optional argument required. A copy of its own: the SDK keeps
    # the dict it is given, and the MemoryTool's schema is shared with whoever else uses it.
    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=copy.deepcopy(dict(tool.parameters)),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


def tool_schemas(agent: Agent[Any]) -> list[dict[str, Any]]:
    """The agent's function tools and handoffs as chat-completions tool schemas (what is counted); a hosted
    tool as its type alone. Tools an MCP server lists at run time are not seen here, so not counted."""
    schemas: list[dict[str, Any]] = []
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            schemas.append(_function(tool.name, tool.description, tool.params_json_schema))
        else:
            schemas.append({"type": getattr(tool, "type", None) or tool.name})
    for item in agent.handoffs:
        h = item if isinstance(item, Handoff) else handoff(item)
        schemas.append(_function(h.tool_name, h.tool_description, h.input_json_schema))
    return schemas


def _function(name: str, description: str | None, parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description or "", "parameters": parameters}}
