"""ctxkeep for LangChain v1 agents: one middleware, ``create_agent(..., middleware=[CtxkeepMiddleware("./ws")])``.

Before every model call it takes what is new in the agent's message list into the workspace (an `Intake`;
the conversion both ways is `ctxkeep.formats.langchain`), runs the
pre-reasoning pass with the call's system prompt and tool schemas, and sends the compacted context
instead: the summary as the first message (a `HumanMessage`, as LangChain's own summarization puts it),
then the recent messages as the agent's own objects (an offloaded tool result as a copy with the cut
text). The agent's state keeps its full history; the workspace keeps the summary, archive and offloads.

With ``memory=True`` the middleware also brings the workspace's memory tools (`ctxkeep.memory_tools`) as
LangChain tools, which ``create_agent`` adds to the agent's own. LangGraph's prebuilt
``create_react_agent`` takes the same object's `pre_model_hook` (and its `tools` in its tool list). One
middleware serves one conversation: a workspace holds one history. Needs ``pip install 'ctxkeep[langchain]'``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from ctxkeep.content_ids import Entry
from ctxkeep.formats.langchain import as_chat_dicts, chat_dict, content_of, message_of, to_langchain
from ctxkeep.host import core as _core
from ctxkeep.host.core import Intake, Memory, Piece, SessionSource, Workspace
from ctxkeep.host.inputs import unnumbered
from ctxkeep.memory.tools import MemoryTool
from ctxkeep.session import Session
from ctxkeep.step import Step

__all__ = ["CtxkeepMiddleware", "as_chat_dicts", "to_langchain", "to_langchain_tool"]

ModelHandler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]


class CtxkeepMiddleware(AgentMiddleware[Any, Any, Any]):
    """Keep a LangChain agent's context inside its window: ``middleware=[CtxkeepMiddleware("./ws", window=16_000)]``.

    `workspace` is a folder (opened on the first model call, created when missing) or an open
    `Session`/`AsyncSession`; keyword `settings` go to `Session.open` (``window=``, ``summarizer=``...).
    `memory=True` registers the workspace's memory tools (`tools`, which ``create_agent`` adds to the
    agent's); a list of `MemoryTool`s (``memory_tools(ws, embedder=None)``) registers those instead.
    `agent.invoke` runs the blocking path, `agent.ainvoke` the async one, whose disk and summarizer work
    never blocks the event loop. `close()` (or ``with``) releases a workspace the middleware opened.
    """

    def __init__(self, workspace: Workspace, *, memory: Memory = False, **settings: Any) -> None:
        super().__init__()
        self._source = SessionSource(workspace, settings)
        self.tools: list[BaseTool] = [to_langchain_tool(t) for t in _core.memory_tools_of(workspace, memory, settings)]
        """The memory tools as LangChain tools (empty without `memory`); ``create_agent`` registers them."""
        self._tools: tuple[list[BaseTool | dict[str, Any]], list[dict[str, Any]]] | None = None
        self._intake = Intake(chat_entries)  # the agent's messages, converted and synced once each
        self.last_step: Step | None = None
        """What the last pass did (`Step.compaction`, `.warnings`...), None before the first model call."""

    @property
    def session(self) -> Session | None:
        """The workspace's session once open (None before the first model call when given a path)."""
        return self._source.opened

    def wrap_model_call(self, request: ModelRequest[Any], handler: ModelHandler) -> ModelResponse[Any]:
        """Send the compacted context instead of the whole history."""
        session = self._source.session()
        step, pieces = self._intake.prepare(session, request.messages, request.system_prompt, self._schemas(request))
        return handler(request.override(messages=self._handback(step, pieces, request.messages)))

    async def awrap_model_call(self, request: ModelRequest[Any], handler: AsyncModelHandler) -> ModelResponse[Any]:
        """`wrap_model_call` for `ainvoke`/`astream`: conversion, disk and summarizer run in worker threads."""
        session = await self._source.asession()
        step, pieces = await self._intake.aprepare(
            session, request.messages, request.system_prompt, self._schemas(request)
        )
        return await handler(request.override(messages=self._handback(step, pieces, request.messages)))

    def pre_model_hook(self, state: dict[str, Any]) -> dict[str, Any]:
        """LangGraph's ``create_react_agent(..., pre_model_hook=...)``: the compacted messages as
        ``llm_input_messages`` (the state keeps the full history). The hook sees neither the prompt nor
        the tools, so they are not counted: the compaction threshold's headroom must cover them."""
        messages = state["messages"]
        step, pieces = self._intake.prepare(self._source.session(), messages, None, None)
        return {"llm_input_messages": self._handback(step, pieces, messages)}

    async def apre_model_hook(self, state: dict[str, Any]) -> dict[str, Any]:
        """`pre_model_hook` for an async graph (``RunnableLambda(mw.pre_model_hook, mw.apre_model_hook)``)."""
        messages = state["messages"]
        session = await self._source.asession()
        step, pieces = await self._intake.aprepare(session, messages, None, None)
        return {"llm_input_messages": self._handback(step, pieces, messages)}

    def close(self) -> None:
        """Release the workspace if this middleware opened it (everything is already on disk)."""
        self._source.close()

    async def aclose(self) -> None:
        """`close` without blocking the event loop."""
        await self._source.aclose()

    def __enter__(self) -> CtxkeepMiddleware:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _schemas(self, request: ModelRequest[Any]) -> list[dict[str, Any]] | None:
        """The call's tools as OpenAI schemas, converted once per tool list (an agent's list rarely changes)."""
        tools = request.tools
        if not tools:
            return None
        cached = self._tools
        if (
            cached is None
            or len(cached[0]) != len(tools)
            or any(a is not b for a, b in zip(cached[0], tools, strict=True))
        ):
            cached = (list(tools), [_schema(t) for t in tools])
            self._tools = cached
        return cached[1]

    def _handback(self, step: Step, pieces: Sequence[Piece], history: Sequence[AnyMessage]) -> list[AnyMessage]:
        self.last_step = step
        return handback(pieces, history)


def handback(pieces: Sequence[Piece], history: Sequence[AnyMessage]) -> list[AnyMessage]:
    """The context as LangChain messages: the agent's own objects where ctxkeep kept them as they were."""
    out: list[AnyMessage] = []
    for piece, items in _core.emit_once(pieces):
        if not items:
            out.append(message_of(piece.message, summary=piece.is_summary))
        elif piece.changed:
            original = history[items.start]
            out.append(original.model_copy(update={"content": content_of(piece.message)}))
        else:
            out.extend(history[i] for i in items)
    return out


def _schema(tool: BaseTool | dict[str, Any]) -> dict[str, Any]:
    if isinstance(tool, dict) and tool.get("type") != "function" and "name" not in tool:
        return tool  # a provider's built-in tool ({"type": "web_search"}...): counted as it is sent
    return convert_to_openai_tool(tool)


def to_langchain_tool(tool: MemoryTool) -> StructuredTool:
    """A memory tool as a LangChain tool: its JSON schema as the arguments, the call going to `tool.invoke`
    (which answers a bad call with an error text for the model); the async call runs in a worker thread."""

    def run(**arguments: Any) -> str:
        return tool.invoke(arguments)

    async def arun(**arguments: Any) -> str:
        return await asyncio.to_thread(tool.invoke, arguments)

    # A copy of its own: LangChain wants a dict, and the MemoryTool's schema is shared with whoever else uses it.
    schema = copy.deepcopy(dict(tool.parameters))
    return StructuredTool(name=tool.name, description=tool.description, args_schema=schema, func=run, coroutine=arun)


def chat_entries(messages: Sequence[object], start: int) -> list[Entry]:
    """The entries of LangChain messages, a history's from its item `start` on (an `Intake` converter)."""
    return unnumbered([chat_dict(start + k, m) for k, m in enumerate(messages)], start)
