"""ctxkeep for LangChain v1 agents: one middleware, ``create_agent(..., middleware=[CtxkeepMiddleware("./ws")])``.

Before every model call it syncs the agent's whole message list into the workspace, runs the
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
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from ctxkeep.errors import MessageError
from ctxkeep.host import core as _core
from ctxkeep.host.core import Memory, Piece, SessionSource, Workspace
from ctxkeep.memory.tools import MemoryTool
from ctxkeep.messages import ImageBlock, Message, TextBlock, ToolResult
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
        self.tools: list[BaseTool] = [to_langchain_tool(t) for t in _core.memory_tools_of(workspace, memory)]
        """The memory tools as LangChain tools (empty without `memory`); ``create_agent`` registers them."""
        self._tools: tuple[list[BaseTool | dict[str, Any]], list[dict[str, Any]]] | None = None
        self.last_step: Step | None = None
        """What the last pass did (`Step.compaction`, `.warnings`...), None before the first model call."""

    @property
    def session(self) -> Session | None:
        """The workspace's session once open (None before the first model call when given a path)."""
        return self._source.opened

    def wrap_model_call(self, request: ModelRequest[Any], handler: ModelHandler) -> ModelResponse[Any]:
        """Send the compacted context instead of the whole history."""
        step, pieces = _core.prepare(
            self._source.session(), as_chat_dicts(request.messages), request.system_prompt, self._schemas(request)
        )
        return handler(request.override(messages=self._handback(step, pieces, request.messages)))

    async def awrap_model_call(self, request: ModelRequest[Any], handler: AsyncModelHandler) -> ModelResponse[Any]:
        """`wrap_model_call` for `ainvoke`/`astream`: conversion, disk and summarizer run in worker threads."""
        session = await self._source.asession()
        history = await asyncio.to_thread(as_chat_dicts, request.messages)
        step, pieces = await _core.aprepare(session, history, request.system_prompt, self._schemas(request))
        return await handler(request.override(messages=self._handback(step, pieces, request.messages)))

    def pre_model_hook(self, state: dict[str, Any]) -> dict[str, Any]:
        """LangGraph's ``create_react_agent(..., pre_model_hook=...)``: the compacted messages as
        ``llm_input_messages`` (the state keeps the full history). The hook sees neither the prompt nor
        the tools, so they are not counted: the compaction threshold's headroom must cover them."""
        messages = state["messages"]
        step, pieces = _core.prepare(self._source.session(), as_chat_dicts(messages), None, None)
        return {"llm_input_messages": self._handback(step, pieces, messages)}

    async def apre_model_hook(self, state: dict[str, Any]) -> dict[str, Any]:
        """`pre_model_hook` for an async graph (``RunnableLambda(mw.pre_model_hook, mw.apre_model_hook)``)."""
        messages = state["messages"]
        session = await self._source.asession()
        history = await asyncio.to_thread(as_chat_dicts, messages)
        step, pieces = await _core.aprepare(session, history, None, None)
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
            out.append(_message_of(piece.message, summary=piece.is_summary))
        elif piece.changed:
            original = history[items.start]
            out.append(original.model_copy(update={"content": _content_of(piece.message)}))
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


# --- LangChain -> OpenAI chat dicts (what Session.sync takes) -------------------------------------------


def as_chat_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as OpenAI chat dicts, one each, for `Session.sync` and counting.

    Tool calls (valid or not: the provider is sent both) keep their ids, so results stay paired.
    Reasoning blocks are left out (the chat format has no place for them). Raises `MessageError` naming
    the position of a message of an unknown kind.
    """
    return [_chat_dict(i, m) for i, m in enumerate(messages)]


def _chat_dict(i: int, msg: BaseMessage) -> dict[str, Any]:
    if isinstance(msg, ToolMessage):
        return {"role": "tool", "tool_call_id": msg.tool_call_id, "content": _chat_content(msg.content)}
    if isinstance(msg, AIMessage):
        calls = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
            for c in msg.tool_calls
            if c.get("id")
        ]
        calls += [
            {"id": c["id"], "type": "function", "function": {"name": c["name"] or "", "arguments": c["args"] or ""}}
            for c in msg.invalid_tool_calls
            if c.get("id")
        ]
        text = msg.text
        out: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
        if calls:
            out["tool_calls"] = calls
        return out
    role: str | None = None
    if isinstance(msg, SystemMessage):
        role = "system"
    elif isinstance(msg, HumanMessage):
        role = "user"
    elif isinstance(msg, ChatMessage) and msg.role in ("system", "developer", "user", "assistant"):
        role = msg.role
    if role is None:
        raise MessageError(
            f"history item {i}: a {type(msg).__name__} ({msg.type!r}) is not a message ctxkeep can place;"
            " expected a HumanMessage, AIMessage, ToolMessage or SystemMessage",
            index=i,
        )
    return {"role": role, "content": _chat_content(msg.content)}


def _chat_content(content: str | list[str | dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif block.get("type") == "image_url":
            parts.append({"type": "image_url", "image_url": block["image_url"]})
        elif block.get("type") == "image" and (block.get("url") or block.get("base64")):
            url = block.get("url") or f"data:{block.get('mime_type', 'image/png')};base64,{block['base64']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            # Anything else (a file, audio, a provider's block) counts as its JSON text: never as nothing.
            parts.append({"type": "text", "text": json.dumps(block, ensure_ascii=False, default=str)})
    return parts


# --- ctxkeep -> LangChain ---------------------------------------------------------------------------------


def to_langchain(messages: Sequence[Message]) -> list[AnyMessage]:
    """ctxkeep messages as LangChain messages: ids kept, tool calls with their parsed arguments, each
    result a `ToolMessage` with its call's id (``status="error"`` for an error result)."""
    return [_message_of(m) for m in messages]


def _message_of(msg: Message, *, summary: bool = False) -> AnyMessage:
    if msg.role == "tool":
        result = msg.content[0]
        assert isinstance(result, ToolResult)
        return ToolMessage(
            content=_content_of(msg),
            tool_call_id=result.call_id,
            status="error" if result.is_error else "success",
            id=msg.id,
        )
    if msg.role == "assistant":
        calls = [{"name": c.name, "args": c.input_object(), "id": c.id, "type": "tool_call"} for c in msg.tool_calls]
        return AIMessage(content=msg.text, tool_calls=calls, id=msg.id)
    if msg.role == "system":
        return SystemMessage(content=_content_of(msg), id=msg.id)
    # LangChain's own summarization marks its summary message so; other middleware recognises it.
    extra = {"lc_source": "summarization"} if summary else {}
    return HumanMessage(content=_content_of(msg), id=msg.id, additional_kwargs=extra)


def _content_of(msg: Message) -> str | list[str | dict[str, Any]]:
    blocks = msg.content
    if msg.role == "tool":
        result = blocks[0]
        assert isinstance(result, ToolResult)
        if isinstance(result.content, str):
            return result.content
        blocks = result.content
    if not any(isinstance(b, ImageBlock) for b in blocks):
        return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
    parts: list[str | dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            url = b.url if b.url is not None else f"data:{b.media_type};base64,{b.data or ''}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts
