"""Offload big tool results to files (the seed's ``compact_tool_result``), and clean the files up.

A command's output the user ran themselves (pi's ``!command``, Codex's user shell command, Claude Code's
``<bash-stdout>``) arrives as user text but is as big as any result: it is offloaded the same way
(`is_output`). What the user typed is never cut.

A result over its limit (`recent_max_bytes` while among the `recent_n` newest, `old_max_bytes`
after) keeps its head and a notice; its full text is saved to ``tool_result/<uuid>.txt`` first. Its
visible text changes at most twice (when cut, when aged), which keeps prompt caches warm; the
`OffloadRecord` in the result's extra makes `offload` idempotent and tells `retention.cleanup` which
files a live message still needs. The big arguments of old tool calls (a whole file in a write) are cut the
same way, once. An output too big to handle whole is capped and saved in pieces (`ctxkeep.bigoutput`).
The stages, the per-tool policies and the choices made: docs/offload.md.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import arguments, bigoutput
from .bigoutput import Capped, capped_over, encode, measured, over_bytes, over_cap, prefix, save, within_cap
from .messages import ImageBlock, Message, TextBlock, ToolCall
from .origin import origin
from .originals import OffloadRecord as OffloadRecord
from .originals import Stage
from .originals import is_original as is_original
from .originals import original_file as original_file
from .originals import original_name as original_name
from .originals import record_in as record_in
from .originals import record_of as record_of
from .reasoning import THINKING_KEY, saved_thinking
from .settings import OffloadSettings, PolicyKind, ToolPolicy
from .store import OFFLOAD_KEY as OFFLOAD_KEY
from .store import TOOL_RESULT_DIR as TOOL_RESULT_DIR
from .store import Store

# An output over this many bytes is cut as it is added (`offload_new`), before it is counted or held, not at
# the next step: its original is written once, to its file, and the live log holds the cut form only.
# Below it the log keeps the full text until a compaction, which spares a sync of each saved original.
SAVE_AT_ONCE_BYTES = 1_048_576

_log = logging.getLogger("ctxkeep")


def is_output(message: Message) -> bool:
    """True for a message `offload` may cut: a tool result, or a user message that is a command's output.

    Which user messages are command outputs is what the importers mark and `ctxkeep.origin`
    tells apart (pi's ``bashExecution``, ``<user_shell_command>``, ``<bash-stdout>``...): one classifier
    for the summary and for offloading, so a message the user typed is never cut.
    """
    if message.role == "tool":
        return True
    return message.role == "user" and origin(message) == "command_output"


@dataclass(frozen=True, slots=True)
class _Output:
    """What `offload` reads of a message it may cut: a tool result, or a command's output sent as user text."""

    content: str | tuple[TextBlock | ImageBlock, ...]
    # Where the offload record is kept: the result's extra, or the user message's.
    extra: Mapping[str, Any]
    # The call id of a result (it picks the tool's policy and names the saved file); "" for a command's output.
    call_id: str
    is_error: bool
    # How a warning names it.
    label: str
    # The per-message cap for a new result `inputs.capped` left whole (`offload_new`): its text past it is
    # saved and cut as capped. None at a step: what is live was capped as it came in, under its own cap.
    cap: int | None = None

    @property
    def text(self) -> str:
        """The text parts joined by newlines, as `ToolResult.text` and `Message.text` both join them."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(_texts(self.content))


def _output(message: Message) -> _Output | None:
    """The cuttable part of a tool message or of a user message (None when it holds more than text and images)."""
    result = message.tool_result
    if result is not None:
        return _Output(result.content, result.extra, result.call_id, result.is_error, f"tool result {result.call_id}")
    if message.role != "user":
        return None
    parts = tuple(b for b in message.content if isinstance(b, TextBlock | ImageBlock))
    if len(parts) != len(message.content):
        return None
    extra = message.extra
    # pi records how the user's command ended; an error output's notice says to read its end too.
    code = extra.get("pi:exitCode")
    failed = extra.get("pi:cancelled") is True or (isinstance(code, int) and not isinstance(code, bool) and code != 0)
    return _Output(parts, extra, "", failed, f"command output {message.id}")


def _rebuilt(message: Message, content: str | tuple[TextBlock | ImageBlock, ...], record: OffloadRecord) -> Message:
    """`message` with its cut content and the record of the cut (other extra keys, is_error and exit_code kept)."""
    result = message.tool_result
    if result is not None:
        new = replace(result, content=content, extra={**result.extra, OFFLOAD_KEY: record.to_dict()})
        return replace(message, content=(new,))
    parts = (TextBlock(text=content),) if isinstance(content, str) else content
    return replace(message, content=parts, extra={**message.extra, OFFLOAD_KEY: record.to_dict()})


def saved_texts(replaced: Iterable[tuple[Message, Message]]) -> dict[str, bytes]:
    """What the first cuts among `replaced` (each message before and after an offload) saved: file -> bytes.

    A message before its first cut holds the full text its original keeps, so the file can be written
    again from it (a session does, when a power loss cut one short).
    """
    out: dict[str, bytes] = {}
    for before, after in replaced:
        if before.role == "assistant":
            out.update(_saved_arguments(before, after))
            note = after.extra.get(THINKING_KEY)
            if THINKING_KEY not in before.extra and isinstance(note, Mapping) and isinstance(note.get("file"), str):
                out[note["file"]] = saved_thinking(before)
            continue
        old = _output(before)
        if old is None or OFFLOAD_KEY in old.extra or before.role != after.role:
            continue
        try:
            record = record_in(after)
        except ValueError:
            continue
        data = encode(old.text)
        if record is not None and record.original_bytes == len(data):
            out[record.file] = data
    return out


def _saved_arguments(before: Message, after: Message) -> dict[str, bytes]:
    """What the first cut of the calls of `before` (now `after`) saved: file -> the call's full arguments."""
    out: dict[str, bytes] = {}
    full = {c.id: c for c in before.tool_calls if OFFLOAD_KEY not in c.extra}
    for call in after.tool_calls:
        raw = call.extra.get(OFFLOAD_KEY)
        if raw is None or call.id not in full:
            continue
        try:
            record = OffloadRecord.from_dict(raw)
        except ValueError:
            continue
        data = encode(full[call.id].arguments)
        if record.original_bytes == len(data):
            out[record.file] = data
    return out


# --- offload -------------------------------------------------------------------------


def offload(
    messages: Sequence[Message],
    settings: OffloadSettings,
    store: Store,
    *,
    tool_names: Mapping[str, str] | None = None,
    new: bool = False,
    recent_n: int | None = None,
) -> list[Message]:
    """The messages with big tool results and command outputs (`is_output`) cut, their full texts saved in `store`.

    The arguments of old calls (every result answering them past `recent_n`) are cut too when over
    `old_max_bytes` (`ctxkeep.arguments`), their full text saved. Same length and order as `messages`;
    a message that does not change is returned as the same object. A tool's name (which picks its
    policy) comes from `tool_names` (call id -> name), else from the assistant call in `messages`; a
    command's output takes the default policy and counts
    among the results for `recent_n`. Every file is written before any message changes: when
    `store` raises `StorageError`, the error propagates and nothing is returned. File names derive
    from the message and call ids, so a retry rewrites the same files. `new` (`offload_new`): the messages
    are coming in, and a result's one text over `max_message_chars` is saved and cut as capped. `recent_n`, when
    given, stands for the settings' (a step passes one of its own without making new settings each time).
    """
    if not isinstance(settings, OffloadSettings):
        raise TypeError(f"offload needs an OffloadSettings; got {type(settings).__name__}")
    names = _names(messages, tool_names)
    outputs = [i for i, m in enumerate(messages) if is_output(m)]
    recent = set(outputs[max(0, len(outputs) - (settings.recent_n if recent_n is None else recent_n)) :])

    changed: dict[int, Message] = {}
    writes: dict[str, bytes | str | Capped] = {}
    for i in outputs:
        message = messages[i]
        out = _output(message)
        if out is None:
            continue
        if new:
            out = replace(out, cap=settings.max_message_chars)
        name = names.get(out.call_id) if out.call_id else None
        stage: Stage = "recent" if i in recent else "old"
        plan = _plan(message, out, stage, _policy_of(settings.policies, name), settings, store)
        if plan is not None:
            changed[i], write = plan
            if write is not None:
                writes[write[0]] = write[1]

    for i in _old_calls(messages, recent):
        planned = _plan_arguments(messages[i], settings.old_max_bytes, store)
        if planned is not None:
            changed[i], files = planned
            writes.update(files)

    for name, data in writes.items():
        save(store, name, data)
    if changed:
        _log.debug("offloaded %d outputs (%d files written)", len(changed), len(writes))
    return [changed.get(i, m) for i, m in enumerate(messages)]


def offload_new(
    messages: Sequence[Message], settings: OffloadSettings, store: Store, *, tool_names: Mapping[str, str]
) -> list[Message]:
    """The messages of one `add` with their outputs cut as new results are (`offload` with all of them recent),
    when one of them is over `SAVE_AT_ONCE_BYTES` or the cap (`max_message_chars`); else `messages` as they are.

    A result over the cap (left whole by `inputs.capped` with `cut_later`) has its capped form saved and cut
    in one go; one no cut takes is capped as it is.

    The originals are durable before this returns (`sync_originals`, where the store has it): the live log
    will hold only the cut forms, so nothing but the saved file has the full text. `tool_names` maps the
    call ids of the live calls to their tools' names (`Live.result_tools`).
    """
    outputs = [m for m in messages if is_output(m)]
    cap = settings.max_message_chars
    if not any(
        over_bytes(out.text, SAVE_AT_ONCE_BYTES) or over_cap(out.content, cap)
        for m in outputs
        if (out := _output(m)) is not None
    ):
        return list(messages)
    done = offload(messages, settings, store, tool_names=tool_names, new=True, recent_n=len(outputs))
    done = [within_cap(m, cap) if m is before else m for before, m in zip(messages, done, strict=True)]
    sync = getattr(store, "sync_originals", None)  # an optional method: a store in memory has nothing to sync
    if callable(sync) and any(a is not b for a, b in zip(messages, done, strict=True)):
        sync()
    return done


@functools.lru_cache(maxsize=4096)
def _policy_of(policies: tuple[ToolPolicy, ...], name: str | None) -> PolicyKind:
    """`OffloadSettings.policy_for` of `name` under `policies`, read once per pair: matching a name against every
    pattern took 7 us for a name no policy takes, a few times a step."""
    return OffloadSettings(policies=policies).policy_for(name)


def _old_calls(messages: Sequence[Message], recent: set[int]) -> list[int]:
    """Positions of the assistant messages whose calls are old: every result answering them is old.

    Results directly follow their call (`ctxkeep.live.add` refuses any other order), so those are the
    tool messages right after it; a call still waiting for its result is not old.
    """
    old: list[int] = []
    for i, message in enumerate(messages):
        if message.role != "assistant" or not message.tool_calls:
            continue
        j = i + 1
        while j < len(messages) and messages[j].role == "tool":
            j += 1
        if j > i + 1 and not any(k in recent for k in range(i + 1, j)):
            old.append(i)
    return old


def arguments_excess(message: Message, limit: int) -> int:
    """The bytes an assistant message's call arguments (not cut yet) take past `limit` each: about what a cut frees."""
    return sum(arguments.excess(c, limit) for c in message.tool_calls if OFFLOAD_KEY not in c.extra)


def _plan_arguments(message: Message, limit: int, store: Store) -> tuple[Message, dict[str, bytes]] | None:
    """The message with its big call arguments cut, and the files to write (each call's full arguments), or None.

    A call's arguments change once, when the call is old (there is no "recent" cut: the newest calls are
    what the agent just did, and a cut before it ever sees them would hide its own work).
    """
    cut: dict[str, ToolCall] = {}
    writes: dict[str, bytes] = {}
    for call in message.tool_calls:
        if OFFLOAD_KEY in call.extra or not arguments.excess(call, limit):
            continue
        data = encode(call.arguments)
        file = original_name(message.id, call.id)
        text = arguments.cut(call.arguments, limit, store.where(file))
        if len(encode(text)) >= len(data):
            continue  # nothing to free (small values only): left as it is, so a prompt cache keeps it
        lines = _count_lines(data)
        record = OffloadRecord(
            file=file,
            stage="old",
            policy="default",
            original_bytes=len(data),
            original_lines=lines,
            kept_bytes=0,
            next_line=1,
        )
        writes[file] = data
        cut[call.id] = replace(call, arguments=text, extra={**call.extra, OFFLOAD_KEY: record.to_dict()})
    if not cut:
        return None
    content = tuple(cut.get(b.id, b) if isinstance(b, ToolCall) else b for b in message.content)
    return replace(message, content=content), writes


def _names(messages: Sequence[Message], given: Mapping[str, str] | None) -> dict[str, str]:
    names = {call.id: call.name for m in messages if m.role == "assistant" for call in m.tool_calls}
    if given:
        names.update(given)
    return names


def _plan(
    message: Message,
    result: _Output,
    stage: Stage,
    policy: PolicyKind,
    settings: OffloadSettings,
    store: Store,
) -> tuple[Message, tuple[str, bytes | str | Capped] | None] | None:
    """The new message and the file to write, or None when the message stays as it is."""
    raw = result.extra.get(OFFLOAD_KEY)
    if raw is not None:
        try:
            record = OffloadRecord.from_dict(raw)
        except ValueError as exc:
            _log.warning("%s left as it is: %s", result.label, exc)
            return None
        if record.stage == "old" or stage == "recent":
            return None
        if not over_bytes(result.text, settings.old_max_bytes):
            return None  # small enough already: left as it is, so a prompt cache keeps it
        recut = _age(result, record, settings, store)
        return None if recut is None else (_rebuilt(message, *recut), None)

    text = result.text
    cap = result.cap
    too_long = cap is not None and over_cap(result.content, cap)
    if policy == "file_read" and stage == "recent" and not too_long:
        return None
    limit = settings.recent_max_bytes if stage == "recent" else settings.old_max_bytes
    if policy == "browser":
        if not text:
            return None
        if stage == "old":
            if not over_bytes(text, settings.old_max_bytes):
                return None  # a small page is left as it is, so a prompt cache keeps it
            limit = 0
    elif not (capped_over(text, cap, limit) if cap is not None and too_long else over_bytes(text, limit)):
        return None

    original: bytes | str | Capped
    if too_long or len(text) > bigoutput.PIECE:
        # Measured and saved in pieces: the head needs only the first `limit` bytes and one more (`_head`).
        original = Capped(text, cap) if cap is not None and too_long else text
        if isinstance(original, Capped):
            _log.warning("a tool message had texts over %s characters: their middle was dropped", f"{cap:,}")
        size, lines = measured(original)
        first = encode(prefix(original, limit + 1))[: limit + 1]
    else:
        data = original = first = encode(text)
        size, lines = len(data), _count_lines(data)
    file = original_name(message.id, result.call_id)
    widest = OffloadRecord(
        file=file,
        stage=stage,
        policy=policy,
        original_bytes=size,
        original_lines=lines,
        kept_bytes=size,
        next_line=lines + 1,
    )
    head, record, notice = _cut(first, limit, widest, store.where(file), is_error=result.is_error)
    return _rebuilt(message, _content(result.content, _decode(head), notice), record), (file, original)


def _age(
    result: _Output, record: OffloadRecord, settings: OffloadSettings, store: Store
) -> tuple[str | tuple[TextBlock | ImageBlock, ...], OffloadRecord] | None:
    """A result cut when recent, cut again from its kept head now that it is old; same original file.

    The original file is not read (it may be large, or gone): the kept head is a prefix of the
    original, so its line numbers are the original's.
    """
    data = encode(result.text)
    kept = record.kept_bytes
    # The visible text is head + "\n" + notice (or the notice alone): check before trusting kept_bytes.
    fits = kept == 0 or (len(data) > kept and data[kept] == ord("\n"))
    head = _decode(data[:kept]) if fits else ""
    base = _without_notice(result.content)
    if not fits or (not isinstance(base, str) and "\n".join(_texts(base)) != head):
        _log.warning("%s left as it is: its text no longer matches its offload record", result.label)
        return None
    limit = 0 if record.policy == "browser" else settings.old_max_bytes
    widest = replace(record, stage="old", kept_bytes=record.original_bytes, next_line=record.original_lines + 1)
    new_head, new_record, notice = _cut(data[:kept], limit, widest, store.where(record.file), is_error=result.is_error)
    content = _content(head if isinstance(base, str) else base, _decode(new_head), notice)
    return content, new_record


# --- cutting -------------------------------------------------------------------------


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def _count_lines(data: bytes) -> int:
    """Lines as an editor numbers them: a last line without a newline counts too."""
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _head(data: bytes, budget: int) -> bytes:
    """The prefix of `data` to keep within `budget` bytes: whole lines, or mid-line when those keep too little."""
    if len(data) <= budget:
        return data
    end = max(budget, 0)
    while end > 0 and data[end] & 0xC0 == 0x80:  # never inside a UTF-8 character
        end -= 1
    newline = data.rfind(b"\n", 0, end)
    if newline >= 0 and (newline + 1) * 2 >= end:
        return data[: newline + 1]
    return data[:end]


def _cut(
    data: bytes, limit: int, widest: OffloadRecord, location: str, *, is_error: bool
) -> tuple[bytes, OffloadRecord, str]:
    """A head of `data` (a prefix of the original) such that head, newline and notice fit in `limit` bytes.

    `widest` is the record with the largest numbers the notice can show (everything kept); the
    head, the final record and the notice are returned.
    """
    # Numbers in the notice only shrink from those of `widest`, so this is the most the notice can take.
    longest = _truncated_notice(widest, location, shown=widest.next_line, partial=True, is_error=is_error)
    reserve = len(encode(longest)) + 1
    head = _head(data, limit - reserve) if limit > reserve else b""
    partial = bool(head) and not head.endswith(b"\n") and len(head) < widest.original_bytes
    record = replace(widest, kept_bytes=len(head), next_line=head.count(b"\n") + 1)
    return head, record, _notice(record, location, partial=partial, is_error=is_error)


_ERROR_HINT = "; this is an error output: read its last lines too, the error is often at the end"


def _notice(record: OffloadRecord, location: str, *, partial: bool, is_error: bool) -> str:
    """The line that follows the kept head: what was kept, where the full text is, where to read on."""
    size = f"{record.original_bytes:,} bytes, {_lines(record.original_lines)}"
    hint = _ERROR_HINT if is_error else ""
    if record.kept_bytes >= record.original_bytes:
        return f"[ctxkeep: this output ({size}) is also saved in {location}{hint}]"
    if record.kept_bytes == 0:
        return f"[ctxkeep: output offloaded ({size}) to {location}; read it from line 1{hint}]"
    shown = record.next_line if partial else record.next_line - 1
    return _truncated_notice(record, location, shown=shown, partial=partial, is_error=is_error)


def _truncated_notice(record: OffloadRecord, location: str, *, shown: int, partial: bool, is_error: bool) -> str:
    cut = f", line {record.next_line:,} cut short" if partial else ""
    return (
        f"[ctxkeep: output truncated, showing {record.kept_bytes:,} of {record.original_bytes:,} bytes"
        f" ({'line 1' if shown == 1 else f'lines 1-{shown:,}'} of {record.original_lines:,}{cut});"
        f" the full output is in {location},"
        f" read from line {record.next_line:,}{_ERROR_HINT if is_error else ''}]"
    )


def _lines(n: int) -> str:
    return "1 line" if n == 1 else f"{n:,} lines"


def _content(
    base: str | tuple[TextBlock | ImageBlock, ...], head: str, notice: str
) -> str | tuple[TextBlock | ImageBlock, ...]:
    """New content: `head` (a prefix of `base`'s text) laid over base's text parts, images kept, then the notice.

    The new `ToolResult.text` is always ``head + "\\n" + notice``, or the notice alone when the head
    is empty, so a later cut finds the head again from its byte size.
    """
    if isinstance(base, str):
        return f"{head}\n{notice}" if head else notice
    parts: list[TextBlock | ImageBlock] = []
    at = 0  # where the next text part starts in "\n".join(text parts)
    for part in base:
        if isinstance(part, ImageBlock):
            parts.append(part)
            continue
        # A part starting right at the end of the head still counts when the head ends with the
        # newline that joins it to the previous part: an empty piece keeps that newline.
        if at < len(head) or 0 < at == len(head):
            piece = head[at : at + len(part.text)]
            parts.append(part if piece == part.text else replace(part, text=piece))
        at += len(part.text) + 1
    parts.append(TextBlock(text=notice))
    return tuple(parts)


def _without_notice(content: str | tuple[TextBlock | ImageBlock, ...]) -> str | tuple[TextBlock | ImageBlock, ...]:
    """A cut result's content with its notice (the last text part) taken off; a string is returned as is."""
    if isinstance(content, str):
        return content
    last = max((i for i, p in enumerate(content) if isinstance(p, TextBlock)), default=-1)
    return tuple(p for i, p in enumerate(content) if i != last)


def _texts(parts: Iterable[TextBlock | ImageBlock]) -> list[str]:
    return [p.text for p in parts if isinstance(p, TextBlock)]
