"""ReMe's side of bench/bench_reme.py. Runs in ReMe's own virtual environment (reme-ai 0.3.1.10), never in
ctxkeep's: it imports no ctxkeep module.

Reads one JSON command per line on standard input, answers one JSON line on standard output:

    {"session": FILE, "steps": [i, ...], "workdir": DIR, "threshold": N, "reserve": N, "system": TEXT,
     "offload": {"old_max_bytes": .., "recent_max_bytes": .., "recent_n": .., "retention_days": ..},
     "collect": true|false}

FILE holds AgentScope Msg dicts, one a line. Before each step index i (the Msgs before i are the agent's
memory), it times what CoPaw runs before a reasoning step: ReMeLight.compact_tool_result, then
ReMeLight.check_context; when that says compact (and the split is valid), the memory becomes the kept
part (the summary, a model call, is not run: neither side summarizes in this benchmark). With "collect", it
also returns each step's context as digests of its messages (with the text of each digest once) and
ReMe's token estimate of every block as first seen, for the prefix reuse and token-count figures. It
also counts the fsync and fdatasync calls made during the timed steps ("fsyncs"): what ReMe makes durable.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from sync_clock import SyncClock  # bench/ is the script's folder

warnings.filterwarnings("ignore")


def render(role: str, content: Any) -> str:
    """A message as bench_reme.py renders both sides' contexts: role and content, as JSON."""
    return json.dumps({"role": role, "content": content}, ensure_ascii=False, sort_keys=True)


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


async def run(reme: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    from agentscope.message import Msg
    from reme.memory.file_based.utils.as_msg_handler import AsMsgHandler

    with open(cmd["session"], encoding="utf-8") as f:
        dicts = [json.loads(line) for line in f if line.strip()]
    handler = AsMsgHandler(reme.service_context.as_token_counters["default"])
    off = cmd["offload"]
    memory: list[Any] = []
    summary: str | None = None
    times: list[float] = []
    contexts: list[list[str]] = []
    texts: dict[str, str] = {}
    estimates: list[list[int]] = []
    compactions = 0
    compacted: list[bool] = []
    # Its offloaded originals go to this run's folder (in memory or on disk, as the driver chose).
    reme.tool_result_path = Path(cmd["workdir"])
    if cmd["collect"]:  # before anything is cut: the estimate of every block as written
        for d in dicts:
            stat = await handler.stat_message(Msg.from_dict(d))
            estimates.append([b.token_count for b in stat.content])
    start = 0
    system = render("system", cmd["system"])
    syncs = SyncClock()
    for end in cmd["steps"]:
        batch = [Msg.from_dict(d) for d in dicts[start:end]]
        start = end
        t0 = time.perf_counter()
        memory.extend(batch)
        with syncs:
            memory = await reme.compact_tool_result(
                memory,
                old_max_bytes=off["old_max_bytes"],
                recent_max_bytes=off["recent_max_bytes"],
                retention_days=off["retention_days"],
                recent_n=off["recent_n"],
            )
            to_compact, to_keep, valid = await reme.check_context(
                memory, memory_compact_threshold=cmd["threshold"], memory_compact_reserve=cmd["reserve"]
            )
        compacted.append(bool(to_compact and valid))
        if to_compact and valid:
            memory = list(to_keep)
            compactions += 1
            summary = render("user", f"<summary>compaction {compactions}: {len(to_compact)} messages</summary>")
        times.append(time.perf_counter() - t0)
        if cmd["collect"]:
            rendered = [system, *([summary] if summary else []), *(render(m.role, m.content) for m in memory)]
            keys = [digest(r) for r in rendered]
            for k, r in zip(keys, rendered, strict=True):
                texts.setdefault(k, r)
            contexts.append(keys)
    return {
        "times": times,
        "compactions": compactions,
        "compacted": compacted,
        "contexts": contexts,
        "texts": texts,
        "estimates": estimates,
        "fsyncs": syncs.count,
    }


async def main() -> None:
    from reme.reme_light import ReMeLight

    home = tempfile.mkdtemp(prefix="reme-home-")  # ReMe's own folders (memory, dialog): unused here
    reme = ReMeLight(working_dir=home)
    await reme.start()
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            out = await run(reme, cmd)
        except Exception as exc:  # reported to the driver, which stops with it
            out = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
