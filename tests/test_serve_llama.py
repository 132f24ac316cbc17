"""`ctxkeep serve` in front of a real llama.cpp `llama-server` (SmolLM2-135M), through the openai and anthropic
SDKs: a short conversation at a 3,072-token server context, compacted by the proxy on the way.

The server and model come from PyPI (`scripts/test` installs them; see tests/test_llama_server.py).
The model's answers are nonsense; what is asserted is the path: every request accepted by the real
server, each within its context by the server's own count, a compaction on the way, and every message
held once. Slow (each prompt is prefilled on one CPU thread), so marked `slow` and given long waits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI
from tests.proxy_harness import running_proxy
from tests.validating_server import held_ids

from ctxkeep import Session, to_messages

pytestmark = [pytest.mark.slow, pytest.mark.extra("serve")]

CONTEXT = 3_072  # the server's window
# The proxy's window, well below the server's: ctxkeep counts o200k, the model its own (about twice as many
# tokens for these logs). The proxy learns the ratio from the server's usage and shrinks its window, but
# not below 1,024 tokens, where the summary's minimum size and the newest message alone take ~2,500 of
# the model's tokens.
WINDOW = 1_400
SECONDS = 900  # per request: only a hung server should reach it, even on a very slow machine
SYSTEM = "You are a build engineer. Answer in one short sentence."


def report(i: int) -> str:
    """The user's i-th message: a question with ~250 tokens of build log pasted in."""
    lines = [f"Turn {i}: why did the build fail? Log:"]
    for n in range(12):
        digest = hashlib.sha256(f"{i}:{n}".encode()).hexdigest()
        lines.append(f"ERROR src/pkg_{digest[:3]}/mod.py:{int(digest[3:6], 16)} failed {digest[6:22]}")
    return "\n".join(lines)


def held_once(root: Path, session: str, history: list[Any]) -> None:
    with Session.open(root / session) as workspace:
        assert workspace.sync(history) == []
        held = held_ids(workspace)
        assert workspace.summary is not None  # the proxy compacted on the way
    assert len(held) == len(set(held)) == len(to_messages(history))


def test_openai_sdk_through_the_proxy_to_llama_server(llama_servers: Callable[[int], str], tmp_path: Path) -> None:
    with running_proxy(llama_servers(CONTEXT), tmp_path, window=WINDOW, timeout=SECONDS) as url:
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=SECONDS)
        history: list[Any] = [{"role": "system", "content": SYSTEM}]
        sessions, prompts = set(), []
        for i in range(6):
            history.append({"role": "user", "content": report(i)})
            kw: dict[str, Any] = {"model": "smollm2", "messages": history, "max_tokens": 12}
            if i % 2:
                stream = client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
                sessions.add(stream.response.headers["x-ctxkeep-session"])
                text = ""
                for chunk in stream:
                    text += "".join(c.delta.content or "" for c in chunk.choices)
                    if chunk.usage is not None:
                        prompts.append(chunk.usage.prompt_tokens)
            else:
                raw = client.chat.completions.with_raw_response.create(**kw)
                sessions.add(raw.headers["x-ctxkeep-session"])
                answer = raw.parse()
                text = answer.choices[0].message.content or ""
                assert answer.usage is not None
                prompts.append(answer.usage.prompt_tokens)
            history.append({"role": "assistant", "content": text})
        client.close()
    assert len(prompts) == 6
    assert max(prompts) + 12 <= CONTEXT  # by the server's own tokenizer
    assert len(sessions) == 1
    held_once(tmp_path, next(iter(sessions)), history[1:])


def test_anthropic_sdk_through_the_proxy_to_llama_server(llama_servers: Callable[[int], str], tmp_path: Path) -> None:
    with running_proxy(llama_servers(CONTEXT), tmp_path, window=WINDOW, timeout=SECONDS) as url:
        client = Anthropic(base_url=url, api_key="none", max_retries=0, timeout=SECONDS)
        history: list[Any] = []
        sessions, prompts = set(), []
        for i in range(4):
            history.append({"role": "user", "content": report(i)})
            kw: dict[str, Any] = {"model": "smollm2", "system": SYSTEM, "messages": history, "max_tokens": 12}
            if i % 2:
                with client.messages.stream(**kw) as events:
                    message = events.get_final_message()
                    sessions.add(events.response.headers["x-ctxkeep-session"])
            else:
                raw = client.messages.with_raw_response.create(**kw)
                sessions.add(raw.headers["x-ctxkeep-session"])
                message = raw.parse()
            prompts.append(message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0))
            text = "".join(b.text for b in message.content if b.type == "text") or "(no answer)"
            history.append({"role": "assistant", "content": text})
        client.close()
    assert max(prompts) + 12 <= CONTEXT
    assert len(sessions) == 1
    held_once(tmp_path, next(iter(sessions)), history)
