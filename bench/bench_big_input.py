"""One runaway tool output: the memory a `Session` needs to take it, and the bytes it writes for it.

Run: .venv/bin/python bench/bench_big_input.py [--mb 40] [--cap-mb 0] [--dir PATH]

A tool whose search reads its own workspace returns each earlier output inside the next (issue 24: 32 KB,
410 KB, 22 MB, 186 MB, 319 MB, then a SIGSEGV). Here one result of `--mb` MB (grep-like lines, ASCII) is
made in a fresh child process and handed to `Session.add` as an OpenAI chat dict, as an agent loop does,
then `prepare` runs. The child reports:

- peak memory: its peak resident set (ru_maxrss) less what it held before the result was made, as a
  multiple of the result's size; the result itself counts (it is 1x by itself), so 2x means the session
  held at most one more copy at any time;
- bytes written per byte of input: every byte the child passed to write() (``wchar`` of /proc/self/io,
  which counts a file rewritten each time it is written), over the result's size;
- what the workspace holds: the live log, the saved original, the rest.

The per-message cap (`OffloadSettings.max_message_chars`, 32,000,000 characters by default) drops the
middle of a text past it: `--cap-mb 0` keeps the default, `--cap-mb N` sets it to N million characters
(above `--mb` to see a result kept whole in its saved original).

Target (issue 24 item 1): for a 300 MB result (``--mb 300``, ~1.5 GB of RAM free), peak <= 2x its size and
<= 1.2 bytes written per byte of input. The default run (40 MB) takes a few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

MB = 1_000_000


def _written() -> int:
    """The bytes this process passed to write() so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no wchar line")


def _rss() -> int:
    """This process's resident set now, in bytes."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _output(size: int) -> str:
    """`size` characters of grep-like lines, made in one join of shared lines: never more than the text itself
    is held, so the peak measured is the session's, not this function's."""
    lines = [
        f"src/pkg/module_{i:03d}.py:{i * 7:05d}: value = compute(x, y)  # matched the pattern again\n"
        for i in range(997)
    ]
    width = len(lines[0])
    count, rest = divmod(size, width)
    return "".join([*(lines[i % 997] for i in range(count)), lines[count % 997][:rest]])


def child(mb: int, cap_mb: int, folder: Path) -> dict[str, float]:
    """Run in the child: one result of `mb` MB into a fresh session; the figures as a dict."""
    from ctxkeep import Session
    from ctxkeep.settings import EngineSettings

    settings = EngineSettings.for_window(128_000)
    if cap_mb:
        settings = replace(settings, offload=replace(settings.offload, max_message_chars=cap_mb * MB))
    session = Session.open(folder, settings=settings)
    session.add({"role": "user", "content": "find every call of compute"})
    call = {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "compute"}'}}
    session.add({"role": "assistant", "content": None, "tool_calls": [call]})
    base, written = _rss(), _written()
    text = _output(mb * MB)
    start = time.perf_counter()
    session.add({"role": "tool", "tool_call_id": "call_1", "content": text})
    added = time.perf_counter() - start
    step = session.prepare()
    seconds = time.perf_counter() - start
    context_chars = sum(len(m.text) for m in step.context.messages)
    session.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    files = {p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()}
    return {
        "input": len(text),
        "peak": peak - base,
        "written": _written() - written,
        "live": sum(v for k, v in files.items() if k.startswith("live/")),
        "originals": sum(v for k, v in files.items() if k.startswith("tool_result/")),
        "other": sum(v for k, v in files.items() if not k.startswith(("live/", "tool_result/"))),
        "context_chars": context_chars,
        "add_s": added,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=40, help="size of the tool result, MB (default 40)")
    parser.add_argument(
        "--cap-mb", type=int, default=0, help="the per-message cap, millions of characters (0: default)"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the workspace goes (default: a temporary folder)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.mb, args.cap_mb, args.dir)))
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        argv = [sys.executable, __file__, "--child", "--mb", str(args.mb), "--cap-mb", str(args.cap_mb)]
        proc = subprocess.run([*argv, "--dir", str(Path(tmp) / "ws")], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"the child failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    size = r["input"]
    print(f"load: {os.getloadavg()[0]:.2f}   result: {size / MB:,.1f} MB ({size:,} characters)")
    print(f"peak memory over the baseline: {r['peak'] / MB:,.1f} MB = {r['peak'] / size:.2f}x the result (target <= 2)")
    print(f"bytes written: {r['written'] / MB:,.1f} MB = {r['written'] / size:.3f} per byte of input (target <= 1.2)")
    print(
        f"workspace: live log {r['live'] / MB:,.2f} MB, saved originals {r['originals'] / MB:,.1f} MB,"
        f" other {r['other'] / MB:,.2f} MB; context sent {r['context_chars']:,} characters"
    )
    print(f"time: add {r['add_s']:.2f} s, add + prepare {r['seconds']:.2f} s")


if __name__ == "__main__":
    main()
