"""What a session writes to its workspace, in the order that keeps it crash-safe (the protocol is in
`ctxkeep.workspace`): the live log's appends, the commits of ``state.json``, the records, the tidy-up.

A `Journal` is opened by `recover`ing the workspace and then holds what is not on disk yet: the live-log
lines of offloads still to go with the next append, and the tokens of the steps not yet noted.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from ctxkeep import archive as archive_mod
from ctxkeep.errors import CtxkeepError
from ctxkeep.live import Live
from ctxkeep.retention import cleanup
from ctxkeep.settings import EngineSettings
from ctxkeep.step import Billed, Failure, Step
from ctxkeep.store import FAILED_DIR, Store
from ctxkeep.tokens import Counter, count_key

from . import livelog, records
from .recovery import recover
from .state import State

log = logging.getLogger("ctxkeep")


class Journal:
    """The workspace in `store` as one session writes it. Open it with `Journal.open`."""

    def __init__(self, store: Store, state: State, *, key: str | None, settings: EngineSettings) -> None:
        """A journal over `state`, the workspace's committed state (`open` recovers it first)."""
        self._store = store
        self._state = state
        self._key = key  # whose counts the live log carries
        self._retention_days = settings.offload.retention_days  # of offloaded originals no live message refers to
        self._compact = settings.compact  # noted with the steps: the report draws the window and threshold
        self._cache = settings.offload.cache  # noted with them too: the report prices what the cache held
        # Live-log lines of offloads not yet written: they go with the next append (one durable write per
        # step). Lost in a crash, they cost nothing: the next `prepare` offloads the same results the same way.
        self._pending: list[bytes] = []
        # Replaced lines in the live log: the log is rewritten without them when the session closes.
        self._replaced = 0
        # The steps since the last "steps" record, and when the first and last ran: noted with the next compaction
        # (or at close), never on their own, so a step costs no write.
        self._steps: list[records.StepNote] = []
        self._steps_span: tuple[datetime, datetime] | None = None
        self._stepped = False  # whether this session ran a step: the one a usage noted later belongs to
        # The generation of the newest compaction record in compactions.jsonl; None until read.
        self._recorded: int | None = None

    @classmethod
    def open(cls, store: Store, counter: Counter, *, settings: EngineSettings, now: datetime) -> tuple[Journal, Live]:
        """Recover the workspace in `store` (`ctxkeep.workspace.recovery`) and finish what a crash left half-done;
        the journal and the live context as committed."""
        key = count_key(counter)
        found = recover(store, counter, key=key, now=now)
        journal = cls(store, found.state, key=key, settings=settings)
        # A log with replaced lines, or counts of another counter, is rewritten: the next open reads it fast.
        journal._replaced = 1 if found.rewrite else 0
        journal.write_log(found.live)
        journal._after_commit(None, found.live, now)
        return journal, found.live

    @property
    def state(self) -> State:
        """The state as committed."""
        return self._state

    def append(self, line: bytes) -> None:
        """Append one `add`'s line to the live log, durably, after the offloads of the steps before it."""
        # The offloads of the last steps go first, in the same append: one durable write for the step.
        self._store.append_live(self._state.generation, b"".join(self._pending) + line)
        self._pending.clear()

    def commit(self, **changes: Any) -> None:
        """Commit the state with `changes` (`pinned`, `failed_at`): one atomic replace of state.json."""
        state = replace(self._state, **changes)
        self._store.commit_state(state.to_bytes())
        self._state = state

    def step(self, step: Step, now: datetime) -> None:
        """Keep what `step` changed: a compaction committed, or its offloads noted for the next append (and a
        failure recorded). Raises `StorageError` when a compaction cannot be committed; nothing is then."""
        self._steps.append(records.StepNote.of(step))
        self._stepped = True
        self._steps_span = (self._steps_span[0] if self._steps_span else now, now)
        if step.compaction is not None:
            self._commit_compaction(step)
            return
        after = step.live
        self._pending += [livelog.replace_line(i, after.messages[i], after.counts[i]) for i in after.offloaded]
        self._replaced += len(after.offloaded)
        if step.failure is not None or after.failed_at != self._state.failed_at:
            self.commit(failed_at=after.failed_at)
            if step.failure is not None:
                self._record_failure(step.failure)

    def billed(self, billed: Billed) -> None:
        """Note how the model's API counted the request of the newest step: in its note while it waits to be
        written (no write of its own), else (its note went with its compaction's record) in a record of its own.
        Nothing before this session's first step: that step was another session's."""
        if self._steps:
            self._steps[-1] = replace(self._steps[-1], billed=billed)
        elif self._stepped:
            try:
                self._store.append_record(records.to_line(records.usage_record(billed)))
            except CtxkeepError as exc:
                log.warning("the upstream's count of the last step was not noted in the records: %s", exc)

    def close(self, live: Live) -> None:
        """Rewrite the live log when offloads replaced lines in it, and note the steps not yet noted."""
        self.write_log(live)
        self._note_steps()

    def write_log(self, live: Live) -> None:
        """Rewrite the live log as the messages are now, when offloads replaced lines in it (or are still to be
        written): the next open reads each message once, with its count. A disk that refuses loses nothing."""
        if not self._replaced:
            return
        try:
            self._store.start_live(self._state.generation, livelog.snapshot(live.messages, live.counts, self._key))
        except CtxkeepError as exc:
            log.warning("live log not rewritten; the next open reads it as it is: %s", exc)
            return
        self._pending.clear()
        self._replaced = 0

    def _commit_compaction(self, step: Step) -> None:
        assert step.compaction is not None
        old, live = self._state, step.live
        record = records.compaction_record(step, generation=old.generation + 1)
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
        store = self._store
        try:
            store.start_live(new.generation, livelog.snapshot(live.messages, live.counts, self._key))
            store.commit_state(new.to_bytes())  # the commit point
        except CtxkeepError:
            # Nothing committed: undo the archive append and the next generation's file.
            with contextlib.suppress(CtxkeepError):
                archive_mod.restore(store, old.archive)
                store.drop_live(new.generation)
            raise
        self._state = new
        self._pending.clear()  # the new generation's log holds the messages as they are now
        self._replaced = 0
        # Noted with the compaction's record, in one append: the steps up to and including this one first.
        self._after_commit(old.generation, live, step.compaction.at, steps=self._steps_line())

    def _record_failure(self, failure: Failure) -> None:
        """Save what the summarizer was asked and answered, and note the failure in the records."""
        name = f"{failure.at.strftime('%Y%m%dT%H%M%S%f')}-{failure.tokens}.json"
        self._store.save_failure(name, records.failure_detail(failure))
        record = records.failure_record(failure, saved=f"{FAILED_DIR}/{name}", step=len(self._steps))
        self._store.append_record(records.to_line(record))

    def _note_steps(self) -> None:
        """Append the steps since the last note to the records. Only a count for `ctxkeep report`: a disk that
        refuses it loses the note, with a warning, and nothing else."""
        line = self._steps_line()
        if not line:
            return
        try:
            self._store.append_record(line)
        except CtxkeepError as exc:
            log.warning("the token counts of the last steps were not noted in the records: %s", exc)

    def _steps_line(self) -> bytes:
        """The record of the steps since the last note (empty when none), taken: they count as noted."""
        if not self._steps or self._steps_span is None:
            return b""
        first, last = self._steps_span
        note = records.steps_record(self._steps, first=first, last=last, compact=self._compact, cache=self._cache)
        self._steps, self._steps_span = [], None
        return records.to_line(note)

    def _after_commit(self, old_generation: int | None, live: Live, now: datetime, *, steps: bytes = b"") -> None:
        """Tidy-up after a commit, `steps` (a record line) noted with the compaction's record. A crash or a full
        disk may stop it half-way; the next open redoes it (the steps' note is lost then, with a warning)."""
        try:
            self._tidy(old_generation, live, now, steps)
        except CtxkeepError as exc:
            log.warning("workspace tidy-up postponed to the next open: %s", exc)

    def _tidy(self, old_generation: int | None, live: Live, now: datetime, steps: bytes) -> None:
        state, store = self._state, self._store
        if old_generation is not None and old_generation != state.generation:
            store.drop_live(old_generation)
        record = b""
        if state.last_record is not None:
            if self._recorded is None:  # read once per open: after that, this session is the only writer
                self._recorded = records.last_compaction_generation(store.read_records()) or 0
            if self._recorded != state.last_record["generation"]:
                record = records.to_line(state.last_record)
        if steps or record:
            store.append_record(steps + record)  # one durable append for both
            if record:
                assert state.last_record is not None
                self._recorded = state.last_record["generation"]
        summary = (state.summary or "").encode()
        if store.read_summary() != summary:
            store.write_summary(summary)
        # Offloaded originals past their retention that no live message refers to.
        cleanup(store, live.messages, retention_days=self._retention_days, now=now.timestamp())
