"""Where a command writes: every output path of the command line is checked here, before anything is written.

A command replaces only what it could have made itself: a missing path, or a regular file of the user
running it. A device, a named pipe, a socket, a folder or a symbolic link at the path is refused and left
as it is; a link is never followed (as root, writing through `-o /dev/null` replaced the system's
``/dev/null``). Files are written whole: a private temporary file beside the path, then one rename.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from ctxkeep.errors import CtxkeepError, StorageError

__all__ = ["check_output", "write_output"]

# What a file type is called in a message; a regular file (or a folder, where one is asked for) is absent.
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISREG, "a regular file"),
)


def check_output(path: Path, flag: str, *, folder: bool = False) -> bool:
    """Refuse (`CtxkeepError`) an output path ctxkeep must not replace; whether something is there already.

    `folder`: the output is a folder (a workspace), so an existing folder is what is expected there and a
    regular file is refused instead. Nothing is followed: a link at `path` is refused, whatever it points at.
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CtxkeepError(f"cannot use {flag} {path}: {exc.strerror or exc}") from None
    wanted = stat.S_ISDIR if folder else stat.S_ISREG
    if not wanted(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        what = "a new or empty folder" if folder else "a new file or a regular file of yours"
        raise CtxkeepError(
            f"{flag} {path} is {kind}; ctxkeep never writes through or replaces it, and left it as it is:"
            f" give the path of {what}"
        )
    if st.st_uid != os.geteuid():
        raise CtxkeepError(
            f"{flag} {path} belongs to another user (uid {st.st_uid}); ctxkeep replaces only what you own,"
            " and left it as it is: choose another path"
        )
    return True


def write_output(path: Path, data: bytes, flag: str) -> None:
    """Write `data` to the file `path` names, whole and private (0600), after `check_output`."""
    check_output(path, flag)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            # Again, just before the rename: what is at the path may have changed while the file was written.
            check_output(path, flag)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}", path=str(path), errno=exc.errno) from None
