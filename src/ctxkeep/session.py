"""A live context kept in a workspace folder, so one process can stop and another go on.

    state.json                 the commit point: generation, summary, archive index, pins (replaced atomically)
    live/<generation>.jsonl    live messages: one line per `add` (a message or a batch), plus "replace"
                               records for results offloaded since the generation began
    summary.md                 a copy of the summary, for people
    compactions.jsonl          one record per compaction or failed attempt
    failed/<time>.json         what the summarizer was asked and answered when its summary was refused
    dialog/YYYY-MM-DD.jsonl    the archive of compacted messages
    tool_result/<uuid>.txt     full texts of offloaded tool results

A compaction appends to the archive (fsync), writes the next generation's live file (fsync), then
replaces state.json; only that rename makes it real. Killed at any point before, the workspace reopens
with the old generation and the archive cut back to its committed size; after it, with the new one.
Either way every message is live or archived exactly once, and the summary is the old or the new.

A `Session` holds the workspace's lock from `open` to `close`: a second process waits up to
`lock_timeout` seconds, then gets `WorkspaceLockedError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from . import archive as archive_mod
from . import engine
from .archive import Archive
from .codec import dumps, message_from_dict, message_to_dict
from .engine import EngineSettings, Live, Step
from .errors import CtxkeepError, MessageError, PinnedOverBudgetError, WorkspaceError
from .folder import Folder, LocalFolder
from .messages import Message
from .offload import cleanup
from .split import pair_groups
from .summarize import Summarizer
from .summarize.extractive import ExtractiveSummarizer
from .tokens import Counter, get_counter

__all__ = ["Session"]

log = logging.getLogger("ctxkeep")

STATE = "state.json"
SUMMARY = "summary.md"
RECORDS = "compactions.jsonl"
LIVE_DIR = "live"
FAILED_DIR = "failed"
_STATE_MARK = "ctxkeep-session/1"
_REPLACE_MARK = "ctxkeep-replace/1"
_BATCH_MARK = "ctxkeep-batch/1"


@dataclass(frozen=True, kw_only=True, slots=True)
class _State:
    generation: int
    summary: str | None
    summary_body: str | None
    archive: Archive
    pinned: frozenset[str]
    failed_at: int | None
    compactions: int
    last_record: dict[str, Any] | None

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "v": _STATE_MARK,
                "generation": self.generation,
                "summary": self.summary,
                "summary_body": self.summary_body,
                "archive": self.archive.to_dict(),
                "pinned": sorted(self.pinned),
                "failed_at": self.failed_at,
                "compactions": self.compactions,
                "last_record": self.last_record,
            },
            option=orjson.OPT_INDENT_2,
        )

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> _State:
        try:
            d = orjson.loads(raw)
            if not isinstance(d, dict) or d.get("v") != _STATE_MARK:
                raise ValueError(f"not a {_STATE_MARK} state file")
            return cls(
                generation=int(d["generation"]),
                summary=d.get("summary"),
                summary_body=d.get("summary_body"),
                archive=Archive.from_dict(d.get("archive") or {}),
                pinned=frozenset(d.get("pinned") or ()),
                failed_at=d.get("failed_at"),
                compactions=int(d.get("compactions") or 0),
                last_record=d.get("last_record"),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise WorkspaceError(f"{where} is damaged ({exc}); restore it from a backup", path=where) from exc


def _live_name(generation: int) -> str:
    return f"{LIVE_DIR}/{generation:08d}.jsonl"


class Session:
    """A persistent live context: add messages, `prepare` before each reasoning step, `compact` by hand.

    Open it with `Session.open(path)` (a folder, created when missing) or pass any `Folder`.
    Use it as a context manager, or call `close()`, to release the workspace's lock.
    """

    def __init__(
        self,
        folder: Folder,
        *,
        settings: EngineSettings | None = None,
        counter: Counter | None = None,
        summarizer: Summarizer | None = None,
        lock_timeout: float = 10.0,
        now: datetime | None = None,
    ) -> None:
        self.folder = folder
        self.settings = settings or EngineSettings()
        self.counter = counter or get_counter("o200k_base")
        self.summarizer = summarizer or ExtractiveSummarizer()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(folder.lock(lock_timeout))
        try:
            self._state, self.live = self._recover(now or datetime.now().astimezone())
        except BaseException:
            self._stack.close()
            raise

    @classmethod
    def open(cls, path: str | Path, **kw: Any) -> Session:
        """The session in folder `path` (created when missing). Keyword arguments as for `Session`."""
        return cls(LocalFolder(path), **kw)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the workspace's lock. Everything is already on disk."""
        self._stack.close()

    # --- reading ------------------------------------------------------------------

    @property
    def messages(self) -> tuple[Message, ...]:
        """The live messages, oldest first."""
        return self.live.messages

    @property
    def summary(self) -> str | None:
        """The current summary (archive guide included), or None before the first compaction."""
        return self.live.summary

    # --- changing -------------------------------------------------------------------

    def add(self, messages: Iterable[Message] | Message) -> None:
        """Append messages to the live context, durably. Raises `MessageError` before writing anything."""
        batch = [messages] if isinstance(messages, Message) else list(messages)
        live = engine.add(self.live, batch, self.counter)  # validates first
        if not batch:
            return
        # One line per call: a crash mid-append leaves a torn last line, which reopening drops, so a
        # batch (a call and its results, say) is live entirely or not at all.
        line = dumps(batch[0]) if len(batch) == 1 else _batch_line(batch)
        self.folder.append(_live_name(self._state.generation), line)
        self.live = live

    def pin(self, message_id: str) -> None:
        """Never offload nor compact this live message, nor the rest of its tool-call group."""
        messages = self.live.messages
        index = next((i for i, m in enumerate(messages) if m.id == message_id), None)
        if index is None:
            raise MessageError(f"no live message has the id {message_id!r}")
        roots = pair_groups(messages)
        pinned = self.live.pinned | {m.id for m, r in zip(messages, roots, strict=True) if r == roots[index]}
        pinned_tokens = sum(n for m, n in zip(self.live.messages, self.live.counts, strict=True) if m.id in pinned)
        budget = self.settings.compact.compact_threshold - self.live.summary_tokens
        if pinned_tokens > budget:
            raise PinnedOverBudgetError(
                f"pinning {message_id!r} would make pinned messages {pinned_tokens} tokens, over the {budget}"
                " the compaction budget allows; unpin others first or raise max_input_length",
                pinned=pinned_tokens,
                budget=budget,
            )
        self._commit_state(replace(self._state, pinned=pinned))
        self.live = replace(self.live, pinned=pinned)

    def unpin(self, message_id: str) -> None:
        """Let this message (and its tool-call group) be offloaded and compacted again."""
        messages = self.live.messages
        roots = pair_groups(messages)
        group = {roots[i] for i, m in enumerate(messages) if m.id == message_id}
        pinned = self.live.pinned - {message_id} - {m.id for m, r in zip(messages, roots, strict=True) if r in group}
        self._commit_state(replace(self._state, pinned=pinned))
        self.live = replace(self.live, pinned=pinned)

    def prepare(self, system: str | None = None, *, now: datetime | None = None) -> Step:
        """Run the pre-reasoning pass and keep its result. Returns the `Step` (its `.context` goes to the model).

        `now` (default: the local time) names the day's archive file when a compaction happens.
        """
        return self._run(system, now, force=False, focus=None)

    def compact(self, focus: str | None = None, *, system: str | None = None, now: datetime | None = None) -> Step:
        """Compact now, whatever the size; `focus` tells the summarizer what matters most."""
        return self._run(system, now, force=True, focus=focus)

    # --- internals --------------------------------------------------------------------

    def _run(self, system: str | None, now: datetime | None, *, force: bool, focus: str | None) -> Step:
        at = now or datetime.now().astimezone()
        before = self.live
        step = engine.prepare(
            before,
            system=system,
            counter=self.counter,
            summarizer=self.summarizer,
            folder=self.folder,
            settings=self.settings,
            now=at,
            force=force,
            focus=focus,
        )
        if step.compaction is not None:
            self._commit_compaction(step)
        else:
            self._save_offloads(step.live)
            if step.failure is not None or step.live.failed_at != before.failed_at:
                self._commit_state(replace(self._state, failed_at=step.live.failed_at))
                if step.failure is not None:
                    self._record_failure(step)
        self.live = step.live
        return step

    def _record_failure(self, step: Step) -> None:
        """Save what the summarizer was asked and answered under ``failed/``, and note the failure."""
        failure = step.failure
        assert failure is not None
        name = f"{FAILED_DIR}/{failure.at.strftime('%Y%m%dT%H%M%S%f')}-{failure.tokens}.json"
        detail = {
            "at": failure.at.isoformat(),
            "reason": failure.reason,
            "tokens": failure.tokens,
            "request": failure.request,
            "response": failure.response,
        }
        self.folder.write(name, orjson.dumps(detail, option=orjson.OPT_INDENT_2))
        record = {"kind": "failed", "at": failure.at.isoformat(), "reason": failure.reason, "tokens": failure.tokens}
        self._append_record({**record, "saved": name})

    def _save_offloads(self, after: Live) -> None:
        lines = [
            orjson.dumps({"v": _REPLACE_MARK, "at": i, "message": message_to_dict(after.messages[i])}) + b"\n"
            for i in after.offloaded
        ]
        if lines:
            self.folder.append(_live_name(self._state.generation), b"".join(lines))

    def _commit_compaction(self, step: Step) -> None:
        assert step.compaction is not None
        old = self._state
        live = step.live
        record = {"kind": "compaction", "generation": old.generation + 1, **_jsonable(asdict(step.compaction))}
        new = replace(
            old,
            generation=old.generation + 1,
            summary=live.summary,
            summary_body=live.summary_body,
            archive=live.archive,
            pinned=live.pinned,
            failed_at=live.failed_at,
            compactions=old.compactions + 1,
            last_record=record,
        )
        try:
            self.folder.write(_live_name(new.generation), b"".join(dumps(m) for m in live.messages))
            self.folder.write(STATE, new.to_bytes())  # the commit point
        except CtxkeepError:
            # Nothing committed: undo the archive append and the next generation's file.
            with contextlib.suppress(CtxkeepError):
                archive_mod.restore(self.folder, old.archive)
                self.folder.remove(_live_name(new.generation))
            raise
        self._state = new
        self.live = live
        self._after_commit(old.generation, step.compaction.at)

    def _after_commit(self, old_generation: int | None, now: datetime) -> None:
        """Tidy-up after a commit. A crash or a full disk may stop it half-way; `_recover` redoes it."""
        try:
            self._tidy(old_generation, now)
        except CtxkeepError as exc:
            log.warning("workspace tidy-up postponed to the next open: %s", exc)

    def _tidy(self, old_generation: int | None, now: datetime) -> None:
        state = self._state
        if old_generation is not None and old_generation != state.generation:
            self.folder.remove(_live_name(old_generation))
        summary = (state.summary or "").encode()
        if self.folder.read(SUMMARY) != summary:
            self.folder.write(SUMMARY, summary)
        if state.last_record is not None and self._last_record_generation() != state.last_record["generation"]:
            self._append_record(state.last_record)
        cleanup(
            self.folder, self.live.messages, retention_days=self.settings.offload.retention_days, now=now.timestamp()
        )

    def _commit_state(self, state: _State) -> None:
        self.folder.write(STATE, state.to_bytes())
        self._state = state

    def _append_record(self, record: dict[str, Any]) -> None:
        self.folder.append(RECORDS, orjson.dumps(record) + b"\n")

    def _last_record_generation(self) -> int | None:
        raw = self.folder.read(RECORDS)
        if not raw:
            return None
        for line in reversed(raw.splitlines()):
            with contextlib.suppress(orjson.JSONDecodeError):
                rec = orjson.loads(line)
                if isinstance(rec, dict) and rec.get("kind") == "compaction":
                    return int(rec["generation"])
        return None

    def _recover(self, now: datetime) -> tuple[_State, Live]:
        raw = self.folder.read(STATE)
        if raw is None:
            if self.folder.list(f"{LIVE_DIR}/") or self.folder.list(f"{archive_mod.DIALOG_DIR}/"):
                raise WorkspaceError(
                    f"{self.folder.location(STATE)} is missing but the workspace holds live or archived messages;"
                    " restore state.json from a backup rather than start over",
                    path=self.folder.location(STATE),
                )
            state = _State(
                generation=0,
                summary=None,
                summary_body=None,
                archive=Archive(),
                pinned=frozenset(),
                failed_at=None,
                compactions=0,
                last_record=None,
            )
            self.folder.write(STATE, state.to_bytes())
            self.folder.append(_live_name(0), b"")
        else:
            state = _State.from_bytes(raw, self.folder.location(STATE))
        self._state = state
        archive_mod.restore(self.folder, state.archive)
        current = _live_name(state.generation)
        for info in self.folder.list(f"{LIVE_DIR}/"):
            if info.name != current:
                self.folder.remove(info.name)
        messages = self._read_live(current)
        live = engine.add(
            Live(
                summary=state.summary,
                summary_body=state.summary_body,
                summary_tokens=engine.summary_tokens_of(state.summary, self.counter),
                archive=state.archive,
                failed_at=state.failed_at,
            ),
            messages,
            self.counter,
        )
        live = replace(live, pinned=frozenset(p for p in state.pinned if any(m.id == p for m in messages)))
        self.live = live
        self._after_commit(None, now)
        return state, live

    def _read_live(self, name: str) -> list[Message]:
        raw = self.folder.read(name) or b""
        end = raw.rfind(b"\n") + 1
        if end < len(raw):
            # A line cut short by a crash: its `add` never returned, so it was never part of the context.
            self.folder.truncate(name, end)
            raw = raw[:end]
        messages: list[Message] = []
        for lineno, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = orjson.loads(line)
                if d.get("v") == _REPLACE_MARK:
                    messages[int(d["at"])] = message_from_dict(d["message"])
                elif d.get("v") == _BATCH_MARK:
                    messages.extend(message_from_dict(m) for m in d["messages"])
                else:
                    messages.append(message_from_dict(d))
            except (orjson.JSONDecodeError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                where = f"{self.folder.location(name)}:{lineno}"
                raise WorkspaceError(f"{where}: damaged live message ({exc})", path=where) from exc
        return messages


def _batch_line(batch: list[Message]) -> bytes:
    return orjson.dumps({"v": _BATCH_MARK, "messages": [message_to_dict(m) for m in batch]}) + b"\n"


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in d.items()}
