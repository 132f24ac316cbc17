"""Replay a fixed conversation into a workspace and SIGKILL this process at the Nth file operation.

    python tests/crash_worker.py WORKSPACE KILL_AT MODE [START [DURABILITY]]

MODE is "before" (die before the operation), "torn" (write half the bytes of a write/append, then
die) or "after" (die right after it). DURABILITY is the folder's ("step", "batch" or "off"; default step):
a kill loses nothing acknowledged in any. KILL_AT 0 never kills; then the worker prints the number of
file operations and every committed summary as JSON. START resumes the replay at that message.
Used by tests/test_crash.py; not a test module itself.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import UTC, datetime

from ctxkeep.folder import LocalFolder
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SETTINGS = EngineSettings(
    compact=CompactSettings(max_input_length=3_000, compact_ratio=0.7, reserve_ratio=0.2),
    offload=OffloadSettings(recent_n=2, recent_max_bytes=2_000, old_max_bytes=400),
)


def conversation() -> list[Message]:
    """A deterministic agent session: asks, tool calls (some parallel) with large outputs, answers."""
    out: list[Message] = []
    for turn in range(12):
        out.append(
            Message.of("user", f"Step {turn}: please check /srv/app/module_{turn}.py and run the tests", id=f"u{turn}")
        )
        calls = [
            ToolCall(id=f"c{turn}_{k}", name="bash", arguments=json.dumps({"command": f"pytest -k t{turn}_{k}"}))
            for k in range(1 + turn % 2)
        ]
        out.append(
            Message(
                role="assistant",
                content=(TextBlock(text=f"I'll run the tests for step {turn}."), *calls),
                id=f"a{turn}",
            )
        )
        for k, call in enumerate(calls):
            body = "\n".join(f"line {i} of output {turn}.{k}: test_{i} passed" for i in range(60 + 10 * turn))
            out.append(
                Message(
                    role="tool",
                    content=(ToolResult(call_id=call.id, content=body, exit_code=1 if turn % 5 == 4 else 0),),
                    id=f"r{turn}_{k}",
                )
            )
        out.append(Message.of("assistant", f"Step {turn} done; module_{turn} is fine.", id=f"d{turn}"))
    return out


class KillingFolder(LocalFolder):
    """A local folder that dies at its Nth write (a file replaced, or a new one written in place), append,
    truncate or remove."""

    def __init__(self, root: str, kill_at: int, mode: str, durability: str = "step") -> None:
        super().__init__(root, durability=durability)
        self.ops = 0
        self.kill_at = kill_at
        self.mode = mode

    def _tick(self, name: str, data: bytes | None, op):  # type: ignore[no-untyped-def]
        self.ops += 1
        if self.ops != self.kill_at:
            return op()
        if self.mode == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.mode == "torn" and data is not None:
            path = self.root / name
            if op.__name__ == "write":  # an atomic write tears its temporary file, never the target
                path = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        result = op()
        os.kill(os.getpid(), signal.SIGKILL)
        return result

    def write(self, name: str, data: bytes) -> None:
        def write() -> None:
            LocalFolder.write(self, name, data)

        self._tick(name, data, write)

    def _write_new(self, name: str, data: bytes) -> bool:
        def write_new() -> bool:
            return LocalFolder._write_new(self, name, data)

        return self._tick(name, data, write_new)  # type: ignore[no-any-return]

    def append(self, name: str, data: bytes) -> int:
        def append() -> int:
            return LocalFolder.append(self, name, data)

        return self._tick(name, data, append)  # type: ignore[no-any-return]

    def truncate(self, name: str, size: int) -> None:
        self._tick(name, None, lambda: LocalFolder.truncate(self, name, size))

    def remove(self, name: str) -> None:
        self._tick(name, None, lambda: LocalFolder.remove(self, name))


def run(workspace: str, kill_at: int, mode: str, start: int = 0, durability: str = "step") -> None:
    folder = KillingFolder(workspace, kill_at, mode, durability)
    messages = conversation()[start:]
    summaries: list[str] = []
    with Session(folder, settings=SETTINGS, now=NOW) as session:
        if start:
            # An agent that restarts prepares before its next reasoning step, as the killed one was about to.
            step = session.prepare("You are a careful agent.", now=NOW)
            if step.compaction and session.summary:
                summaries.append(session.summary)
        pending: list[Message] = []
        for msg in messages:
            if msg.role == "assistant" and pending and pending[-1].role != "assistant":
                session.add(pending)
                pending = []
                step = session.prepare("You are a careful agent.", now=NOW)
                if step.compaction and session.summary:
                    summaries.append(session.summary)
            pending.append(msg)
        session.add(pending)
        step = session.prepare("You are a careful agent.", now=NOW)
        if step.compaction and session.summary:
            summaries.append(session.summary)
    # Offload notices name files by absolute path; summaries of two workspaces differ only there.
    root = str(folder.root)
    print(json.dumps({"ops": folder.ops, "summaries": [s.replace(root, "WORKSPACE") for s in summaries]}))


if __name__ == "__main__":
    run(
        sys.argv[1],
        int(sys.argv[2]),
        sys.argv[3],
        int(sys.argv[4]) if len(sys.argv) > 4 else 0,
        sys.argv[5] if len(sys.argv) > 5 else "step",
    )
