"""Every shared transcript: detected as its format, all calls paired, ids stable and unique."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import TRANSCRIPTS, raw_params

from ctxkeep.formats import load
from ctxkeep.messages import validate

# provenance.json's format names -> ctxkeep's
FORMAT_NAMES = {
    "claude_code": "claude_code",
    "codex": "codex",
    "pi": "pi",
    "openhands_output_jsonl": "openhands",
    "swe_agent_traj": "swe_agent",
    "tau_bench_results": "tau_bench",
}


def expected_format(path: Path) -> str:
    entries = json.loads((TRANSCRIPTS / "provenance.json").read_text())
    return FORMAT_NAMES[next(e["format"] for e in entries if e["raw_file"] == path.name)]


@pytest.mark.parametrize("path", raw_params())
def test_detected_and_paired(path: Path) -> None:
    transcript = load(path)
    assert transcript.format == expected_format(path)
    assert transcript.conversations
    for conv in transcript.conversations:
        assert validate(conv.messages) == [], f"{path.name} {conv.id}"
    ids = [m.id for m in transcript.messages]
    assert len(ids) == len(set(ids)), "message ids are unique within a file"
    again = load(path)
    assert [m.id for m in again.messages] == ids, "ids are stable across imports"
    assert all(m.timestamp is None or m.timestamp.tzinfo is not None for m in transcript.messages)
