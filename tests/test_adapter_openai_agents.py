"""The OpenAI Agents SDK adapter: a real `Agent` and `Runner`, over real HTTP, against the validating server.

The long run: the agent's own `@function_tool` returns ~30 KB per call, 150 tasks at a 16k window
(every third task two parallel calls), the process "restarted" halfway (a new filter and agent on the
same workspace, carrying on with ``result.to_input_list()`` as the host holds it): every request valid
and inside the window, every message of the host's history held exactly once. The same conversation
kept by `CtxkeepSession` instead of the host, and a short run whose summaries the real llama-server
writes. The Responses converter and the session protocol are tested alone.

The validating server speaks Chat Completions, so the agent's model is `OpenAIChatCompletionsModel`;
the filter sees Responses-API items either way.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    set_default_openai_api,
    set_tracing_disabled,
)
from agents.items import TResponseInputItem
from openai import AsyncOpenAI
from tests import local_model
from tests.validating_server import ValidatingServer, held_ids, task, tool_output

from ctxkeep import Session, WorkspaceError, memory_tools, to_messages
from ctxkeep.adapters.openai_agents import CtxkeepInputFilter, CtxkeepSession, tool_schemas
from ctxkeep.context import SUMMARY_TAG
from ctxkeep.formats.responses import to_responses
from ctxkeep.pairing import validate

pytestmark = pytest.mark.extra("openai-agents")

WINDOW = 16_000
SYSTEM = "You are a build engineer. Use the tools, then answer briefly."


@function_tool
def search_logs(query: str) -> str:
    """Search the build logs; returns the matching lines."""
    return tool_output(query)


def make_agent(base_url: str, memory: Sequence[FunctionTool] = ()) -> Agent[Any]:
    """The host's agent: the SDK's chat-completions model on `base_url`, one `@function_tool` after the
    `memory` tools an adapter gives."""
    client = AsyncOpenAI(base_url=base_url, api_key="sk-local", max_retries=0, timeout=120)
    model = OpenAIChatCompletionsModel(model="validating", openai_client=client)
    return Agent(name="build-engineer", instructions=SYSTEM, tools=[*memory, search_logs], model=model)


def config(input_filter: CtxkeepInputFilter) -> RunConfig:
    # No tracing: its exporter would try to reach the OpenAI platform.
    return RunConfig(call_model_input_filter=input_filter, tracing_disabled=True)


async def aplay(
    workspace: Path,
    base_url: str,
    tasks: int,
    restart_at: int | None = None,
    kind: type[CtxkeepInputFilter] = CtxkeepInputFilter,
    **settings: Any,
) -> list[TResponseInputItem]:
    """`tasks` tasks, the host carrying ``result.to_input_list()``; a new filter and agent at `restart_at`."""
    settings = {"window": WINDOW, **settings}
    history: list[TResponseInputItem] = []
    input_filter = kind(workspace, **settings)
    agent = make_agent(base_url)
    try:
        for i in range(tasks):
            if i == restart_at:
                await input_filter.aclose()  # a new process sees just the workspace, and the history its host kept
                input_filter = kind(workspace, **settings)
                agent = make_agent(base_url)
            result = await Runner.run(
                agent, [*history, {"role": "user", "content": task(i)}], run_config=config(input_filter)
            )
            history = result.to_input_list()
    finally:
        await input_filter.aclose()
    return history


async def arun(workspace: Path, base_url: str, tasks: int, restart_at: int | None = None) -> None:
    """The long run (bench/bench_adapters.py times it). The SDK is async; ``Runner.run_sync`` takes the same path."""
    await aplay(workspace, base_url, tasks, restart_at)


def run(workspace: Path, base_url: str, tasks: int, restart_at: int | None = None) -> None:
    """`arun` in a new event loop."""
    asyncio.run(arun(workspace, base_url, tasks, restart_at))


def check_requests(api: ValidatingServer, tasks: int, window: int = WINDOW) -> None:
    """No request refused, none over the window, and some carried a summary."""
    assert api.refused == []
    assert api.peak_tokens <= window
    assert len(api.records) >= 2 * tasks
    summarized = [r for r in api.records if any(SUMMARY_TAG in str(m.get("content")) for m in r.body["messages"])]
    assert summarized, "no request carried a summary: nothing was compacted"


def check_held(workspace: Path, history: list[TResponseInputItem], window: int = WINDOW) -> None:
    """Every message of the host's history held exactly once, live or archived. Items and messages are not
    one to one: the items of one assistant turn (parallel `function_call`s) make one message."""
    with Session.open(workspace, window=window) as session:
        session.sync(history)  # the last answer, which no model call has synced yet
        held = held_ids(session)
    assert len(held) == len(set(held)) == len(to_messages(history))


@pytest.mark.slow
def test_150_tasks_at_16k_with_a_restart_halfway(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        history = asyncio.run(aplay(tmp_path / "ws", api.base_url, tasks=150, restart_at=75))
    check_requests(api, 150)
    check_held(tmp_path / "ws", history)
    # The host keeps its whole history: the 30 KB outputs are all there, uncut.
    assert all(len(str(i["output"])) > 25_000 for i in history if i.get("type") == "function_call_output")


def test_a_short_run_hands_back_the_hosts_own_items(tmp_path: Path) -> None:
    sent: list[list[Any]] = []

    class Spy(CtxkeepInputFilter):
        async def __call__(self, data: Any) -> Any:
            out = await super().__call__(data)
            sent.append(out.input)
            return out

    with ValidatingServer(window=WINDOW) as api:
        history: list[Any] = asyncio.run(aplay(tmp_path / "ws", api.base_url, tasks=12, restart_at=6, kind=Spy))
    check_requests(api, 12)
    check_held(tmp_path / "ws", history)
    last = sent[-1]
    assert last[0]["role"] == "user" and last[0]["content"].startswith(f"<{SUMMARY_TAG}>")  # the summary first
    for item in last[1:]:
        if item.get("type") == "function_call_output":
            original = next(h for h in history if h.get("call_id") == item["call_id"] and h.get("type") == item["type"])
            assert len(item["output"]) <= len(original["output"])
            if item["output"] != original["output"]:
                assert "tool_result/" in item["output"]  # the notice names the file with the whole output
        else:
            assert any(item is h for h in history) or item in history  # the host's own item, provider_data and all
    assert any(i.get("provider_data") for i in last)
    assert api.records[-1].body["messages"][0] == {"role": "system", "content": SYSTEM}


@pytest.mark.slow
def test_a_ctxkeep_session_keeps_the_conversation_across_a_restart(tmp_path: Path) -> None:
    added: list[list[Any]] = []

    class Spy(CtxkeepSession):
        async def add_items(self, items: list[Any]) -> None:
            added.append(list(items))
            await super().add_items(items)

    async def go(base_url: str) -> None:
        session = Spy(tmp_path / "ws", window=WINDOW)
        agent = make_agent(base_url)
        for i in range(40):
            if i == 20:
                await session.aclose()
                session = Spy(tmp_path / "ws", window=WINDOW)
                assert (await session.get_items())[0]["content"].startswith(f"<{SUMMARY_TAG}>")
            await Runner.run(agent, task(i), session=session, run_config=config(session.input_filter))
        await session.aclose()

    with ValidatingServer(window=WINDOW) as api:
        asyncio.run(go(api.base_url))
    check_requests(api, 40)
    with Session.open(tmp_path / "ws", window=WINDOW) as session:
        held = held_ids(session)
    # Each batch the SDK saved, as the messages ctxkeep makes of it (a turn's parallel calls: one message).
    assert len(held) == len(set(held)) == sum(len(to_messages(batch)) for batch in added)


def readme_block(heading: str) -> str:
    """The first Python block under a README heading, as a reader would copy it."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text.split(f"## {heading}\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "settings.py").write_text("RETRY_LIMIT = 5\n")
    monkeypatch.chdir(tmp_path)
    # The example's model name goes to the SDK's default provider, which reads these; the validating server
    # speaks Chat Completions, not the Responses API the SDK uses by default. Tracing stays off in tests:
    # its exporter would post to the OpenAI platform.
    set_tracing_disabled(True)
    set_default_openai_api("chat_completions")
    try:
        with ValidatingServer(window=WINDOW) as api:
            monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)
            monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
            monkeypatch.setenv("MODEL", "local-model")  # a local server's name: no SDK special-cases it
            readme: dict[str, Any] = {"__name__": "readme"}
            exec(compile(readme_block("Use it with the OpenAI Agents SDK"), "README.md", "exec"), readme)
    finally:
        set_default_openai_api("responses")
    assert api.refused == []
    assert len(api.records) == 4  # per question: the grep call(s), then the answer
    check_held(tmp_path / "workspace", readme["result"].to_input_list())


# --- the memory tools (memory=True) ------------------------------------------------------------------------
# The agent lists the adapter's tools first, and the validating server calls the first tool offered with the
# task's text: memory_write, then (after a restart, memory_search listed first) a search that finds it.


def tool_results(api: ValidatingServer, request: int) -> list[str]:
    """The tool results the `request`-th request sent the model."""
    return [m["content"] for m in api.records[request].body["messages"] if m["role"] == "tool"]


def day_log(workspace: Path) -> tuple[str, str]:
    """The name of the workspace's one day log, and its text."""
    (log,) = (workspace / "memory").glob("*.md")
    return f"memory/{log.name}", log.read_text()


def test_memory_tools_of_the_filter_write_and_search_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"

    async def go(base_url: str) -> list[TResponseInputItem]:
        input_filter = CtxkeepInputFilter(ws, window=WINDOW, memory=True)
        agent = make_agent(base_url, input_filter.tools)
        first = await Runner.run(agent, [{"role": "user", "content": task(0)}], run_config=config(input_filter))
        await input_filter.aclose()
        # A restart, whose agent lists memory_search first (a list of MemoryTools in place of True).
        # (min_relevance 0: the scripted model searches with the task's words, which share few with the note)
        search = next(t for t in memory_tools(ws, embedder=None, min_relevance=0) if t.name == "memory_search")
        input_filter = CtxkeepInputFilter(ws, window=WINDOW, memory=[search])
        agent = make_agent(base_url, input_filter.tools)
        history = [*first.to_input_list(), {"role": "user", "content": task(1)}]
        second = await Runner.run(agent, history, run_config=config(input_filter))
        await input_filter.aclose()
        return second.to_input_list()

    with ValidatingServer(window=WINDOW) as api:
        history = asyncio.run(go(api.base_url))
    assert api.refused == []
    names = [t["function"]["name"] for t in api.records[0].body["tools"]]
    assert names == ["memory_write", "memory_read", "memory_search", "dialog_search", "recall", "search_logs"]
    sent = {t["function"]["name"]: t["function"]["parameters"] for t in api.records[0].body["tools"]}
    assert all(sent[t.name] == t.parameters for t in memory_tools(ws))  # each tool's JSON schema, as it is

    # The model's memory_write reached today's log, and its answer came back to the model.
    name, text = day_log(ws)
    written = f"{task(0)[:40]} #0"
    assert f" {written}\n" in text
    assert f"saved to {name}" in tool_results(api, 1)
    # After the restart the model's memory_search found it, and was sent the hit with its file and line.
    assert [t["function"]["name"] for t in api.records[2].body["tools"]] == ["memory_search", "search_logs"]
    (hit,) = [r for r in tool_results(api, 3) if r.startswith(f"[{name}:")]
    assert written in hit
    check_held(ws, history)


def test_memory_tools_of_a_ctxkeep_session_on_an_open_session(tmp_path: Path) -> None:
    async def go(base_url: str, workspace: Session) -> None:
        session = CtxkeepSession(workspace, memory=True)
        assert session.input_filter.tools is session.tools
        agent = make_agent(base_url, session.tools)
        await Runner.run(agent, task(2), session=session, run_config=config(session.input_filter))

    with ValidatingServer(window=WINDOW) as api, Session.open(tmp_path / "ws", window=WINDOW) as workspace:
        asyncio.run(go(api.base_url, workspace))
    assert api.refused == []
    name, text = day_log(tmp_path / "ws")  # the open session's folder
    assert f" {task(2)[:40]} #0\n" in text
    assert tool_results(api, 1) == [f"saved to {name}"]


def test_a_memory_tool_answers_a_bad_call_with_an_error_text(tmp_path: Path) -> None:
    from agents.tool_context import ToolContext

    input_filter = CtxkeepInputFilter(tmp_path / "ws", memory=True)
    read = next(t for t in input_filter.tools if t.name == "memory_read")
    context = ToolContext(context=None, tool_name=read.name, tool_call_id="c1", tool_arguments="")
    assert asyncio.run(read.on_invoke_tool(context, "")) == "error: MEMORY.md does not exist yet"  # no arguments
    answer = asyncio.run(read.on_invoke_tool(context, '{"path": "state.json"}'))
    assert answer.startswith(
        "error: only MEMORY.md, memory/YYYY-MM-DD.md, dialog/YYYY-MM-DD.jsonl and tool_result/<uuid>.txt can be read"
    )
    assert CtxkeepInputFilter(tmp_path / "ws").tools == []
    with pytest.raises(TypeError, match="memory must be True, False or a list of MemoryTools"):
        CtxkeepInputFilter(tmp_path / "ws", memory=memory_tools(tmp_path / "ws")[0])


# --- the session protocol, the converter, the tool schemas ---------------------------------------------------


def test_the_session_refuses_to_delete_what_it_holds(tmp_path: Path) -> None:
    async def go() -> None:
        session = CtxkeepSession(tmp_path / "ws", session_id="s1")
        await session.add_items([{"role": "user", "content": "hello"}, {"role": "user", "content": "again"}])
        with pytest.raises(WorkspaceError, match="never removes"):
            await session.pop_item()
        with pytest.raises(WorkspaceError, match="open a new workspace"):
            await session.clear_session()
        assert await session.get_items() == [{"role": "user", "content": "hello"}, {"role": "user", "content": "again"}]
        assert await session.get_items(limit=1) == [{"role": "user", "content": "again"}]
        assert await session.get_items(limit=0) == []
        await session.aclose()

    asyncio.run(go())
    with Session.open(tmp_path / "ws") as session:
        assert [m.text for m in session.messages] == ["hello", "again"]


def items() -> list[dict[str, Any]]:
    """Responses input items: a user request with an image, a turn with text and two parallel calls, the
    results, an answer."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Searching.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "search_logs", "arguments": '{"query": "a"}'},
        {"type": "function_call", "call_id": "c2", "name": "search_logs", "arguments": '{"query": "b"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found a"},
        {"type": "function_call_output", "call_id": "c2", "output": "found b"},
        {"role": "assistant", "content": "Both found."},
    ]


def test_to_responses_round_trips_calls_results_and_ids() -> None:
    messages = to_messages(items())
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    back = to_responses(messages)
    assert back[1] == {"type": "message", "role": "assistant", "content": "Searching."}
    assert back[2:6] == items()[2:6]  # both calls (ids and arguments), both results
    assert back[0]["content"][1] == {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}
    again = to_messages(back)
    # Same content, so the same ids: a workspace recognises its own view.
    assert [(m.id, m.role, m.content) for m in again] == [(m.id, m.role, m.content) for m in messages]
    assert validate(again) == []


def test_tool_schemas_are_the_function_tools_and_handoffs() -> None:
    helper = Agent(name="helper", instructions="help")
    agent = Agent(name="main", tools=[search_logs], handoffs=[helper])
    schemas = tool_schemas(agent)
    assert [s["function"]["name"] for s in schemas] == ["search_logs", "transfer_to_helper"]
    assert schemas[0]["function"]["parameters"]["properties"]["query"]["type"] == "string"


# --- through the real llama-server ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_short_run_summarized_by_the_local_model(
    tmp_path: Path, llama_url: str, request: pytest.FixtureRequest
) -> None:
    window, tasks = local_model.WINDOW, local_model.TASKS
    summarizer = local_model.summarizer(llama_url, request)
    with ValidatingServer(window=window) as api:
        run = aplay(tmp_path / "ws", api.base_url, tasks, restart_at=tasks // 2, window=window, summarizer=summarizer)
        history = asyncio.run(run)
    check_requests(api, tasks, window=window)
    check_held(tmp_path / "ws", history, window=window)
    records = [json.loads(line) for line in (tmp_path / "ws" / "compactions.jsonl").read_text().splitlines()]
    assert sum(1 for r in records if r.get("kind") == "compaction") >= 2
    assert summarizer.asked >= 2  # the real model was asked each time (its summary used when accepted)
