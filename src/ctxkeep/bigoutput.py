"""An output too big to handle whole: the cap per message that drops its middle, and the pieces it is read in.

A text over `OffloadSettings.max_message_chars` keeps its head and its end, a note in place of its middle
(`cut_middle`; `dropped_middle` is the arithmetic, so the cut can be measured before it is made). A new
output over the cap is saved and cut in one go (`ctxkeep.offload.offload_new`): its capped form is read
from the text itself (`Capped`), and an original longer than `PIECE` characters is measured and saved in
pieces, never encoded whole (`measured`, `save`). docs/offload.md has the choices made.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace

from .messages import Message
from .store import Store

# A text longer than this many characters is measured and saved in pieces of it, never encoded whole: its
# original goes to its file without a second copy of it in memory (where the store can take pieces).
PIECE = 1_048_576

_log = logging.getLogger("ctxkeep")


def encode(text: str) -> bytes:
    """`text` in UTF-8, a lone surrogate kept as it is (an original is saved exactly as it came)."""
    return text.encode("utf-8", "surrogatepass")


def over_bytes(text: str, limit: int) -> bool:
    """True when the text is over `limit` bytes of UTF-8, without encoding it when the length decides."""
    n = len(text)
    if n * 4 <= limit:  # a character takes at most 4 bytes
        return False
    if n > limit or text.isascii():  # and at least 1 (an ASCII text, one each: CPython knows without reading it)
        return n > limit
    return len(encode(text)) > limit


def dropped_middle(length: int, max_chars: int) -> tuple[int, str, int]:
    """How a text of `length` characters is cut to `max_chars` (`OffloadSettings.max_message_chars`): the
    characters of its head kept, the note that takes the place of its middle, the characters of its end kept."""
    note = (
        f"\n\n[ctxkeep: {length - max_chars:,} characters of {length:,} dropped here, over the cap of"
        f" {max_chars:,} characters for this text; the output was too large to keep whole]\n\n"
    )
    keep = max(0, max_chars - len(note))
    head = keep * 3 // 4  # more of the head: where a listing or a log starts
    return head, note, keep - head


def cut_middle(text: str, max_chars: int) -> str:
    """`text` in at most `max_chars` characters: its head and its end, the middle replaced by a note."""
    head, note, tail = dropped_middle(len(text), max_chars)
    return "".join((text[:head], note, text[len(text) - tail :]))  # no head + note copy on the way


@dataclass(frozen=True, slots=True)
class Capped:
    """A text over the cap as `cut_middle` makes it, read from the text itself in pieces: a new output over
    the cap is saved and cut in one go, its capped form never held beside it (`offload_new`)."""

    text: str
    max_chars: int

    def pieces(self) -> Iterator[str]:
        head, note, tail = dropped_middle(len(self.text), self.max_chars)
        yield from (self.text[i : min(i + PIECE, head)] for i in range(0, head, PIECE))
        yield note
        yield from (self.text[i : i + PIECE] for i in range(len(self.text) - tail, len(self.text), PIECE))


def over_cap(content: object, max_chars: int) -> bool:
    """True for a tool result's one text over the cap (`inputs.capped` leaves it whole with `cut_later`)."""
    return isinstance(content, str) and len(content) > max_chars


def capped_over(text: str, max_chars: int, limit: int) -> bool:
    """`over_bytes` for the capped form of `text`, built only when its length alone cannot tell (then it is small)."""
    head, note, tail = dropped_middle(len(text), max_chars)
    if head + len(note) + tail > limit:
        return True
    return over_bytes(cut_middle(text, max_chars), limit)


def within_cap(message: Message, max_chars: int) -> Message:
    """A tool result over the cap that no cut took (a new file read is kept whole): its text capped as is."""
    result = message.tool_result
    if result is None or not over_cap(result.content, max_chars):
        return message
    _log.warning("a tool message had texts over %s characters: their middle was dropped", f"{max_chars:,}")
    capped = replace(result, content=cut_middle(result.text, max_chars))
    return replace(message, content=tuple(capped if b is result else b for b in message.content))


def pieces_of(text: str | Capped) -> Iterator[str]:
    """A long text (or a capped one) in pieces of at most about `PIECE` characters, in order."""
    if isinstance(text, Capped):
        return text.pieces()
    return (text[i : i + PIECE] for i in range(0, len(text), PIECE))


def measured(text: str | Capped) -> tuple[int, int]:
    """The UTF-8 size of `text` and its lines (a last line without a newline counts too), without encoding it whole."""
    if isinstance(text, str) and text.isascii():
        return len(text), (text.count("\n") + (0 if text.endswith("\n") else 1) if text else 0)
    size = newlines = 0
    last = ""
    for piece in pieces_of(text):
        size += len(piece) if piece.isascii() else len(encode(piece))
        newlines += piece.count("\n")
        last = piece[-1:] or last
    return size, (newlines + (0 if last == "\n" else 1) if size else 0)


def prefix(text: str | Capped, n: int) -> str:
    """The first `n` characters of `text` (of its capped form), read from as few pieces as give them."""
    if isinstance(text, str):
        return text[:n]
    taken: list[str] = []
    left = n
    for piece in text.pieces():
        if left <= 0:
            break
        taken.append(piece[:left])
        left -= len(taken[-1])
    return "".join(taken)


def save(store: Store, name: str, data: bytes | str | Capped) -> None:
    """Save an original: a long text piece by piece where the store takes pieces (`stream_original`, optional),
    so it is never held twice; else encoded whole, through `save_original`."""
    if isinstance(data, bytes):
        store.save_original(name, data)
        return
    stream = getattr(store, "stream_original", None)
    if callable(stream):
        stream(name, (encode(piece) for piece in pieces_of(data)))
    else:
        store.save_original(name, encode("".join(pieces_of(data))))
