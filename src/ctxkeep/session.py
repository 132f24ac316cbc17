"""A live context kept in a workspace folder, so one process can stop and another go on.

    state.json                 the commit point: generation, summary, archive index, pins (replaced atomically)
    live/<generation>.jsonl    live messages: one line per `add` (a message or a batch) with token counts,
                               plus "replace" lines for results offloaded since (`ctxkeep.livelog`)
    summary.md                 a copy of the summary, for people
    compactions.jsonl          one record per compaction or failed attempt
    failed/<time>.json         what the summarizer was asked and answered when its summary was refused
    dialog/YYYY-MM-DD.jsonl    the archive of compacted messages
    tool_result/<uuid>.txt     full texts of offloaded tool results and command outputs

A step makes one durable write: `add` appends its line (one write and one fdatasync, on the live log
the folder keeps open) after the offloads of the steps before it (a crash loses only offloads, which
the next `prepare` redoes the same way). An original in tool_result/ is fsynced at the next
compaction: until then the live log holds its full text, and reopening rewrites an original a power
loss cut short. A compaction appends to the archive (fsync),
writes the next generation's live file (fsync), then replaces state.json; only that rename makes it
real. Killed at any point before, the workspace reopens with the old generation and the archive cut
back to its committed size; after it, with the new one.
Either way every message is live or archived exactly once, and the summary is the old or the new.

A `Session` holds the workspace's lock from `open` to `close`: a second process waits up to
`lock_timeout` seconds, then gets `WorkspaceLockedError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Container, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from . import archive as archive_mod
from . import engine, inputs, livelog, records
from . import live as live_mod
from . import sync as sync_mod
from .archive import Archive
from .codec import ids_in, storable
from .context import summary_tokens_of
from .engine import Step
from .errors import CtxkeepError, WorkspaceError
from .folder import LocalFolder
from .live import Live, Tools
from .memory import flush as memory_flush
from .messages import Message
from .offload import saved_texts
from .settings import EngineSettings
from .store import FAILED_DIR, STATE, Store, live_name
from .summarize import Summarizer
from .tokens import Counter, count_key

log = logging.getLogger("ctxkeep")


_STATE_MARK = "ctxkeep-session/1"


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
        """The state in `raw`; `WorkspaceError` naming `where` when it is not one (every field is checked)."""
        try:
            d = orjson.loads(raw)
            if not isinstance(d, dict) or d.get("v") != _STATE_MARK:
                raise ValueError(f"not a {_STATE_MARK} state file")
            last = _field(d, "last_record", dict, None)
            if last is not None and not _whole(last.get("generation")):
                raise ValueError("'last_record' has no generation")
            return cls(
                generation=_field(d, "generation", int),
                summary=_field(d, "summary", str, None),
                summary_body=_field(d, "summary_body", str, None),
                archive=Archive.from_dict(_archive_index(d.get("archive"))),
                pinned=frozenset(_field(d, "pinned", list, [])),
                failed_at=_field(d, "failed_at", int, None),
                compactions=_field(d, "compactions", int, 0),
                last_record=last,
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise WorkspaceError(f"{where} is damaged ({exc}); restore it from a backup", path=where) from exc


_MISSING: Any = object()


def _field(d: dict[str, Any], key: str, kind: type, default: Any = _MISSING) -> Any:
    """`d[key]`, checked to be a `kind` (a whole number, 0 or more, for int); `default` when null or absent."""
    value = d.get(key)
    if value is None:
        if default is _MISSING:
            raise ValueError(f"{key!r} is missing")
        return default
    if kind is int:
        ok = _whole(value)
    elif kind is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ValueError(f"{key!r} holds {value!r}")
    return value


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _archive_index(value: object) -> dict[str, Any]:
    """The archive index of a state, checked: file name -> {"bytes": n, "lines": n}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"'archive' holds {value!r}")
    for name, info in value.items():
        if not isinstance(info, dict) or not all(_whole(info.get(k)) for k in ("bytes", "lines")):
            raise ValueError(f"'archive' holds {info!r} for {name}")
    return value


_NEW = _State(
    generation=0,
    summary=None,
    summary_body=None,
    archive=Archive(),
    pinned=frozenset(),
    failed_at=None,
    compactions=0,
    last_record=None,
)


class Session:
    """A persistent live context: add messages, `prepare` before each reasoning step, `compact` by hand.

    Open it with `Session.open(path)` (a folder, created when missing) or pass any `Store`.
    Use it as a context manager, or call `close()`, to release the workspace's lock. What it holds
    (`live`, `store`, `settings`, ...) is read-only: it changes only through these methods, which
    write to the store first, so memory and disk never disagree.
    """

    def __init__(
        self,
        store: Store,
        *,
        settings: EngineSettings | None = None,
        counter: Counter | None = None,
        summarizer: Summarizer | None = None,
        lock_timeout: float = 10.0,
        now: datetime | None = None,
    ) -> None:
        """Open the workspace in `store`, waiting up to `lock_timeout` seconds (``float("inf")``: as long as
        it takes) for another process to release it. Raises `WorkspaceError` for a bad `lock_timeout`.

        With `CompactSettings.background` each summary is written ahead, in a thread of the session's own,
        from the step the context passes `CompactSettings.soft_threshold`: at the threshold it is applied
        without waiting for the summarizer (see `ctxkeep.engine.prepare`), which then runs outside the
        caller's thread.
        """
        if not isinstance(lock_timeout, int | float) or isinstance(lock_timeout, bool) or not lock_timeout >= 0:
            raise WorkspaceError(
                "lock_timeout must be the seconds to wait for another process to release the workspace,"
                f' 0 or more (float("inf") waits as long as it takes); got {lock_timeout!r}'
            )
        self._setup = engine.Setup.with_defaults(store, settings=settings, counter=counter, summarizer=summarizer)
        self._stack = contextlib.ExitStack()
        # Live-log lines of offloads not yet written: they go with the next append (one durable write per
        # step). Lost in a crash, they cost nothing: the next `prepare` offloads the same results the same way.
        self._pending: list[bytes] = []
        self._key = count_key(self._setup.counter)  # whose counts the live log carries
        # Replaced lines in the live log: the log is rewritten without them when the session closes.
        self._replaced = 0
        # The tokens sent at each step since the last "steps" record, and when the first and last ran: written
        # with the next compaction (or at close), never on their own, so a step costs no write.
        self._steps: list[int] = []
        self._steps_span: tuple[datetime, datetime] | None = None
        # The summary being written ahead (`background`), and the thread that writes it: nothing on disk
        # depends on either, so a crash or a close loses only the work.
        # The generation of the newest compaction record in compactions.jsonl; None until read.
        self._recorded: int | None = None
        self._draft: engine.Draft | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._stack.enter_context(store.lock(lock_timeout))
        try:
            self._state, self._live = self._recover(now or datetime.now().astimezone())
            self._live = replace(self._live, archived=_archived_ids(store, self._state.archive))
        except BaseException:
            self._stack.close()
            raise

    @classmethod
    def open(cls, path: str | Path, *, window: int | None = None, background: bool = False, **kw: Any) -> Session:
        """The session in folder `path` (created when missing). Keyword arguments as for `Session`.

        `window` (the model's context window, tokens) derives every size from it
        (`EngineSettings.for_window`); explicit `settings` win over it. `background` writes summaries ahead
        (`CompactSettings.background`), whatever the settings say.
        """
        if window is not None and kw.get("settings") is None:
            kw["settings"] = EngineSettings.for_window(window)
        if background:
            settings = kw.get("settings") or EngineSettings()
            kw["settings"] = replace(settings, compact=replace(settings.compact, background=True))
        return cls(LocalFolder(path), **kw)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the workspace's lock. Everything is already on disk (and the step counts are noted); a
        summary being written ahead is dropped."""
        try:
            self._drop_draft()
            self._write_log()
            self._note_steps()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=False, cancel_futures=True)
            self._stack.close()

    # --- reading ------------------------------------------------------------------

    @property
    def live(self) -> Live:
        """The live context as committed."""
        return self._live

    @property
    def store(self) -> Store:
        """Where the workspace is kept."""
        return self._setup.store

    @property
    def settings(self) -> EngineSettings:
        """The settings of every pass."""
        return self._setup.settings

    @property
    def counter(self) -> Counter:
        """The token counter."""
        return self._setup.counter

    @property
    def summarizer(self) -> Summarizer:
        """What writes the summary."""
        return self._setup.summarizer

    @property
    def messages(self) -> Sequence[Message]:
        """The live messages, oldest first."""
        return self._live.messages

    @property
    def summary(self) -> str | None:
        """The current summary (archive guide included), or None before the first compaction."""
        return self._live.summary

    # --- changing -------------------------------------------------------------------

    def add(self, messages: Iterable[object] | object) -> None:
        """Append messages to the live context, durably.

        Takes ctxkeep `Message`s, OpenAI chat dicts or the openai SDK's message objects, Anthropic message
        dicts and Responses-API items (`ctxkeep.inputs`); those get ids from their content, past the ids
        the workspace holds. Raises `MessageError` before writing anything: for what is none of these, an
        id already live or archived, a result without its call (`ctxkeep.live.add` has the rules), or an
        `extra` value JSON cannot hold. Lone UTF-16 surrogates (Node writes them; no UTF-8 file can hold
        them) are replaced by U+FFFD and the message kept: losing a turn over one broken character would
        be worse.
        """
        self._append(_batch_of(messages, sync_mod.Held(self._live)))

    def sync(self, history: Iterable[object]) -> list[Message]:
        """Add what is new in the host's whole `history` (any kinds `add` takes); returns what was added.

        Idempotent: what the session holds, live or archived (or the system prompt and summary of a
        context it returned), is recognised by content-derived ids and skipped, so syncing the same
        history again, even after reopening, adds nothing. Raises `MessageError`, adding nothing, when
        the history no longer holds what the session has (an earlier message edited or removed).
        """
        entries = inputs.convert(inputs.as_list(history, single=False))
        batch = [e.message for e in sync_mod.new_entries(self._live, entries)]
        self._append(batch)
        return batch

    def _append(self, batch: list[Message]) -> None:
        if not batch:
            return
        # One line per call: a crash mid-append leaves a torn last line, which reopening drops, so a
        # batch (a call and its results, say) is live entirely or not at all. Encoded first, so what
        # is kept in memory is exactly what the line holds.
        live = live_mod.add(self._live, batch, self.counter)  # validates and counts
        try:
            line = livelog.batch_line(batch, live.counts[-len(batch) :])
        except orjson.JSONEncodeError:
            batch = storable(batch)  # surrogates replaced; MessageError for what JSON cannot hold
            live = live_mod.add(self._live, batch, self.counter)
            line = livelog.batch_line(batch, live.counts[-len(batch) :])
        # The offloads of the last steps go first, in the same append: one durable write for the step.
        self.store.append_live(self._state.generation, b"".join(self._pending) + line)
        self._pending.clear()
        self._live = live

    def pin(self, message_id: str) -> None:
        """Never offload nor compact this live message, nor the rest of its tool-call group.

        Raises `PinnedOverBudgetError` when the pins would take more than a compaction can leave them.
        """
        live = live_mod.pin(self._live, message_id, self.settings.compact.compact_threshold)
        self._commit_state(replace(self._state, pinned=live.pinned))
        self._live = live

    def unpin(self, message_id: str) -> None:
        """Let this message (and its tool-call group) be offloaded and compacted again."""
        live = live_mod.unpin(self._live, message_id)
        self._commit_state(replace(self._state, pinned=live.pinned))
        self._live = live

    def prepare(
        self,
        system: str | None = None,
        *,
        tools: Tools = None,
        now: datetime | None = None,
    ) -> Step:
        """Run the pre-reasoning pass and keep its result. Returns the `Step` (its `.context` goes to the model).

        `tools` are the tool schemas the request carries (OpenAI or Anthropic form): they count against
        the window like the system prompt. `now` (default: the local time) names the day's archive file
        when a compaction happens.
        """
        return self._run(system, tools, now, manual=None)

    def compact(
        self,
        focus: str | None = None,
        *,
        system: str | None = None,
        tools: Tools = None,
        now: datetime | None = None,
    ) -> Step:
        """Compact now, whatever the size; `focus` tells the summarizer what matters most."""
        return self._run(system, tools, now, manual=engine.Manual(focus=focus))

    # --- internals --------------------------------------------------------------------

    def _run(self, system: str | None, tools: Tools, now: datetime | None, *, manual: engine.Manual | None) -> Step:
        at = now or datetime.now().astimezone()
        before = self._live
        live = live_mod.with_tools(before, tools, self.counter)
        # Before a compaction, once per cycle: preferences and lessons to the day's log (off by default).
        memory_flush.before_pass(self._setup, live, cycle=self._state.generation, now=at, force=manual is not None)
        step = engine.prepare(live, self._setup, system=system, now=at, manual=manual, draft=self._draft)
        self._steps.append(step.context.tokens)
        self._steps_span = (self._steps_span[0] if self._steps_span else at, at)
        if step.compaction is not None:
            self._commit_compaction(step)
        else:
            self._save_offloads(step.live)
            if step.failure is not None or step.live.failed_at != before.failed_at:
                self._commit_state(replace(self._state, failed_at=step.live.failed_at))
                if step.failure is not None:
                    self._record_failure(step)
        self._live = step.live
        self._draft_ahead(step, at)
        return step

    def _draft_ahead(self, step: Step, now: datetime) -> None:
        """After a step: drop the draft a compaction used or made stale; start one past the soft threshold."""
        done = step.compaction is not None or step.failure is not None
        if done or (self._draft is not None and engine.outgrown(self._draft, step.live, self.settings)):
            self._drop_draft()
        if not self.settings.compact.background or self._draft is not None:
            return
        try:
            ahead = engine.plan(step.live, self.settings, now=now, ahead=True)
        except CtxkeepError as exc:  # pins over budget, say: the threshold's own pass will say so
            log.debug("no summary written ahead: %s", exc)
            return
        if isinstance(ahead, engine.Plan):
            ahead = engine.with_saved_originals(ahead, self.store)
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="ctxkeep-summary")
            future = self._writer.submit(engine.write, self.summarizer, ahead.request)
            self._draft = engine.Draft(plan=ahead, future=future, summary_body=step.live.summary_body)

    def _drop_draft(self) -> None:
        """Forget the draft; a summary still being written is left to finish on its own (nothing waits for it)."""
        draft, self._draft = self._draft, None
        if draft is not None:
            draft.future.cancel()

    def _record_failure(self, step: Step) -> None:
        """Save what the summarizer was asked and answered, and note the failure in the records."""
        failure = step.failure
        assert failure is not None
        name = f"{failure.at.strftime('%Y%m%dT%H%M%S%f')}-{failure.tokens}.json"
        detail = {
            "at": failure.at.isoformat(),
            "reason": failure.reason,
            "tokens": failure.tokens,
            "request": failure.request,
            "response": failure.response,
        }
        self.store.save_failure(name, orjson.dumps(detail, option=orjson.OPT_INDENT_2))
        record = {"kind": "failed", "at": failure.at.isoformat(), "reason": failure.reason, "tokens": failure.tokens}
        usage = asdict(failure.usage) if failure.usage is not None else None
        # `step`: this step's place among those not yet noted (the next "steps" record), for the report's chart.
        self._append_record({**record, "saved": f"{FAILED_DIR}/{name}", "usage": usage, "step": len(self._steps)})

    def _save_offloads(self, after: Live) -> None:
        """Note the results `prepare` offloaded, for the next append (their originals are saved already)."""
        self._pending += [livelog.replace_line(i, after.messages[i], after.counts[i]) for i in after.offloaded]
        self._replaced += len(after.offloaded)

    def _write_log(self) -> None:
        """Rewrite the live log as the messages are now, when offloads replaced lines in it (or are still to be
        written): the next open reads each message once, with its count. A disk that refuses loses nothing."""
        if not self._replaced:
            return
        live = self._live
        try:
            self.store.start_live(self._state.generation, livelog.snapshot(live.messages, live.counts, self._key))
        except CtxkeepError as exc:
            log.warning("live log not rewritten; the next open reads it as it is: %s", exc)
            return
        self._pending.clear()
        self._replaced = 0

    def _commit_compaction(self, step: Step) -> None:
        assert step.compaction is not None
        old = self._state
        live = step.live
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
        try:
            self.store.start_live(new.generation, livelog.snapshot(live.messages, live.counts, self._key))
            self.store.commit_state(new.to_bytes())  # the commit point
        except CtxkeepError:
            # Nothing committed: undo the archive append and the next generation's file.
            with contextlib.suppress(CtxkeepError):
                archive_mod.restore(self.store, old.archive)
                self.store.drop_live(new.generation)
            raise
        self._state = new
        self._live = live
        self._pending.clear()  # the new generation's log holds the messages as they are now
        self._replaced = 0
        self._note_steps()  # before the compaction's record: the steps up to and including this one
        self._after_commit(old.generation, step.compaction.at)

    def _note_steps(self) -> None:
        """Append the steps since the last note to the records. Only a count for `ctxkeep report`: a disk that
        refuses it loses the note, with a warning, and nothing else."""
        if not self._steps or self._steps_span is None:
            return
        first, last = self._steps_span
        note = records.steps_record(self._steps, first=first, last=last)
        self._steps, self._steps_span = [], None
        try:
            self._append_record(note)
        except CtxkeepError as exc:
            log.warning("the token counts of %d steps were not noted in the records: %s", len(note["tokens"]), exc)

    def _after_commit(self, old_generation: int | None, now: datetime) -> None:
        """Tidy-up after a commit. A crash or a full disk may stop it half-way; `_recover` redoes it."""
        try:
            self._tidy(old_generation, now)
        except CtxkeepError as exc:
            log.warning("workspace tidy-up postponed to the next open: %s", exc)

    def _tidy(self, old_generation: int | None, now: datetime) -> None:
        state = self._state
        if old_generation is not None and old_generation != state.generation:
            self.store.drop_live(old_generation)
        summary = (state.summary or "").encode()
        if self.store.read_summary() != summary:
            self.store.write_summary(summary)
        if state.last_record is not None:
            if self._recorded is None:  # read once per open: after that, this session is the only writer
                self._recorded = self._last_record_generation() or 0
            if self._recorded != state.last_record["generation"]:
                self._append_record(state.last_record)
                self._recorded = state.last_record["generation"]
        engine.tidy(self._live, self._setup, now)

    def _commit_state(self, state: _State) -> None:
        self.store.commit_state(state.to_bytes())
        self._state = state

    def _append_record(self, record: dict[str, Any]) -> None:
        self.store.append_record(orjson.dumps(record) + b"\n")

    def _last_record_generation(self) -> int | None:
        raw = self.store.read_records()
        for line in reversed(raw.splitlines()):
            with contextlib.suppress(orjson.JSONDecodeError):
                rec = orjson.loads(line)
                if isinstance(rec, dict) and rec.get("kind") == "compaction":
                    return int(rec["generation"])
        return None

    def _recover(self, now: datetime) -> tuple[_State, Live]:
        raw = self.store.read_state()
        if raw is None:
            if self.store.live_generations() or self.store.archive_files():
                where = self.store.where(STATE)
                raise WorkspaceError(
                    f"{where} is missing but the workspace holds live or archived messages;"
                    " restore state.json from a backup rather than start over",
                    path=where,
                )
            state = _NEW
            self.store.commit_state(state.to_bytes())
            self.store.append_live(0, livelog.header(self._key))
        else:
            state = _State.from_bytes(raw, self.store.where(STATE))
        self._state = state
        archive_mod.restore(self.store, state.archive)
        for generation in self.store.live_generations():
            if generation != state.generation:
                self.store.drop_live(generation)
        with livelog.collector_paused():
            read = self._read_live(state.generation, now)
            messages = read.messages
            trusted = self._key is not None and read.counter == self._key
            counts = self._counts(read) if trusted else self.counter.count_each(messages)
            live = live_mod.add(
                Live(
                    summary=state.summary,
                    summary_body=state.summary_body,
                    summary_tokens=summary_tokens_of(state.summary, self.counter),
                    archive=state.archive,
                    failed_at=state.failed_at,
                ),
                messages,
                self.counter,
                counts=counts,
            )
        held = live_mod.message_ids(live)  # the index `add` built: no pass over the messages per pin
        live = replace(live, pinned=frozenset(p for p in state.pinned if p in held))
        self._live = live
        self._restore_originals(read.replaced)
        # A log with replaced lines, or counts of another counter, is rewritten: the next open reads it fast.
        self._replaced = len(read.replaced) + (0 if trusted or self._key is None else 1)
        self._write_log()
        self._after_commit(None, now)
        return state, live

    def _counts(self, read: livelog.Read) -> list[int]:
        """The saved counts of the messages read, the missing ones counted now."""
        missing = [m for m, n in zip(read.messages, read.counts, strict=True) if n is None]
        fresh = iter(self.counter.count_each(missing))
        return [next(fresh) if n is None else n for n in read.counts]

    def _restore_originals(self, replaced: list[tuple[Message, Message]]) -> None:
        """Rewrite the originals a power loss cut short (see `LocalFolder.save_original`), from the full texts
        the live log still holds."""
        texts = saved_texts(replaced)
        if not texts:
            return
        sizes = {f.name: f.size for f in self.store.originals()}
        for name, data in texts.items():
            if sizes.get(name) != len(data):
                log.warning("%s was cut short or lost (a power loss?); rewritten from the live log", name)
                self.store.save_original(name, data)

    def _read_live(self, generation: int, now: datetime) -> livelog.Read:
        raw = self.store.read_live(generation)
        end = raw.rfind(b"\n") + 1
        if end < len(raw):
            # A line cut short by a crash: its `add` never returned, so it was never part of the context.
            self.store.cut_live(generation, end)
            raw = raw[:end]
        read = livelog.Read()
        lines = raw.split(b"\n")[:-1]
        torn: list[tuple[int, int]] = []  # (line number, bytes dropped)
        for lineno, line in enumerate(lines, 1):
            if not line or line.isspace():  # (strip would copy every line)
                continue
            try:
                livelog.apply(read, line)
            except (orjson.JSONDecodeError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                # A failed append that could not be cut back leaves the start of a line, and the next
                # append goes on after it: that `add` raised, the record glued to it was acknowledged.
                at = livelog.glued_record(line)
                if at is None:
                    where = f"{self.store.where(live_name(generation))}:{lineno}"
                    raise WorkspaceError(f"{where}: damaged live message ({exc})", path=where) from exc
                livelog.apply(read, line[at:])
                lines[lineno - 1] = line[at:]
                torn.append((lineno, at))
        if torn:
            self._repair_live(generation, b"".join(line + b"\n" for line in lines), torn, now)
        return read

    def _repair_live(self, generation: int, data: bytes, torn: list[tuple[int, int]], now: datetime) -> None:
        """Rewrite a live log without the torn pieces found in it, and note each in the records."""
        name = live_name(generation)
        for lineno, dropped in torn:
            log.warning(
                "%s:%d: dropped %d bytes of a torn line a failed write left; no acknowledged message was in them",
                self.store.where(name),
                lineno,
                dropped,
            )
        try:
            self.store.start_live(generation, data)
            for lineno, dropped in torn:
                note = {"kind": "repaired", "at": now.isoformat(), "file": name, "line": lineno, "dropped": dropped}
                self._append_record(note)
        except CtxkeepError as exc:
            log.warning("live log repair postponed to the next open: %s", exc)


def _batch_of(messages: object, taken: Container[str]) -> list[Message]:
    """What `Session.add` was given, as a list of messages; `MessageError` for anything else."""
    if isinstance(messages, Message):
        return [inputs.capped(messages)]  # what `inputs.convert` does to each message of a list
    batch = inputs.convert(messages)
    return [e.message for e in inputs.renumber(batch, taken)]


def _archived_ids(store: Store, archive: Archive) -> frozenset[str]:
    """The ids of the archived messages, read back from the archive files as committed."""
    ids: set[str] = set()
    for name, info in archive.files.items():
        ids.update(ids_in(store.read_archive(name)[: info.bytes]))
    return frozenset(ids)
