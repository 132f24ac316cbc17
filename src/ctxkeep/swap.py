"""Swapping a workspace folder for a new one built beside it, so that a kill at any point can be undone.

``ctxkeep compact --replace`` builds the new workspace in a hidden folder beside the old, moves the old
aside into a second hidden folder, moves the new one in, and deletes the old. Between the two moves no
workspace is at its path. A journal beside the workspace names the two hidden folders for as long as
either may exist::

    .NAME.ctxkeep-replace   {"new": ".NAME.x1y2.new"}                    while the new one is built
                            {"new": ".NAME.x1y2.new", "old": ".NAME.a3b4.old"}   from the first move on

`recover` reads it: the swap is finished when the old workspace was moved aside (the new one is complete
by then), or rolled back before that; the hidden folders are deleted, and the journal last. Only the
folders a journal names, under the names ctxkeep gives them, are ever deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from .errors import StorageError, WorkspaceLockedError

__all__ = ["Journal", "journal_path", "recover"]

_SUFFIX = ".ctxkeep-replace"


def journal_path(out: Path) -> Path:
    """Where the journal of a swap of the workspace `out` is: a hidden file beside it."""
    return out.parent / f".{out.name}{_SUFFIX}"


class Journal:
    """The journal of one swap of `out`, written before each step that leaves a hidden folder behind."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = journal_path(out)

    def write(self, new: Path, old: Path | None = None) -> None:
        """Name the hidden folders (siblings of `out`) that a kill from now on would leave."""
        names = {"new": new.name} | ({"old": old.name} if old is not None else {})
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                f.write(json.dumps(names))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, self.path)  # whole or absent: a kill never leaves half a journal
            _sync_folder(self.path.parent)
        except OSError as exc:
            raise StorageError(
                f"cannot write {self.path}: {exc.strerror or exc}; make {self.path.parent} writable",
                path=str(self.path),
                errno=exc.errno,
            ) from None

    def remove(self) -> None:
        """The swap is over and its hidden folders are gone: so is the journal."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        _sync_folder(self.path.parent)


def recover(out: Path) -> str | None:
    """Finish or roll back a swap of `out` that a kill interrupted, and delete what it left; what was done,
    or None when no swap of `out` was pending. `WorkspaceLockedError` when a swap is under way right now."""
    journal = journal_path(out)
    temporary = journal.with_name(journal.name + ".tmp")
    try:
        text = journal.read_text(encoding="utf-8")
    except FileNotFoundError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)  # a journal whose first write was killed: nothing was moved yet
        return None
    except (OSError, UnicodeDecodeError) as exc:
        message = f"cannot read {journal}: {exc}; delete it once {out} is as you want it"
        raise StorageError(message, path=str(journal)) from None
    new, old = _named(out, text, journal)
    with _unused(out, old):
        done = _settle(out, new, old, journal)
        Journal(out).remove()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return done


def _named(out: Path, text: str, journal: Path) -> tuple[Path, Path | None]:
    """The hidden folders `text` names, each checked to be a name ctxkeep gives: nothing else is deleted."""
    try:
        names = json.loads(text)
    except ValueError:
        names = None
    prefix = f".{out.name}."
    ok = isinstance(names, dict) and set(names) <= {"new", "old"} and "new" in names
    ok = ok and all(
        isinstance(v, str) and v.startswith(prefix) and v.endswith(f".{k}") and "/" not in v and "\0" not in v
        for k, v in names.items()
    )
    if not ok:
        raise StorageError(
            f"{journal} is not a journal ctxkeep wrote; delete it once {out} is as you want it", path=str(journal)
        )
    return out.parent / names["new"], (out.parent / names["old"] if "old" in names else None)


@contextlib.contextmanager
def _unused(out: Path, old: Path | None) -> Iterator[None]:
    """Held: no `--replace` of `out` is running. Its lock file moves with the old workspace, so it is in
    the folder aside once the first move is made, and in `out` before."""
    for folder in (old, out):
        if folder is None:
            continue
        try:
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise WorkspaceLockedError(
                    f"{out} is being replaced by another process (ctxkeep compact --replace); try again",
                    path=str(out),
                ) from None
            yield
            return
        finally:
            os.close(fd)
    yield


def _settle(out: Path, new: Path, old: Path | None, journal: Path) -> str:
    if old is None or not _full(old):  # the old workspace was never moved: undo the build
        _delete(new)
        if old is not None:
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(old)  # the empty folder made for it; never a full one
        return f"an interrupted replace of {out} was rolled back: the new copy is deleted, the workspace kept"
    if not os.path.lexists(out):
        if os.path.isdir(new):
            os.rename(new, out)  # complete: it was built before the old was moved aside
            _delete(old)
            return f"an interrupted replace of {out} was finished: the new workspace moved in, the old deleted"
        os.rename(old, out)
        return f"an interrupted replace of {out} was rolled back: the old workspace moved back"
    if os.path.lexists(new):
        # Both copies and something at `out` too: not a state a swap leaves. Keep all of it.
        raise StorageError(
            f"{out}, {new} and {old} all exist: keep the one you want at {out}, delete the others, then {journal}",
            path=str(out),
        )
    _delete(old)  # the new one is in place: only the old copy was left
    return f"the old copy left by a replace of {out} is deleted"


def _full(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is not None
    except FileNotFoundError:
        return False


def _delete(folder: Path) -> None:
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(
            f"cannot delete {folder}, left by a replace: {exc.strerror or exc}", path=str(folder), errno=exc.errno
        ) from None


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
