"""Settings of the pre-reasoning pass, one frozen dataclass per concern, with the seed defaults.

    CompactSettings   when to compact and how much recent history to keep (tokens)
    OffloadSettings   how big tool results are cut and saved to files (bytes)
    ToolPolicy        which tools get the browser or file-read treatment (name patterns)

Every value is checked on construction; the error says what is wrong and what would be right.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

__all__ = [
    "DEFAULT_POLICIES",
    "CompactSettings",
    "OffloadSettings",
    "PolicyKind",
    "ToolPolicy",
]

PolicyKind: TypeAlias = Literal["browser", "file_read", "default"]


def _positive(value: object, name: str, *, zero: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero else 1):
        least = "0 or more" if zero else "1 or more"
        raise ValueError(f"{name} must be a whole number, {least}; got {value!r}")


def _ratio(value: object, name: str) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1]; got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactSettings:
    """When to compact (`compact_threshold`) and how many recent tokens to keep (`reserve`).

    Defaults are the seed's: a 128,000-token window, compaction at 0.7 of it (89,600 tokens),
    and a kept tail of 0.1 of it capped at 12,800 tokens.
    """

    max_input_length: int = 128_000
    compact_ratio: float = 0.7
    reserve_ratio: float = 0.1
    reserve_cap: int = 12_800

    def __post_init__(self) -> None:
        _positive(self.max_input_length, "max_input_length")
        _ratio(self.compact_ratio, "compact_ratio")
        _ratio(self.reserve_ratio, "reserve_ratio")
        _positive(self.reserve_cap, "reserve_cap")
        if self.reserve_ratio >= self.compact_ratio:
            raise ValueError(
                f"reserve_ratio ({self.reserve_ratio}) must be below compact_ratio ({self.compact_ratio}),"
                " or a compaction could never free room"
            )

    @property
    def compact_threshold(self) -> int:
        """Tokens (system prompt + summary + live messages) above which a compaction runs."""
        return int(self.max_input_length * self.compact_ratio)

    @property
    def reserve(self) -> int:
        """The most tokens of recent messages a compaction keeps verbatim."""
        return min(int(self.max_input_length * self.reserve_ratio), self.reserve_cap)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolPolicy:
    """Tools whose name matches one of `patterns` (shell-style, case-insensitive) get `kind`."""

    kind: PolicyKind
    patterns: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.kind not in ("browser", "file_read", "default"):
            raise ValueError(f"ToolPolicy.kind must be 'browser', 'file_read' or 'default'; got {self.kind!r}")
        if isinstance(self.patterns, str):
            raise TypeError("ToolPolicy.patterns must be a tuple of patterns, not one string")
        object.__setattr__(self, "patterns", tuple(self.patterns))
        for p in self.patterns:
            if not isinstance(p, str) or not p:
                raise ValueError(f"ToolPolicy.patterns must be non-empty strings; got {p!r}")

    def matches(self, tool_name: str) -> bool:
        """True when `tool_name` matches one of the patterns."""
        name = tool_name.lower()
        return any(fnmatch.fnmatchcase(name, p.lower()) for p in self.patterns)


DEFAULT_POLICIES: tuple[ToolPolicy, ...] = (
    ToolPolicy(kind="browser", patterns=("*browser*", "*playwright*", "*puppeteer*", "*chrome*")),
    ToolPolicy(
        kind="file_read",
        patterns=("read", "read_file", "*_read_file", "file_read", "view_file", "open_file", "readfile", "cat"),
    ),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class OffloadSettings:
    """How tool results are cut (bytes of UTF-8) and how long their saved files live.

    The `recent_n` newest results are cut to `recent_max_bytes`, older ones to `old_max_bytes`.
    The first policy whose pattern matches a tool's name applies; no match means the default policy.
    """

    recent_n: int = 3
    recent_max_bytes: int = 50_000
    old_max_bytes: int = 3_000
    retention_days: int = 30
    policies: tuple[ToolPolicy, ...] = field(default=DEFAULT_POLICIES)

    def __post_init__(self) -> None:
        _positive(self.recent_n, "recent_n", zero=True)
        _positive(self.recent_max_bytes, "recent_max_bytes")
        _positive(self.old_max_bytes, "old_max_bytes")
        _positive(self.retention_days, "retention_days")
        if self.old_max_bytes > self.recent_max_bytes:
            raise ValueError(
                f"old_max_bytes ({self.old_max_bytes}) must not exceed recent_max_bytes ({self.recent_max_bytes}):"
                " older results are cut further, never less"
            )
        object.__setattr__(self, "policies", tuple(self.policies))
        for p in self.policies:
            if not isinstance(p, ToolPolicy):
                raise TypeError(f"OffloadSettings.policies must hold ToolPolicy values; got {p!r}")

    def policy_for(self, tool_name: str | None) -> PolicyKind:
        """The policy kind for a tool name (``"default"`` when nothing matches or the name is unknown)."""
        if tool_name:
            for p in self.policies:
                if p.matches(tool_name):
                    return p.kind
        return "default"
