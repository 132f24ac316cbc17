"""What the memory index holds: a file cut into chunks of about 400 tokens that overlap, each with its line range.

A Markdown file is cut on line boundaries (a line longer than a chunk is a chunk alone); the last lines of a
chunk (about 80 tokens) open the next one, so a fact on a boundary is found whole in one of them. An archive
file (``dialog/*.jsonl``) gives one chunk per message line: a result then names the line to read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxkeep.messages import Message

CHUNK_TOKENS = 400
OVERLAP_TOKENS = 80
# Of one archived message, what the index keeps: the head is what a search is about.
DIALOG_CHARS = 2_000

Count = Callable[[Sequence[str]], list[int]]


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a file: its text and first and last line (1-based, inclusive)."""

    path: str
    start_line: int
    end_line: int
    text: str


def markdown_chunks(
    path: str, text: str, count: Count, *, size: int = CHUNK_TOKENS, overlap: int = OVERLAP_TOKENS
) -> list[Chunk]:
    """`text` cut into chunks of at most `size` tokens (by `count`), the next starting `overlap` tokens back."""
    lines = text.splitlines()
    if not lines:
        return []
    costs = count([line + "\n" for line in lines])
    out: list[Chunk] = []
    start = 0
    while start < len(lines):
        end, used = start, 0
        while end < len(lines) and (end == start or used + costs[end] <= size):
            used += costs[end]
            end += 1
        body = "\n".join(lines[start:end])
        if body.strip():
            out.append(Chunk(path, start + 1, end, body))
        if end >= len(lines):
            break
        # Step back over the last lines worth `overlap` tokens, but always move forward.
        back, carried = end, 0
        while back - 1 > start and carried + costs[back - 1] <= overlap:
            back -= 1
            carried += costs[back]
        start = back
    return out


def dialog_chunks(path: str, data: bytes) -> list[Chunk]:
    """One chunk per archived message of ``dialog/*.jsonl``: who spoke, what was said or run, and the result."""
    # Imported here: a search that finds no archive changed need not pay for the message types (~30 ms).
    import orjson

    from ctxkeep.codec import message_from_dict

    out = []
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            message = message_from_dict(orjson.loads(raw))
        except (ValueError, TypeError, KeyError):
            continue  # a torn line a crash left: the session drops it too
        text = message_text(message)
        if text.strip():
            out.append(Chunk(path, number, number, text[:DIALOG_CHARS]))
    return out


def message_text(message: Message) -> str:
    """A message as searchable text: role, text, tool calls with their arguments, a result's text."""
    parts = [f"{message.role}: {message.text}".rstrip()]
    parts.extend(f"[{call.name}] {call.arguments}" for call in message.tool_calls)
    result = message.tool_result
    if result is not None:
        parts.append(("[error] " if result.is_error else "") + result.text)
    return "\n".join(p for p in parts if p)
