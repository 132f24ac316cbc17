"""The memory flush and the consolidation on real replies: llama.cpp's server with SmolLM2-135M on 127.0.0.1.

SmolLM2-135M is far too small to judge what it saves: these tests check the safeguards on real replies
(every reply is an action held to the schema, or the rule takes over; the calls stay within their number;
no entry is lost by a consolidation the model rewrote). Marked slow, like tests/test_llama_server.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxkeep.folder import LocalFolder
from ctxkeep.memory.consolidate import SUPERSEDED, _key, consolidate
from ctxkeep.memory.files import MEMORY_FILE, append_daily, append_to_section, entries_of
from ctxkeep.memory.flush import flush
from ctxkeep.messages import Message
from ctxkeep.providers import get_model

pytestmark = pytest.mark.slow
NOW = datetime(2026, 10, 10, 21, 0, tzinfo=UTC)


def test_a_real_model_flush_writes_only_tagged_entries(llama_url: str, tmp_path: Path) -> None:
    folder = LocalFolder(tmp_path)
    messages = [
        Message.of("user", "Please always answer in German. I prefer pnpm over npm."),
        Message.of("assistant", "Verstanden. Ich nutze pnpm."),
    ]
    model = get_model("openai:smollm2", base_url=llama_url, timeout=600)
    run = flush(folder, messages, now=NOW, model=model, steps=2)
    assert run.by in ("model", "rule") and run.calls <= 2
    if run.by == "rule":  # the model's reply was no action: the rule's notes, and why
        assert run.errors and [n.text for n in run.notes] == [
            "Please always answer in German.",
            "I prefer pnpm over npm.",
        ]
    log = (folder.read("memory/2026-10-10.md") or b"").decode()
    for note in run.notes:
        assert f"[{note.kind}] {note.text.splitlines()[0]}" in log


def test_a_real_model_consolidation_loses_no_entry(llama_url: str, tmp_path: Path) -> None:
    folder = LocalFolder(tmp_path)
    append_to_section(folder, "Deploy only from the release branch", section="Rules")
    append_daily(folder, "The user prefers pnpm over npm", at=NOW, tag="preference")
    append_daily(folder, "`pnpm install` failed offline; `pnpm install --offline` worked", at=NOW, tag="lesson")
    written = [
        _key(e.text)
        for name in ("MEMORY.md", "memory/2026-10-10.md")
        for e in entries_of((folder.read(name) or b"").decode())
    ]
    model = get_model("openai:smollm2", base_url=llama_url, timeout=600)
    done = consolidate(folder, now=NOW, model=model)
    assert done.logs == ("memory/2026-10-10.md",)
    kept = entries_of((folder.read(MEMORY_FILE) or b"").decode())
    present = {_key(e.text) for e in kept}
    superseded = " ".join(e.text for e in kept if e.section == SUPERSEDED).casefold()
    for key in written:
        assert key in present or key in " ".join(superseded.split()), key
