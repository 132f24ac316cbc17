"""`ctxkeep serve` on a real socket for the tests: uvicorn in a thread, on 127.0.0.1 and a free port."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from ctxkeep.serve import ServeSettings, create_app
from ctxkeep.summarize import Summarizer

# uvicorn's event loops, for a test to run on each: `ctxkeep serve` runs on uvloop where it is installed (the
# `serve` extra, not on Windows), on asyncio's own loop elsewhere.
LOOPS = [
    "asyncio",
    pytest.param("uvloop", marks=pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="no uvloop")),
]
START_SECONDS = 60  # generous: a loaded 2-core machine may take long to start a thread and a server


@contextmanager
def running_proxy(
    upstream: str,
    root: Path,
    *,
    window: int = 16_000,
    summarizer: Callable[[], Summarizer | None] = lambda: None,
    loop: str = "auto",
    root_path: str = "",
    **settings: object,
) -> Iterator[str]:
    """The proxy forwarding to `upstream`, for the duration; yields its base URL (``http://127.0.0.1:N``).
    `loop` is uvicorn's: ``auto`` (uvloop when it is installed, as `ctxkeep serve` runs), ``asyncio`` or ``uvloop``;
    `root_path` uvicorn's too (a reverse proxy's prefix, put before each request's path)."""
    app = create_app(
        ServeSettings(upstream=upstream, root=root, window=window, **settings),  # type: ignore[arg-type]
        summarizer=summarizer,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", loop=loop, root_path=root_path)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the proxy did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=START_SECONDS)
        sock.close()
