"""The README's other Python blocks run as written: the whole programs as they stand, the fragments of the
pass with only the names they leave to the reader (a history, a system prompt, a client) given."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from tests.conftest import ROOT
from tests.test_readme import readme_block
from tests.validating_server import ValidatingServer

from ctxkeep import Session


def run_block(heading: str, names: dict[str, Any]) -> dict[str, Any]:
    """Run the first Python block under `heading` with `names` defined; its globals after."""
    scope: dict[str, Any] = {"__name__": "readme", **names}
    exec(compile(readme_block(heading), "README.md", "exec"), scope)
    return scope


def test_the_library_block_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(ROOT / "examples" / "agent_session.jsonl", tmp_path / "session.jsonl")
    monkeypatch.chdir(tmp_path)
    scope = run_block("Library", {})
    assert scope["messages"] and scope["changes"] is not None
    assert scope["tokens"] > 0


def test_the_memory_block_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scope = run_block("Long-term memory", {})
    names = [t.name for t in scope["tools"]]
    assert names[:3] == ["memory_write", "memory_read", "memory_search"] and "recall" in names
    assert isinstance(scope["result"], str)
    assert len(scope["schemas"]) == len(names)


def test_the_pass_and_sync_fragments_run_with_their_names_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    history: list[Any] = [
        {"role": "user", "content": "Where is the retry limit set?"},
        {"role": "assistant", "content": "In settings.py, RETRY_LIMIT = 5."},
    ]
    with ValidatingServer(window=32_000) as api:
        client = OpenAI(base_url=api.base_url, api_key="sk-local")
        names = {
            "new_messages": history,
            "system_prompt": "You are a careful engineer.",
            "tool_schemas": [],
            "client": client,
            "MODEL": "local-model",
            "message_id": None,
        }
        with Session.open("workspace") as session:
            session.add(history)
            names["message_id"] = session.messages[0].id
        history.append({"role": "user", "content": "Which tests cover it?"})  # new since: add takes only those
        names["new_messages"] = history[-1:]
        run_block("The pre-reasoning pass", names)
        # in a workspace of its own (the one above holds a pin, which stays live while what follows it is archived)
        (tmp_path / "other").mkdir()
        monkeypatch.chdir(tmp_path / "other")
        sync = {"Session": Session, "messages": history, "system_prompt": "You are a careful engineer."}
        run_block("Syncing a host's history", sync)  # it follows the block above, whose import it uses
        run_block("Syncing a host's history", sync)  # the same history again adds nothing
        client.close()
    assert api.refused == []
    assert len(api.records) == 1  # the one model call of the pass fragment
    with Session.open(tmp_path / "workspace") as session:
        assert session.summary is not None  # the fragment's manual /compact
        assert session.messages[0].id == names["message_id"]  # pinned: kept live
    with Session.open(tmp_path / "other" / "workspace") as session:
        assert len(session.messages) == len(history)
