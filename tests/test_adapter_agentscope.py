"""The AgentScope adapters with the real framework over real HTTP, and the 2.x ``Msg`` converter.

2.x (installed from PyPI in CI): its `Agent` with its own `Toolkit` and `OpenAIChatModel`, pointed at
the validating server, with `ContextMiddleware`: 150 tasks of ~30 KB tool outputs at a 16k window and
a restart halfway. 1.x cannot be installed beside 2.x: its test builds a venv of its own once, under
the user's cache folder, and runs `tests/agentscope_v1_run.py` there against the server running here.

Without AgentScope these tests skip, unless CTXKEEP_REQUIRE_EXTRAS requires it (tests/extras.py),
when they fail: CI must run them.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import agentscope
import pytest
from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import (
    AssistantMsg,
    Base64Source,
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    UserMsg,
)
from agentscope.model import OpenAIChatModel
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.state import AgentState
from agentscope.tool import FunctionTool, Toolkit
from tests import local_model
from tests.validating_server import ValidatingServer, held_ids, task, tool_output

from ctxkeep import MemoryFolder, Session
from ctxkeep.adapters.agentscope import ContextMiddleware, context_msgs, history_messages
from ctxkeep.formats.agentscope2 import from_agentscope2, to_agentscope2
from ctxkeep.messages import ImageBlock, ToolResult
from ctxkeep.pairing import validate

pytestmark = pytest.mark.extra("agentscope")
if not agentscope.__version__.startswith("2."):
    pytest.fail(f"the agentscope extra pins 2.x; found {agentscope.__version__}", pytrace=False)

WINDOW = 16_000
SYSTEM = "You are a build engineer. Use the tools, then answer briefly."
REPO = Path(__file__).resolve().parents[1]


# --- the converter -----------------------------------------------------------------------


def reply_msg() -> Msg:
    """One 2.x reply as the agent keeps it: a hint, thinking and text, two parallel calls, their results, text."""
    return AssistantMsg(
        name="builder",
        content=[
            HintBlock(hint="<system-reminder>time: 12:00</system-reminder>", source="runtime"),
            ThinkingBlock(thinking="Two searches at once.", signature="sig-1"),
            TextBlock(text="Looking at the logs."),
            ToolCallBlock(id="call_a", name="search_logs", input='{"query": "login"}', state="finished"),
            ToolCallBlock(id="call_b", name="search_logs", input='{"query": "build"}', state="finished"),
            ToolResultBlock(id="call_a", name="search_logs", output=[TextBlock(text="3 failures")], state="success"),
            ToolResultBlock(id="call_b", name="search_logs", output="boom", state="error", metadata={"exit": 2}),
            TextBlock(text="Found it."),
        ],
    )


def dumps(msgs: list[Msg]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in msgs]


def test_a_reply_splits_into_calls_followed_by_their_results() -> None:
    pieces = from_agentscope2(dumps([UserMsg(name="user", content="Task 0"), reply_msg()]))
    shape = [(m.role, [type(b).__name__ for b in m.content]) for m in pieces]
    assert shape == [
        ("user", ["TextBlock"]),
        ("user", ["TextBlock"]),  # the hint: AgentScope's formatters send it as a user message too
        ("assistant", ["ThinkingBlock"]),
        ("assistant", ["TextBlock"]),
        ("assistant", ["ToolCall", "ToolCall"]),  # parallel calls stay in one message
        ("tool", ["ToolResult"]),
        ("tool", ["ToolResult"]),
        ("assistant", ["TextBlock"]),
    ]
    assert validate(pieces) == []
    assert [c.id for c in pieces[4].tool_calls] == ["call_a", "call_b"]
    results = [b for m in pieces for b in m.content if isinstance(b, ToolResult)]
    assert [(r.call_id, r.text, r.is_error) for r in results] == [
        ("call_a", "3 failures", False),
        ("call_b", "boom", True),
    ]
    assert len({m.id for m in pieces}) == len(pieces)


def test_round_trip_gives_back_equal_msgs() -> None:
    image = DataBlock(source=Base64Source(data="aGVsbG8=", media_type="image/png"), name="shot.png")
    audio = DataBlock(source=Base64Source(data="UklGRg==", media_type="audio/wav"))
    history = [
        UserMsg(name="user", content=[TextBlock(text="Look at this"), image]),
        reply_msg(),
        AssistantMsg(
            name="builder",
            content=[
                ToolCallBlock(id="call_c", name="screenshot", input="{}", state="finished"),
                ToolResultBlock(id="call_c", name="screenshot", output=[TextBlock(text="taken"), image, audio]),
                HintBlock(hint=[TextBlock(text="a background result")], source="system"),
            ],
        ),
        Msg(name="system", role="system", content=[TextBlock(text="observed note")]),
    ]
    original = dumps(history)
    pieces = from_agentscope2(original)
    assert any(isinstance(b, ImageBlock) for m in pieces for b in m.content)
    back = to_agentscope2(pieces)
    assert back == original
    assert dumps([Msg.model_validate(d) for d in back]) == original  # and AgentScope accepts them


def test_pieces_do_not_change_as_the_reply_grows() -> None:
    """The host hands over the same reply Msg again with blocks appended: the earlier pieces are unchanged,
    so `Session.sync` sees only a new suffix."""
    msg = reply_msg()
    full = msg.model_dump(mode="json")
    for n in range(1, len(full["content"])):
        before = from_agentscope2([{**full, "content": full["content"][:n]}])
        after = from_agentscope2([full])
        if before and before[-1].tool_calls:
            continue  # calls are never on their own at the end of a history for long: results follow
        assert after[: len(before)] == before


def test_messages_not_from_a_msg_become_msgs_of_their_role() -> None:
    """The summary ctxkeep writes and the placeholder for a call with no result are Msgs AgentScope accepts."""
    call = AssistantMsg(name="builder", content=[ToolCallBlock(id="c1", name="lookup", input="{}")])
    with Session(MemoryFolder()) as session:
        session.add(from_agentscope2(dumps([UserMsg(name="user", content="Task 0"), call])))
        context = session.prepare("sys").context  # the open call gets an explicit error result
    msgs = context_msgs(replace(context, summary="## Goal\nfix it"))
    assert [(m.role, [b.type for b in m.content]) for m in msgs] == [
        ("user", ["text"]),
        ("user", ["text"]),
        ("assistant", ["tool_call"]),
        ("assistant", ["tool_result"]),
    ]
    assert "## Goal" in (msgs[0].get_text_content() or "")
    result = msgs[3].content[0]
    assert isinstance(result, ToolResultBlock) and result.state == "error" and result.name == "lookup"


def test_bad_input_is_refused_with_the_msg_named() -> None:
    with pytest.raises(ValueError, match="Msg 1"):
        from_agentscope2([UserMsg(name="u", content="ok").model_dump(mode="json"), {"role": "robot", "id": "x"}])
    with pytest.raises(ValueError, match="list of Msg dicts"):
        from_agentscope2("not a list")  # type: ignore[arg-type]


def test_the_1x_hook_refuses_2x_with_the_fix_named() -> None:
    from ctxkeep.adapters.agentscope_v1 import attach

    with pytest.raises(ImportError, match=r"For 2\.x use ctxkeep\.adapters\.agentscope\.ContextMiddleware"):
        attach(object(), "unused")


# --- the agent over HTTP ---------------------------------------------------------------------


class ToolNamelessFormatter(OpenAIChatFormatter):
    """AgentScope 2.0.11's formatter with the ``name`` it writes on ``tool`` messages left out.

    api.openai.com ignores that key, but the validating server (like strict OpenAI-compatible gateways)
    refuses keys the schema lacks, and it has nothing to do with ctxkeep, which never sees this layer.
    """

    async def format(self, msgs: list[Msg]) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in m.items() if not (m["role"] == "tool" and k == "name")}
            for m in await super().format(msgs)
        ]


def search_logs(query: str) -> str:
    """Search the build logs; returns the matching lines.

    Args:
        query (`str`):
            What to look for.
    """
    return tool_output(query)


def build_agent(base_url: str, middleware: ContextMiddleware, state: AgentState | None = None) -> Agent:
    """The framework's agent with its own toolkit and OpenAI model, as a user would write it, plus the one line."""
    model = OpenAIChatModel(
        credential=OpenAICredential(api_key="sk-local", base_url=base_url),
        model="validating",
        stream=False,
        max_retries=0,
        context_size=WINDOW,
        formatter=ToolNamelessFormatter(),
    )
    allowed = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="read-only search")
    toolkit = Toolkit(tools=[FunctionTool(search_logs, permission=allowed)])
    return Agent(
        name="builder", system_prompt=SYSTEM, model=model, toolkit=toolkit, middlewares=[middleware], state=state
    )


@dataclass
class Outcome:
    """What a long run leaves: the ids the workspace holds and how many messages the host's history makes."""

    held: list[str]
    history: int
    summary: str | None


async def run_tasks(
    workspace: Path, base_url: str, tasks: int, restart_at: int | None = None, **settings: Any
) -> Outcome:
    """`tasks` tasks through a 2.x agent with `ContextMiddleware`; at `restart_at` the session is closed and a
    new middleware and agent take over the workspace and the agent's state, as a restarted host would."""
    settings = {"window": WINDOW, **settings}
    middleware = ContextMiddleware(workspace, **settings)
    agent = build_agent(base_url, middleware)
    for i in range(tasks):
        if i == restart_at:
            await middleware.close()
            saved = agent.state.model_dump_json()  # what a host persists and loads again
            middleware = ContextMiddleware(workspace, **settings)
            agent = build_agent(base_url, middleware, AgentState.model_validate_json(saved))
        await agent.reply(UserMsg(name="user", content=task(i)))
    # How AgentScope's messages map to ctxkeep's: each Msg of the agent's context becomes one or more
    # messages (a hint: user; each text or thinking block: assistant; a run of calls: one assistant message;
    # each result: a tool message), with ids from the Msg id and the block id. The agent's last answer was
    # never sent to the model, so it is synced here; then every piece of the history is held exactly once.
    session = await middleware.session()
    history = history_messages(agent.state.context)
    await session.sync(history)
    outcome = Outcome(held=held_ids(session.session), history=len(history), summary=session.summary)
    await middleware.close()
    return outcome


def run(workspace: Path, base_url: str, tasks: int, restart_at: int | None = None) -> None:
    """The long run for AgentScope 2.x against a validating server at `base_url` (bench/bench_adapters.py)."""
    asyncio.run(run_tasks(workspace, base_url, tasks, restart_at))


def test_a_few_tasks_stay_valid_and_compact(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        outcome = asyncio.run(run_tasks(tmp_path / "ws", api.base_url, 12))
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    assert outcome.summary is not None, "12 tasks of ~30 KB results at 16k compact at least once"
    assert len(outcome.held) == len(set(outcome.held)) == outcome.history


def compactions(workspace: Path) -> int:
    """How many compactions the workspace records."""
    path = workspace / "compactions.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(1 for line in lines if json.loads(line).get("kind") == "compaction")


def test_agentscope_compression_keeps_the_history_and_an_explicit_one_compacts(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"

    async def go(base_url: str) -> tuple[bool, list[int], list[int]]:
        middleware = ContextMiddleware(workspace, window=WINDOW)
        agent = build_agent(base_url, middleware)
        for i in range(2):
            await agent.reply(UserMsg(name="user", content=task(i)))
        # AgentScope's own estimate of its history: over its trigger, so its compression would run now
        due = await agent.model.count_tokens(agent.state.context, None) > agent.context_config.trigger_ratio * WINDOW
        sizes, done = [len(agent.state.context)], [compactions(workspace)]
        await agent.compress_context()  # the check before each reasoning step
        sizes.append(len(agent.state.context))
        done.append(compactions(workspace))
        await agent.compress_context(instructions=HintBlock(hint="keep the failing test names"))
        sizes.append(len(agent.state.context))
        done.append(compactions(workspace))
        await middleware.close()
        return due, sizes, done

    with ValidatingServer(window=WINDOW) as api:
        due, sizes, done = asyncio.run(go(api.base_url))
    assert due
    assert sizes[0] == sizes[1] == sizes[2]  # the agent keeps its whole history
    assert done[1] == done[0]  # the automatic check compacts nothing: ctxkeep does that before the model call
    assert done[2] == done[0] + 1  # an explicit request compacts the workspace


def test_the_readme_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_readme import readme_block

    (tmp_path / "settings.py").write_text("RETRY_LIMIT = 5\n")
    monkeypatch.chdir(tmp_path)
    with ValidatingServer(window=WINDOW) as api:
        monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
        monkeypatch.setenv("MODEL", "local-model")  # a local server's name: no SDK special-cases it
        readme: dict[str, Any] = {"__name__": "readme"}
        exec(compile(readme_block("Use it with AgentScope"), "README.md", "exec"), readme)
    assert api.refused == []
    assert len(api.records) == 4  # per question: the grep call, then the answer
    # The tool ran without asking first: the server searched for the question's words, which no file holds.
    results = [m["content"] for m in api.records[1].body["messages"] if m["role"] == "tool"]
    assert results
    assert set(results) == {"no match"}
    with Session.open(tmp_path / "workspace") as session:
        roles = [m.role for m in session.messages]
    assert roles[0] == "user"
    assert "tool" in roles  # the workspace holds the run


@pytest.mark.slow
def test_150_tasks_at_16k_with_a_restart_halfway(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        outcome = asyncio.run(run_tasks(tmp_path / "ws", api.base_url, 150, restart_at=75))
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    assert len(api.records) >= 300
    assert any(len(m.get("tool_calls") or []) == 2 for r in api.records for m in r.body["messages"])
    assert len(outcome.held) == len(set(outcome.held)) == outcome.history


# --- a real compaction model ---------------------------------------------------------------
# The shared short run (tests/local_model.py): SmolLM2 as the summarizer, its summary used when ctxkeep accepts
# it and the extractive one otherwise, so the run stays short on a slow machine; what it checks is that a real
# model summarizer runs inside the middleware, every request inside the window, no message lost.


@pytest.mark.slow
def test_a_short_run_with_the_local_model_as_summarizer(
    llama_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    summarizer = local_model.summarizer(llama_url, request)
    window = local_model.WINDOW
    with ValidatingServer(window=window) as api:
        outcome = asyncio.run(
            run_tasks(tmp_path / "ws", api.base_url, local_model.TASKS, window=window, summarizer=summarizer)
        )
    assert compactions(tmp_path / "ws") >= 2
    assert summarizer.asked >= 2  # the real model was asked each time (its summary used when accepted)
    assert api.refused == []
    assert api.peak_tokens <= window
    assert len(outcome.held) == len(set(outcome.held)) == outcome.history


# --- AgentScope 1.x, in a venv of its own ------------------------------------------------------

V1_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ctxkeep-tests" / "agentscope1"
# 1.0.21 needs mcp<2 and greenlet to import, and imports tqdm without requiring it
V1_PACKAGES = ["agentscope==1.0.21", "mcp<2", "greenlet", "tqdm"]


def v1_python() -> Path:
    """The 1.x venv's Python, built once (pip's cache makes a rebuild fast); ctxkeep installed from this repo."""
    python = V1_VENV / "bin" / "python"
    marker = V1_VENV / "ctxkeep-ready.json"
    want = json.dumps({"packages": V1_PACKAGES, "repo": str(REPO)})
    if marker.exists() and marker.read_text() == want and python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(V1_VENV)], check=True, timeout=600)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *V1_PACKAGES], check=True, timeout=1800)
    subprocess.run([*pip, "-e", str(REPO)], check=True, timeout=1800)  # ctxkeep from this checkout
    marker.write_text(want)
    return python


@pytest.mark.slow
def test_agentscope_1x_pre_reasoning_hook_150_tasks_with_a_restart(tmp_path: Path) -> None:
    python = v1_python()
    with ValidatingServer(window=WINDOW) as api:
        done = subprocess.run(
            [
                str(python),
                str(REPO / "tests" / "agentscope_v1_run.py"),
                str(tmp_path / "ws"),
                api.base_url,
                "150",
                "75",
            ],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=REPO,
        )
    assert done.returncode == 0, done.stderr[-4000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    assert outcome["compactions"] >= 1
    assert outcome["held"] == outcome["unique"] == outcome["history"]
