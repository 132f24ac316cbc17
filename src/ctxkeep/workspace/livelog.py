"""The live log (``live/<generation>.jsonl``): its lines, how they are written and read back.

    {"v": "ctxkeep-live/1", "counter": KEY}                 first line: whose token counts the lines carry
    {"v": "ctxkeep/1", "id": ..., ..., "n": 412}            one message `add`ed alone, with its token count
    {"v": "ctxkeep-batch/1", "messages": [...], "counts": [...]}   a batch, added (or lost) as one line
    {"v": "ctxkeep-replace/1", "at": 17, "message": {...}, "n": 96}  the offloaded form of live message 17

The counts let a session reopen without recounting the history, when the counter that wrote them is
the one reading (`ctxkeep.tokens.count_key`); lines without one, or under another counter's header,
are counted again. A `snapshot` is the log rewritten as the messages are now (no replaced lines), what
a session writes after a compaction and when it closes or opens a log holding replaced lines.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import orjson

from ctxkeep.codec import check_finite, message_from_dict, message_to_dict
from ctxkeep.messages import Message

LIVE_MARK = "ctxkeep-live/1"
REPLACE_MARK = "ctxkeep-replace/1"
BATCH_MARK = "ctxkeep-batch/1"


def header(counter: str | None) -> bytes:
    """The first line of a log whose counts `counter` (a `count_key`, or None: counts not to be reused) gave."""
    return orjson.dumps({"v": LIVE_MARK, "counter": counter}) + b"\n"


def batch_line(batch: Sequence[Message], counts: Sequence[int]) -> bytes:
    """The line of one `add`; `orjson.JSONEncodeError` when a message holds what JSON cannot, `MessageError`
    when it holds NaN or an infinity."""
    if len(batch) == 1:
        line = orjson.dumps({**message_to_dict(batch[0]), "n": counts[0]}) + b"\n"
    else:
        d = {"v": BATCH_MARK, "messages": [message_to_dict(m) for m in batch], "counts": list(counts)}
        line = orjson.dumps(d) + b"\n"
    if b"null" in line:  # where orjson writes NaN and the infinities; else there is none to look for
        check_finite(batch)
    return line


def replace_line(at: int, message: Message, count: int) -> bytes:
    """The line that gives live message `at` its offloaded form."""
    return orjson.dumps({"v": REPLACE_MARK, "at": at, "message": message_to_dict(message), "n": count}) + b"\n"


def snapshot(messages: Sequence[Message], counts: Sequence[int], counter: str | None) -> bytes:
    """A whole log holding `messages` as they are, with their counts."""
    parts = [header(counter)]
    parts += [orjson.dumps({**message_to_dict(m), "n": n}) + b"\n" for m, n in zip(messages, counts, strict=True)]
    return b"".join(parts)


@dataclass(slots=True)
class Read:
    """A log read so far: the messages, their saved counts (None where a line had none), what was replaced."""

    messages: list[Message] = field(default_factory=list)
    counts: list[int | None] = field(default_factory=list)
    # Each offloaded form applied, with the form it replaced (which may hold the full text).
    replaced: list[tuple[Message, Message]] = field(default_factory=list)
    counter: str | None = None  # the header's counter key
    header: bool = False


def apply(read: Read, line: bytes) -> None:
    """Apply one line to `read`; on a malformed line raise (orjson, Value, Type, Key, Index or Attribute
    error) and leave `read` as it was."""
    d = orjson.loads(line)
    mark = d.get("v")
    if mark == REPLACE_MARK:
        at = int(d["at"])
        if at < 0:
            raise IndexError(f"position {at}")
        before = read.messages[at]
        after = message_from_dict(d["message"])
        read.messages[at] = after
        read.counts[at] = _count(d.get("n"))
        read.replaced.append((before, after))
    elif mark == BATCH_MARK:
        batch = [message_from_dict(m) for m in d["messages"]]
        counts = d.get("counts")
        ok = isinstance(counts, list) and len(counts) == len(batch)
        read.messages += batch
        read.counts += [_count(n) for n in counts] if ok else [None] * len(batch)
    elif mark == LIVE_MARK:
        counter = d.get("counter")
        read.counter = counter if isinstance(counter, str) else None
        read.header = True
    else:
        read.messages.append(message_from_dict(d))
        read.counts.append(_count(d.get("n")))


def count(data: bytes) -> int:
    """The messages a live log holds, up to the first line that cannot be read (a torn last line, which
    reopening drops): for a count shown to people, without building the messages."""
    held = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            d = orjson.loads(line)
            mark = d.get("v")
            if mark == BATCH_MARK:
                held += len(d["messages"])
            elif mark not in (REPLACE_MARK, LIVE_MARK):
                held += 1
        except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
            break
    return held


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector from walking a whole log's messages while they are read back.

    Reading makes about a million objects that all stay alive (50,000 messages); each time their number
    passes a threshold the collector walks the young ones again, and then again as they age: together
    longer than the reading itself. So it is paused while reading, and then every object goes straight
    to the oldest generation (`gc.freeze` then `gc.unfreeze`: two list splices, nothing walked), which
    only the collector's rare full passes look at, as they would after surviving two collections.
    Nothing is freed later than a full pass would free it. The collector is enabled again after
    (unless it was off already).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was:
            gc.enable()


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def glued_record(line: bytes) -> int | None:
    """Where a whole record starts in a line that begins with a torn one; None when none does."""
    at = line.find(b"{", 1)
    while at > 0:
        with contextlib.suppress(orjson.JSONDecodeError):
            if isinstance(orjson.loads(line[at:]), dict):
                return at
        at = line.find(b"{", at + 1)
    return None
