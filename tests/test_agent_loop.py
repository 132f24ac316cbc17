"""The README's agent loop on the official `openai` SDK, against a local server that checks every request.

150 tasks with ~30 KB tool outputs (some calls in parallel) at a 16k window, the process "restarted"
halfway (the session closed and reopened from disk while the host keeps its history): every request
valid and inside the window, every message of the host's history held exactly once, live or archived.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from tests.validating_server import SEARCH_TOOL, ValidatingServer, held_ids, task, tool_output

from ctxkeep import Session

WINDOW = 16_000
SYSTEM = "You are a build engineer. Use the tools, then answer briefly."


def run_task(client: OpenAI, session: Session, history: list[Any], i: int) -> int:
    """One task of the README's loop; the number of requests it took."""
    history.append({"role": "user", "content": task(i)})
    for requests in range(1, 10):
        session.sync(history)
        step = session.prepare(SYSTEM, tools=[SEARCH_TOOL])
        reply = (
            client.chat.completions.create(model="validating", messages=step.to_openai(), tools=[SEARCH_TOOL])
            .choices[0]
            .message
        )
        history.append(reply)
        if not reply.tool_calls:
            return requests
        for call in reply.tool_calls:
            query = json.loads(call.function.arguments)["query"]  # type: ignore[union-attr]
            history.append({"role": "tool", "tool_call_id": call.id, "content": tool_output(query)})
    raise AssertionError(f"task {i} did not finish")


def run(workspace: Path, base_url: str, tasks: int, restart_at: int | None = None) -> None:
    """The long run: `tasks` tasks through the README's loop, the session reopened before `restart_at`."""
    client = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
    history: list[Any] = []
    session = Session.open(workspace, window=WINDOW)
    try:
        for i in range(tasks):
            if i == restart_at:
                session.sync(history)  # the last answer too, so the reopened session has nothing new to take
                session.close()
                session = Session.open(workspace, window=WINDOW)  # a new process would see just this
                assert session.sync(history) == []  # all of it is recognised, live or archived
            run_task(client, session, history, i)
        session.sync(history)
        held = held_ids(session)
    finally:
        session.close()
    assert len(held) == len(set(held)) == len(history)


@pytest.mark.slow
def test_150_tasks_at_16k_with_a_restart_halfway(tmp_path: Path) -> None:
    with ValidatingServer(window=WINDOW) as api:
        run(tmp_path / "ws", api.base_url, 150, restart_at=75)
    assert api.refused == []
    assert api.peak_tokens <= WINDOW
    assert len(api.records) >= 300
