"""The last resort for one message too big for the context: its head and tail kept, with a note between.

A compaction keeps the newest group whole. When a single message there is bigger than the window
allows (a pasted log, a huge answer), the compaction cannot bring the context under the threshold, and
the request would go over the window. Then (`ctxkeep.aging.age_all`) the text of such a message keeps
its head and its tail, the end being where an error or a question usually is; its full text is saved
first, like an offloaded output, and the note says where.
"""

from __future__ import annotations

from dataclasses import replace

from .messages import Message, TextBlock, ThinkingBlock, make_id
from .store import TOOL_RESULT_DIR, Store

# Where a message cut so notes the file holding its full text.
CUT_KEY = "ctxkeep_cut"
# ... and the file holding the full text of its unsigned thinking, cut so.
THINKING_CUT_KEY = "ctxkeep_thinking_cut"


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


def _cut(data: bytes, limit: int, where: str) -> tuple[str, str, str]:
    """The head, the note and the tail of `data` cut to about `limit` bytes, the whole being at `where`."""
    note = (
        f"\n[ctxkeep: this message was too big for the context: {len(data):,} bytes, the middle cut;"
        f" the full text is in {where}]\n"
    )
    room = max(0, limit - len(note.encode()))
    # A byte cut may split a character at its edge: "ignore" drops that piece only.
    head = data[: room // 2].decode("utf-8", "ignore")
    tail = data[len(data) - (room - room // 2) :].decode("utf-8", "ignore")
    return head, note, tail
