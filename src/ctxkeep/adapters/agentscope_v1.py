"""AgentScope 1.x: ctxkeep as the ``ReActAgent``'s ``pre_reasoning`` instance hook, in one line.

    hook = attach(agent, "workspace", window=16_000)

This is the hook the seeds' CoPaw registers. A 1.x ReActAgent sends the model its system prompt, the
memory's compressed summary and the memory's messages, and a hook cannot hand it another list; so
before each reasoning step the hook syncs the memory's messages into the workspace, runs `prepare`, and
when the context differs from the memory (a compaction, an offloaded tool result) puts the context in
the memory: the recent messages as ``Msg``\\ s and the summary as the memory's compressed summary. As in
the seeds, what was compacted leaves the memory once it is archived in the workspace (``dialog/``, with
every full tool output in ``tool_result/``). Rewriting the memory drops the marks its messages carried,
so leave the agent's own ``compression_config`` off.

1.x cannot be installed beside 2.x (the ``agentscope`` extra pins 2.x; its middleware is in
`ctxkeep.adapters.agentscope`): install ``agentscope==1.0.21 'mcp<2' greenlet tqdm`` yourself.
"""

from __future__ import annotations

import importlib
from typing import Any

from ctxkeep.async_session import AsyncSession
from ctxkeep.context import Context, summary_message_text
from ctxkeep.formats.agentscope import from_agentscope, to_agentscope
from ctxkeep.host.core import SessionSource, Workspace

__all__ = ["PreReasoningHook", "attach"]

HOOK_NAME = "ctxkeep"


def _msg_class() -> Any:
    """AgentScope 1.x's ``Msg``; a clear error under 2.x, whose messages this hook does not read."""
    agentscope = importlib.import_module("agentscope")
    version = str(getattr(agentscope, "__version__", ""))
    if not version.startswith("1."):
        raise ImportError(
            f"ctxkeep.adapters.agentscope_v1 is for AgentScope 1.x; found {version or 'an unknown version'}."
            " For 2.x use ctxkeep.adapters.agentscope.ContextMiddleware"
        )
    return importlib.import_module("agentscope.message").Msg


def attach(agent: Any, workspace: Workspace, **settings: Any) -> PreReasoningHook:
    """Register ctxkeep as `agent`'s ``pre_reasoning`` hook; `settings` go to `Session.open` (e.g. ``window=``).

    Returns the hook; ``await hook.close()`` releases the workspace when the agent is done.
    """
    hook = PreReasoningHook(workspace, **settings)
    # A bound coroutine function: AgentScope awaits a hook only when `inspect` says it is one.
    agent.register_instance_hook("pre_reasoning", HOOK_NAME, hook.before_reasoning)
    return hook


class PreReasoningHook:
    """The hook: before each reasoning step, the memory synced, prepared, and replaced by the context."""

    def __init__(self, workspace: Workspace, **settings: Any) -> None:
        self._msg = _msg_class()
        self._source = SessionSource(workspace, settings)

    async def session(self) -> AsyncSession:
        """The session, opened on first use (off the event loop)."""
        return await self._source.asession()

    async def close(self) -> None:
        """Release the workspace (when this hook opened it)."""
        await self._source.aclose()

    async def sync(self, agent: Any) -> None:
        """Add what is new in `agent`'s memory to the workspace (the hook does it before each step; call it
        after the last reply, which no step follows, before closing)."""
        session = await self.session()
        await session.sync(await self._held(agent))

    async def before_reasoning(self, agent: Any, kwargs: dict[str, Any]) -> None:
        """The ``pre_reasoning`` hook (`attach` registers it); returns None: the step's arguments stay."""
        held = await self._held(agent)
        session = await self.session()
        await session.sync(held)
        step = await session.prepare(agent.sys_prompt, tools=agent.toolkit.get_json_schemas() or None)
        if list(step.context.messages) != held or step.context.summary:
            await self._show(agent.memory, step.context)

    async def _held(self, agent: Any) -> list[Any]:
        msgs = await agent.memory.get_memory(prepend_summary=False)
        return from_agentscope([m.to_dict() for m in msgs])

    async def _show(self, memory: Any, context: Context) -> None:
        """Make the memory hold what the model is to see: the recent messages, and the summary."""
        if context.summary:
            await memory.update_compressed_summary(summary_message_text(context.summary))
        msgs = [self._msg.from_dict(d) for d in to_agentscope(list(context.messages))]
        current = await memory.get_memory(prepend_summary=False)
        if [m.to_dict() for m in current] != [m.to_dict() for m in msgs]:
            await memory.clear()
            await memory.add(msgs)
