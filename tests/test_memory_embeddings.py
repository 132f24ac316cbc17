"""OpenAIEmbedder against a real OpenAI-compatible embeddings server on 127.0.0.1 (MiniLM behind it)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ctxkeep.errors import ProviderError
from ctxkeep.folder import MemoryFolder
from ctxkeep.memory.embed import MiniLMEmbedder, OpenAIEmbedder, default_embedder
from ctxkeep.memory.files import append_daily
from ctxkeep.memory.index import MemoryIndex
from ctxkeep.memory.search import search

NOW = datetime(2026, 2, 2, 9, 0, tzinfo=UTC)


class _Server(ThreadingHTTPServer):
    embedder: MiniLMEmbedder
    batches: list[int]
    dim_cut: int | None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/embeddings" or self.headers.get("Authorization") != "Bearer sk-test-embeddings":
            self.send_error(404 if self.path != "/v1/embeddings" else 401)
            return
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.server.batches.append(len(texts))
        vectors = self.server.embedder.embed(texts)
        cut = self.server.dim_cut
        # Returned in reverse order: the client must put them back by index.
        data = [
            {"object": "embedding", "index": i, "embedding": v[:cut] if cut else v}
            for i, v in reversed(list(enumerate(vectors)))
        ]
        payload = json.dumps(
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder)
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.embedder, httpd.batches, httpd.dim_cut = embedder, [], None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=30)


def _url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.mark.extra("memory")
def test_the_endpoints_vectors_index_and_search(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBEDDINGS_KEY", "sk-test-embeddings")
    embedder = OpenAIEmbedder("all-minilm", dim=384, base_url=_url(server), api_key_env="EMBEDDINGS_KEY")
    texts = [f"entry number {i}" for i in range(40)] + ["the user prefers dark mode"]
    vectors = embedder.embed(texts)
    assert server.batches[-2:] == [32, 9]  # in batches, each put back in order
    assert vectors[-1] == pytest.approx(server.embedder.embed(["the user prefers dark mode"])[0], abs=1e-5)
    folder = MemoryFolder()
    append_daily(folder, "The user prefers dark mode in the editor", at=NOW)
    append_daily(folder, "Invoices are sent on Mondays", at=NOW.replace(day=3))
    with MemoryIndex(folder, embedder=embedder) as index:
        index.update()
        hit = search(index, "which colour theme for coding", k=1, mode="vector", min_relevance=0)[0]  # the nearest
    assert hit.path == "memory/2026-02-02.md"


@pytest.mark.extra("memory")
def test_a_wrong_dim_and_a_dead_server_are_clear_errors(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBEDDINGS_KEY", "sk-test-embeddings")
    server.dim_cut = 100
    try:
        embedder = OpenAIEmbedder("all-minilm", dim=384, base_url=_url(server), api_key_env="EMBEDDINGS_KEY")
        with pytest.raises(ProviderError, match="vectors of 100 floats, not 384"):
            embedder.embed(["x"])
    finally:
        server.dim_cut = None
    monkeypatch.setenv("EMBEDDINGS_KEY", "sk-wrong-key")
    with pytest.raises(ProviderError, match="AuthenticationError, HTTP 401") as failed:
        OpenAIEmbedder("all-minilm", dim=384, base_url=_url(server), api_key_env="EMBEDDINGS_KEY").embed(["x"])
    assert "sk-wrong-key" not in str(failed.value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    dead = OpenAIEmbedder("m", dim=384, base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ProviderError, match="APIConnectionError"):
        dead.embed(["x"])
    with pytest.raises(ValueError, match="http"):
        OpenAIEmbedder("m", dim=384, base_url="127.0.0.1:8080")
