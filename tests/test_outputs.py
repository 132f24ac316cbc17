"""What `prepare` returns goes to the SDKs as it is: no None fields, the SDKs' parameter types, a real request."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from tests.builders import shell_turn
from tests.test_providers import FakeAPI, anthropic_success, openai_success

from ctxkeep import EngineSettings, MemoryFolder, Message, Session, Step
from ctxkeep.settings import CompactSettings

SETTINGS = EngineSettings(compact=CompactSettings(max_input_length=1_500, compact_ratio=0.7, reserve_ratio=0.2))


def turn(i: int) -> list[Message]:
    return shell_turn(
        i,
        ask=f"request {i}: " + "word " * 60,
        output="out\n" * 40,
        command=f"ls /srv/{i}",
        note=f"running {i}",
        answer=f"step {i} done",
    )


@pytest.fixture
def step() -> Step:
    with Session(MemoryFolder(), settings=SETTINGS) as session:
        for i in range(8):
            session.add(turn(i))
            last = session.prepare("be brief")
        assert last.context.summary is not None  # the summary layer is there to export
        return last


def nones(value: Any, where: str = "") -> list[str]:
    if value is None:
        return [where]
    if isinstance(value, dict):
        return [w for k, v in value.items() for w in nones(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [w for i, v in enumerate(value) for w in nones(v, f"{where}[{i}]")]
    return []


def test_openai_messages_have_no_none_and_the_system_prompt_is_optional(step: Step) -> None:
    messages = step.to_openai()
    assert nones(messages) == []
    assert messages[0] == {"role": "system", "content": "be brief"}
    assert "<context-summary>" in str(messages[1]["content"])
    assert step.to_openai(system=False) == messages[1:]


def test_anthropic_system_and_messages_have_no_none(step: Step) -> None:
    system, messages = step.to_anthropic()
    assert system == "be brief"
    assert nones(messages) == []
    assert all(m["role"] in ("user", "assistant") for m in messages)


def test_the_openai_sdk_sends_them_as_they_are(step: Step) -> None:
    with FakeAPI(openai_success) as api:
        client = openai.OpenAI(base_url=f"{api.url}/v1", api_key="test", max_retries=0)
        try:
            client.chat.completions.create(model="m", messages=step.to_openai())
        finally:
            client.close()
    assert api.seen[0][2]["messages"] == step.to_openai()


def test_the_anthropic_sdk_sends_them_as_they_are(step: Step) -> None:
    system, messages = step.to_anthropic()
    assert system is not None
    with FakeAPI(anthropic_success) as api:
        client = anthropic.Anthropic(base_url=api.url, api_key="test", max_retries=0)
        try:
            client.messages.create(model="m", max_tokens=16, system=system, messages=messages)
        finally:
            client.close()
    body = api.seen[0][2]
    assert body["system"] == system and body["messages"] == messages


@pytest.mark.slow
def test_the_outputs_type_check_as_the_sdks_parameters(tmp_path: Path) -> None:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    assert mypy, "mypy is not installed in this environment"
    code = textwrap.dedent(
        """
        import anthropic
        import openai

        from ctxkeep import Step


        def send(step: Step) -> None:
            openai.OpenAI().chat.completions.create(model="m", messages=step.to_openai())
            openai.OpenAI().chat.completions.create(model="m", messages=step.to_openai(system=False))
            system, messages = step.to_anthropic()
            if system is not None:
                anthropic.Anthropic().messages.create(model="m", max_tokens=16, system=system, messages=messages)
        """
    )
    (tmp_path / "host.py").write_text(code)
    proc = subprocess.run(
        [mypy, "--strict", "--no-incremental", str(tmp_path / "host.py")],
        capture_output=True,
        text=True,
        timeout=900,  # stops a hung process only
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
