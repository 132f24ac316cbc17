"""What `ctxkeep serve` adds to a request, and what it holds per session.

Starts a fast local upstream (an OpenAI-compatible server that answers at once) and `ctxkeep serve` as
a real process in front of it, then prints:

1. added latency per request outside compaction: a 100,000-token history (tool calls with ~4 KB
   results) grown by one turn per request, sent to the proxy and, paired, straight to the upstream;
   the difference per request, median and p95 (target < 5 ms);
2. throughput with 8 concurrent sessions (threads, one conversation each, ~20,000-token histories);
3. memory per session: the proxy's resident memory after the sessions of (2) and of (1), per session.

    .venv/bin/python bench/bench_serve.py [--requests 40] [--tokens 100000] [--sessions 8] [--dir PATH]

Every request's new messages are appended to the workspace with an fdatasync before it is forwarded
(the session's durability), so the figures include the disk: `--dir /dev/shm` (tmpfs) shows the proxy
without it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from ctxkeep.tokens import get_counter

ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "fast",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()
TOOL = {"type": "function", "function": {"name": "read_log", "parameters": {"type": "object", "properties": {}}}}


class Fast(BaseHTTPRequestHandler):
    """Reads the whole body and answers at once: what remains is the transport, on both paths alike."""

    protocol_version = "HTTP/1.1"
    # As real servers do: without it the answer's head and body wait on each other (Nagle and delayed ACKs,
    # 40 ms a request on Linux), on both paths, and drown what is measured.
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)


def turn(i: int, tag: str) -> list[dict[str, Any]]:
    """One agent turn: a request, a tool call, its ~4 KB result, an answer."""
    lines = [hashlib.sha256(f"{tag}:{i}:{n}".encode()).hexdigest() for n in range(60)]
    result = "\n".join(f"{n:04d} INFO worker/{h[:8]}.py:{n * 7} {h[8:56]}" for n, h in enumerate(lines))
    call = {"id": f"call_{tag}_{i}", "type": "function", "function": {"name": "read_log", "arguments": "{}"}}
    return [
        {"role": "user", "content": f"{tag}: step {i}, read the log and tell me what failed"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": result},
        {"role": "assistant", "content": f"Step {i}: nothing failed."},
    ]


def grow(messages: list[dict[str, Any]], i: int, tag: str) -> list[dict[str, Any]]:
    """The next request's history: the answer to the last request (a tool call, its result, an answer), a new one."""
    return [*messages, *turn(i, tag)[1:], {"role": "user", "content": f"{tag}: and step {i}?"}]


def history_of(tokens: int, tag: str) -> list[dict[str, Any]]:
    """A conversation of about `tokens` tokens (o200k), ending with a user request."""
    counter = get_counter("o200k_base")
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a build engineer."}]
    i = 0
    while counter.count_texts([json.dumps(messages)])[0] < tokens:
        messages += turn(i, tag)
        i += 1
    return [*messages, {"role": "user", "content": f"{tag}: anything else?"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str) -> None:
    """Until `url` answers at all (a 404 will do): the server is up."""
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(url)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def post(
    client: httpx.Client, url: str, body: bytes, session: str | None = None, path: str = "/chat/completions"
) -> float:
    headers = {"content-type": "application/json", "authorization": "Bearer none"}
    if session:
        headers["x-ctxkeep-session"] = session
    started = time.perf_counter()
    answer = client.post(url + path, content=body, headers=headers)
    took = time.perf_counter() - started
    if answer.status_code != 200:
        raise RuntimeError(f"{answer.status_code}: {answer.text[:300]}")
    return took


def latency(client: httpx.Client, proxy: str, upstream: str, tokens: int, requests: int) -> list[float]:
    """Per request: proxy time minus direct time, for a history growing by one turn per request."""
    messages = history_of(tokens, "latency")
    body = json.dumps({"model": "fast", "messages": messages, "tools": [TOOL]}).encode()
    post(client, proxy, body, "latency")  # the first request syncs the whole history: not "outside compaction"
    added = []
    for i in range(requests):
        messages = grow(messages, 10_000 + i, "latency")
        body = json.dumps({"model": "fast", "messages": messages, "tools": [TOOL]}).encode()
        via = post(client, proxy, body, "latency")
        direct = post(client, upstream, body)
        added.append(via - direct)
    return added


def relay(client: httpx.Client, proxy: str, upstream: str, tokens: int, requests: int) -> list[float]:
    """Per request: the proxy's time minus the direct time for a body it passes through untouched."""
    body = json.dumps({"model": "fast", "messages": history_of(tokens, "relay"), "tools": [TOOL]}).encode()
    added = []
    for _ in range(requests):
        via = post(client, proxy.removesuffix("/v1") + "/v1/relay", body, path="")
        direct = post(client, upstream + "/relay", body, path="")
        added.append(via - direct)
    return added


def figures(seconds: list[float]) -> str:
    ms = sorted(1000 * s for s in seconds)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms"


def throughput(proxy: str, sessions: int, tokens: int, requests: int) -> float:
    """Requests per second over `sessions` threads, one conversation each."""
    done = []

    def run(k: int) -> None:
        messages = history_of(tokens, f"t{k}")
        with httpx.Client(timeout=600) as client:
            for i in range(requests):
                messages = grow(messages, 10_000 + i, f"t{k}")
                body = json.dumps({"model": "fast", "messages": messages, "tools": [TOOL]}).encode()
                post(client, proxy, body, f"t{k}")
                done.append(1)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(sessions)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(done) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--dir", help="where the workspaces go (default: the system's temporary folder)")
    parser.add_argument("--upstream-only", type=int, help=argparse.SUPPRESS)  # the upstream's own process
    args = parser.parse_args()
    if args.upstream_only:
        ThreadingHTTPServer(("127.0.0.1", args.upstream_only), Fast).serve_forever()
        return

    # Three processes, as in use: this client, the proxy and the upstream (threads of one process would
    # take turns at one interpreter lock and add its switching to every figure).
    upstream_port = free_port()
    upstream_process = subprocess.Popen([sys.executable, __file__, "--upstream-only", str(upstream_port)])
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    port = free_port()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        command = [sys.executable, "-m", "ctxkeep.cli", "serve", "--upstream", upstream, "--port", str(port)]
        command += ["--root", root, "--window", str(4 * args.tokens)]  # a window no request comes near
        proxy_process = subprocess.Popen(command, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONWARNINGS": ""})
        proxy = f"http://127.0.0.1:{port}/v1"
        try:
            wait_for(f"http://127.0.0.1:{port}/healthz")
            wait_for(f"{upstream}/models")
            with httpx.Client(timeout=600) as client:
                # One small conversation first, so the tokenizer (loaded once, shared) is not counted as a session's.
                post(client, proxy, json.dumps({"model": "fast", "messages": history_of(100, "warm")}).encode(), "warm")
                idle = rss_kib(proxy_process.pid)
                added = latency(client, proxy, upstream, args.tokens, args.requests)
                relayed = relay(client, proxy, upstream, args.tokens, args.requests)
            print(
                f"added latency per request, {args.tokens:,}-token history, {len(added)} requests outside compaction:"
            )
            print(f"  {figures(added)} (target < 5 ms)")
            print(
                f"  of which the HTTP hop alone (the same body on a path passed through unchanged): {figures(relayed)}"
            )
            after_one = rss_kib(proxy_process.pid)
            rate = throughput(proxy, args.sessions, 20_000, 10)
            print(f"throughput, {args.sessions} concurrent sessions, 20,000-token histories: {rate:.1f} requests/s")
            after_all = rss_kib(proxy_process.pid)
            one = (after_one - idle) / 1024
            each = (after_all - after_one) / 1024 / args.sessions
            print(f"memory: {idle / 1024:.0f} MiB with the tokenizer loaded;")
            print(f"  the {args.tokens:,}-token session +{one:.1f} MiB;")
            print(f"  {args.sessions} sessions of 20,000 tokens +{each:.1f} MiB each")
        finally:
            proxy_process.terminate()
            proxy_process.wait(timeout=60)
            upstream_process.terminate()
            upstream_process.wait(timeout=60)


if __name__ == "__main__":
    main()
