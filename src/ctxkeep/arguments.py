"""Cut a tool call's arguments: its big string values keep their head and a note; the JSON stays an object.

A file write, an edit or a patch carries the whole text in its call's arguments, and those are sent with
every request for as long as the call is live: most of an agent's output tokens. Once the call is old
(`ctxkeep.offload.offload`), its arguments are cut like a result: the full JSON is saved first, and each
big string value keeps its head and a note saying where the rest is. Keys, numbers and small strings stay,
so the arguments are still the valid JSON object providers require, and the model still sees which file
it wrote.
"""

from __future__ import annotations

import json
from typing import Any

from .messages import ToolCall

# A value smaller than this is never cut: its note would take about as much as it frees.
_SMALL = 400


def excess(call: ToolCall, limit: int) -> int:
    """The bytes of the call's arguments (UTF-8) past `limit`: about what cutting them frees (0: none)."""
    text = call.arguments
    if len(text) * 4 <= limit:  # a character takes at most 4 bytes
        return 0
    return max(0, len(text.encode("utf-8", "surrogatepass")) - limit)


def as_object(arguments: str) -> dict[str, Any]:
    """`arguments` (JSON text) as the object they hold; anything else (a model's broken JSON, a list) as
    ``{"arguments": <their text>}``, as `ToolCall.input_object` reads them."""
    try:
        value: Any = json.loads(arguments)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's json follows
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": arguments}


def cut(arguments: str, limit: int, location: str) -> str:
    """`arguments` (JSON text) with its big string values cut to heads and notes, so the whole fits about `limit` bytes.

    Arguments that are not a JSON object (a model's broken JSON) become ``{"arguments": <head and note>}``,
    as `ToolCall.input_object` reads them.
    """
    value = as_object(arguments)
    sizes = [_size(s) for s in _strings(value)]
    big = sorted((n for n in sizes if n > _SMALL), reverse=True)
    if not big:
        return _dump(value)
    room = limit - (_size_of(value) - sum(big))  # what the big values may take together
    cap = _cap(big, room)
    return _dump(_shrunk(value, cap, location))


def _cap(sizes: list[int], room: int) -> int:
    """The largest size each of `sizes` (largest first) may keep so that together they take at most `room`.

    The biggest values are cut to one cap and the others kept whole (water-filling): one big file in a
    call with a short comment loses the file's tail, never the comment.
    """
    tail = sum(sizes)
    if tail <= room:
        return sizes[0]
    for i in range(1, len(sizes) + 1):
        tail -= sizes[i - 1]
        cap = (room - tail) // i
        if i == len(sizes) or cap >= sizes[i]:
            return max(0, cap)
    return 0  # not reached: the last round returns


def _shrunk(value: Any, cap: int, location: str) -> Any:
    if isinstance(value, str):
        return _head_and_note(value, cap, location) if _size(value) > max(cap, _SMALL) else value
    if isinstance(value, dict):
        return {k: _shrunk(v, cap, location) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrunk(v, cap, location) for v in value]
    return value


def _head_and_note(text: str, cap: int, location: str) -> str:
    """A head of `text` and the note, about `cap` bytes as a JSON string; the note alone when only it fits."""
    size = len(text.encode("utf-8", "surrogatepass"))
    widest = _note(size, size, location)
    budget = cap - _size(widest) - 1
    if budget <= 0:
        return _note(0, size, location)
    end = budget
    # JSON escapes make a value bigger than its text: shorten until the head fits as JSON.
    while end > 0 and _size(text[:end]) > budget:
        end -= max(1, _size(text[:end]) - budget)
    newline = text.rfind("\n", 0, end)
    if newline >= 0 and (newline + 1) * 2 >= end:  # whole lines, unless they keep less than half
        end = newline + 1
    head = text[:end]
    return f"{head}\n{_note(len(head.encode('utf-8', 'surrogatepass')), size, location)}"


def _note(kept: int, size: int, location: str) -> str:
    shown = f"showing the first {kept:,} of {size:,} bytes" if kept else f"{size:,} bytes"
    return f"[ctxkeep: this value was cut ({shown}); the call's full arguments (JSON) are in {location}]"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _size(text: str) -> int:
    """Bytes a string takes in the arguments' JSON text (quotes and escapes included)."""
    return len(_dump(text).encode("utf-8", "surrogatepass"))


def _size_of(value: Any) -> int:
    return len(_dump(value).encode("utf-8", "surrogatepass"))
