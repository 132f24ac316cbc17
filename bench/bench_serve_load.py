"""`ctxkeep serve` under load: more conversations than it keeps open, many requests at once.

Starts the fast local upstream of `bench_serve.py` in a thread and `ctxkeep serve` as a real process in
front of it, then runs N agents at once (at most C requests in flight), each sending T turns of its own
conversation one after the other (its history grown by each reply). With N above the proxy's 256 open
workspaces, idle ones are closed while others are in use. Prints every answer's status (and content
type: a plain-text 500 is a bug), dropped connections, the upstream calls made, and the time per request.

    .venv/bin/python bench/bench_serve_load.py [--conversations 300] [--turns 3] [--concurrency 64] [--dir PATH]

Target: every request answered 200 (issue 24 saw 109 plain-text 500s in 800 before the idle-close fix).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from typing import Any

import httpx

from bench_serve import Fast, free_port, wait_for


class _Upstream(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # a real API server takes hundreds of connections at once


async def agent(
    client: httpx.AsyncClient, gate: asyncio.Semaphore, i: int, turns: int, seen: Counter[str]
) -> list[float]:
    """One conversation's turns, one after the other; the seconds each took. Stops at its first failure."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"conversation {i}: summarise the build log"},
    ]
    took = []
    for turn in range(turns):
        async with gate:
            started = time.perf_counter()
            try:
                answer = await client.post("/v1/chat/completions", json={"model": "fast", "messages": messages})
            except httpx.TransportError as exc:
                seen[f"dropped ({type(exc).__name__})"] += 1
                return took
            took.append(time.perf_counter() - started)
        kind = answer.headers.get("content-type", "").split(";")[0]
        seen[f"{answer.status_code} {kind}"] += 1
        if answer.status_code != 200:
            return took
        reply = answer.json()["choices"][0]["message"]["content"]
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"and step {turn}"}]
    return took


async def run(url: str, conversations: int, turns: int, concurrency: int) -> tuple[Counter[str], list[float]]:
    seen: Counter[str] = Counter()
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        done = await asyncio.gather(*(agent(client, gate, i, turns, seen) for i in range(conversations)))
    return seen, [s for took in done for s in took]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--dir", help="where the workspaces go (default: the system's temporary folder)")
    args = parser.parse_args()

    calls = Counter[str]()

    class Counted(Fast):
        def do_POST(self) -> None:
            calls["upstream"] += 1
            super().do_POST()

    upstream = _Upstream(("127.0.0.1", 0), Counted)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
    port = free_port()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        command = [sys.executable, "-m", "ctxkeep.cli", "serve", "--upstream", base, "--port", str(port)]
        env = {**os.environ, "PYTHONWARNINGS": ""}
        proxy = subprocess.Popen([*command, "--root", root], stderr=subprocess.DEVNULL, env=env)
        try:
            wait_for(f"http://127.0.0.1:{port}/healthz")
            started = time.monotonic()
            seen, took = asyncio.run(run(f"http://127.0.0.1:{port}", args.conversations, args.turns, args.concurrency))
            seconds = time.monotonic() - started
        finally:
            proxy.terminate()
            proxy.wait(timeout=120)
            upstream.shutdown()
    asked = args.conversations * args.turns
    print(
        f"{args.conversations} conversations x {args.turns} turns, {args.concurrency} requests at once"
        f" (the proxy keeps 256 open): {asked} requests planned"
    )
    for what, n in sorted(seen.items()):
        print(f"  {what:<28} {n}")
    print(f"  upstream calls               {calls['upstream']}")
    ms = sorted(s * 1000 for s in took)
    if ms:
        p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
        print(f"  per request: median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms; {seconds:.1f} s in all")
    ok = seen.get("200 application/json", 0)
    print(f"  answered 200: {ok} of {asked} (target: all)")


if __name__ == "__main__":
    main()
