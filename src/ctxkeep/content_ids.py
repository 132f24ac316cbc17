"""How a message that comes from outside gets its id: from its content and its occurrence, not its position.

An `Entry` is one converted message, with the key its id derives from (`key_of`: role, text, images and
tool-call ids, the source's own id); `number` derives the ids of a history's entries, counting each key's
occurrences, so the second identical "ok" gets another id than the first and the same history gets the same
ids every time; `renumber` moves ids past those a workspace holds. The host's messages come in through
`ctxkeep.host.inputs`; a format whose converter numbers its own messages (pydantic-ai's) uses these too.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Container, Sequence
from dataclasses import dataclass, replace

from ctxkeep.messages import ImageBlock, Message, ToolCall, ToolResult, make_id

log = logging.getLogger("ctxkeep")


@dataclass(frozen=True, slots=True)
class Entry:
    """One converted message: the item it came from, and what its id derives from (None: a given `Message`)."""

    index: int
    message: Message
    key: str | None = None
    occurrence: int = 0
    # Lone UTF-16 surrogates in the item were replaced by U+FFFD.
    replaced: bool = False


def number(entries: Sequence[Entry], seen: dict[str, int] | None = None) -> list[Entry]:
    """`entries` with ids derived from their keys, numbered by occurrence; with `seen` (which it updates), each
    counted after the occurrences it holds already: a history's new items numbered as the whole history's."""
    seen = {} if seen is None else seen
    out: list[Entry] = []
    for e in entries:
        if e.key is None:
            out.append(e)
            continue
        n = seen.get(e.key, 0)
        seen[e.key] = n + 1
        out.append(replace(e, message=_with_id(e.message, _id(e.key, n)), occurrence=n))
    return out


def renumber(entries: Sequence[Entry], taken: Container[str]) -> list[Entry]:
    """`entries` with each derived id moved past the ids in `taken` (and those given earlier here).

    These are the entries being added: a warning names each whose lone surrogates were replaced.
    """
    used: set[str] = set()
    out: list[Entry] = []
    for e in entries:
        if e.key is not None:
            occurrence = e.occurrence
            while (mid := _id(e.key, occurrence)) in taken or mid in used:
                occurrence += 1
            used.add(mid)
            if mid != e.message.id or occurrence != e.occurrence:  # (most entries keep theirs: no copy)
                e = replace(e, message=_with_id(e.message, mid), occurrence=occurrence)
        if e.replaced:
            log.warning(
                "message %s (item %d): lone UTF-16 surrogates replaced with U+FFFD; the message is kept",
                e.message.id,
                e.index,
            )
        out.append(e)
    return out


def key_of(msg: Message, source_id: object = None) -> str:
    """What a message's derived id comes from: role, text, images and tool-call ids (a tool result: its
    call id alone, so an offloaded result keeps its key), and the source's own id. Thinking is left out:
    the chat format drops it on the way back."""
    parts = [msg.role, source_id if isinstance(source_id, str) else ""]
    if msg.role == "tool":
        parts += [f"result:{b.call_id}" for b in msg.content if isinstance(b, ToolResult)]
    else:
        parts.append("text:" + msg.text)
        for b in msg.content:
            if isinstance(b, ImageBlock):
                image = b.url or hashlib.sha256((b.data or "").encode()).hexdigest()
                parts.append(f"image:{image}")
            elif isinstance(b, ToolCall):
                parts.append(f"call:{b.id}")
    return "\x1f".join(parts)


def _id(key: str, occurrence: int) -> str:
    return make_id("ctxkeep-input", key, occurrence)


def _with_id(msg: Message, mid: str) -> Message:
    return msg if msg.id == mid else replace(msg, id=mid)
