"""Window-first settings: every size follows the window unless given, and one keyword overrides one part
(`Session.open(path, window=N, **overrides)`, `EngineSettings.for_window`), as httpx's `Timeout` does."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ctxkeep import Session
from ctxkeep.settings import CompactSettings, EngineSettings


def test_a_keyword_overrides_its_part_and_the_sizes_follow_the_rest(tmp_path: Path) -> None:
    with Session.open(tmp_path, window=32_000, language="zh", recent_n=5, compact_ratio=0.6) as s:
        got = s.settings
    assert got.compact == CompactSettings(max_input_length=32_000, compact_ratio=0.6)
    assert got.language == "zh" and got.offload.recent_n == 5
    # The sizes follow the threshold the overridden ratio makes, not the default one.
    plain = EngineSettings.for_window(32_000)
    assert got.summary_max_chars < plain.summary_max_chars
    assert got.offload.old_max_bytes < plain.offload.old_max_bytes
    assert replace(got, language=plain.language, offload=replace(got.offload, recent_n=plain.offload.recent_n)) == (
        EngineSettings.for_window(32_000, compact=CompactSettings(max_input_length=32_000, compact_ratio=0.6))
    )


def test_without_a_window_the_overrides_apply_to_the_seed_window(tmp_path: Path) -> None:
    with Session.open(tmp_path, recent_n=5) as s:
        assert s.settings == replace(EngineSettings(), offload=replace(EngineSettings().offload, recent_n=5))
    assert EngineSettings.for_window(128_000) == EngineSettings()


def test_explicit_settings_still_win_over_the_window(tmp_path: Path) -> None:
    mine = EngineSettings.for_window(8_192)
    with Session.open(tmp_path, window=32_000, settings=mine) as s:
        assert s.settings == mine


@pytest.mark.parametrize(
    ("keywords", "says"),
    [
        ({"recnt_n": 5}, "'recnt_n' is no setting"),
        ({"max_input_length": 9_000}, "the window is given as `window`"),
        ({"compact": CompactSettings(), "compact_ratio": 0.5}, "whole or its fields"),
        ({"settings": EngineSettings(), "language": "zh"}, "settings= and setting keywords"),
    ],
)
def test_a_wrong_keyword_says_what_to_do(tmp_path: Path, keywords: dict[str, object], says: str) -> None:
    with pytest.raises(TypeError, match=says):
        Session.open(tmp_path, window=16_000, **keywords)  # type: ignore[arg-type]
