"""ctxkeep against ReMe (reme-ai 0.3.1.10), side by side on the same synthetic sessions, in one run.

    .venv/bin/python bench/bench_reme.py [--sizes 400,2000] [--pairs 3] [--modes memory,disk]
                                         [--cache DIR] [--reme-venv DIR] [--no-reme]

ReMe runs in its own virtual environment, made once under the cache folder (default
``$XDG_CACHE_HOME/ctxkeep-bench``, else ``~/.cache/ctxkeep-bench``; never inside the repository) with
``reme-ai==0.3.1.10`` and what it needs to import offline (agentscope 1.0.20, mcp 1.25.0, fastmcp
2.14.1, greenlet; no fastmcp-slim); bench/reme_worker.py drives it there over a pipe. Without ReMe
(``--no-reme``, or its environment cannot be made: no network), ctxkeep's figures print alone, saying so.

The sessions are generated once (seeded) and written as AgentScope ``Msg`` dicts, one a line, which both
sides read: ctxkeep through ``from_agentscope``, ReMe through ``Msg.from_dict``. Many large tool results
(logs, JSON, code, pages), parallel calls, half the user text Chinese. Before every reasoning step (each
assistant turn), each side runs what it runs there: ctxkeep ``Session.add`` + ``Session.prepare``;
ReMe's ``compact_tool_result`` + ``check_context`` (CoPaw's pre-reasoning hook), both with the seed's
settings (window 128,000: threshold 89,600, reserve 12,800; recent_n 3, 50,000 / 3,000 bytes). Neither
side summarizes: ReMe's summary is a model call, so ctxkeep gets a fixed summary too (``--summarizer
extractive`` runs ctxkeep's real one). "memory": ctxkeep's MemoryFolder, ReMe's working folder on
/dev/shm (it always writes its offloaded results to files); "disk": both in folders under the cache.

Printed: per step median and p95 of each side and ctxkeep ÷ ReMe, per pair (pairs alternate which side runs
first). On disk the two keep different things: ReMe never fsyncs, ctxkeep makes every step durable
(``durability="step"``). So "disk" runs ctxkeep at ``off`` too (no sync: ReMe's durability, a kill -9 still
loses nothing) and prints ctxkeep ÷ ReMe at each, beside the floor: right after each ctxkeep step, the bytes
it appended to its live log appended to a file of their own and fdatasynced (what no durable step can go
below), and ctxkeep at ``step`` ÷ the floor; prefix reuse (per step, the tokens of the longest common
prefix with the previous step's context over the tokens sent, o200k), between compactions and over the
whole replay; and each side's token-count error against exact o200k counts of the same texts (ReMe's
default counter is bytes / 3.75).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from ctxkeep import (  # noqa: E402
    EngineSettings,
    LocalFolder,
    MemoryFolder,
    Message,
    Session,
    SummaryRequest,
    from_agentscope,
    get_counter,
    to_agentscope,
)
from ctxkeep.tokens.encodings import TiktokenTokenizer  # noqa: E402
from sync_clock import Floor, SyncClock, live_size  # noqa: E402  (bench/ is the script's folder)

REME_PINS = ["reme-ai==0.3.1.10", "agentscope==1.0.20", "mcp==1.25.0", "fastmcp==2.14.1", "greenlet"]
SYSTEM = "You are a careful coding agent. Use the tools; read before you edit; keep answers short."
SETTINGS = EngineSettings()  # the seed's: 128,000 window, threshold 89,600, reserve 12,800
OFFLOAD = {
    "old_max_bytes": SETTINGS.offload.old_max_bytes,
    "recent_max_bytes": SETTINGS.offload.recent_max_bytes,
    "recent_n": SETTINGS.offload.recent_n,
    "retention_days": SETTINGS.offload.retention_days,
}
FIXED_SUMMARY = "\n\n".join(
    f"## {title}\n- (not summarized in this benchmark)"
    for title in ("Goal", "Constraints & Preferences", "Progress", "Key Decisions", "Next Steps", "Critical Context")
)


class FixedSummarizer:
    """A summary that costs nothing, so the pass is timed without summarizing (ReMe's summary is a model call)."""

    def summarize(self, request: SummaryRequest) -> str:
        return FIXED_SUMMARY


# --- the ReMe environment ------------------------------------------------------------------


def cache_dir(given: str | None) -> Path:
    if given:
        return Path(given).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ctxkeep-bench"


def reme_python(venv: Path) -> Path | None:
    """The ReMe venv's python, made (once) when missing; None, saying why, when it cannot be made."""
    python = venv / "bin" / "python"
    ready = venv / ".ready"  # written once the pins are installed: a half-made venv is made again
    if python.exists() and ready.exists():
        return python
    print(f"making ReMe's virtual environment in {venv} (once; a few minutes)", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *REME_PINS], check=True)
        # fastmcp-slim, when a dependency brings it, shadows fastmcp and breaks the offline import
        subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "fastmcp-slim"], check=False)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"ReMe is not installed ({exc}): ctxkeep's figures only", flush=True)
        return None
    ready.touch()
    return python


class ReMeWorker:
    """bench/reme_worker.py in ReMe's venv: one command, one answer, over a pipe."""

    def __init__(self, python: Path, log: Path) -> None:
        self._log = log.open("w")
        self._proc = subprocess.Popen(
            [str(python), str(HERE / "reme_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=log.parent,  # ReMe writes a logs/ folder into its working directory
            text=True,
            encoding="utf-8",
        )

    def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self._pipes()
        stdin.write(json.dumps(cmd) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise SystemExit(f"ReMe's worker stopped; see {self._log.name}")
        out: dict[str, Any] = json.loads(line)
        if "error" in out:
            raise SystemExit(f"ReMe's worker failed: {out['error']} (log: {self._log.name})")
        return out

    def _pipes(self) -> tuple[TextIO, TextIO]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        return self._proc.stdin, self._proc.stdout

    def close(self) -> None:
        self._pipes()[0].close()
        self._proc.wait(timeout=60)
        self._log.close()


# --- the sessions ----------------------------------------------------------------------------

_ZH = (  # noqa: SIM905 -- a vocabulary reads better as text
    "请帮我 检查 这个 服务 的 日志 为什么 接口 返回 错误 然后 修复 测试 用例 并且 更新 文档 说明 "
    "数据库 连接 超时 配置 文件 部署 环境 变量 缓存 失效 用户 反馈 页面 加载 很慢 需要 优化 性能 "
    "先 不要 修改 迁移 脚本 保持 向后 兼容 记得 运行 全部 测试 之后 提交 代码"
).split()
_EN = (  # noqa: SIM905
    "please check the service logs why the endpoint returns errors then fix the failing test and update "
    "the docs the database connection times out after deploy config cache invalidation users report slow "
    "page loads keep backward compatibility do not touch the migrations run the whole suite before commit"
).split()
_TOOLS = ("bash", "read_file", "grep", "web_fetch")


def _user_text(rnd: random.Random, i: int) -> str:
    chinese = i % 2 == 0  # half the user text Chinese
    words = [rnd.choice(_ZH if chinese else _EN) for _ in range(rnd.randint(12, 60))]
    ref = f" issue #{rnd.randint(100, 999)} in src/app/module_{rnd.randint(1, 40)}.py"
    return ("".join(words) if chinese else " ".join(words).capitalize()) + ref


def _output(rnd: random.Random, tool: str) -> str:
    # Most results are small (~200 bytes); about one in eight is large (~6.6 KB, some over 20 KB): over old_max_bytes.
    large = rnd.random() < 0.13
    size = int(min(90_000, rnd.lognormvariate(8.8, 0.6) if large else rnd.lognormvariate(5.3, 0.8)))
    lines: list[str] = []
    total = 0
    while total < size:
        if tool == "bash":
            line = (
                f"2026-12-03T10:{rnd.randint(0, 59):02d}:{rnd.randint(0, 59):02d}.{rnd.randint(0, 999):03d}Z "
                f"{rnd.choice(['INFO', 'WARN', 'ERROR'])} worker-{rnd.randint(1, 8)} job {rnd.randint(10**5, 10**6)} "
                f"took {rnd.randint(1, 900)} ms host=10.0.{rnd.randint(0, 9)}.{rnd.randint(1, 254)}"
                f":{rnd.randint(1024, 65535)}"
            )
        elif tool == "read_file":
            line = f"    def handler_{rnd.randint(1, 500)}(self, request, *, timeout={rnd.randint(1, 60)}):  # noqa"
        elif tool == "grep":
            records = [{"id": rnd.randint(1, 10**6), "path": f"src/m{rnd.randint(1, 99)}.py", "ok": rnd.random() < 0.8}]
            line = json.dumps(records * rnd.randint(3, 12))
        else:
            line = (
                "".join(rnd.choice(_ZH) for _ in range(rnd.randint(10, 40)))
                + f" https://docs.example/p/{rnd.randint(1, 9999)}"
            )
        lines.append(line)
        total += len(line.encode()) + 1
    return "\n".join(lines)


def generate(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` AgentScope Msg dicts: user asks, assistant turns with (parallel) tool calls, their results."""
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = []
    t = 0

    def msg(role: str, name: str, content: Any) -> None:
        nonlocal t
        t += 1
        stamp = f"2026-12-03 {9 + t // 3600 % 12:02d}:{t // 60 % 60:02d}:{t % 60:02d}.000"
        out.append(
            {
                "id": f"m{len(out):06d}",
                "name": name,
                "role": role,
                "content": content,
                "metadata": {},
                "timestamp": stamp,
            }
        )

    asks = 0
    while len(out) < n:
        msg("user", "user", _user_text(rnd, asks))
        asks += 1
        for _ in range(rnd.randint(1, 6)):
            if len(out) >= n - 2:
                break
            calls = [
                {
                    "type": "tool_use",
                    "id": f"call_{len(out)}_{k}",
                    "name": rnd.choice(_TOOLS),
                    "input": {"arg": f"/srv/app/f{rnd.randint(1, 300)}.log"},
                }
                for k in range(rnd.choice((1, 1, 1, 2, 3, 4)))  # parallel calls in a third of the turns
            ]
            msg("assistant", "agent", [{"type": "text", "text": f"Checking {len(calls)} thing(s) next."}, *calls])
            results = [
                {
                    "type": "tool_result",
                    "id": c["id"],
                    "name": c["name"],
                    "output": [{"type": "text", "text": _output(rnd, c["name"])}],
                }
                for c in calls
            ]
            msg("system", "system", results)
        msg("assistant", "agent", [{"type": "text", "text": "Done: " + " ".join(rnd.choice(_EN) for _ in range(30))}])
    return out[:n]


def steps_of(dicts: Sequence[dict[str, Any]]) -> list[int]:
    """Where a reasoning step happens: before each assistant Msg that follows a non-assistant one."""
    return [
        i for i, d in enumerate(dicts) if d["role"] == "assistant" and i > 0 and dicts[i - 1]["role"] != "assistant"
    ]


def session_file(cache: Path, n: int) -> Path:
    path = cache / "sessions" / f"session-{n}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in generate(n, seed=n)), encoding="utf-8")
        tmp.replace(path)
    return path


# --- the runs -----------------------------------------------------------------------------------


@dataclass
class Run:
    times: list[float]
    compactions: int
    compacted: list[bool] = field(default_factory=list)
    contexts: list[list[str]] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    fsyncs: int = 0  # fsync and fdatasync calls during the timed steps
    synced: list[float] = field(default_factory=list)  # seconds of each step spent in them (ctxkeep's side)
    floor: list[float] = field(default_factory=list)  # ctxkeep on disk: each step's bytes appended and fdatasynced


def render(role: str, content: Any) -> str:
    """As reme_worker.render: both sides' contexts are compared in the same form."""
    return json.dumps({"role": role, "content": content}, ensure_ascii=False, sort_keys=True)


def digest(text: str) -> str:
    import hashlib

    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Side:
    """What one run replays into: ctxkeep in memory or on disk at a durability, or ReMe."""

    name: str
    durability: str = "step"


def run_ctxkeep(
    dicts: Sequence[dict[str, Any]],
    steps: Sequence[int],
    folder: Path | None,
    *,
    collect: bool,
    side: Side,
    summarizer: Any,
) -> Run:
    messages = [from_agentscope([d]) for d in dicts]  # converted before timing, as ReMe's Msg.from_dict
    store = LocalFolder(folder, durability=side.durability) if folder is not None else MemoryFolder()
    run = Run(times=[], compactions=0)
    start = 0
    syncs = SyncClock()
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(Session(store, settings=SETTINGS, summarizer=summarizer))
        floor = stack.enter_context(Floor(folder.parent / "floor.bin")) if folder is not None else None
        for end in steps:
            batch: list[Message] = [m for group in messages[start:end] for m in group]
            start = end
            before = syncs.seconds
            size = live_size(folder) if folder is not None else 0
            t0 = time.perf_counter()
            with syncs:
                session.add(batch)
                step = session.prepare(SYSTEM)
            run.times.append(time.perf_counter() - t0)
            run.synced.append(syncs.seconds - before)
            if floor is not None and folder is not None and step.compaction is None:
                run.floor.append(floor.append(live_size(folder) - size))
            run.compactions += step.compaction is not None
            run.compacted.append(step.compaction is not None)
            if collect:
                shown = to_agentscope(list(step.context.as_messages()))
                rendered = [render(d["role"], d["content"]) for d in shown]
                keys = [digest(r) for r in rendered]
                for k, r in zip(keys, rendered, strict=True):
                    run.texts.setdefault(k, r)
                run.contexts.append(keys)
    run.fsyncs = syncs.count
    return run


def run_reme(
    worker: ReMeWorker, session: Path, steps: Sequence[int], workdir: Path, *, collect: bool
) -> tuple[Run, list[list[int]]]:
    out = worker.run(
        {
            "session": str(session),
            "steps": list(steps),
            "workdir": str(workdir),
            "threshold": SETTINGS.compact.compact_threshold,
            "reserve": SETTINGS.compact.reserve,
            "system": SYSTEM,
            "offload": OFFLOAD,
            "collect": collect,
        }
    )
    run = Run(
        times=out["times"],
        compactions=out["compactions"],
        compacted=out["compacted"],
        contexts=out["contexts"],
        texts=out["texts"],
        fsyncs=out.get("fsyncs", 0),
    )
    return run, out["estimates"]


# --- the figures ------------------------------------------------------------------------------------


def durability(runs: dict[str, Run], steps: int) -> None:
    """The floor beside ctxkeep at each durability (step, off), and what each side fsyncs."""
    step, off, reme = runs["ctxkeep step"], runs["ctxkeep off"], runs.get("ReMe")
    fm = statistics.median(step.floor)
    sm, om = statistics.median(step.times), statistics.median(off.times)
    print(
        f"      floor {ms(fm).strip()} ms (median): ctxkeep step ÷ floor {sm / fm:.2f}, off ÷ floor {om / fm:.2f}."
        f" fsyncs per step: ctxkeep step {step.fsyncs / steps:.2f}, off {off.fsyncs / steps:.2f}"
        + (f", ReMe {reme.fsyncs / steps:.2f}" if reme else "")
    )


def p95(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 20 else max(values)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f}"


def prefix_reuse(run: Run, tokenizer: TiktokenTokenizer) -> tuple[float, float, float]:
    """(reuse between compactions, over the whole replay, the lowest step between compactions): the tokens of
    each step's longest common prefix with the previous step's context, over the tokens it sends."""
    encoded: dict[str, list[int]] = {}

    def tokens(key: str) -> list[int]:
        if key not in encoded:
            encoded[key] = tokenizer.encoding.encode_ordinary(run.texts[key])
        return encoded[key]

    kept_between = sent_between = kept_all = sent_all = 0
    lowest = 1.0
    for k in range(1, len(run.contexts)):
        prev, cur = run.contexts[k - 1], run.contexts[k]
        sent = sum(len(tokens(key)) for key in cur)
        kept = 0
        for a, b in zip(prev, cur, strict=False):
            if a == b:
                kept += len(tokens(a))
                continue
            ta, tb = tokens(a), tokens(b)
            kept += next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), min(len(ta), len(tb)))
            break
        kept_all += kept
        sent_all += sent
        if not run.compacted[k]:
            kept_between += kept
            sent_between += sent
            lowest = min(lowest, kept / sent if sent else 1.0)
    return kept_between / max(1, sent_between), kept_all / max(1, sent_all), lowest


def blocks(d: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(kind, text) of each block of a Msg, as ReMe's counter sees it: in its order."""
    content = d["content"]
    if isinstance(content, str):
        yield (
            ("user text (Chinese)" if any("\u4e00" <= c <= "\u9fff" for c in content) else "user text (English)"),
            content,
        )
        return
    for b in content:
        if b["type"] == "text":
            yield "assistant text", b["text"]
        elif b["type"] == "tool_use":
            yield "tool calls", b["name"] + json.dumps(b["input"], ensure_ascii=False)
        elif b["type"] == "tool_result":
            yield f"{b['name']} results", "".join(o["text"] for o in b["output"] if o["type"] == "text")


def count_errors(dicts: Sequence[dict[str, Any]], reme: Sequence[Sequence[int]], tokenizer: TiktokenTokenizer) -> None:
    counter = get_counter("o200k_base")
    by_kind: dict[str, tuple[list[float], list[float]]] = {}
    for d, estimates in zip(dicts, reme, strict=True):
        for (kind, text), estimate in zip(blocks(d), estimates, strict=True):
            exact = len(tokenizer.encoding.encode_ordinary(text))
            if exact < 10:
                continue
            ours, theirs = by_kind.setdefault(kind, ([], []))
            ours.append(counter.count_text(text) / exact - 1)
            theirs.append(estimate / exact - 1)
    print("\ntoken counts against exact o200k counts of the same texts (relative error: p5 / median / p95)")
    print(f"  {'kind':<22} {'blocks':>6}  {'ctxkeep':>24}  {'ReMe (bytes / 3.75)':>24}")
    every: tuple[list[float], list[float]] = ([], [])
    for kind, (ours, theirs) in sorted(by_kind.items()):
        every[0].extend(ours)
        every[1].extend(theirs)
        print(f"  {kind:<22} {len(ours):>6}  {_spread(ours):>24}  {_spread(theirs):>24}")
    print(f"  {'all':<22} {len(every[0]):>6}  {_spread(every[0]):>24}  {_spread(every[1]):>24}")


def _spread(errors: list[float]) -> str:
    qs = statistics.quantiles(errors, n=20) if len(errors) >= 20 else [min(errors)] * 19 + [max(errors)]
    return f"{qs[0]:+.1%} / {statistics.median(errors):+.1%} / {qs[-1]:+.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="400,2000", help="Msgs per session (default 400,2000)")
    parser.add_argument(
        "--pairs", type=int, default=3, help="runs of each side per size and mode, alternating who goes first"
    )
    parser.add_argument("--modes", default="memory,disk", help="memory, disk or both (default)")
    parser.add_argument(
        "--cache", help="where the sessions, ReMe's venv and the disk runs go (default ~/.cache/ctxkeep-bench)"
    )
    parser.add_argument(
        "--reme-venv", help="ReMe's virtual environment (default: CACHE/reme-0.3.1.10, made when missing)"
    )
    parser.add_argument("--no-reme", action="store_true", help="ctxkeep's figures only (no ReMe venv is made)")
    parser.add_argument("--summarizer", choices=["fixed", "extractive"], default="fixed", help="ctxkeep's summarizer")
    args = parser.parse_args()
    cache = cache_dir(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    python = None
    if args.no_reme:
        print("ReMe not run (--no-reme): ctxkeep's figures only")
    else:
        python = reme_python(Path(args.reme_venv) if args.reme_venv else cache / "reme-0.3.1.10")
    summarizer: Any = FixedSummarizer() if args.summarizer == "fixed" else None
    tokenizer = TiktokenTokenizer("o200k_base")
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; ctxkeep summarizer: {args.summarizer}")
    started = time.perf_counter()
    worker = ReMeWorker(python, cache / "reme-worker.log") if python is not None else None
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    modes = args.modes.split(",")
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            session = session_file(cache, n)
            dicts = [json.loads(line) for line in session.read_text(encoding="utf-8").splitlines()]
            steps = steps_of(dicts)
            total = sum(len(tokenizer.encoding.encode_ordinary(t)) for d in dicts for _, t in blocks(d))
            print(f"\n=== {n:,} Msgs, {len(steps):,} steps, {total:,} tokens (o200k) ===")
            collected: dict[str, Run] = {}
            estimates: list[list[int]] = []
            for mode in modes:
                ours = [Side("ctxkeep")] if mode == "memory" else [Side("ctxkeep step"), Side("ctxkeep off", "off")]
                sides = [*ours, *([Side("ReMe")] if worker is not None else [])]
                print(f"  {mode}: per step, ms median / p95")
                for pair in range(args.pairs):
                    order = sides[pair % len(sides) :] + sides[: pair % len(sides)]
                    runs: dict[str, Run] = {}
                    for side in order:
                        collect = mode == modes[0] and pair == 0
                        base = Path(tempfile.mkdtemp(dir=shm if mode == "memory" else cache, prefix="run-"))
                        try:
                            if side.name == "ReMe":
                                assert worker is not None
                                runs[side.name], got = run_reme(worker, session, steps, base, collect=collect)
                                estimates = got or estimates
                            else:
                                folder = None if mode == "memory" else base / "ws"
                                runs[side.name] = run_ctxkeep(
                                    dicts, steps, folder, collect=collect, side=side, summarizer=summarizer
                                )
                        finally:
                            shutil.rmtree(base, ignore_errors=True)
                        if collect:
                            collected[side.name] = runs[side.name]
                    figures = "   ".join(
                        f"{name} {ms(statistics.median(r.times)).strip()} / {ms(p95(r.times)).strip()}"
                        for name, r in runs.items()
                    )
                    reme = runs.get("ReMe")
                    ratios = (
                        "   ctxkeep ÷ ReMe "
                        + ", ".join(
                            f"{side.name.removeprefix('ctxkeep').strip() or 'median'}"
                            f" {statistics.median(runs[side.name].times) / statistics.median(reme.times):.3f}"
                            for side in ours
                        )
                        if reme
                        else ""
                    )
                    compactions = " / ".join(str(r.compactions) for r in runs.values())
                    print(
                        f"    pair {pair + 1} ({order[0].name} first)   {figures}{ratios}   compactions {compactions}"
                    )
                    if mode == "disk":
                        durability(runs, len(steps))
            if "disk" in modes:
                print(
                    "  on disk the two do not keep the same things. ReMe holds the conversation in the process"
                    " only (what\n  survives a kill -9 is up to its host) and writes its offloaded results"
                    " without fsync. ctxkeep at\n  'step' appends every step to its live log and fdatasyncs it:"
                    " neither a kill -9 nor a power loss loses\n  an acknowledged step. At 'off' it makes the"
                    " same writes without a sync: a kill -9 still loses nothing, a\n  power loss may (ReMe's"
                    " durability, or better). The floor is what a durable step cannot go below."
                )
                if worker is None:
                    print("  ReMe was not run: ctxkeep's figures only.")
            if collected:
                print("  prefix reuse (o200k tokens of the common prefix with the previous step / tokens sent)")
                for name, run in collected.items():
                    between, whole, lowest = prefix_reuse(run, tokenizer)
                    print(
                        f"    {name:<8} between compactions {between:.4f} (lowest step {lowest:.4f});"
                        f" whole replay {whole:.4f}"
                    )
            if estimates:
                count_errors(dicts, estimates, tokenizer)
    finally:
        if worker is not None:
            worker.close()
    print(f"\n({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
