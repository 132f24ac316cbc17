"""The resident embedder: MiniLM loaded once in a background process over a private Unix socket, the same vectors
as in-process, a fallback when it is gone, one per user and model, and gone after its idle time."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from ctxkeep.errors import StorageError
from ctxkeep.memory.embed import MiniLMEmbedder, default_embedder
from ctxkeep.memory.resident import ResidentEmbedder, serve, socket_path, stop_server


class Fixed:
    """An embedder whose vectors say which one answered."""

    name = MiniLMEmbedder.name
    dim = 2

    def __init__(self, value: float) -> None:
        self.value = value
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [[self.value, float(len(t))] for t in texts]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A Unix socket's path has at most ~107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        yield Path(tmp)


def _serving(path: Path, embedder: Fixed | MiniLMEmbedder, idle: float = 60.0) -> threading.Thread:
    thread = threading.Thread(target=serve, args=(path,), kwargs={"idle": idle, "embedder": embedder}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return thread


def test_it_answers_one_server_runs_at_a_time_and_stop_ends_it(short_dir: Path) -> None:
    path = short_dir / "embed.sock"
    thread = _serving(path, Fixed(1.0))
    try:
        assert ResidentEmbedder(path, fallback=lambda: None).embed(["ab", "abc"]) == [[1.0, 2.0], [1.0, 3.0]]
        assert serve(path, idle=60.0, embedder=Fixed(2.0)) == 1  # the lock is held: a second one leaves at once
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    finally:
        assert stop_server(path)
    thread.join(timeout=30)
    assert not thread.is_alive() and not path.exists()
    assert not stop_server(path)  # nothing runs now


def test_a_bad_request_is_an_error_reply_and_the_server_goes_on(short_dir: Path) -> None:
    path = short_dir / "embed.sock"
    thread = _serving(path, Fixed(1.0))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(path))
            conn.sendall(b'{"texts": [1, 2]}\n')
            assert b"texts must be a list of strings" in conn.recv(4096)
        assert ResidentEmbedder(path, fallback=lambda: None).embed(["a"]) == [[1.0, 1.0]]
    finally:
        stop_server(path)
    thread.join(timeout=30)


def test_it_exits_after_its_idle_time(short_dir: Path) -> None:
    path = short_dir / "embed.sock"
    thread = _serving(path, Fixed(1.0), idle=0.5)
    thread.join(timeout=30)
    assert not thread.is_alive() and not path.exists()


def test_a_gone_server_falls_back_to_an_embedder_here(short_dir: Path) -> None:
    local = Fixed(3.0)
    embedder = ResidentEmbedder(short_dir / "nobody.sock", fallback=lambda: local)
    assert embedder.embed(["a"]) == [[3.0, 1.0]]
    assert embedder.embed(["ab"]) == [[3.0, 2.0]] and local.calls == 2  # loaded once, kept
    with pytest.raises(OSError):
        ResidentEmbedder(short_dir / "nobody.sock", fallback=lambda: None).embed(["a"])


def test_the_socket_folder_is_private_or_refused(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    path = socket_path("m")
    assert path == short_dir / "ctxkeep" / "embed-m.sock"
    assert oct(os.stat(path.parent).st_mode & 0o777) == "0o700"
    os.chmod(path.parent, 0o755)  # anyone may enter: someone else's, or opened by mistake
    with pytest.raises(StorageError, match="not a private folder"):
        socket_path("m")


@pytest.mark.extra("memory")
def test_the_vectors_are_minilms_own(short_dir: Path) -> None:
    minilm = default_embedder()
    assert isinstance(minilm, MiniLMEmbedder)
    path = short_dir / "embed.sock"
    thread = _serving(path, minilm)
    try:
        texts = ["the user prefers dark mode", "用户喜欢深色主题"]
        assert ResidentEmbedder(path, fallback=lambda: None).embed(texts) == minilm.embed(texts)
    finally:
        stop_server(path)
    thread.join(timeout=30)
