"""The pydantic-ai adapter: a real pydantic-ai agent, over real HTTP, against the validating server.

The long run: the agent's own tool returns ~30 KB per call, 150 tasks at a 16k window (every third
task two parallel calls), the process "restarted" halfway (a new capability and agent on the same
workspace, carrying on with ``message_history=result.all_messages()``): every request valid and
inside the window, every message of the agent's history held exactly once. One shorter run has the
real llama-server write the summaries. The converters are tested alone, both ways.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    AgentInstructionSource,
    BinaryContent,
    CompactionPart,
    FilePart,
    ImageUrl,
    InstructionDeltaPart,
    InstructionId,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from tests import local_model
from tests.test_readme import readme_block
from tests.validating_server import ValidatingServer, held_ids, task, tool_output

from ctxkeep import (
    AsyncSession,
    Message,
    MessageError,
    Session,
    ToolCall,
    ToolResult,
    WorkspaceError,
)
from ctxkeep.adapters.pydantic_ai import CtxkeepCapability, from_pydantic_ai, to_pydantic_ai

pytestmark = pytest.mark.extra("pydantic-ai")

WINDOW = 16_000
SYSTEM = "You are a build engineer. Use the tools, then answer briefly."
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def close_the_loop_run_sync_leaves() -> Iterator[None]:
    """pydantic-ai's `run_sync` runs on the thread's event loop, creating one it never closes; closed
    here, or a later test collects it unclosed (a ResourceWarning, an error under `filterwarnings`)."""
    yield
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # none set (the test used none, or asyncio.run's)
        return
    if not loop.is_running():
        loop.close()
    asyncio.set_event_loop(None)


def make_agent(capability: CtxkeepCapability, base_url: str) -> Agent[None, str]:
    """The host's agent: pydantic-ai's OpenAI chat model on `base_url`, one tool of its own kind."""
    model = OpenAIChatModel("validating", provider=OpenAIProvider(base_url=base_url, api_key="sk-local"))
    agent = Agent(model, system_prompt=SYSTEM, capabilities=[capability])

    @agent.tool_plain
    def search_logs(query: str) -> str:
        """Search the build logs; returns the matching lines."""
        return tool_output(query)

    return agent


def reloaded(history: list[ModelMessage]) -> list[ModelMessage]:
    """The history as a host saves it and a new process loads it: through pydantic-ai's JSON."""
    return ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(history))


def run(
    workspace: Path, base_url: str, tasks: int, restart_at: int | None = None, **settings: Any
) -> list[ModelMessage]:
    """`tasks` tasks through a pydantic-ai agent with ctxkeep; a new capability and agent at `restart_at`.

    Returns the agent's whole history. `settings` go to `Session.open` (default: the 16k window).
    """
    settings = settings or {"window": WINDOW}
    capability = CtxkeepCapability(workspace, **settings)
    agent = make_agent(capability, base_url)
    history: list[ModelMessage] = []
    try:
        for i in range(tasks):
            if i == restart_at:
                capability.close()  # a new process would see just the workspace and the history the host saved
                history = reloaded(history)
                capability = CtxkeepCapability(workspace, **settings)
                agent = make_agent(capability, base_url)
            history = agent.run_sync(task(i), message_history=history).all_messages()
    finally:
        capability.close()
    return history


async def arun(
    workspace: Path, base_url: str, tasks: int, restart_at: int | None = None, **settings: Any
) -> list[ModelMessage]:
    """`run` on the event loop: ``await agent.run(...)``, the capability closed with ``await aclose()``."""
    settings = settings or {"window": WINDOW}
    capability = CtxkeepCapability(workspace, **settings)
    agent = make_agent(capability, base_url)
    history: list[ModelMessage] = []
    try:
        for i in range(tasks):
            if i == restart_at:
                await capability.aclose()
                history = reloaded(history)
                capability = CtxkeepCapability(workspace, **settings)
                agent = make_agent(capability, base_url)
            history = (await agent.run(task(i), message_history=history)).all_messages()
    finally:
        await capability.aclose()
    return history


def check_held(workspace: Path, history: list[ModelMessage]) -> None:
    """Every message of the host's history held once, live or archived, and nothing else.

    pydantic-ai's messages do not map 1:1 to ctxkeep's: a request holding two parallel tool returns
    is two tool messages, and the system prompt opening the first request is the fixed layer, never
    held. So the count is checked against the history converted, which is what the capability syncs.
    """
    converted = from_pydantic_ai(history).messages
    with Session.open(workspace) as session:
        # The capability syncs before each request, so the last answer is the one thing new.
        assert session.sync(converted) == [converted[-1]]
        held = held_ids(session)
    assert len(held) == len(set(held)) == len(converted)
    assert set(held) == {m.id for m in converted}


def check_whole(history: list[ModelMessage], tasks: int) -> None:
    """The host keeps its whole history: every task, every tool return as the tool returned it."""
    prompts = [p for m in history if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]
    assert [p.content for p in prompts] == [task(i) for i in range(tasks)]
    calls = {
        p.tool_call_id: p
        for m in history
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    }
    returns = [p for m in history if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returns and all(r.content == tool_output(calls[r.tool_call_id].args_as_dict()["query"]) for r in returns)


def compactions(workspace: Path) -> int:
    lines = (workspace / "compactions.jsonl").read_text().splitlines()
    return sum(json.loads(line).get("kind") == "compaction" for line in lines)


@pytest.mark.slow
def test_150_tasks_at_16k_with_a_restart_halfway(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        history = run(tmp_path / "ws", api.base_url, tasks=150, restart_at=75)
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    assert len(api.records) >= 300
    check_whole(history, 150)
    check_held(tmp_path / "ws", history)
    assert compactions(tmp_path / "ws") >= 10


def test_a_short_run_compacts_sends_the_summary_and_keeps_the_hosts_history(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        history = run(tmp_path / "ws", api.base_url, tasks=6, restart_at=3)
    assert api.refused == [] and api.peak_tokens <= WINDOW
    assert compactions(tmp_path / "ws") >= 1
    check_whole(history, 6)
    check_held(tmp_path / "ws", history)
    last = api.records[-1].body["messages"]
    assert last[0] == {"role": "system", "content": SYSTEM}  # the standing prompt leads every request
    summary = (tmp_path / "ws" / "summary.md").read_text(encoding="utf-8")
    # pydantic-ai sends a CompactionPart as user text in its own tag: ctxkeep's summary arrives whole.
    sent = [m["content"] for m in last if m["role"] == "user" and "<pyai:conversation_summary>" in m["content"]]
    assert len(sent) == 1 and summary.strip() in sent[0]
    assert sum(m["role"] == "user" and m["content"].startswith("Task ") for m in last) < 6


def test_the_async_run_with_a_restart(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        history = asyncio.run(arun(tmp_path / "ws", api.base_url, tasks=6, restart_at=3))
    assert api.refused == [] and api.peak_tokens <= WINDOW
    assert compactions(tmp_path / "ws") >= 1
    check_whole(history, 6)
    check_held(tmp_path / "ws", history)


def test_the_async_run_with_an_async_session_passed_in(tmp_path: Path) -> None:
    async def main(base_url: str) -> list[ModelMessage]:
        async with await AsyncSession.open(tmp_path / "ws", window=WINDOW) as session:
            agent = make_agent(CtxkeepCapability(session), base_url)
            history: list[ModelMessage] = []
            for i in range(6):
                history = (await agent.run(task(i), message_history=history)).all_messages()
            assert len(session.messages) < len(from_pydantic_ai(history).messages)  # compacted, still open
            return history

    with ValidatingServer(window=WINDOW) as api:
        history = asyncio.run(main(api.base_url))
    assert api.refused == [] and api.peak_tokens <= WINDOW
    check_held(tmp_path / "ws", history)


def test_a_session_passed_in_stays_open_and_settings_need_a_path(tmp_path: Path) -> None:
    with Session.open(tmp_path / "ws", window=WINDOW) as session:
        capability = CtxkeepCapability(session)
        capability.close()
        session.sync([Message.of("user", "still open")])
        with pytest.raises(WorkspaceError, match="settings"):
            CtxkeepCapability(session, window=WINDOW)
    with pytest.raises(WorkspaceError, match="workspace path"):
        CtxkeepCapability(16_000)  # type: ignore[arg-type]


def test_the_readme_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "settings.py").write_text("RETRY_LIMIT = 5\n")
    monkeypatch.chdir(tmp_path)
    with ValidatingServer(window=WINDOW) as api:
        monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
        monkeypatch.setenv("MODEL", "openai-chat:local-model")  # a local server's name: no SDK special-cases it
        readme: dict[str, Any] = {"__name__": "readme"}
        exec(compile(readme_block("Use it with pydantic-ai"), "README.md", "exec"), readme)
    assert api.refused == []
    assert len(api.records) == 4  # per question: the grep call(s), then the answer
    check_held(tmp_path / "workspace", readme["result"].all_messages())


# --- the converters ---------------------------------------------------------------------


def sample_history() -> list[ModelMessage]:
    """A pydantic-ai history with each kind of part the converters map: multimodal prompts, thinking,
    parallel calls (arguments as a dict and as text), an error result, provider fields."""
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("You are terse.", timestamp=T0),
                UserPromptPart("hello", timestamp=T0),
                UserPromptPart(
                    [
                        "look at",
                        ImageUrl("https://example.com/plot.png"),
                        BinaryContent(b"\x89PNG\r\n", media_type="image/png"),
                        TextContent("notes", metadata={"page": 2}),
                    ],
                    timestamp=T0,
                ),
            ],
            instructions="Be brief.",
            run_id="run-1",
            timestamp=T0,
        ),
        ModelResponse(
            parts=[
                ThinkingPart("let me search", signature="sig-1", provider_name="openai"),
                TextPart("Searching."),
                ToolCallPart("search_logs", {"query": "login"}, "call_a"),
                ToolCallPart("search_logs", '{"query": "build"}', "call_b"),
            ],
            model_name="validating",
            provider_name="openai",
            provider_response_id="chatcmpl-1",
            timestamp=T0,
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("search_logs", "12 lines", "call_a", timestamp=T0),
                ToolReturnPart("search_logs", "timed out", "call_b", outcome="failed", timestamp=T0),
            ],
            run_id="run-1",
            timestamp=T0,
        ),
        ModelResponse(parts=[TextPart("Found it.")], provider_response_id="chatcmpl-2", timestamp=T0),
    ]


def as_json(messages: list[ModelMessage]) -> Any:
    return json.loads(ModelMessagesTypeAdapter.dump_json(messages))


def test_a_history_converted_there_and_back_is_the_same() -> None:
    converted = from_pydantic_ai(sample_history())
    assert [p.content for p in converted.head] == ["You are terse."] and converted.system == "You are terse."
    assert [m.role for m in converted.messages] == ["user", "user", "assistant", "tool", "tool", "assistant"]
    back = to_pydantic_ai(converted.messages, head=converted.head)
    assert as_json(back) == as_json(sample_history())
    again = from_pydantic_ai(back).messages
    assert again == converted.messages


def test_calls_stay_paired_with_their_results_ids_kept() -> None:
    converted = from_pydantic_ai(sample_history()).messages
    calls = converted[2].tool_calls
    assert [(c.id, c.name, c.input()) for c in calls] == [
        ("call_a", "search_logs", {"query": "login"}),
        ("call_b", "search_logs", {"query": "build"}),
    ]
    results = [m.tool_result for m in converted[3:5]]
    assert [(r.call_id, r.text, r.is_error) for r in results if r] == [
        ("call_a", "12 lines", False),
        ("call_b", "timed out", True),
    ]
    # ctxkeep messages from elsewhere (no pydantic-ai fields kept): a result takes its call's tool name.
    bare = [
        Message(role="assistant", content=(ToolCall(id="c1", name="read"), ToolCall(id="c2", name="grep"))),
        Message(role="tool", content=(ToolResult(call_id="c1", content="x"),)),
        Message(role="tool", content=(ToolResult(call_id="c2", content="y", is_error=True),)),
    ]
    response, request = to_pydantic_ai(bare)
    assert [(p.tool_call_id, p.tool_name) for p in response.parts if isinstance(p, ToolCallPart)] == [
        ("c1", "read"),
        ("c2", "grep"),
    ]
    assert [
        (p.tool_call_id, p.tool_name, p.content, p.outcome) for p in request.parts if isinstance(p, ToolReturnPart)
    ] == [
        ("c1", "read", "x", "success"),
        ("c2", "grep", "y", "failed"),
    ]


def test_ids_come_from_content_and_occurrence() -> None:
    first = [m.id for m in from_pydantic_ai(sample_history()).messages]
    assert first == [m.id for m in from_pydantic_ai(sample_history()).messages]
    later = [
        ModelRequest(parts=[UserPromptPart("ok", timestamp=T0)]),
        ModelResponse(parts=[TextPart("fine")]),
        ModelRequest(parts=[UserPromptPart("ok", timestamp=datetime.now(UTC))]),  # another time: same content
    ]
    ids = [m.id for m in from_pydantic_ai(later).messages]
    assert len(set(ids)) == 3  # the second "ok" is another message
    assert [m.id for m in from_pydantic_ai(later[:1]).messages] == ids[:1]  # a prefix keeps its ids


def test_the_summary_is_a_compaction_part_after_the_standing_prompt_and_is_not_synced_back() -> None:
    converted = from_pydantic_ai(sample_history())
    sent = to_pydantic_ai(converted.messages[3:], head=converted.head, summary="## Goal\n- fix the login test")
    first = sent[0]
    assert isinstance(first, ModelRequest)
    assert isinstance(first.parts[0], SystemPromptPart) and isinstance(first.parts[1], CompactionPart)
    assert first.parts[1].content == "## Goal\n- fix the login test"
    assert [m.id for m in from_pydantic_ai(sent).messages] == [m.id for m in converted.messages[3:]]


def test_a_later_system_prompt_and_a_foreign_compaction_are_conversation() -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart("hi", timestamp=T0)]),
        ModelResponse(parts=[TextPart("hello")]),
        ModelRequest(parts=[SystemPromptPart("Now answer in French.", timestamp=T0)]),
        ModelRequest(parts=[CompactionPart(content="earlier: greetings")]),
    ]
    converted = from_pydantic_ai(messages)
    assert converted.head == ()
    assert [(m.role, m.text) for m in converted.messages][2:] == [
        ("system", "Now answer in French."),
        ("user", "earlier: greetings"),
    ]
    assert as_json(to_pydantic_ai(converted.messages)) == as_json(
        [messages[0], messages[1], ModelRequest(parts=[*messages[2].parts, *messages[3].parts])]
    )


def test_retry_feedback_and_an_instruction_change_go_back_as_they_were() -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart("give me JSON", timestamp=T0)]),
        ModelResponse(parts=[TextPart("sure")]),
        ModelRequest(
            parts=[
                RetryFeedbackPart("not JSON: try again", retry=RetryInfo(cause="model_retry", attempt=1)),
                InstructionDeltaPart(id=InstructionId(AgentInstructionSource()), content="Answer in French."),
            ],
            timestamp=T0,
        ),
    ]
    converted = from_pydantic_ai(messages).messages
    assert [(m.role, m.text) for m in converted[2:]] == [
        ("user", "not JSON: try again"),  # user-voice on the wire: not a standing instruction
        ("system", "Answer in French."),
    ]
    assert as_json(to_pydantic_ai(converted)) == as_json(messages)


def test_native_tool_parts_and_files_of_a_response_go_back_whole() -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart("find it", timestamp=T0)]),
        ModelResponse(
            parts=[
                NativeToolCallPart("web_search", {"query": "x"}, "n1", provider_name="openai"),
                NativeToolReturnPart("web_search", {"hits": 1}, "n1", provider_name="openai", timestamp=T0),
                FilePart(BinaryContent(b"\x89PNG", media_type="image/png")),
                TextPart("found"),
            ],
            provider_response_id="chatcmpl-9",
            timestamp=T0,
        ),
    ]
    converted = from_pydantic_ai(messages).messages
    assert converted[1].text.endswith("found")  # what a summary can use of it
    assert as_json(to_pydantic_ai(converted)) == as_json(messages)


def test_a_structured_tool_return_is_held_as_the_json_text_the_model_is_sent() -> None:
    part = ToolReturnPart("stats", {"lines": [1, 2]}, "call_s", timestamp=T0)
    messages = [
        ModelResponse(parts=[ToolCallPart("stats", {}, "call_s")]),
        ModelRequest(parts=[part]),
    ]
    result = from_pydantic_ai(messages).messages[1].tool_result
    assert result is not None and result.text == part.model_response_str()
    back = to_pydantic_ai(from_pydantic_ai(messages).messages)[1]
    assert isinstance(back, ModelRequest) and back.parts[0].content == part.model_response_str()  # type: ignore[union-attr]


def test_what_is_not_a_pydantic_ai_message_is_refused_with_its_position() -> None:
    with pytest.raises(MessageError, match="pydantic-ai message 1: expected a ModelRequest or ModelResponse"):
        from_pydantic_ai([ModelRequest(parts=[UserPromptPart("hi")]), {"role": "user", "content": "hi"}])  # type: ignore[list-item]


# --- through the real llama-server -------------------------------------------------------
# The shared short run (tests/local_model.py): SmolLM2 as the summarizer, its summary used when ctxkeep accepts
# it and the extractive one otherwise, so the run stays short on a slow machine; what it checks is that a real
# model summarizer runs inside the adapter, every request inside the window, no message lost.


@pytest.mark.slow
def test_a_run_summarized_by_the_llama_server(tmp_path: Path, llama_url: str, request: pytest.FixtureRequest) -> None:
    summarizer = local_model.summarizer(llama_url, request)
    window, tasks = local_model.WINDOW, local_model.TASKS
    with ValidatingServer(window=window) as api:
        history = run(
            tmp_path / "ws", api.base_url, tasks=tasks, restart_at=tasks // 2, window=window, summarizer=summarizer
        )
    assert api.refused == [] and api.peak_tokens <= window
    check_whole(history, tasks)
    check_held(tmp_path / "ws", history)
    assert compactions(tmp_path / "ws") >= 2
    assert summarizer.asked >= 2  # the real model was asked each time (its summary used when accepted)
