"""What `ctxkeep serve` adds to a request, and what it holds per session, beside a plain pass-through.

Starts a fast local upstream (an OpenAI-compatible server that answers at once), `ctxkeep serve` as a real
process in front of it, and a plain pass-through (the standard library's HTTP server forwarding each
request over a kept-alive `http.client` connection: the least any proxy adds), then prints:

1. added latency per request outside compaction: a 100,000-token history (tool calls with ~4 KB
   results) grown by one turn per request, sent to the proxy, to the plain pass-through and straight to
   the upstream, in turn; each one's time over the direct one, median and p95; beside them the durable
   write (a turn's bytes appended and fdatasync'ed in the workspaces' folder). Target: ctxkeep's median
   at most 1 ms over the durable write;
2. throughput with 8 concurrent conversations (threads, one each, ~20,000-token histories, every body
   made before the clock starts): through the proxy, the plain pass-through, and straight. Target: 1,000
   requests/s through the proxy;
3. memory per session: the proxy's resident memory after the sessions of (2) and of (1), per session;
4. beside (1) and (2), the CPU each process spent a request (what the machine's load changes least), the
   proxy's split between its event loop (HTTP, parsing, the wire forms) and its other threads (the steps).

    .venv/bin/python bench/bench_serve.py [--requests 40] [--tokens 100000] [--sessions 8] [--dir PATH]
                                          [--turns 40] [--durability step|batch|off]

Every request's new messages are appended to the workspace with an fdatasync before it is forwarded
(the session's durability), so the figures include the disk: `--dir /dev/shm` (tmpfs) shows the proxy
without it; `--durability batch` (group commit) is what the proxy wants under load. The machine's load
changes every figure: compare each with the pass-through of the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
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


class Plain(BaseHTTPRequestHandler):
    """The plain pass-through: reads the body, sends it on over this thread's kept-alive connection to the
    upstream, and answers with what came back."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    upstream_port = 0
    _local = threading.local()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = http.client.HTTPConnection("127.0.0.1", self.upstream_port)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
        connection.request("POST", self.path, body=body, headers=headers)
        answer = connection.getresponse()
        content = answer.read()
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.getheader("Content-Type") or "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)


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


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """The process's CPU time so far (user and system), or one of its threads' (`thread`, an id as the kernel
    knows it): what a request costs it, whatever else runs on the machine."""
    stat = f"/proc/{pid}/task/{thread}/stat" if thread is not None else f"/proc/{pid}/stat"
    fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Spent:
    """CPU seconds a process spent over a stretch: all of it, and its main thread's (the proxy's event loop:
    HTTP, parsing, the wire forms; the rest is the workspaces' threads, each request's step)."""

    pid: int
    whole: float = 0.0
    main: float = 0.0

    def __enter__(self) -> Spent:
        self.whole, self.main = -cpu_seconds(self.pid), -cpu_seconds(self.pid, self.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self.whole += cpu_seconds(self.pid)
        self.main += cpu_seconds(self.pid, self.pid)

    def per(self, requests: int) -> str:
        """Milliseconds a request, the event loop's and the other threads' beside."""
        whole, main = 1000 * self.whole / requests, 1000 * self.main / requests
        return f"{whole:.2f} ms a request (event loop {main:.2f}, other threads {whole - main:.2f})"


@dataclass
class Paired:
    """The latency run's figures (`latency`)."""

    added: list[float] = field(default_factory=list)  # seconds, the proxy's time minus the direct time
    passed: list[float] = field(default_factory=list)  # seconds, the plain pass-through's minus the direct
    new: list[int] = field(default_factory=list)  # bytes of each request's new messages
    spent: tuple[Spent, ...] = ()  # the CPU of the proxy's process and of the pass-through's over the run


def latency(
    client: httpx.Client, urls: tuple[str, str, str], pids: tuple[int, int], tokens: int, requests: int
) -> Paired:
    """For a history growing by one turn per request, sent to the proxy, straight, and to the plain
    pass-through (whose processes are `pids`), in turn."""
    proxy, plain, upstream = urls
    messages = history_of(tokens, "latency")
    body = json.dumps({"model": "fast", "messages": messages, "tools": [TOOL]}).encode()
    post(client, proxy, body, "latency")  # the first request syncs the whole history: not "outside compaction"
    post(client, plain, body)  # its connection to the upstream opened
    out = Paired()
    added, passed, new = out.added, out.passed, out.new
    out.spent = (Spent(pids[0]), Spent(pids[1]))
    with out.spent[0], out.spent[1]:
        for i in range(requests):
            grown = grow(messages, 10_000 + i, "latency")
            new.append(len(json.dumps(grown[len(messages) :]).encode()))
            messages = grown
            body = json.dumps({"model": "fast", "messages": messages, "tools": [TOOL]}).encode()
            via = post(client, proxy, body, "latency")
            direct = post(client, upstream, body)
            plainly = post(client, plain, body)
            added.append(via - direct)
            passed.append(plainly - direct)
    return out


def durable_write(folder: str, sizes: list[int]) -> list[float]:
    """Seconds to append each of `sizes` bytes to a file in `folder` and fdatasync it: a step's floor."""
    took = []
    with tempfile.NamedTemporaryFile(dir=folder) as file:
        for size in sizes:
            data = b"x" * size
            started = time.perf_counter()
            os.write(file.fileno(), data)
            os.fdatasync(file.fileno())
            took.append(time.perf_counter() - started)
    return took


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
    return f"median {statistics.median(ms):.2f} ms, p95 {p95:.2f} ms"


def conversations(sessions: int, tokens: int, requests: int, tag: str) -> list[list[bytes]]:
    """Each conversation's request bodies, its history grown by one turn per request (the first syncs it whole)."""
    out = []
    for k in range(sessions):
        messages = history_of(tokens, f"{tag}{k}")
        bodies = []
        for i in range(requests + 1):
            bodies.append(json.dumps({"model": "fast", "messages": messages, "tools": [TOOL]}).encode())
            messages = grow(messages, 10_000 + i, f"{tag}{k}")
        out.append(bodies)
    return out


def throughput(url: str, bodies: list[list[bytes]], tag: str, spent: Spent | None = None) -> float:
    """Requests per second over one thread per conversation, its first request (a whole sync) not timed;
    `spent` counts the CPU of the serving process over the timed requests."""
    ready = threading.Barrier(len(bodies) + 1)

    def run(k: int) -> None:
        with httpx.Client(timeout=600) as client:
            post(client, url, bodies[k][0], f"{tag}{k}")
            ready.wait()
            for body in bodies[k][1:]:
                post(client, url, body, f"{tag}{k}")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(bodies))]
    for t in threads:
        t.start()
    ready.wait()
    with spent or contextlib.nullcontext():
        started = time.perf_counter()
        for t in threads:
            t.join()
        took = time.perf_counter() - started
    return sum(len(b) - 1 for b in bodies) / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=40, help="requests per conversation for the throughput")
    parser.add_argument("--dir", help="where the workspaces go (default: the system's temporary folder)")
    parser.add_argument(
        "--durability",
        choices=("step", "batch", "off"),
        help="passed to `ctxkeep serve --durability` (issue 25's setting; default: the proxy's own, step)",
    )
    parser.add_argument("--upstream-only", type=int, help=argparse.SUPPRESS)  # the upstream's own process
    parser.add_argument("--plain-only", type=int, nargs=2, help=argparse.SUPPRESS)  # the pass-through's
    args = parser.parse_args()
    if args.upstream_only:
        ThreadingHTTPServer(("127.0.0.1", args.upstream_only), Fast).serve_forever()
        return
    if args.plain_only:
        Plain.upstream_port = args.plain_only[1]
        ThreadingHTTPServer(("127.0.0.1", args.plain_only[0]), Plain).serve_forever()
        return

    # Four processes, as in use: this client, the proxy, the pass-through and the upstream (threads of one
    # process would take turns at one interpreter lock and add its switching to every figure).
    upstream_port = free_port()
    upstream_process = subprocess.Popen([sys.executable, __file__, "--upstream-only", str(upstream_port)])
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    plain_port = free_port()
    plain_process = subprocess.Popen([sys.executable, __file__, "--plain-only", str(plain_port), str(upstream_port)])
    plain = f"http://127.0.0.1:{plain_port}/v1"
    port = free_port()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        command = [sys.executable, "-m", "ctxkeep.cli", "serve", "--upstream", upstream, "--port", str(port)]
        command += ["--root", root, "--window", str(4 * args.tokens)]  # a window no request comes near
        if args.durability:
            command += ["--durability", args.durability]
        proxy_process = subprocess.Popen(command, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONWARNINGS": ""})
        proxy = f"http://127.0.0.1:{port}/v1"
        try:
            wait_for(f"http://127.0.0.1:{port}/healthz")
            wait_for(f"{upstream}/models")
            wait_for(f"http://127.0.0.1:{plain_port}/")
            with httpx.Client(timeout=600) as client:
                # One small conversation first, so the tokenizer (loaded once, shared) is not counted as a session's.
                post(client, proxy, json.dumps({"model": "fast", "messages": history_of(100, "warm")}).encode(), "warm")
                idle = rss_kib(proxy_process.pid)
                pids = (proxy_process.pid, plain_process.pid)
                paired = latency(client, (proxy, plain, upstream), pids, args.tokens, args.requests)
                relayed = relay(client, proxy, upstream, args.tokens, args.requests)
            added, passed, written = paired.added, paired.passed, durable_write(root, paired.new)
            print(
                f"added latency per request, {args.tokens:,}-token history, {len(added)} requests outside compaction"
                " (each over the same body sent straight to the upstream):"
            )
            print(f"  ctxkeep serve:       {figures(added)}; CPU {paired.spent[0].per(args.requests)}")
            print(f"  plain pass-through:  {figures(passed)}; CPU {paired.spent[1].per(args.requests)}")
            print(f"  the durable write:   {figures(written)} (a turn's bytes appended, fdatasync)")
            print(
                f"  ctxkeep's own, over the plain pass-through: median"
                f" {1000 * (statistics.median(added) - statistics.median(passed)):.2f} ms;"
                f" target: ctxkeep serve's median <= 1 ms + the durable write"
                f" = {1 + 1000 * statistics.median(written):.2f} ms"
            )
            print(f"  the proxy's HTTP hop alone (the same body on a path it passes on unchanged): {figures(relayed)}")
            after_one = rss_kib(proxy_process.pid)
            bodies = conversations(args.sessions, 20_000, args.turns, "t")
            spent = (Spent(proxy_process.pid), Spent(plain_process.pid))
            targets = zip((proxy, plain, upstream), (*spent, None), strict=True)
            rates = [throughput(url, bodies, "t", counted) for url, counted in targets]
            print(
                f"throughput, {args.sessions} conversations at once, 20,000-token histories, {args.turns} turns each:"
                f" ctxkeep serve {rates[0]:,.0f} requests/s (target 1,000), plain pass-through {rates[1]:,.0f},"
                f" straight to the upstream {rates[2]:,.0f}; ctxkeep / plain = {rates[0] / rates[1]:.2f}"
            )
            timed = args.sessions * args.turns
            print(f"  CPU: ctxkeep serve {spent[0].per(timed)}; plain pass-through {spent[1].per(timed)}")
            after_all = rss_kib(proxy_process.pid)
            one = (after_one - idle) / 1024
            each = (after_all - after_one) / 1024 / args.sessions
            print(f"memory: {idle / 1024:.0f} MiB with the tokenizer loaded;")
            print(f"  the {args.tokens:,}-token session +{one:.1f} MiB;")
            print(f"  {args.sessions} sessions of 20,000 tokens +{each:.1f} MiB each")
        finally:
            proxy_process.terminate()
            proxy_process.wait(timeout=60)
            for process in (plain_process, upstream_process):
                process.terminate()
                process.wait(timeout=60)


if __name__ == "__main__":
    main()
