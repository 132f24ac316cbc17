"""Shared helpers, the hypothesis profiles, and a guard against tests collected twice.

Real transcripts are read from ../shared/data/transcripts/ (never copied here).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# No test depends on how fast the machine is: no deadline per example, and no health check that
# fails when drawing examples is slow (a busy machine is not a bug). CI runs the same examples every
# time (HYPOTHESIS_PROFILE=ci in .ci/run), so a landing never hangs on luck; local runs explore new
# examples on each run.
settings.register_profile("local", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", settings.get_profile("local"), derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "local"))

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT.parent / "shared" / "data" / "transcripts"
RAW = TRANSCRIPTS / "raw"


def raw_files(fmt: str | None = None) -> list[Path]:
    """Raw transcript files of `fmt` (a provenance.json format name), or all of them."""
    prov = TRANSCRIPTS / "provenance.json"
    if not prov.exists():
        return []
    entries = json.loads(prov.read_text())
    return sorted(RAW / e["raw_file"] for e in entries if fmt is None or e["format"] == fmt)


def raw_params(fmt: str | None = None) -> list[object]:
    """pytest params for the raw files of `fmt`; one skipped param when shared/ is absent."""
    files = raw_files(fmt)
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no transcripts in {TRANSCRIPTS}"))]
    return [pytest.param(p, id=p.name) for p in files]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a test that a module imported from another test module: pytest would collect it twice.
    Shared helpers belong here or in a plain module (tests/scripted.py), never in a test module."""
    strays = [
        f"{item.nodeid} (defined in {item.function.__module__})"
        for item in items
        if isinstance(item, pytest.Function) and item.function.__module__ != item.module.__name__
    ]
    if strays:
        raise pytest.UsageError("tests imported from another test module run twice:\n  " + "\n  ".join(strays))
