"""Replay tests/crash_worker.py's conversation into a PostgreSQL workspace and SIGKILL this process.

    python tests/pg_crash_worker.py URL WORKSPACE MODE N [START]

MODE "before" or "after": die before or right after the Nth write to the store; "timer": die N milliseconds
after the replay starts, wherever it is (in a transaction, between two). N 0 never kills; then the worker
prints the number of writes and every committed summary as JSON on its last line. Each message is printed
as ``acked <id>`` once `Session.add` returned: the store said it is kept. START resumes at that message.
Used by tests/test_pg_crash.py; not a test module itself.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

from crash_worker import NOW, SETTINGS, conversation
from ctxkeep.messages import Message
from ctxkeep.postgres.store import PostgresStore
from ctxkeep.session import Session

WRITES = (
    "commit_state",
    "write_summary",
    "start_live",
    "append_live",
    "cut_live",
    "drop_live",
    "append_archive",
    "cut_archive",
    "append_record",
    "save_original",
    "drop_original",
    "save_failure",
    "write_memory",
    "append_memory",
)


class KillingStore(PostgresStore):
    """A PostgreSQL store that dies before or after its Nth write."""

    def __init__(self, url: str, workspace: str, *, kill_at: int, mode: str) -> None:
        super().__init__(url, workspace)
        self.ops = 0
        self.kill_at = kill_at
        self.mode = mode

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name not in WRITES:
            return found

        def write(*args: Any) -> Any:
            self.ops += 1
            dies = self.mode in ("before", "after") and self.ops == self.kill_at
            if dies and self.mode == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = found(*args)
            if dies:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return write


def _summarized(session: Session, step: Any, summaries: list[str], where: str) -> None:
    if step.compaction and session.summary:
        summaries.append(session.summary.replace(where, "WORKSPACE"))


def run(url: str, workspace: str, mode: str, n: int, start: int = 0) -> None:
    if mode == "timer" and n:
        threading.Timer(n / 1000, os.kill, (os.getpid(), signal.SIGKILL)).start()
    store = KillingStore(url, workspace, kill_at=n, mode=mode)
    where = store.where("").removesuffix("/")
    messages = conversation()[start:]
    summaries: list[str] = []

    def add(batch: list[Message]) -> None:
        session.add(batch)
        print("\n".join(f"acked {m.id}" for m in batch), flush=True)

    with Session(store, settings=SETTINGS, now=NOW) as session:
        if start:
            _summarized(session, session.prepare("You are a careful agent.", now=NOW), summaries, where)
        pending: list[Message] = []
        for msg in messages:
            if msg.role == "assistant" and pending and pending[-1].role != "assistant":
                add(pending)
                pending = []
                _summarized(session, session.prepare("You are a careful agent.", now=NOW), summaries, where)
            pending.append(msg)
        add(pending)
        _summarized(session, session.prepare("You are a careful agent.", now=NOW), summaries, where)
    store.close()
    print(json.dumps({"ops": store.ops, "summaries": summaries}), flush=True)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 0)
