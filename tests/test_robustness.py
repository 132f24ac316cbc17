"""Odd records never crash an importer: each one either imports or raises `FormatError`.

Real transcripts are mutated at random (a field dropped, a value of the wrong type, a line
cut short) and read again. Whatever happens, the only exception allowed is `FormatError`,
and with ``lenient=True`` the file still loads: the same transcript when nothing was wrong,
else the rest of the file, with the record strict reading stopped at listed among the skips.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import raw_files

from ctxkeep.errors import FormatError
from ctxkeep.formats import Transcript, parse
from ctxkeep.formats.source import Source

# a small file of each format, cut to its first lines so each example is fast
SAMPLES = {
    "claude_code": "cc_spotter_subagent_a881341.jsonl",
    "codex": "codex_codemie_019e1625.jsonl",
    "pi": "pi_before_compaction.jsonl",
    "openhands": "openhands_multiswe_ponyc.jsonl",
}
MAX_LINES = 60
# more examples for a deeper search: CTXKEEP_FUZZ_EXAMPLES=500 pytest tests/test_robustness.py
SCALE = int(os.environ.get("CTXKEEP_FUZZ_EXAMPLES", "40"))
ODD_VALUES: list[Any] = [None, 0, -1, "", "x", [], {}, [None], {"type": None}, True, 1.5]


def _lines(name: str) -> list[str]:
    path = next((p for p in raw_files() if p.name == name), None)
    if path is None:
        pytest.skip("shared transcripts are absent")
    return path.read_text(encoding="utf-8").split("\n")[:MAX_LINES]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON value."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:20]):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(value: Any, path: tuple[Any, ...], action: str, odd: Any) -> Any:
    if not path:
        return odd
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    if action == "drop" and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = odd
    return value


_LENIENT_HINT = " (use --lenient to skip bad lines)"


def _check(fmt: str, raw: bytes) -> None:
    """Strict reading imports or raises `FormatError`; lenient reading imports (or, for a problem with
    the whole document, raises `FormatError` where strict reading did too). When strict reading
    succeeds, lenient reading gives the same transcript; when strict reading stopped at a bad record,
    lenient reading imports the rest and lists that record among its skips, with the same reason."""
    try:
        strict: Transcript | None = parse(Source.from_bytes(raw, path="mutated"), fmt)
    except FormatError as exc:
        strict, error = None, exc
    try:
        lenient = parse(Source.from_bytes(raw, path="mutated", lenient=True), fmt)
    except FormatError:
        assert strict is None, "lenient reading failed where strict reading succeeded"
        raise
    assert lenient.format == fmt and lenient.conversations
    if strict is not None:
        assert lenient == strict
        return
    assert error.reason.endswith(_LENIENT_HINT), f"strict reading failed, lenient did not, yet: {error}"
    where = f"line {error.line}" if error.line is not None else "record"
    assert f"skipped {where}: {error.reason.removesuffix(_LENIENT_HINT)}" in lenient.notes


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
@settings(
    max_examples=SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_mutated_records_import_or_raise_format_error(fmt: str, data: st.DataObject) -> None:
    lines = _lines(SAMPLES[fmt])
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    if not lines[index].strip():
        return
    record = json.loads(lines[index])
    path = data.draw(st.sampled_from(_paths(record)), label="path")
    action = data.draw(st.sampled_from(["drop", "replace"]), label="action")
    odd = data.draw(st.sampled_from(ODD_VALUES), label="odd")
    lines[index] = json.dumps(_mutate(record, path, action, odd))
    if index > 0:  # keep the file recognisable: detection reads the first line
        _check(fmt, "\n".join(lines).encode())
    else:
        with contextlib.suppress(FormatError):
            _check(fmt, "\n".join(lines).encode())


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
@settings(max_examples=max(1, SCALE // 3), deadline=None)
@given(data=st.data())
def test_truncated_lines_are_format_errors(fmt: str, data: st.DataObject) -> None:
    lines = _lines(SAMPLES[fmt])
    index = data.draw(st.integers(1, len(lines) - 2), label="line")
    cut = data.draw(st.integers(0, max(0, len(lines[index]) - 1)), label="cut")
    lines[index] = lines[index][:cut]
    _check(fmt, "\n".join(lines).encode())


@pytest.mark.parametrize(
    "name", ["swea_marshmallow_1867_fc.traj", "swea_pydicom_1458_gpt4.traj", "tau_gpt4o_airline.json"]
)
@settings(max_examples=max(1, SCALE // 2), deadline=None)
@given(data=st.data())
def test_mutated_json_documents_import_or_raise_format_error(name: str, data: st.DataObject) -> None:
    path = next((p for p in raw_files() if p.name == name), None)
    if path is None:
        pytest.skip("shared transcripts are absent")
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(doc, list):
        doc = doc[:3]
    fmt = "tau_bench" if name.startswith("tau") else "swe_agent"
    target = data.draw(st.sampled_from(_paths(doc)[1:]), label="path")
    action = data.draw(st.sampled_from(["drop", "replace"]), label="action")
    odd = data.draw(st.sampled_from(ODD_VALUES), label="odd")
    raw = json.dumps(_mutate(doc, target, action, odd)).encode()
    # a document-level problem (e.g. no conversation left at all) is still a clear error, lenient or not
    with contextlib.suppress(FormatError):
        _check(fmt, raw)
