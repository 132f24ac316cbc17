"""Exact recall: archived messages word for word, with the saved originals of what was cut from them put back.

A source is what a summary, a search hit or a notice names:

    dialog/YYYY-MM-DD.jsonl:FROM-TO    lines FROM to TO of an archive file (``:N`` for one line)
    tool_result/<uuid>.txt             one saved original (also by the path a notice prints)

An archived message is kept as it was when it left the context: an offloaded result holds only its head
and a notice, cut call arguments a stub, an oversized message its head and tail, dropped reasoning nothing.
`recall` puts each saved original back in its place (read through the store's `read_original`, which
opens only names ctxkeep gives, never through a link); an original retention has removed is named in
`Recalled.missing`, and the message keeps its cut text. Nothing outside ``dialog/`` and ``tool_result/``
of the workspace is read: any other source is refused with a `ValueError` that shows the accepted forms.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import orjson

from ctxkeep.codec import message_from_dict
from ctxkeep.messages import Block, ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.originals import record_in
from ctxkeep.oversize import ARGUMENTS_CUT_KEY, CUT_KEY
from ctxkeep.reasoning import THINKING_KEY
from ctxkeep.store import OFFLOAD_KEY, ORIGINAL_NAME, STATE, TOOL_RESULT_DIR, Store

from . import state

__all__ = ["MAX_LINES", "Recalled", "original_name", "parse_source", "read_original", "recall", "render"]

# Lines of an archive file one recall returns: a range wider than a model's context helps no one.
MAX_LINES = 500
_RANGE = re.compile(r"(?P<file>dialog/[0-9]{4}-[0-9]{2}-[0-9]{2}\.jsonl)(?::(?P<first>[0-9]+)(?:-(?P<last>[0-9]+))?)?")
_FORMS = "dialog/YYYY-MM-DD.jsonl:FROM-TO (or :N) or tool_result/<uuid>.txt"


@dataclass(frozen=True, kw_only=True, slots=True)
class Recalled:
    """One archived message: its `file` and `line`, the `message` with its saved originals put back, the
    originals put back (`restored`) and those no longer kept (`missing`: the message keeps its cut text)."""

    file: str
    line: int
    message: Message
    restored: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        """Where it is, as `recall` accepts it: ``dialog/YYYY-MM-DD.jsonl:N``."""
        return f"{self.file}:{self.line}"


def parse_source(source: str) -> tuple[str, int, int | None]:
    """An archive range as (file, first line, last line or None for "to the end"); a file alone is (file, 1, None).

    Raises `ValueError` for anything else, naming the accepted forms.
    """
    found = _RANGE.fullmatch(source.strip()) if isinstance(source, str) else None
    if found is None:
        raise ValueError(f"a source is {_FORMS}; got {source!r}")
    first = int(found["first"] or 1)
    last = int(found["last"]) if found["last"] else (first if found["first"] else None)
    if first < 1 or (last is not None and last < first):
        raise ValueError(f"a line range is FROM-TO with 1 <= FROM <= TO; got {source!r}")
    return found["file"], first, last


def original_name(store: Store, source: str) -> str | None:
    """The saved original `source` names (``tool_result/<uuid>.txt``, or the path the store gives it), else None."""
    text = source.strip()
    folder_name, _, base = text.rpartition("/")
    if not ORIGINAL_NAME.fullmatch(base):
        return None
    name = f"{TOOL_RESULT_DIR}/{base}"
    # A notice prints the store's location of the file: that path, and no other, is this workspace's.
    return name if text == name or (folder_name.endswith(TOOL_RESULT_DIR) and text == store.where(name)) else None


def read_original(store: Store, name: str) -> bytes | None:
    """A saved original through the store's `read_original` (None when retention removed it, or when the store
    has no such optional method: the message keeps its cut text)."""
    read: Callable[[str], bytes | None] | None = getattr(store, "read_original", None)
    return None if read is None else read(name)


def recall(store: Store, source: str) -> list[Recalled]:
    """The archived messages `source` (``dialog/YYYY-MM-DD.jsonl:FROM-TO``) names, with their saved originals.

    Only committed lines are read (the state's archive index), so what recall shows is what the archive
    holds. Raises `ValueError` for a malformed source or a range past the file (the message says what the
    file holds), `FileNotFoundError` for an archive file the workspace does not have, the store's
    `StorageError` for a file it will not read (a symbolic link) and `WorkspaceError` for a damaged state.
    """
    name, first, last = parse_source(source)
    data = _committed(store, name)
    if data is None:
        raise FileNotFoundError(f"{name} is not in this workspace's archive")
    lines = data.splitlines()
    last = len(lines) if last is None else last
    if first > len(lines) or last > len(lines):
        raise ValueError(f"{name} has lines 1-{len(lines)}; got {first}-{last}")
    if last - first + 1 > MAX_LINES:
        raise ValueError(f"at most {MAX_LINES} lines at a time; ask for {name}:{first}-{first + MAX_LINES - 1}")
    out = []
    for number in range(first, last + 1):
        try:
            message = message_from_dict(orjson.loads(lines[number - 1]))
        except (orjson.JSONDecodeError, TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"{name}:{number} is not an archived message ({exc})") from None
        out.append(_with_originals(name, number, message, lambda n: read_original(store, n)))
    return out


def _committed(store: Store, name: str) -> bytes | None:
    """The archive file's committed bytes: a crash between an append and its commit leaves lines that the next
    session cuts off, which were never archived. A folder without a state file (an archive alone) is read whole."""
    data = store.read_archive(name) or None  # empty: a file the archive does not have
    raw = store.read_state()
    if data is None or raw is None:
        return data
    known = state.parse(raw, store.where(STATE)).archive.files.get(name)
    return None if known is None else data[: known.bytes]


def _with_originals(file: str, line: int, message: Message, read: Callable[[str], bytes | None]) -> Recalled:
    """The message with each saved original in the place of its cut text."""
    restored: list[str] = []
    missing: list[str] = []

    def text_of(raw: object) -> str | None:
        """The saved original a record (a dict naming its "file") points at; None when there is none."""
        name = raw.get("file") if isinstance(raw, Mapping) else None
        if not isinstance(name, str):
            return None  # no record, or dropped reasoning that was redacted (nothing was saved)
        data = read(name)  # None too for a name ctxkeep never gives (an imported record may say anything)
        (missing if data is None else restored).append(name)
        # `replace`: a byte the saver could not have written (a lone surrogate) prints as U+FFFD
        return None if data is None else data.decode("utf-8", "replace")

    content = message.content
    try:
        offloaded = record_in(message) is not None
    except ValueError:
        offloaded = False  # a damaged record: the cut text is what there is
    if offloaded:
        content = _output_restored(message, text_of)
    content = tuple(_call_restored(b, text_of) if isinstance(b, ToolCall) else b for b in content)
    if CUT_KEY in message.extra:
        full = text_of(message.extra[CUT_KEY])
        if full is not None:  # the cut made the text blocks one, where the first was
            content = _texts_replaced(content, full)
    if THINKING_KEY in message.extra:
        thinking = text_of(message.extra[THINKING_KEY])
        if thinking is not None:
            content = (ThinkingBlock(text=thinking), *content)
    return Recalled(
        file=file,
        line=line,
        message=replace(message, content=content),
        restored=tuple(restored),
        missing=tuple(missing),
    )


def _output_restored(message: Message, text_of: Callable[[object], str | None]) -> tuple[Block, ...]:
    """A tool result's or a command output's content with its saved original for its text (images kept)."""
    result = message.tool_result
    if result is None:
        full = text_of(message.extra.get(OFFLOAD_KEY))
        return message.content if full is None else _texts_replaced(message.content, full)
    full = text_of(result.extra.get(OFFLOAD_KEY))
    if full is None:
        return message.content
    images = () if isinstance(result.content, str) else tuple(p for p in result.content if isinstance(p, ImageBlock))
    content: str | tuple[TextBlock | ImageBlock, ...] = (TextBlock(text=full), *images) if images else full
    return (replace(result, content=content), *message.content[1:])


def _call_restored(call: ToolCall, text_of: Callable[[object], str | None]) -> ToolCall:
    # An oversize cut's file holds the arguments whole, whether it came before the old cut or after it.
    full = text_of(call.extra.get(ARGUMENTS_CUT_KEY, call.extra.get(OFFLOAD_KEY)))
    return call if full is None else replace(call, arguments=full)


def _texts_replaced(content: tuple[Block, ...], text: str) -> tuple[Block, ...]:
    """`content` with its text blocks made one block holding `text`, where the first was."""
    first = next((i for i, b in enumerate(content) if isinstance(b, TextBlock)), len(content))
    before = tuple(b for b in content[:first] if not isinstance(b, TextBlock))
    after = tuple(b for b in content[first + 1 :] if not isinstance(b, TextBlock))
    return (*before, TextBlock(text=text), *after)


def render(item: Recalled) -> str:
    """One recalled message as text: a header line (source, role, what was put back), then its blocks word for word."""
    message = item.message
    head = f"[{item.source}] {message.role}"
    result = message.tool_result
    if result is not None:
        head += f" (result of {result.call_id}{', error' if result.is_error else ''})"
    if item.restored:
        head += f"; full text from {', '.join(item.restored)}"
    if item.missing:
        head += f"; {', '.join(item.missing)} no longer kept: the text below is cut"
    body: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            body.append(block.text)
        elif isinstance(block, ThinkingBlock):
            body.append(f"(thinking) {block.text}" if block.text else "(thinking, redacted)")
        elif isinstance(block, ToolCall):
            body.append(f"-> {block.name} [{block.id}] {block.arguments}")
        elif isinstance(block, ToolResult):
            parts = [block.content] if isinstance(block.content, str) else [_part(p) for p in block.content]
            body.extend(parts)
        else:
            body.append(_part(block))
    return "\n".join([head, *body])


def _part(block: TextBlock | ImageBlock) -> str:
    return block.text if isinstance(block, TextBlock) else f"[image {block.media_type}]"
