"""The README's first Python example runs as written, against a local OpenAI-compatible server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.conftest import ROOT
from tests.validating_server import ValidatingServer

from ctxkeep import Session


def readme_block(heading: str) -> str:
    """The first ```python block under `heading` in the README."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, f"no python block under {heading!r}"
    return found.group(1)


def test_the_agent_loop_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "settings.py").write_text("RETRY_LIMIT = 5\n")
    monkeypatch.chdir(tmp_path)
    with ValidatingServer(window=16_000) as api:
        monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
        monkeypatch.setenv("MODEL", "local-model")  # a local server's name: no SDK special-cases it
        exec(compile(readme_block("An agent loop in 15 lines"), "README.md", "exec"), {"__name__": "readme"})
    assert api.refused == []
    assert len(api.records) == 2  # the grep call, then the answer
    with Session.open(tmp_path / "workspace") as session:
        roles = [m.role for m in session.messages]  # the last answer is only in the host's history
    assert roles[:2] == ["user", "assistant"]
    assert set(roles[2:]) == {"tool"}


def test_the_agent_loop_goes_on_when_run_again_in_the_same_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Reopen it to go on later": the loop keeps no history of its own, so its second run starts over with
    the same request; the workspace holds the first run, and the second run's requests carry it."""
    (tmp_path / "settings.py").write_text("RETRY_LIMIT = 5\n")
    monkeypatch.chdir(tmp_path)
    block = compile(readme_block("An agent loop in 15 lines"), "README.md", "exec")
    with ValidatingServer(window=16_000) as api:
        monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
        monkeypatch.setenv("MODEL", "local-model")
        exec(block, {"__name__": "readme"})
        first = len(api.records)
        exec(block, {"__name__": "readme"})
    assert api.refused == []
    assert len(api.records) == 2 * first
    earlier = api.records[first - 1].body["messages"]  # the first run's last request
    again = api.records[first].body["messages"]  # the second run's first request
    assert again[: len(earlier)] == earlier  # the first run's context, then the request asked again
    assert again[len(earlier) :] == [earlier[1]]
    roles = [m["role"] for m in again[1:]]  # after the system prompt: run 1's request, call and results
    assert roles[:2] == ["user", "assistant"] and set(roles[2:-1]) == {"tool"} and roles[-1] == "user"
    with Session.open(tmp_path / "workspace") as session:
        roles = [m.role for m in session.messages]
    assert roles.count("user") == 2 and roles[0] == "user"


def test_the_agent_loop_run_for_30_requests_with_the_real_grep_stays_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop as written, 15 runs in one folder (30 requests), its `grep` searching the folder the workspace
    sits in: each output would hold the earlier ones if grep read the workspace (it ran away to 2.8 GB);
    the workspace folder is left out, so the outputs, the workspace and the context stay small."""
    (tmp_path / "settings.py").write_text("RETRY_LIMIT = 5\n")
    monkeypatch.chdir(tmp_path)
    block = compile(readme_block("An agent loop in 15 lines"), "README.md", "exec")
    with ValidatingServer(window=16_000) as api:
        monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
        monkeypatch.setenv("MODEL", "local-model")
        for _ in range(15):
            exec(block, {"__name__": "readme"})
    assert api.refused == []
    assert len(api.records) == 30
    assert api.peak_tokens <= 16_000
    outputs = {m["content"] for r in api.records for m in r.body["messages"] if m["role"] == "tool"}
    assert outputs == {"no match"}  # the question's words are in no file but the workspace's own
    size = sum(p.stat().st_size for p in (tmp_path / "workspace").rglob("*") if p.is_file())
    assert size < 1_000_000, size
