"""Copy a workspace from one store to another (a folder to PostgreSQL and back: ``ctxkeep store copy``), verified.

Both are held (`Store.lock`) for the copy. The target must hold nothing yet: a copy never merges. What is
committed is copied (the archive files up to their committed sizes, the live log of the committed generation,
every kept original, the records, the summary, the memory files and AGENTS.md), the state last: it is the
commit point, so a copy cut short leaves a target that reopening refuses rather than one that looks whole.
Then the target is read back: each part's SHA-256 and the message counts must be the source's. A refused
summary's saved request (``failed/``) is not copied: the `Store` seam writes those and never reads them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from ctxkeep.errors import WorkspaceError
from ctxkeep.store import AGENTS_FILE, Store

from . import livelog
from . import state as state_file


@dataclass(frozen=True, kw_only=True, slots=True)
class Copied:
    """What a copy moved, as read back from the target."""

    archived: int  # messages in the archive
    live: int  # messages in the live context
    originals: int  # offloaded outputs' originals
    memory_files: int  # MEMORY.md, memory/…, AGENTS.md
    bytes: int  # of every part together


def copy(source: Store, target: Store, *, lock_timeout: float = 10.0) -> Copied:
    """Copy the workspace in `source` into `target`, which must hold nothing; verify it. Raises `WorkspaceError`
    when the source holds no workspace, the target holds anything, or the copy reads back different."""
    with source.lock(lock_timeout), target.lock(lock_timeout):
        raw = source.read_state()
        if raw is None:
            raise WorkspaceError(f"{source.where('')} holds no workspace to copy", path=source.where(""))
        _check_empty(target)
        state = state_file.parse(raw, source.where("state.json"))
        parts = dict(_parts(source, state))
        for kind, name, data in _writes(parts):
            _write(target, kind, name, data)
        target.commit_state(raw)  # the commit point, last
        copied = dict(_parts(target, state_file.parse(target.read_state() or b"", target.where("state.json"))))
        wrong = sorted(
            f"{kind} {name}"
            for (kind, name) in parts.keys() | copied.keys()
            if _digest(parts.get((kind, name))) != _digest(copied.get((kind, name)))
        )
        if wrong or target.read_state() != raw:
            raise WorkspaceError(f"the copy reads back different: {', '.join(wrong) or 'state'}", path=target.where(""))
        live = livelog.count(copied.get(("live", str(state.generation)), b""))
        archived = sum(len(data.splitlines()) for (kind, _), data in copied.items() if kind == "archive")
        if archived != state.archive.lines:
            raise WorkspaceError(
                f"the copy's archive holds {archived} messages, its state says {state.archive.lines}",
                path=target.where(""),
            )
        return Copied(
            archived=archived,
            live=live,
            originals=sum(kind == "original" for kind, _ in copied),
            memory_files=sum(kind == "memory" for kind, _ in copied),
            bytes=len(raw) + sum(len(data) for data in copied.values()),
        )


def _check_empty(target: Store) -> None:
    held = [
        what
        for what, there in (
            ("a state", target.read_state() is not None),
            ("live logs", bool(target.live_generations())),
            ("archive files", bool(target.archive_files())),
            ("originals", bool(target.originals())),
            ("records", bool(target.read_records())),
            ("memory files", bool(target.memory_files()) or target.read_memory(AGENTS_FILE) is not None),
        )
        if there
    ]
    if held:
        where = target.where("")
        raise WorkspaceError(
            f"{where} already holds {', '.join(held)}: copy into a new workspace (an empty folder, or a new"
            " --session name)",
            path=where,
        )


def _parts(store: Store, state: state_file.State) -> Iterator[tuple[tuple[str, str], bytes]]:
    """Every committed part of the workspace in `store`, by (kind, name)."""
    for name, committed in state.archive.files.items():
        yield ("archive", name), store.read_archive(name)[: committed.bytes]  # past it: never committed
    yield ("live", str(state.generation)), store.read_live(state.generation)
    for info in store.originals():
        read = getattr(store, "read_original", None)
        data = read(info.name) if read is not None else None
        if data is None:
            raise WorkspaceError(f"{store.where(info.name)} cannot be read to copy it", path=store.where(info.name))
        yield ("original", info.name), data
    yield ("records", ""), store.read_records()
    summary = store.read_summary()
    if summary is not None:
        yield ("summary", ""), summary
    for info in store.memory_files():
        yield ("memory", info.name), store.read_memory(info.name) or b""
    agents = store.read_memory(AGENTS_FILE)
    if agents is not None:
        yield ("memory", AGENTS_FILE), agents


def _writes(parts: dict[tuple[str, str], bytes]) -> Iterator[tuple[str, str, bytes]]:
    # What the state points to goes first (originals before the logs that name them); nothing empty is written.
    order = ("original", "memory", "records", "summary", "archive", "live")
    for kind in order:
        for (k, name), data in sorted(parts.items()):
            if k == kind and (data or kind in ("live", "summary", "memory")):
                yield kind, name, data


def _write(target: Store, kind: str, name: str, data: bytes) -> None:
    if kind == "original":
        target.save_original(name, data)
    elif kind == "memory":
        target.write_memory(name, data)
    elif kind == "records":
        target.append_record(data)
    elif kind == "summary":
        target.write_summary(data)
    elif kind == "archive":
        target.append_archive(name, data)
    else:
        target.start_live(int(name), data)


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()
