"""AgentScope 2.x: ctxkeep as an agent middleware, in one line.

    agent = Agent(..., middlewares=[ContextMiddleware("workspace", window=16_000)])

Before every model call (`on_model_call`) the middleware converts the agent's whole context (its
``Msg`` list, which it hands over in full every time) to ctxkeep messages, `AsyncSession.sync`\\ s it,
runs `AsyncSession.prepare` with the system prompt and the call's tool schemas, and passes the model
the compacted context as ``Msg``\\ s. The agent keeps its full history; ctxkeep holds the workspace
(live context, summary, archive, offloaded results). AgentScope's own compression (`on_compress_context`)
is left out, since it would replace the history with its own summary; an explicit request for it
(the agent's ``CompressContext`` tool, or a call with instructions) runs ctxkeep's manual compaction.

With ``memory=True`` the middleware's `list_tools` (AgentScope's hook for the tools a middleware brings)
gives the workspace's memory tools; as for AgentScope's own memory middlewares, the caller puts them in
the agent's toolkit: ``Toolkit(tools=[..., *await middleware.list_tools()])``.

The 1.x ``pre_reasoning`` hook is in `ctxkeep.adapters.agentscope_v1` (1.x cannot be imported beside 2.x).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from agentscope.message import Msg, TextBlock, ToolResultState
from agentscope.middleware import MiddlewareBase
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import ToolBase, ToolChunk

from ctxkeep.async_session import AsyncSession
from ctxkeep.content_ids import Entry
from ctxkeep.context import SYSTEM_ID, Context
from ctxkeep.errors import MessageError
from ctxkeep.formats.agentscope2 import msg_groups, msg_pieces, to_agentscope2
from ctxkeep.host import core as _core
from ctxkeep.host.core import Intake, Memory, SessionSource, Workspace
from ctxkeep.host.inputs import unnumbered
from ctxkeep.memory.tools import MemoryTool
from ctxkeep.messages import Message, ToolResult

__all__ = ["ContextMiddleware", "MemoryToolAdapter", "MsgCache", "context_msgs", "history_messages"]


class ContextMiddleware(MiddlewareBase):
    """Runs ctxkeep before every model call of an AgentScope 2.x agent; give it to ``Agent(middlewares=[...])``.

    `workspace` is a folder (opened on the first call, with `settings` passed to `Session.open`, e.g.
    ``window=16_000``) or a `Session`/`AsyncSession` already open. `memory=True` makes `list_tools` give
    the workspace's memory tools (a list of `MemoryTool`s gives those instead), for the agent's toolkit.
    Close it with `close` (or ``async with``) when the agent is done, to release the workspace's lock.
    """

    def __init__(self, workspace: Workspace, *, memory: Memory = False, **settings: Any) -> None:
        self._source = SessionSource(workspace, settings)
        self._tools: list[ToolBase] = [MemoryToolAdapter(t) for t in _core.memory_tools_of(workspace, memory, settings)]
        self._pieces = PieceCache()
        # The agent's Msgs, converted and synced once each; a Msg grows by blocks, so its block count is its version.
        self._made = MsgCache()  # and the context's Msgs, built once each
        self._intake = Intake(msg_entries, version=lambda msg: len(getattr(msg, "content", ())))

    async def session(self) -> AsyncSession:
        """The session, opened on first use (off the event loop)."""
        return await self._source.asession()

    async def list_tools(self) -> list[ToolBase]:
        """The memory tools (empty without `memory`), for ``Toolkit(tools=[...])``: AgentScope does not add
        a middleware's tools to the agent by itself."""
        return list(self._tools)

    async def close(self) -> None:
        """Release the workspace (when this middleware opened it)."""
        await self._source.aclose()

    async def __aenter__(self) -> ContextMiddleware:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def on_model_call(
        self,
        agent: Any,
        input_kwargs: dict[str, Any],
        next_handler: Callable[..., Awaitable[Any]],
    ) -> Any:
        """Send the model ctxkeep's context instead of the whole history: sync, prepare, convert back."""
        head, history = split_head(input_kwargs["messages"], agent)
        session = await self.session()
        system = "\n\n".join(m.get_text_content() or "" for m in head) or None
        step, _ = await self._intake.aprepare(session, history, system, input_kwargs.get("tools") or None)
        return await next_handler(messages=[*head, *context_msgs(step.context, self._made)])

    async def on_compress_context(
        self,
        agent: Any,
        input_kwargs: dict[str, Any],
        next_handler: Callable[..., Awaitable[None]],
    ) -> None:
        """Keep AgentScope from replacing its history; an explicit request compacts the workspace now."""
        instructions = input_kwargs.get("instructions")
        if input_kwargs.get("context_config") is None and instructions is None:
            return  # the automatic check before each reasoning: ctxkeep's own runs in `on_model_call`
        session = await self.session()
        await session.sync(self._pieces.messages(agent.state.context))
        focus = getattr(instructions, "hint", None)
        await session.compact(focus if isinstance(focus, str) else None)


def split_head(messages: Sequence[Msg], agent: Any) -> tuple[list[Msg], list[Msg]]:
    """The system prompt (and a summary AgentScope wrote itself, before ctxkeep) apart from the history.

    AgentScope builds both anew for every call, with new ids, so they are sent as they are and only
    counted, never synced.
    """
    head = list(messages[:1]) if messages and messages[0].role == "system" else []
    rest = list(messages[len(head) :])
    if getattr(agent.state, "summary", None) and rest and rest[0].role == "user":
        head.append(rest.pop(0))
    return head, rest


def history_messages(history: Sequence[Msg]) -> list[Message]:
    """The ctxkeep messages of an AgentScope 2.x history (see `ctxkeep.formats.agentscope2`)."""
    return [m for msg in history for m in msg_pieces(msg.model_dump(mode="json"))]


def msg_entries(history: Sequence[object], start: int) -> list[Entry]:
    """The entries of AgentScope 2.x Msgs, a history's from its item `start` on (an `Intake` converter): a Msg's
    pieces all stand for it."""
    out: list[Entry] = []
    for i, msg in enumerate(history, start):
        if not isinstance(msg, Msg):
            raise MessageError(f"history item {i}: expected an AgentScope Msg, got {type(msg).__name__}", index=i)
        out += [replace(e, index=i) for e in unnumbered(msg_pieces(msg.model_dump(mode="json")), i)]
    return out


def context_msgs(context: Context, made: MsgCache | None = None) -> list[Msg]:
    """ctxkeep's context (summary and recent messages, not the system prompt) as AgentScope 2.x ``Msg``\\ s;
    `made` keeps the Msgs built for the same messages before."""
    return (made if made is not None else MsgCache()).msgs([m for m in context.as_messages() if m.id != SYSTEM_ID])


class MsgCache:
    """The Msgs built for a context's messages, kept between calls by the messages each was built from: a
    context is mostly the same message objects call after call, so each Msg is built once. What a call did
    not use is let go."""

    def __init__(self) -> None:
        self._kept: dict[tuple[tuple[int, ...], tuple[str, ...]], tuple[list[Message], Msg]] = {}

    def msgs(self, messages: Sequence[Message]) -> list[Msg]:
        """The Msgs of `messages` (`to_agentscope2`)."""
        names = {c.id: c.name for m in messages for c in m.tool_calls}
        kept: dict[tuple[tuple[int, ...], tuple[str, ...]], tuple[list[Message], Msg]] = {}
        out: list[Msg] = []
        for group in msg_groups(messages):
            # A result ctxkeep wrote is named after its call's tool: that name is part of what it was built from.
            called = tuple(names.get(b.call_id, "") for m in group for b in m.content if isinstance(b, ToolResult))
            key = (tuple(id(m) for m in group), called)
            hit = self._kept.get(key) or kept.get(key)
            if hit is None or any(a is not b for a, b in zip(hit[0], group, strict=True)):
                hit = (group, Msg.model_validate(to_agentscope2(group, names=names)[0]))
            kept[key] = hit
            out.append(hit[1])
        self._kept = kept
        return out


class MemoryToolAdapter(ToolBase):
    """A memory tool as an AgentScope 2.x tool: its JSON schema as `input_schema`, the call going to
    `MemoryTool.invoke` in a worker thread; a bad call is an error result whose text says what to fix."""

    is_concurrency_safe = True  # the memory's own lock keeps concurrent writers apart
    is_read_only = True

    def __init__(self, tool: MemoryTool) -> None:
        super().__init__()
        self.tool = tool
        self.name = tool.name
        self.description = tool.description
        # A copy of its own: the MemoryTool's schema is shared with whoever else uses it.
        self.input_schema = copy.deepcopy(dict(tool.parameters))
        # Only memory_write changes anything, and only the workspace's memory files.
        self.is_read_only = tool.name != "memory_write"

    async def check_permissions(self, *args: Any, **kwargs: Any) -> PermissionDecision:
        """Allowed: the tools reach only the workspace's memory and archive files (as AgentScope's own
        memory middlewares' tools allow themselves); asking on every call would defeat them."""
        return PermissionDecision(behavior=PermissionBehavior.ALLOW, message="ctxkeep memory tool")

    async def call(self, *args: Any, **kwargs: Any) -> ToolChunk:
        """Run the tool with the model's arguments."""
        text = await asyncio.to_thread(self.tool.invoke, kwargs)
        state = ToolResultState.ERROR if text.startswith("error: ") else ToolResultState.SUCCESS
        return ToolChunk(content=[TextBlock(text=text)], state=state)


class PieceCache:
    """Each Msg's pieces, converted once: a Msg only grows (blocks are appended), so it is converted
    again only when its block count changed, and the history's conversion costs the new blocks."""

    def __init__(self) -> None:
        self._pieces: dict[str, tuple[int, list[Message]]] = {}

    def messages(self, history: Sequence[Msg]) -> list[Message]:
        """The ctxkeep messages of `history`, oldest first."""
        out: list[Message] = []
        seen: set[str] = set()
        for msg in history:
            seen.add(msg.id)
            cached = self._pieces.get(msg.id)
            if cached is None or cached[0] != len(msg.content):
                cached = (len(msg.content), msg_pieces(msg.model_dump(mode="json")))
                self._pieces[msg.id] = cached
            out.extend(cached[1])
        for gone in self._pieces.keys() - seen:
            del self._pieces[gone]
        return out
