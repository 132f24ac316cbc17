"""What each adapter adds to a model call on a long history: its hook timed against `Session.prepare` alone.

Run: .venv/bin/python bench/bench_host_calls.py [--messages 2000] [--calls 20] [--only langchain,...]

Per adapter, a history of `--messages` messages in the framework's own types (an ask, a tool call, its
output, a reply, over and over) is handed to the adapter's hook once (the first call takes it all in),
then `--calls` times with one more tool call and its result each, as an agent loop does. Printed per
adapter: the hook's time per call and `Session.prepare`'s inside it (medians, ms), and the difference,
what the adapter itself adds (converting, syncing, mapping the context back). The window is far above
the history, so nothing compacts: the figure is the per-call cost, not a compaction's. In memory (no disk).

Target (issue 20 part 4): what an adapter adds does not grow with the history (O(new messages)).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxkeep import Session  # noqa: E402
from ctxkeep.async_session import AsyncSession  # noqa: E402
from ctxkeep.folder import MemoryFolder  # noqa: E402
from ctxkeep.settings import EngineSettings  # noqa: E402

SETTINGS = EngineSettings.for_window(10_000_000)
SYSTEM = "You are a coding agent."


def output(i: int) -> str:
    return "\n".join(f"src/pkg/module_{i}_{k}.py:{k + 1}: def handler_{k}(request): ..." for k in range(6))


@contextmanager
def timed_prepare(calls: list[float]) -> Iterator[None]:
    """Time every `Session.prepare` (an `AsyncSession` runs it in a worker thread)."""
    original = Session.prepare

    def prepare(self: Session, *args: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kw)
        finally:
            calls.append(time.perf_counter() - start)

    Session.prepare = prepare  # type: ignore[method-assign]
    try:
        yield
    finally:
        Session.prepare = original  # type: ignore[method-assign]


# --- each framework: a turn in its own types, and one call of its hook -----------------------------------


def langchain_turn(i: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    call = {"id": f"call-{i}", "name": "bash", "args": {"command": f"grep -rn handler src/ # {i}"}}
    return [
        HumanMessage(content=f"Step {i}: find the handlers of area {i % 7}."),
        AIMessage(content="", tool_calls=[call]),
        ToolMessage(content=output(i), tool_call_id=f"call-{i}"),
        AIMessage(content=f"Area {i % 7}: handler_{i % 5} is the one."),
    ]


def langchain_call(session: Session) -> Callable[[list[Any]], Any]:
    from ctxkeep.adapters.langchain import CtxkeepMiddleware

    middleware = CtxkeepMiddleware(session)
    return lambda history: middleware.pre_model_hook({"messages": history})


def pydantic_ai_turn(i: int) -> list[Any]:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.messages import UserPromptPart as Prompt

    call = ToolCallPart(tool_name="bash", args={"command": f"grep -rn handler src/ # {i}"}, tool_call_id=f"call-{i}")
    return [
        ModelRequest(parts=[Prompt(content=f"Step {i}: find the handlers of area {i % 7}.")]),
        ModelResponse(parts=[call]),
        ModelRequest(parts=[ToolReturnPart(tool_name="bash", content=output(i), tool_call_id=f"call-{i}")]),
        ModelResponse(parts=[TextPart(content=f"Area {i % 7}: handler_{i % 5} is the one.")]),
    ]


def pydantic_ai_call(session: Session) -> Callable[[list[Any]], Any]:
    from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
    from pydantic_ai.models.test import TestModel

    from ctxkeep.adapters.pydantic_ai import CtxkeepCapability

    capability = CtxkeepCapability(AsyncSession(session))
    model = TestModel()

    async def call(history: list[Any]) -> Any:
        request = ModelRequestContext(
            model=model, messages=list(history), model_settings=None, model_request_parameters=ModelRequestParameters()
        )
        return await capability.before_model_request(None, request)  # type: ignore[arg-type]  # the run is not read

    return call


def openai_agents_turn(i: int) -> list[Any]:
    return [
        {"role": "user", "content": f"Step {i}: find the handlers of area {i % 7}."},
        {
            "type": "function_call",
            "call_id": f"call-{i}",
            "name": "bash",
            "arguments": f'{{"command": "grep -rn handler src/ # {i}"}}',
        },
        {"type": "function_call_output", "call_id": f"call-{i}", "output": output(i)},
        {"role": "assistant", "content": f"Area {i % 7}: handler_{i % 5} is the one."},
    ]


def openai_agents_call(session: Session) -> Callable[[list[Any]], Any]:
    from agents import Agent
    from agents.run_config import CallModelData, ModelInputData

    from ctxkeep.adapters.openai_agents import CtxkeepInputFilter

    input_filter = CtxkeepInputFilter(AsyncSession(session))
    agent = Agent(name="bench", instructions=SYSTEM)

    async def call(history: list[Any]) -> Any:
        given = ModelInputData(input=list(history), instructions=SYSTEM)
        return await input_filter(CallModelData(model_data=given, agent=agent, context=None))

    return call


def agentscope_turn(i: int) -> list[Any]:
    from agentscope.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock

    command = f'{{"command": "grep -rn handler src/ # {i}"}}'
    return [
        Msg(name="user", role="user", content=[TextBlock(text=f"Step {i}: find the handlers of area {i % 7}.")]),
        Msg(name="agent", role="assistant", content=[ToolCallBlock(id=f"call-{i}", name="bash", input=command)]),
        Msg(
            name="agent",
            role="assistant",
            content=[ToolResultBlock(id=f"call-{i}", name="bash", output=[TextBlock(text=output(i))])],
        ),
        Msg(name="agent", role="assistant", content=[TextBlock(text=f"Area {i % 7}: handler_{i % 5} is the one.")]),
    ]


def agentscope_call(session: Session) -> Callable[[list[Any]], Any]:
    from agentscope.message import Msg, TextBlock

    from ctxkeep.adapters.agentscope import ContextMiddleware

    middleware = ContextMiddleware(AsyncSession(session))
    agent = SimpleNamespace(state=SimpleNamespace(summary=None, context=[]))
    system = Msg(name="system", role="system", content=[TextBlock(text=SYSTEM)])

    async def handler(**kw: Any) -> Any:
        return kw["messages"]

    async def call(history: list[Any]) -> Any:
        return await middleware.on_model_call(agent, {"messages": [system, *history], "tools": None}, handler)

    return call


ADAPTERS: dict[str, tuple[Callable[[int], list[Any]], Callable[[Session], Callable[[list[Any]], Any]]]] = {
    "langchain": (langchain_turn, langchain_call),
    "pydantic-ai": (pydantic_ai_turn, pydantic_ai_call),
    "openai-agents": (openai_agents_turn, openai_agents_call),
    "agentscope": (agentscope_turn, agentscope_call),
}


def measure(name: str, messages: int, calls: int) -> tuple[float, float]:
    """The hook's and `prepare`'s median seconds per call for adapter `name`."""
    make_turn, make_call = ADAPTERS[name]
    history = [m for i in range(messages // 4) for m in make_turn(i)]
    hook: list[float] = []
    prepared: list[float] = []
    with Session(MemoryFolder(), settings=SETTINGS) as session, timed_prepare(prepared):
        call = make_call(session)
        loop = asyncio.new_event_loop()

        def run(history: list[Any]) -> None:
            result = call(history)
            if asyncio.iscoroutine(result):
                loop.run_until_complete(result)

        run(history)  # the first call takes the whole history in
        prepared.clear()
        for k in range(calls):
            turn = make_turn(messages + k)
            history = [*history, *turn[1:3]]  # a new list, as the frameworks hand over
            start = time.perf_counter()
            run(history)
            hook.append(time.perf_counter() - start)
        loop.close()
    return statistics.median(hook), statistics.median(prepared)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--only", default=",".join(ADAPTERS))
    args = parser.parse_args()
    print(f"{args.messages:,} messages, then {args.calls} calls of one tool call and its result each; medians")
    print(f"{'adapter':<15} {'hook ms':>9} {'prepare ms':>11} {'adapter adds ms':>16}")
    for name in args.only.split(","):
        try:
            hook, prepared = measure(name, args.messages, args.calls)
        except ImportError as exc:
            print(f"{name:<15} skipped: {exc}")
            continue
        print(f"{name:<15} {hook * 1000:>9.1f} {prepared * 1000:>11.1f} {(hook - prepared) * 1000:>16.1f}")


if __name__ == "__main__":
    main()
