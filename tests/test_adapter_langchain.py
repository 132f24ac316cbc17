"""The LangChain adapter: a real `create_agent` agent with `ChatOpenAI`, over real HTTP, against the validating server.

The long run: the agent's own `@tool` returns ~30 KB per call, 150 tasks at a 16k window (every third
task two parallel calls), the process "restarted" halfway (a new middleware and agent on the same
workspace, carrying on with the agent's ``messages`` as the host holds them): every request valid and
inside the window, every message of the agent's history held exactly once. The same through
``ainvoke``, through LangGraph's ``pre_model_hook``, and a short run whose summaries the real
llama-server writes. The converters are tested alone, both ways.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from tests import local_model
from tests.validating_server import ValidatingServer, held_ids, task, tool_output

from ctxkeep import MemoryFolder, MessageError, Session, memory_tools, to_messages
from ctxkeep.adapters.langchain import CtxkeepMiddleware, as_chat_dicts, to_langchain
from ctxkeep.context import SUMMARY_TAG
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.pairing import validate

pytestmark = pytest.mark.extra("langchain")

WINDOW = 16_000
SYSTEM = "You are a build engineer. Use the tools, then answer briefly."


@tool
def search_logs(query: str) -> str:
    """Search the build logs; returns the matching lines."""
    return tool_output(query)


def make_agent(middleware: CtxkeepMiddleware, base_url: str) -> Any:
    """The host's agent: LangChain's ChatOpenAI on `base_url`, one `@tool`, ctxkeep as its middleware."""
    model = ChatOpenAI(model="validating", base_url=base_url, api_key="sk-local", max_retries=0, timeout=120)
    return create_agent(model, tools=[search_logs], system_prompt=SYSTEM, middleware=[middleware])


def play(
    workspace: Path, base_url: str, tasks: int, restart_at: int | None = None, **settings: Any
) -> list[AnyMessage]:
    """`tasks` tasks through ``agent.invoke``, a new middleware and agent at `restart_at`; the agent's history."""
    settings = {"window": WINDOW, **settings}
    history: list[AnyMessage] = []
    middleware = CtxkeepMiddleware(workspace, **settings)
    agent = make_agent(middleware, base_url)
    try:
        for i in range(tasks):
            if i == restart_at:
                middleware.close()  # a new process would see just the workspace, and the history its host kept
                middleware = CtxkeepMiddleware(workspace, **settings)
                agent = make_agent(middleware, base_url)
            history = agent.invoke({"messages": [*history, HumanMessage(task(i))]})["messages"]
    finally:
        middleware.close()
    return history


async def aplay(workspace: Path, base_url: str, tasks: int, restart_at: int | None = None) -> list[AnyMessage]:
    """`play` through ``agent.ainvoke``: the async path (AsyncSession, worker threads)."""
    history: list[AnyMessage] = []
    middleware = CtxkeepMiddleware(workspace, window=WINDOW)
    agent = make_agent(middleware, base_url)
    try:
        for i in range(tasks):
            if i == restart_at:
                await middleware.aclose()
                middleware = CtxkeepMiddleware(workspace, window=WINDOW)
                agent = make_agent(middleware, base_url)
            history = (await agent.ainvoke({"messages": [*history, HumanMessage(task(i))]}))["messages"]
    finally:
        await middleware.aclose()
    return history


def run(workspace: Path, base_url: str, tasks: int, restart_at: int | None = None) -> None:
    """The long run through ``agent.invoke`` (bench/bench_adapters.py times it)."""
    play(workspace, base_url, tasks, restart_at)


async def arun(workspace: Path, base_url: str, tasks: int, restart_at: int | None = None) -> None:
    """The long run through ``agent.ainvoke``."""
    await aplay(workspace, base_url, tasks, restart_at)


def check_held(workspace: Path, history: list[AnyMessage], window: int = WINDOW) -> None:
    """Every message of the host's history held exactly once, live or archived (the mapping is one to one)."""
    with Session.open(workspace, window=window) as session:
        session.sync(as_chat_dicts(history))  # the last answer, which no model call has synced yet
        held = held_ids(session)
    assert len(held) == len(set(held)) == len(history)


def check_requests(api: ValidatingServer, tasks: int, window: int = WINDOW) -> None:
    """No request refused, none over the window, and some carried a summary."""
    assert api.refused == []
    assert api.peak_tokens <= window
    assert len(api.records) >= 2 * tasks
    summarized = [r for r in api.records if any(SUMMARY_TAG in str(m.get("content")) for m in r.body["messages"])]
    assert summarized, "no request carried a summary: nothing was compacted"


@pytest.mark.slow
def test_150_tasks_at_16k_with_a_restart_halfway(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        history = play(tmp_path / "ws", api.base_url, tasks=150, restart_at=75)
    check_requests(api, 150)
    check_held(tmp_path / "ws", history)
    # The host keeps its whole history: the 30 KB results are all there, uncut.
    assert all(len(m.content) > 25_000 for m in history if isinstance(m, ToolMessage))


@pytest.mark.slow
def test_150_tasks_through_ainvoke_with_a_restart_halfway(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        history = asyncio.run(aplay(tmp_path / "ws", api.base_url, tasks=150, restart_at=75))
    check_requests(api, 150)
    check_held(tmp_path / "ws", history)


def test_a_short_run_compacts_and_sends_the_agents_own_messages(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        history = play(tmp_path / "ws", api.base_url, tasks=12, restart_at=6)
    check_requests(api, 12)
    check_held(tmp_path / "ws", history)
    last = api.records[-1].body
    assert last["messages"][0] == {"role": "system", "content": SYSTEM}  # the agent's own system prompt, once
    assert sum(m["role"] == "system" for m in last["messages"]) == 1
    assert [t["function"]["name"] for t in last["tools"]] == ["search_logs"]


def test_the_summary_comes_first_as_langchains_summary_message(tmp_path: Path) -> None:
    seen: list[list[AnyMessage]] = []

    class Spy(CtxkeepMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            return super().wrap_model_call(request, lambda r: seen.append(r.messages) or handler(r))

    with ValidatingServer(window=WINDOW) as api:
        middleware = Spy(tmp_path / "ws", window=WINDOW)
        agent = make_agent(middleware, api.base_url)
        history: list[AnyMessage] = []
        with middleware:
            for i in range(8):
                history = agent.invoke({"messages": [*history, HumanMessage(task(i))]})["messages"]
    sent = seen[-1]
    assert isinstance(sent[0], HumanMessage) and sent[0].additional_kwargs == {"lc_source": "summarization"}
    assert sent[0].content.startswith(f"<{SUMMARY_TAG}>")
    # The rest are the agent's own objects (ids and metadata kept), or copies of its tool messages with the cut text.
    own = {id(m) for m in history}
    for m in sent[1:]:
        original = next(h for h in history if h.id == m.id)
        if isinstance(m, ToolMessage) and m.content != original.content:
            assert m.tool_call_id == original.tool_call_id and len(m.content) < len(original.content)
            assert "tool_result/" in m.content  # the notice names the file that holds the whole output
        else:
            assert id(m) in own
    assert not validate(to_messages(as_chat_dicts(sent)))


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_pre_model_hook_of_langgraphs_prebuilt_agent(tmp_path: Path, asynchronous: bool) -> None:
    from langchain_core.runnables import RunnableLambda
    from langgraph.prebuilt import create_react_agent
    from langgraph.warnings import LangGraphDeprecationWarning

    async def go(agent: Any, history: list[AnyMessage], i: int) -> Any:
        return await agent.ainvoke({"messages": [*history, HumanMessage(task(i))]})

    with ValidatingServer(window=WINDOW) as api, CtxkeepMiddleware(tmp_path / "ws", window=WINDOW) as middleware:
        model = ChatOpenAI(model="validating", base_url=api.base_url, api_key="sk-local", max_retries=0)
        hook = RunnableLambda(middleware.pre_model_hook, middleware.apre_model_hook)
        with pytest.warns(LangGraphDeprecationWarning):  # deprecated in favour of create_agent, still used
            agent = create_react_agent(model, [search_logs], prompt=SYSTEM, pre_model_hook=hook)
        history: list[AnyMessage] = []
        for i in range(10):
            if asynchronous:
                history = asyncio.run(go(agent, history, i))["messages"]
            else:
                history = agent.invoke({"messages": [*history, HumanMessage(task(i))]})["messages"]
        asyncio.run(middleware.aclose())
    check_requests(api, 10)
    check_held(tmp_path / "ws", history)


def readme_block(heading: str) -> str:
    """The first Python block under a README heading, as a reader would copy it."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text.split(f"## {heading}\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "settings.py").write_text("RETRY_LIMIT = 5\n")
    monkeypatch.chdir(tmp_path)
    with ValidatingServer(window=WINDOW) as api:
        monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)  # "openai:<model>" is ChatOpenAI, which reads these
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
        monkeypatch.setenv("MODEL", "local-model")  # a local server's name: no SDK special-cases it
        readme: dict[str, Any] = {"__name__": "readme"}
        exec(compile(readme_block("Use it with LangChain"), "README.md", "exec"), readme)
    assert api.refused == []
    assert len(api.records) == 4  # per question: the grep call(s), then the answer
    check_held(tmp_path / "workspace", readme["state"]["messages"])


# --- the converters -----------------------------------------------------------------------------------------


def conversation() -> list[AnyMessage]:
    """A LangChain history with a plain answer, parallel calls, an error result and an image."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    return [
        SystemMessage("be brief", id="s1"),
        HumanMessage([{"type": "text", "text": "what is on screen?"}, image], id="h1"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[
                {"name": "search_logs", "args": {"query": "login"}, "id": "call_1", "type": "tool_call"},
                {"name": "search_logs", "args": {"query": "build"}, "id": "call_2", "type": "tool_call"},
            ],
        ),
        ToolMessage("login ok", tool_call_id="call_1", id="t1"),
        ToolMessage("no such log", tool_call_id="call_2", status="error", id="t2"),
        AIMessage("Both searched.", id="a2"),
    ]


def test_as_chat_dicts_keeps_calls_paired_with_their_results() -> None:
    dicts = as_chat_dicts(conversation())
    assert [d["role"] for d in dicts] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert [c["id"] for c in dicts[2]["tool_calls"]] == ["call_1", "call_2"]
    assert dicts[2]["tool_calls"][1]["function"] == {"name": "search_logs", "arguments": '{"query": "build"}'}
    assert dicts[2]["content"] is None
    assert [d["tool_call_id"] for d in dicts[3:5]] == ["call_1", "call_2"]
    assert dicts[1]["content"][1]["type"] == "image_url"
    assert validate(to_messages(dicts)) == []


def test_round_trip_through_ctxkeep_gives_the_same_conversation() -> None:
    original = conversation()
    messages = to_messages(as_chat_dicts(original))
    back = to_langchain(messages)
    assert [type(m) for m in back] == [type(m) for m in original]
    assert [m.id for m in back] == [m.id for m in messages]  # ctxkeep's ids, kept
    assert back[2].tool_calls == original[2].tool_calls  # parallel calls, ids and arguments
    assert [(m.tool_call_id, m.content) for m in back[3:5]] == [("call_1", "login ok"), ("call_2", "no such log")]
    assert back[5].content == "Both searched."
    assert back[1].content == original[1].content  # the image survives
    # ...and the same again: converting back and forth changes nothing.
    assert to_messages(as_chat_dicts(back)) == messages


def test_an_invalid_tool_call_stays_paired_with_its_error_result() -> None:
    ai = AIMessage(
        "",
        invalid_tool_calls=[
            {"name": "search_logs", "args": "{not json", "id": "call_9", "error": "bad", "type": "invalid_tool_call"}
        ],
    )
    dicts = as_chat_dicts([HumanMessage("go"), ai, ToolMessage("bad arguments", tool_call_id="call_9", status="error")])
    assert dicts[1]["tool_calls"][0]["function"]["arguments"] == "{not json"
    assert validate(to_messages(dicts)) == []


def test_an_unknown_message_kind_is_refused_with_its_position() -> None:
    from langchain_core.messages import FunctionMessage

    with pytest.raises(MessageError, match="history item 1: a FunctionMessage"):
        as_chat_dicts([HumanMessage("go"), FunctionMessage("x", name="f")])


def test_an_error_result_becomes_a_tool_message_with_the_error_status() -> None:
    call = Message(role="assistant", id="a", content=(ToolCall(id="c", name="f", arguments="{}"),))
    error = Message(role="tool", id="t", content=(ToolResult(call_id="c", content="boom", is_error=True),))
    out = to_langchain([call, error])
    assert isinstance(out[1], ToolMessage)
    assert (out[1].status, out[1].tool_call_id, out[1].content, out[1].id) == ("error", "c", "boom", "t")


def test_settings_with_an_open_session_are_refused(tmp_path: Path) -> None:
    from ctxkeep import WorkspaceError

    with Session.open(tmp_path / "ws") as session, pytest.raises(WorkspaceError, match="window"):
        CtxkeepMiddleware(session, window=WINDOW)


# --- the memory tools (memory=True) ------------------------------------------------------------------------
# create_agent puts a middleware's tools before the agent's own, and the validating server calls the first
# tool offered with the task's text: memory_write, then (a second agent listing memory_search first) search.


def tool_results(api: ValidatingServer, request: int) -> list[str]:
    """The tool results the `request`-th request sent the model."""
    return [m["content"] for m in api.records[request].body["messages"] if m["role"] == "tool"]


def ask(agent: Any, messages: list[AnyMessage], asynchronous: bool) -> list[AnyMessage]:
    """The agent's messages after one turn, through ``ainvoke`` or ``invoke``."""
    if asynchronous:
        return list(asyncio.run(agent.ainvoke({"messages": messages}))["messages"])
    return list(agent.invoke({"messages": messages})["messages"])


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_memory_tools_registered_by_the_middleware_write_and_search_the_workspace(
    tmp_path: Path, asynchronous: bool
) -> None:
    ws = tmp_path / "ws"
    with ValidatingServer(window=WINDOW) as api:
        with CtxkeepMiddleware(ws, window=WINDOW, memory=True) as middleware:
            agent = make_agent(middleware, api.base_url)
            history = ask(agent, [HumanMessage(task(0))], asynchronous)
        # A restart, whose agent lists memory_search first (a list of MemoryTools in place of True).
        # (min_relevance 0: the scripted model searches with the task's words, which share few with the note)
        search = next(t for t in memory_tools(ws, embedder=None, min_relevance=0) if t.name == "memory_search")
        with CtxkeepMiddleware(ws, window=WINDOW, memory=[search]) as middleware:
            agent = make_agent(middleware, api.base_url)
            history = ask(agent, [*history, HumanMessage(task(1))], asynchronous)
    assert api.refused == []
    names = [t["function"]["name"] for t in api.records[0].body["tools"]]
    assert names == ["memory_write", "memory_read", "memory_search", "dialog_search", "recall", "search_logs"]
    sent = {t["function"]["name"]: t["function"]["parameters"] for t in api.records[0].body["tools"]}
    assert all(sent[t.name] == t.parameters for t in memory_tools(ws))  # each tool's JSON schema, as it is

    # The model's memory_write reached today's log, and its answer came back to the model.
    (log,) = (ws / "memory").glob("*.md")
    day_log = f"memory/{log.name}"
    written = f"{task(0)[:40]} #0"
    assert f" {written}\n" in log.read_text()
    assert f"saved to {day_log}" in tool_results(api, 1)
    # The second agent's memory_search found it, and the model was sent the hit with its file and line.
    assert [t["function"]["name"] for t in api.records[2].body["tools"]] == ["memory_search", "search_logs"]
    (hit,) = [r for r in tool_results(api, 3) if r.startswith(f"[{day_log}:")]
    assert written in hit
    check_held(ws, history)


def test_memory_true_on_an_open_session_uses_its_folder(tmp_path: Path) -> None:
    with Session.open(tmp_path / "ws") as session:
        middleware = CtxkeepMiddleware(session, memory=True)
        write = next(t for t in middleware.tools if t.name == "memory_write")
        assert write.invoke({"text": "Ana reviews billing PRs", "target": "memory", "section": "People"}) == (
            "saved to MEMORY.md"
        )
        assert "- Ana reviews billing PRs" in (tmp_path / "ws" / "MEMORY.md").read_text()
        # A bad call is the model's to correct: an error text, not an exception in the agent loop.
        assert write.invoke({"text": ""}).startswith("error: text must be some text")
    with Session(MemoryFolder()) as session:
        (read,) = [t for t in CtxkeepMiddleware(session, memory=True).tools if t.name == "memory_read"]
        assert read.invoke({}) == "error: MEMORY.md does not exist yet"


def test_memory_must_be_true_false_or_memory_tools(tmp_path: Path) -> None:
    assert CtxkeepMiddleware(tmp_path / "ws").tools == []
    with pytest.raises(TypeError, match="memory must be True, False or a list of MemoryTools"):
        CtxkeepMiddleware(tmp_path / "ws", memory="yes")


# --- through the real llama-server ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_short_run_summarized_by_the_local_model(
    tmp_path: Path, llama_url: str, request: pytest.FixtureRequest
) -> None:
    window, tasks = local_model.WINDOW, local_model.TASKS
    summarizer = local_model.summarizer(llama_url, request)
    with ValidatingServer(window=window) as api:
        history = play(
            tmp_path / "ws", api.base_url, tasks, restart_at=tasks // 2, window=window, summarizer=summarizer
        )
    check_requests(api, tasks, window=window)
    check_held(tmp_path / "ws", history, window=window)
    records = [json.loads(line) for line in (tmp_path / "ws" / "compactions.jsonl").read_text().splitlines()]
    assert sum(1 for r in records if r.get("kind") == "compaction") >= 2
    assert summarizer.asked >= 2  # the real model was asked each time (its summary used when accepted)
