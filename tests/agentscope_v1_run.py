"""The long run for AgentScope 1.x, run by tests/test_adapter_agentscope.py in a venv of its own (1.x cannot
be installed beside 2.x) against the validating server running in the pytest process.

    python tests/agentscope_v1_run.py WORKSPACE BASE_URL TASKS RESTART_AT

The framework's `ReActAgent` with its own `Toolkit`, `OpenAIChatModel` and `InMemoryMemory`, plus
`ctxkeep.adapters.agentscope_v1.attach`; at RESTART_AT the hook is closed and a new agent, memory and
hook take over the workspace and the memory's saved state. Prints one JSON line: compactions, the ids
the workspace holds (all, and distinct) and how many messages the agent's memory ever held.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg, TextBlock
from agentscope.model import OpenAIChatModel
from agentscope.tool import Toolkit, ToolResponse
from tests.validating_server import held_ids, task, tool_output

from ctxkeep.adapters.agentscope_v1 import PreReasoningHook, attach
from ctxkeep.formats.agentscope import from_agentscope

WINDOW = 16_000
SYSTEM = "You are a build engineer. Use the tools, then answer briefly."


class ToolNamelessFormatter(OpenAIChatFormatter):
    """1.0.21's formatter without the ``name`` it writes on ``tool`` messages (api.openai.com ignores it, the
    validating server refuses keys the schema lacks; ctxkeep never sees this layer)."""

    async def format(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        out = await super().format(*args, **kwargs)
        return [{k: v for k, v in m.items() if not (m["role"] == "tool" and k == "name")} for m in out]


class RecordingMemory(InMemoryMemory):
    """The framework's memory, noting the ctxkeep id of every message ever added, so the run can check that
    the workspace holds each of them once (the hook replaces compacted messages by the summary)."""

    def __init__(self, seen: set[str]) -> None:
        super().__init__()
        self.seen = seen

    async def add(self, memories: Any, marks: Any = None, **kwargs: Any) -> None:
        msgs = memories if isinstance(memories, list) else [memories] if memories is not None else []
        self.seen.update(m.id for m in from_agentscope([msg.to_dict() for msg in msgs]))
        await super().add(memories, marks, **kwargs)


async def search_logs(query: str) -> ToolResponse:
    """Search the build logs; returns the matching lines.

    Args:
        query (`str`):
            What to look for.
    """
    return ToolResponse(content=[TextBlock(type="text", text=tool_output(query))])


def build(base_url: str, memory: RecordingMemory) -> ReActAgent:
    model = OpenAIChatModel(
        model_name="validating", api_key="sk-local", stream=False, client_kwargs={"base_url": base_url}
    )
    toolkit = Toolkit()
    toolkit.register_tool_function(search_logs)
    agent = ReActAgent(
        name="builder",
        sys_prompt=SYSTEM,
        model=model,
        formatter=ToolNamelessFormatter(),
        toolkit=toolkit,
        memory=memory,
        parallel_tool_calls=True,
    )
    agent.set_console_output_enabled(False)
    return agent


async def main(workspace: Path, base_url: str, tasks: int, restart_at: int) -> dict[str, int]:
    seen: set[str] = set()
    memory = RecordingMemory(seen)
    agent = build(base_url, memory)
    hook: PreReasoningHook = attach(agent, workspace, window=WINDOW)
    for i in range(tasks):
        if i == restart_at:
            await hook.close()
            saved = json.loads(json.dumps(memory.state_dict()))  # what a host persists and loads again
            memory = RecordingMemory(seen)
            memory.load_state_dict(saved)
            agent = build(base_url, memory)
            hook = attach(agent, workspace, window=WINDOW)
        await agent(Msg("user", task(i), "user"))
    await hook.sync(agent)  # the last answer, which no reasoning step followed
    session = await hook.session()
    held = held_ids(session.session)
    await hook.close()
    records = [json.loads(line) for line in (workspace / "compactions.jsonl").read_text().splitlines()]
    compactions = sum(1 for r in records if r.get("kind") == "compaction")
    return {"compactions": compactions, "held": len(held), "unique": len(set(held)), "history": len(seen)}


if __name__ == "__main__":
    where, url, n, restart = sys.argv[1:5]
    print(json.dumps(asyncio.run(main(Path(where), url, int(n), int(restart)))))
