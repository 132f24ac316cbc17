"""The resident embedder: MiniLM loaded once in a background process, so a search from the command line is warm.

A search from the command line is a new process. Loading MiniLM costs it about a second (onnxruntime and numpy
~0.3 s to import, the model ~0.4 s to prepare, the tokenizer ~0.1 s) of the ~1.3 s it took; the search itself
is ~20 ms. So the first ``ctxkeep memory search`` starts this process in the background and embeds in its own
process that once; the next ones send the query to it and get its vector back.

    socket     $XDG_RUNTIME_DIR/ctxkeep/ (else <tmp>/ctxkeep-<uid>/), a folder only its user may enter;
               ``embed-<model>.sock``, and ``.lock`` held by the running server: one per user and model
    protocol   one JSON line each way: {"texts": [...]} -> {"vectors": [[...], ...]} (or {"error": "..."});
               {"stop": true} stops it
    life       it exits after `IDLE_SECONDS` without a request (and with the machine)

    python -m ctxkeep.memory.resident [--idle SECONDS] [--detach]   what the search starts (detached)
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctxkeep.errors import StorageError

from .embed import Embedder, MiniLMEmbedder

log = logging.getLogger("ctxkeep")

IDLE_SECONDS = 600.0
# A request larger than this is no embedding request (a batch of the index's chunks is ~1 MB).
MAX_REQUEST = 64 * 1024 * 1024
# How long the server waits for a request's line once a client connects.
REQUEST_SECONDS = 60.0
# How long a search waits for the server to accept: a dead socket file answers at once.
CONNECT_SECONDS = 2.0


def socket_path(model: str = MiniLMEmbedder.name) -> Path:
    """Where the resident embedder of `model` listens; its folder is made private (0700) when missing."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "ctxkeep" if runtime else Path(tempfile.gettempdir()) / f"ctxkeep-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(base)
    except OSError as exc:
        raise StorageError(f"cannot create {base}: {exc.strerror}", path=str(base), errno=exc.errno) from exc
    # Another user could make the folder first in a shared /tmp: ours only if we own it and no one else may enter.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise StorageError(
            f"{base} is not a private folder of this user; remove it (the resident embedder makes it again)",
            path=str(base),
            errno=errno.EPERM,
        )
    return base / f"embed-{model}.sock"


class ResidentEmbedder:
    """The resident process's MiniLM, with the same name and vectors; `fallback` loads one here if it fails."""

    name = MiniLMEmbedder.name
    dim = MiniLMEmbedder.dim

    def __init__(self, path: Path, *, fallback: Callable[[], Embedder | None]) -> None:
        """Use the server at `path`; on a failure (it stopped meanwhile), `fallback()` gives the embedder instead."""
        self.path = path
        self._fallback = fallback
        self._local: Embedder | None = None

    def __repr__(self) -> str:
        return f"ResidentEmbedder({str(self.path)!r})"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._local is None:
            try:
                return _ask(self.path, {"texts": list(texts)})
            except OSError as exc:
                log.info("the resident embedder did not answer (%s): loading MiniLM here", exc)
                local = self._fallback()
                if local is None:
                    raise
                self._local = local
        return self._local.embed(texts)


def _ask(path: Path, request: dict[str, Any]) -> list[list[float]]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(CONNECT_SECONDS)
        conn.connect(str(path))
        conn.settimeout(None)  # a large batch takes as long as it takes; a dead server closes the socket
        conn.sendall(json.dumps(request).encode() + b"\n")
        with conn.makefile("rb") as reader:
            line = reader.readline(MAX_REQUEST)
    if not line:
        raise ConnectionError("the resident embedder closed the connection")
    reply = json.loads(line)
    if "error" in reply:
        raise ConnectionError(f"the resident embedder failed: {reply['error']}")
    vectors: list[list[float]] = reply.get("vectors", [])
    return vectors


def resident_embedder(*, start: bool = True) -> Embedder | None:
    """MiniLM for a search from the command line: the resident process's when it answers, else one loaded here
    (and, with `start`, the resident process started in the background for the next search). None without
    the memory extra."""
    from .embed import default_embedder, minilm_installed

    try:
        path = socket_path()
    except StorageError as exc:
        log.warning("%s: loading MiniLM in this process", exc)
        return default_embedder()
    if _alive(path):
        return ResidentEmbedder(path, fallback=default_embedder)
    if start and minilm_installed():
        start_server()  # first: it loads the model while this process loads its own
    return default_embedder()


def _alive(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_SECONDS)
            conn.connect(str(path))
        return True
    except OSError:
        return False


def start_server(idle: float = IDLE_SECONDS) -> None:
    """Start the resident embedder in the background, detached: in its own session (a Ctrl-C of the search does
    not stop it), and not our child (nothing waits for it, and no process of ours is left unreaped)."""
    subprocess.run(
        [sys.executable, "-m", "ctxkeep.memory.resident", "--idle", str(idle), "--detach"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def stop_server(path: Path | None = None) -> bool:
    """Ask the resident embedder to stop; whether one was running."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_SECONDS)
            conn.connect(str(path or socket_path()))
            conn.sendall(b'{"stop": true}\n')
            conn.recv(16)
        return True
    except OSError:
        return False


def serve(path: Path, *, idle: float = IDLE_SECONDS, embedder: Embedder | None = None) -> int:
    """Load MiniLM (or use `embedder`) and answer on `path` until `idle` seconds pass with no request, or a stop.
    Returns 0, or 1 when another server holds the lock (it is already running)."""
    import fcntl

    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 1
        model = embedder or MiniLMEmbedder()
        # The lock is ours: a socket file left here is a crashed server's.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(path))
            os.chmod(path, 0o600)
            listener.listen(16)
            listener.settimeout(1.0)
            _loop(listener, model, idle)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return 0
    finally:
        os.close(lock)


def _loop(listener: socket.socket, model: Embedder, idle: float) -> None:
    state = {"last": time.monotonic(), "busy": 0, "stop": False}
    guard = threading.Lock()
    # One embedding at a time: the model already uses the cores, and its tokenizer is not promised thread-safe.
    running = threading.Lock()

    def handle(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            try:
                request = json.loads(reader.readline(MAX_REQUEST) or b"{}")
                if request.get("stop"):
                    state["stop"] = True
                    reply: dict[str, Any] = {"stopped": True}
                else:
                    texts = request.get("texts")
                    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                        raise ValueError("texts must be a list of strings")
                    with running:
                        reply = {"vectors": model.embed(texts)}
            except Exception as exc:  # one bad request must not stop the server
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(reply).encode() + b"\n")
        with guard:
            state["busy"] = int(state["busy"]) - 1
            state["last"] = time.monotonic()

    while not state["stop"]:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            with guard:
                if not state["busy"] and time.monotonic() - float(state["last"]) > idle:
                    return
            continue
        # A client that connects and never writes must not keep the server busy (and alive) for good.
        conn.settimeout(REQUEST_SECONDS)
        with guard:
            state["busy"] = int(state["busy"]) + 1
            state["last"] = time.monotonic()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ctxkeep.memory.resident [--idle SECONDS]``: run the resident embedder in the foreground."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ctxkeep.memory.resident", description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="exit after this many idle seconds")
    parser.add_argument("--detach", action="store_true", help="run it in the background, in a session of its own")
    args = parser.parse_args(argv)
    if args.detach:
        subprocess.Popen(
            [sys.executable, "-m", "ctxkeep.memory.resident", "--idle", str(args.idle)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os._exit(0)  # at once, before the interpreter's clean-up: the server outlives this process by design
    return serve(socket_path(), idle=args.idle)


if __name__ == "__main__":
    sys.exit(main())
