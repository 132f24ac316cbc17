"""The last resort for one message too big for the context: its head and tail kept, with a note between.

A compaction keeps the newest group whole. When a single message there is bigger than the window
allows (a pasted log, a huge answer), the compaction cannot bring the context under the threshold, and
the request would go over the window. Then (`ctxkeep.aging.age_all`) the text of such a message keeps
its head and its tail, the end being where an error or a question usually is; its full text is saved
first, like an offloaded output, and the note says where. A call's arguments too big (a whole file in a
write) are cut the same way inside their biggest string value, so they stay the JSON object providers
require, with the call's id and tool name as they were (`cut_arguments`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .arguments import as_object
from .messages import Message, TextBlock, ThinkingBlock, ToolCall, make_id
from .store import OFFLOAD_KEY, TOOL_RESULT_DIR, Store

# Where a message cut so notes the file holding its full text.
CUT_KEY = "ctxkeep_cut"
# ... and the file holding the full text of its unsigned thinking, cut so.
THINKING_CUT_KEY = "ctxkeep_thinking_cut"
# Where a call whose arguments were cut so notes (in the call's `extra`) the file holding them whole.
ARGUMENTS_CUT_KEY = "ctxkeep_arguments_cut"


def oversized_name(message_id: str) -> str:
    """The store's name for the full text of a message cut for its size: ``tool_result/<uuid>.txt``."""
    return f"{TOOL_RESULT_DIR}/{make_id(message_id, 'text')}.txt"


def cut_oversized(message: Message, limit: int, store: Store) -> Message | None:
    """`message` with its text cut to about `limit` bytes (head, note, tail), its full text saved; None when it fits.

    Only the text blocks change (they become one, where the first was), and the unsigned thinking blocks
    (`cut_thinking`); images, calls, results and signed thinking stay.
    """
    thought = cut_thinking(message, limit, store)
    message = thought or message
    if len(message.text) * 4 <= limit:  # a character takes at most 4 bytes
        return thought
    data = message.text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return thought
    file = oversized_name(message.id)
    head, note, tail = _cut(data, limit, store.where(file))
    store.save_original(file, data)
    first = next(i for i, b in enumerate(message.content) if isinstance(b, TextBlock))
    block = TextBlock(text=f"{head}{note}{tail}")
    content = tuple(
        block if i == first else b for i, b in enumerate(message.content) if i == first or not isinstance(b, TextBlock)
    )
    return replace(message, content=content, extra={**message.extra, CUT_KEY: {"file": file, "bytes": len(data)}})


def cut_thinking(message: Message, limit: int, store: Store) -> Message | None:
    """`message` with its unsigned thinking cut to about `limit` bytes (head, note, tail), the full text saved; None
    when it has none over `limit`.

    A thinking block in the current tool loop stays with its calls (`ctxkeep.reasoning`), but one that alone takes
    the context over the window would have the request refused. Unsigned (a local model's reasoning, a chat
    format's), it can be cut like a text; a signed one stays whole, since a provider refuses a changed signed
    block (Anthropic checks the signature), and the step's one over-the-window warning says what did not fit.
    """
    at = [
        i
        for i, b in enumerate(message.content)
        if isinstance(b, ThinkingBlock) and b.signature is None and not b.redacted and len(b.text) * 4 > limit
    ]
    data = "\n\n".join(b.text for i, b in enumerate(message.content) if i in at and isinstance(b, ThinkingBlock))
    raw = data.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return None
    file = f"{TOOL_RESULT_DIR}/{make_id(message.id, 'thinking-cut')}.txt"
    head, note, tail = _cut(raw, limit, store.where(file))
    store.save_original(file, raw)
    block = ThinkingBlock(text=f"{head}{note}{tail}")
    content = tuple(block if i == at[0] else b for i, b in enumerate(message.content) if i == at[0] or i not in at)
    extra = {**message.extra, THINKING_CUT_KEY: {"file": file, "bytes": len(raw)}}
    return replace(message, content=content, extra=extra)


def cut_arguments(message: Message, limit: int, store: Store) -> Message | None:
    """`message` with each call's arguments over `limit` bytes cut to about `limit` (head, note, tail of their biggest
    string values), the whole arguments saved first; None when no call's are over `limit`.

    The old cut of a call (`ctxkeep.arguments`) keeps each big value's head and never cuts a value under a few
    hundred bytes; a call of the newest group has none, and one whose arguments are many small values (a long todo
    list) has none that frees anything. Over the window, the request would be refused: then the biggest string is cut
    head and tail, and when only small ones are left the biggest part (a list, an object) becomes its own JSON text,
    to be cut the same way. The call's id and tool name stay, and so do keys and small values where the room allows.
    """
    cut: dict[str, ToolCall] = {}
    for call in message.tool_calls:
        data = call.arguments.encode("utf-8", "surrogatepass")
        if len(data) <= limit:
            continue
        # Arguments cut before (the old cut, which spares small values) have their whole text saved already: the
        # note points there, so the file this cut names always holds the arguments as the model wrote them.
        saved = _saved_file(call)
        file = saved or f"{TOOL_RESULT_DIR}/{make_id(message.id, call.id, 'arguments-cut')}.txt"
        text = _cut_json(call.arguments, limit, store.where(file))
        if len(text.encode("utf-8", "surrogatepass")) >= len(data):
            continue  # nothing freed (arguments that are all keys): left as they are
        if saved is None:
            store.save_original(file, data)
        record = {"file": file, "bytes": len(data)}  # the bytes of the arguments this cut took
        cut[call.id] = replace(call, arguments=text, extra={**call.extra, ARGUMENTS_CUT_KEY: record})
    if not cut:
        return None
    return replace(message, content=tuple(cut.get(b.id, b) if isinstance(b, ToolCall) else b for b in message.content))


def _saved_file(call: ToolCall) -> str | None:
    """The file an earlier cut of the call's arguments saved them whole in; None when none did."""
    for key in (ARGUMENTS_CUT_KEY, OFFLOAD_KEY):
        record = call.extra.get(key)
        if isinstance(record, Mapping) and isinstance(record.get("file"), str):
            return str(record["file"])
    return None


def _cut_json(arguments: str, limit: int, where: str) -> str:
    """`arguments` (JSON text) cut to about `limit` bytes, still a JSON object (`cut_arguments`).

    Arguments that are not a JSON object (a model's broken JSON) become ``{"arguments": <their text>}``, as
    `ToolCall.input_object` reads them, and are cut there.
    """
    value: Any = as_object(arguments)
    for _ in range(_ROUNDS):
        excess = _json_size(value) - limit
        if excess <= 0:
            break
        path, text = _biggest_string(value, ())
        size = _json_size(text)
        if size > 2 * _NOTE_BYTES:
            # The value's head and tail keep what it took less the excess (in JSON bytes: escapes count).
            keep = max(0, (size - excess) * len(text) // size)
            raw = text.encode("utf-8", "surrogatepass")
            head, note, tail = _cut(raw, keep * len(raw) // max(1, len(text)), where, kind="value")
            value = _with(value, path, f"{head}{note}{tail}")
            continue
        # Only small strings are left: the biggest part becomes one string (its JSON text), cut the next round.
        part = max(value, key=lambda k: _json_size(value[k]), default=None)
        if part is not None and not isinstance(value[part], str):
            value = {**value, part: _dump(value[part])}
        elif len(value) > 1:  # many small values side by side: the object's text, cut as one
            value = {"arguments": _dump(value)}
        else:
            break  # one small value: nothing left to cut
    return _dump(value)


# A cut argument value's note takes about this many bytes; a value not twice as big frees nothing when cut.
_NOTE_BYTES = 200
# The cuts made at most (each takes the biggest value): enough for a handful of big values, then what is left stays.
_ROUNDS = 12


def _biggest_string(value: Any, path: tuple[Any, ...]) -> tuple[tuple[Any, ...], str]:
    """The path to the biggest string in `value` (in JSON bytes), and that string ("" when there is none)."""
    if isinstance(value, str):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    best: tuple[tuple[Any, ...], str] = ((), "")
    for key, item in items:
        found = _biggest_string(item, (*path, key))
        if len(found[1]) > len(best[1]):
            best = found
    return best


def _with(value: Any, path: tuple[Any, ...], text: str) -> Any:
    """`value` with the string at `path` replaced by `text` (a copy along the path; the rest shared)."""
    if not path:
        return text
    key, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, key: _with(value[key], rest, text)}
    return [_with(v, rest, text) if i == key else v for i, v in enumerate(value)]


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _json_size(value: Any) -> int:
    """Bytes `value` takes as JSON text (quotes and escapes included)."""
    return len(_dump(value).encode("utf-8", "surrogatepass"))


def _cut(data: bytes, limit: int, where: str, *, kind: str = "message") -> tuple[str, str, str]:
    """The head, the note and the tail of `data` cut to about `limit` bytes, the whole being at `where`.

    `kind` names what was cut: a "message" (its full text at `where`) or an argument "value" (the call's full
    arguments, JSON, at `where`).
    """
    whole = "the full text is" if kind == "message" else "the call's full arguments (JSON) are"
    note = (
        f"\n[ctxkeep: this {kind} was too big for the context: {len(data):,} bytes, the middle cut;"
        f" {whole} in {where}]\n"
    )
    room = max(0, limit - len(note.encode()))
    # A byte cut may split a character at its edge: "ignore" drops that piece only.
    head = data[: room // 2].decode("utf-8", "ignore")
    tail = data[len(data) - (room - room // 2) :].decode("utf-8", "ignore")
    return head, note, tail
