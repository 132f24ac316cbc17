"""Old reasoning: the thinking blocks of turns before the current tool loop are not sent again.

A model's reasoning helps the step it was written for. Once the user (or a command the user ran) has
spoken since, it is history: Anthropic ignores it there anyway, the chat format leaves it out, and it
may take more tokens than the answer. Inside the current tool loop, a thinking block stays with its
tool calls: the model goes on from it.

Over the window, the request would be refused whole; then the thinking of every assistant message but the
newest goes too, in the loop as well (`ctxkeep.aging.cut_oversize`). Anthropic checks only the newest
assistant message's thinking ("thinking blocks in the latest assistant message cannot be modified") and
lets a request omit those of earlier turns, so the newest keeps its blocks whole, and a signed block is
only ever dropped whole, never changed.

Dropping a block rewrites a message, which costs a prompt cache everything after it, so blocks are
dropped only where that costs nothing more: in messages the cache never held (new since the previous
request), and in messages that an offload rewrites anyway (`ctxkeep.aging.offload_recent`). Their texts
are saved in the store first, like an offloaded result, and the message records where.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .messages import Message, ThinkingBlock, make_id
from .store import TOOL_RESULT_DIR, Store

# Where an assistant message whose thinking was dropped notes the file holding it.
THINKING_KEY = "ctxkeep_thinking"


def loop_start(messages: Sequence[Message], floor: int = 0) -> int:
    """The position of the newest user message, where the current tool loop starts; `floor` when none is after it.

    Only the messages from `floor` on are looked at, so a step costs what it added, not the history.
    """
    for at in range(len(messages) - 1, floor - 1, -1):
        if messages[at].role == "user":
            return at
    return floor


def last_answer(messages: Sequence[Message]) -> int:
    """The position of the newest assistant message, whose thinking a provider needs unchanged; 0 when none."""
    for at in range(len(messages) - 1, -1, -1):
        if messages[at].role == "assistant":
            return at
    return 0


def thinking_file(message_id: str) -> str:
    """The store's name for the thinking texts dropped from a message: ``tool_result/<uuid>.txt``."""
    return f"{TOOL_RESULT_DIR}/{make_id(message_id, 'thinking')}.txt"


def without_thinking(messages: Sequence[Message], store: Store) -> dict[int, Message]:
    """The assistant messages among `messages` that hold thinking, without it (by position).

    Each one's thinking texts are saved in `store` first. A message that holds nothing but thinking is
    left as it is: an empty assistant message would be refused.
    """
    out: dict[int, Message] = {}
    for at, message in enumerate(messages):
        if message.role != "assistant" or THINKING_KEY in message.extra:
            continue
        thinking = [b for b in message.content if isinstance(b, ThinkingBlock)]
        rest = tuple(b for b in message.content if not isinstance(b, ThinkingBlock))
        if not thinking or not rest:
            continue
        data = saved_thinking(message)
        file = thinking_file(message.id) if data else None  # redacted blocks hold no text a person could read
        if file is not None:
            store.save_original(file, data)
        note: dict[str, object] = {"file": file, "blocks": len(thinking)}
        out[at] = replace(message, content=rest, extra={**message.extra, THINKING_KEY: note})
    return out


def saved_thinking(message: Message) -> bytes:
    """The bytes `without_thinking` saves for a message: its thinking texts, a blank line between (b"": none).

    A session rewrites the file from the live log's earlier copy of the message when a power loss cut it short.
    """
    texts = [b.text for b in message.content if isinstance(b, ThinkingBlock) and b.text]
    return "\n\n".join(texts).encode("utf-8", "surrogatepass")
