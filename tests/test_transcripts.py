"""Every shared transcript: detected as its format, all calls paired, ids stable and unique; its summaries
backed by the archive and said once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT, TRANSCRIPTS, raw_params

from ctxkeep.codec import dumps
from ctxkeep.formats import load
from ctxkeep.pairing import repair, validate
from ctxkeep.settings import CompactSettings, EngineSettings
from ctxkeep.summarize.extractive import ExtractiveSummarizer

# the summary benchmark's replay and its checks, so the test measures what the bench prints
sys.path.insert(0, str(ROOT / "bench"))

# provenance.json's format names -> ctxkeep's
FORMAT_NAMES = {
    "claude_code": "claude_code",
    "codex": "codex",
    "pi": "pi",
    "openhands_output_jsonl": "openhands",
    "swe_agent_traj": "swe_agent",
    "tau_bench_results": "tau_bench",
}


# Calls the agent made that never got a result, as the raw file records them (checked by
# tests/test_import_pi.py's own reader): pi aborted five mid-call and compacted before one ran.
UNPAIRED_IN_SOURCE = {"pi_before_compaction.jsonl": 6}


def expected_format(path: Path) -> str:
    entries = json.loads((TRANSCRIPTS / "provenance.json").read_text())
    return FORMAT_NAMES[next(e["format"] for e in entries if e["raw_file"] == path.name)]


@pytest.mark.parametrize("path", raw_params())
def test_detected_and_paired(path: Path) -> None:
    transcript = load(path)
    assert transcript.format == expected_format(path)
    assert transcript.conversations
    problems = [p for conv in transcript.conversations for p in validate(conv.messages)]
    unpaired = UNPAIRED_IN_SOURCE.get(path.name, 0)
    assert [p.kind for p in problems] == ["missing_result"] * unpaired, f"{path.name}: {problems[:3]}"
    for conv in transcript.conversations:
        fixed, changes = repair(conv.messages)
        assert validate(fixed) == []
        assert len(changes) == len(validate(conv.messages))
    ids = [m.id for m in transcript.messages]
    assert len(ids) == len(set(ids)), "message ids are unique within a file"
    again = load(path)
    assert [m.id for m in again.messages] == ids, "ids are stable across imports"
    assert all(m.timestamp is None or m.timestamp.tzinfo is not None for m in transcript.messages)


@pytest.mark.parametrize("path", raw_params())
def test_native_format_keeps_every_imported_message(path: Path, tmp_path: Path) -> None:
    """What the archive will write (ctxkeep JSONL) reads back equal, for every real message."""
    transcript = load(path)
    out = tmp_path / "archive.jsonl"
    out.write_bytes(b"".join(dumps(m) for m in transcript.messages))
    again = load(out)
    assert again.format == "ctxkeep"
    assert again.messages == transcript.messages


@pytest.mark.parametrize("window", [32_000, 128_000])
def test_summaries_of_the_shared_transcripts_can_be_trusted(window: int) -> None:
    """Replayed turn by turn with the extractive summarizer, as bench/bench_summary.py does: after every
    compaction, each Done item points to a call or commit of the archive, no Blocked item not marked
    resolved was fixed by a later run, and at most 2% of the summaries' characters say a thing twice."""
    bench = pytest.importorskip("bench_summary", reason="bench/ is beside tests/ in a checkout")
    files = bench.select([])
    if not files:
        pytest.skip(f"no transcripts in {TRANSCRIPTS}")
    settings = EngineSettings(compact=CompactSettings(max_input_length=window))
    total = bench.Tally()
    for path in files:
        for system, messages in bench.conversations(path):
            total.add(bench.replay(messages, system, settings, ExtractiveSummarizer))
    assert total.compactions > 0 and total.done > 0
    assert total.unbacked == 0, [e for e in total.examples if e.startswith("done")][:3]
    assert total.stale == 0, [e for e in total.examples if e.startswith("blocked")][:3]
    # Issue 21 asks for <= 2% (0.7% at 32k, 0.4% at 128k): a rule the verbatim part shows whole is not listed again
    assert total.twice <= 0.02 * sum(total.sizes), f"{100 * total.twice / sum(total.sizes):.1f}% said twice"
