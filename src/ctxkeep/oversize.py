"""The last resort for one message too big for the context: its head and tail kept, with a note between.

A compaction keeps the newest group whole. When a single message there is bigger than the window
allows (a pasted log, a huge answer), the compaction cannot bring the context under the threshold, and
the request would go over the window. Then (`ctxkeep.aging.age_all`) the text of such a message keeps
its head and its tail, the end being where an error or a question usually is; its full text is saved
first, like an offloaded output, and the note says where.
"""

from __future__ import annotations

from dataclasses import replace

from .messages import Message, TextBlock, make_id
from .store import TOOL_RESULT_DIR, Store

# Where a message cut so notes the file holding its full text.
CUT_KEY = "ctxkeep_cut"


def oversized_name(message_id: str) -> str:
    """The store's name for the full text of a message cut for its size: ``tool_result/<uuid>.txt``."""
    return f"{TOOL_RESULT_DIR}/{make_id(message_id, 'text')}.txt"


def cut_oversized(message: Message, limit: int, store: Store) -> Message | None:
    """`message` with its text cut to about `limit` bytes (head, note, tail), its full text saved; None when it fits.

    Only the text blocks change (they become one, where the first was); images, calls and results stay.
    """
    if len(message.text) * 4 <= limit:  # a character takes at most 4 bytes
        return None
    data = message.text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return None
    file = oversized_name(message.id)
    note = (
        f"\n[ctxkeep: this message was too big for the context: {len(data):,} bytes, the middle cut;"
        f" the full text is in {store.where(file)}]\n"
    )
    room = max(0, limit - len(note.encode()))
    # A byte cut may split a character at its edge: "ignore" drops that piece only.
    head = data[: room // 2].decode("utf-8", "ignore")
    tail = data[len(data) - (room - room // 2) :].decode("utf-8", "ignore")
    store.save_original(file, data)
    first = next(i for i, b in enumerate(message.content) if isinstance(b, TextBlock))
    block = TextBlock(text=f"{head}{note}{tail}")
    content = tuple(
        block if i == first else b for i, b in enumerate(message.content) if i == first or not isinstance(b, TextBlock)
    )
    return replace(message, content=content, extra={**message.extra, CUT_KEY: {"file": file, "bytes": len(data)}})
