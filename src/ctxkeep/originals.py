"""The originals offload saves: their names under ``tool_result/``, and the record a cut output keeps of its one.

The record (`OffloadRecord`, in the output's extra) says which file holds the full text, how much of it is
still shown and where to read on; `ctxkeep.offload` writes it, `ctxkeep.retention` and the workspace read
it to know which files a live message still needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, get_args

from .messages import Message, ToolResult, make_id
from .settings import PolicyKind
from .store import OFFLOAD_KEY, ORIGINAL_NAME, TOOL_RESULT_DIR

Stage: TypeAlias = Literal["recent", "old"]

_POLICIES: tuple[str, ...] = get_args(PolicyKind)


@dataclass(frozen=True, kw_only=True, slots=True)
class OffloadRecord:
    """What `offload` did to one output; a dict in ``ToolResult.extra[OFFLOAD_KEY]`` (a command's: ``Message.extra``).

    `kept_bytes` is the size of the original's head still shown (the visible text is that head, a
    newline and the notice, or the notice alone when nothing is kept); `next_line` is the 1-based
    line of the saved file from which to read on.
    """

    file: str
    stage: Stage
    policy: PolicyKind
    original_bytes: int
    original_lines: int
    kept_bytes: int
    next_line: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict kept in the result's `extra`."""
        return {
            "file": self.file,
            "stage": self.stage,
            "policy": self.policy,
            "original_bytes": self.original_bytes,
            "original_lines": self.original_lines,
            "kept_bytes": self.kept_bytes,
            "next_line": self.next_line,
        }

    @classmethod
    def from_dict(cls, d: object) -> OffloadRecord:
        """The record from its dict; ValueError naming the bad field when it is malformed."""
        if not isinstance(d, Mapping):
            raise ValueError(f"an offload record must be a JSON object; got {type(d).__name__}")
        file, stage, policy = d.get("file"), d.get("stage"), d.get("policy")
        if not isinstance(file, str) or not file.startswith(TOOL_RESULT_DIR + "/"):
            raise ValueError(f"offload record: 'file' must name a file under {TOOL_RESULT_DIR}/; got {file!r}")
        if stage not in ("recent", "old"):
            raise ValueError(f"offload record: 'stage' must be 'recent' or 'old'; got {stage!r}")
        if policy not in _POLICIES:
            raise ValueError(f"offload record: 'policy' must be one of {list(_POLICIES)}; got {policy!r}")
        numbers: dict[str, int] = {}
        for key in ("original_bytes", "original_lines", "kept_bytes", "next_line"):
            value = d.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"offload record: {key!r} must be a whole number, 0 or more; got {value!r}")
            numbers[key] = value
        if numbers["kept_bytes"] > numbers["original_bytes"]:
            raise ValueError("offload record: 'kept_bytes' cannot exceed 'original_bytes'")
        return cls(file=file, stage=stage, policy=policy, **numbers)


def record_of(result: ToolResult) -> OffloadRecord | None:
    """The offload record of a result, or None when it was never offloaded (ValueError when malformed)."""
    raw = result.extra.get(OFFLOAD_KEY)
    return None if raw is None else OffloadRecord.from_dict(raw)


def record_in(message: Message) -> OffloadRecord | None:
    """The offload record of a tool message or of a command's output, or None (ValueError when malformed)."""
    result = message.tool_result
    raw = (result.extra if result is not None else message.extra).get(OFFLOAD_KEY)
    return None if raw is None else OffloadRecord.from_dict(raw)


def original_name(message_id: str, call_id: str) -> str:
    """The store's name for the full text of a result: ``tool_result/<uuid>.txt``, the same for the same ids."""
    return f"{TOOL_RESULT_DIR}/{make_id(message_id, call_id)}.txt"


def is_original(name: str) -> bool:
    """True for a name `original_name` gives: only those files in ``tool_result/`` are ctxkeep's."""
    folder, _, base = name.partition("/")
    return folder == TOOL_RESULT_DIR and ORIGINAL_NAME.fullmatch(base) is not None


def original_file(result: ToolResult) -> str | None:
    """The store's name of the file holding the result's full text, or None."""
    record = record_of(result)
    return None if record is None else record.file
