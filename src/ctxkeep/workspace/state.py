"""The state file (``state.json``): the commit point of a workspace, and its one reader.

    {"v": "ctxkeep-session/1", "generation": 3, "summary": ..., "summary_body": ..., "archive": {...},
     "pinned": [...], "failed_at": null, "compactions": 3, "last_record": {...}}

Everything that reads a state file reads it through `parse` (or `read`, from a store), with one strictness:
every field is checked, and a file that is no state, or a damaged one, is a `WorkspaceError` naming the
file and the fix. A session replaces the file atomically (`Store.commit_state`); only that rename makes a
compaction real.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from ctxkeep.archive import Archive
from ctxkeep.errors import WorkspaceError
from ctxkeep.store import DIALOG_DIR, STATE, Store

MARK = "ctxkeep-session/1"


@dataclass(frozen=True, kw_only=True, slots=True)
class State:
    """What a workspace has committed: the generation of its live log, the summary, the archive's committed
    size, the pins, the failed compaction's size, and the record of the last compaction until it is appended."""

    generation: int
    summary: str | None
    summary_body: str | None
    archive: Archive
    pinned: frozenset[str]
    failed_at: int | None
    compactions: int
    last_record: dict[str, Any] | None

    def to_bytes(self) -> bytes:
        """The state file's bytes."""
        return orjson.dumps(
            {
                "v": MARK,
                "generation": self.generation,
                "summary": self.summary,
                "summary_body": self.summary_body,
                "archive": self.archive.to_dict(),
                "pinned": sorted(self.pinned),
                "failed_at": self.failed_at,
                "compactions": self.compactions,
                "last_record": self.last_record,
            },
            option=orjson.OPT_INDENT_2,
        )


# A workspace before anything is committed.
NEW = State(
    generation=0,
    summary=None,
    summary_body=None,
    archive=Archive(),
    pinned=frozenset(),
    failed_at=None,
    compactions=0,
    last_record=None,
)


def parse(raw: bytes, where: str) -> State:
    """The state in `raw`; `WorkspaceError` naming `where` when it is not one (every field is checked)."""
    try:
        d = orjson.loads(raw)
        if not isinstance(d, dict) or d.get("v") != MARK:
            raise ValueError(f"not a {MARK} state file")
        last = _field(d, "last_record", dict, None)
        if last is not None and not _whole(last.get("generation")):
            raise ValueError("'last_record' has no generation")
        return State(
            generation=_field(d, "generation", int),
            summary=_field(d, "summary", str, None),
            summary_body=_field(d, "summary_body", str, None),
            archive=Archive.from_dict(_archive_index(d.get("archive"))),
            pinned=frozenset(_field(d, "pinned", list, [])),
            failed_at=_field(d, "failed_at", int, None),
            compactions=_field(d, "compactions", int, 0),
            last_record=last,
        )
    except (ValueError, TypeError, KeyError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise WorkspaceError(f"{where} is damaged ({exc}); restore it from a backup", path=where) from exc


def read(store: Store) -> State:
    """The state committed in `store`; `WorkspaceError` when there is none (not a workspace) or it is damaged."""
    raw = store.read_state()
    where = store.where(STATE)
    if raw is None:
        raise WorkspaceError(
            f"{where} is missing: this is not a ctxkeep workspace (give the folder a session wrote)", path=where
        )
    return parse(raw, where)


_MISSING: Any = object()
# An archive file as `ctxkeep.archive` names them: one file right in dialog/, never a hidden one.
_ARCHIVE_NAME = re.compile(rf"{DIALOG_DIR}/[^/.][^/]*\.jsonl")


def _field(d: dict[str, Any], key: str, kind: type, default: Any = _MISSING) -> Any:
    """`d[key]`, checked to be a `kind` (a whole number, 0 or more, for int); `default` when null or absent."""
    value = d.get(key)
    if value is None:
        if default is _MISSING:
            raise ValueError(f"{key!r} is missing")
        return default
    if kind is int:
        ok = _whole(value)
    elif kind is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ValueError(f"{key!r} holds {value!r}")
    return value


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _archive_index(value: object) -> dict[str, Any]:
    """The archive index of a state, checked: file name -> {"bytes": n, "lines": n}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"'archive' holds {value!r}")
    for name, info in value.items():
        if not _ARCHIVE_NAME.fullmatch(name):  # a name ctxkeep never gives, maybe one leaving the folder
            raise ValueError(f"'archive' names {name!r}, not a file of {DIALOG_DIR}/")
        if not isinstance(info, dict) or not all(_whole(info.get(k)) for k in ("bytes", "lines")):
            raise ValueError(f"'archive' holds {info!r} for {name}")
    return value
