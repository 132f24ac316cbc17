"""Messages and their content blocks: the value types everyone imports (their pairing: `ctxkeep.pairing`).

A conversation is a sequence of immutable `Message` values. Each message has a role
(``system``, ``user``, ``assistant`` or ``tool``) and a tuple of content blocks:

    TextBlock       plain text
    ThinkingBlock   model reasoning (Anthropic thinking, Codex reasoning summaries)
    ToolCall        a call the assistant made: id, tool name, JSON arguments as text
    ToolResult      what came back for one call; lives in a ``tool`` message
    ImageBlock      an image: media type, pixel size when known, bytes kept for export

Tool results always live in ``tool`` messages, one result per message, as in OpenAI's
chat format. Formats that group results differently (Anthropic puts them in the next
user message) split and rejoin them on the way in and out.

How tool results pair with their calls, and how a sequence is checked and repaired, is the algebra
over these values in `ctxkeep.pairing`.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, TypeVar

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})

NO_RESULT_TEXT = "[no result recorded]"

_ID_NAMESPACE = uuid.UUID("5b0f6f2e-7f43-4c55-9a59-6b0c1f1d2a10").bytes
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def make_id(*parts: object) -> str:
    """A stable message id derived from `parts`: same parts, same id; different parts, different ids."""
    texts = [str(p) for p in parts]
    if any("\x1f" in t or "\x1e" in t for t in texts):
        # A part holding the separator would make ("a\x1fb", "c") and ("a", "b\x1fc") one id (and one
        # offload file): escape such parts, under a mark no plain join starts with. Other ids are unchanged.
        texts = ["\x1e", *(t.replace("\x1e", "\x1e0").replace("\x1f", "\x1e1") for t in texts)]
    # uuid5 by hand, with surrogatepass: a lone surrogate (which UTF-8 cannot hold) still names an id, and
    # every other text gets the id uuid5 gives it.
    name = "\x1f".join(texts).encode("utf-8", "surrogatepass")
    # `uuid.UUID(bytes=..., version=5)` and its `str`, without building the object (a third of the cost: every
    # message a host adds gets its id here): the version in byte 6's high nibble, the RFC 4122 variant in byte 8.
    raw = bytearray(hashlib.sha1(_ID_NAMESPACE + name).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _need(value: object, kind: type | tuple[type, ...], what: str) -> None:
    """Raise a TypeError naming the field when a value has the wrong type (bad source data)."""
    if not isinstance(value, kind):
        raise TypeError(f"{what} must be {_type_names(kind)}, got {type(value).__name__}")


def _type_names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("None" if k is type(None) else k.__name__ for k in kinds)


def _freeze(obj: Any) -> None:
    """Wrap a block's or message's `extra` mapping so it cannot be changed in place."""
    extra = obj.extra
    if not isinstance(extra, MappingProxyType):
        object.__setattr__(obj, "extra", MappingProxyType(dict(extra)) if extra else _EMPTY)


@dataclass(frozen=True, kw_only=True, slots=True)
class TextBlock:
    """Plain text."""

    text: str
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)

    def __post_init__(self) -> None:
        _need(self.text, str, "TextBlock.text")
        _freeze(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class ThinkingBlock:
    """Model reasoning. `redacted` blocks carry opaque `signature` data only."""

    text: str
    signature: str | None = None
    redacted: bool = False
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)

    def __post_init__(self) -> None:
        _need(self.text, str, "ThinkingBlock.text")
        _need(self.signature, (str, type(None)), "ThinkingBlock.signature")
        _freeze(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """A tool call. `arguments` is the JSON text exactly as the model produced it."""

    id: str
    name: str
    arguments: str = "{}"
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)

    def __post_init__(self) -> None:
        _need(self.id, str, "ToolCall.id")
        _need(self.name, str, "ToolCall.name")
        if not self.id:
            raise ValueError(f"ToolCall for tool {self.name!r} needs a non-empty id")
        if not isinstance(self.arguments, str):
            raise TypeError(
                "ToolCall.arguments must be the JSON text of the arguments; "
                "use ToolCall.from_input(...) to build one from a dict"
            )
        _freeze(self)

    @classmethod
    def from_input(cls, *, id: str, name: str, input: Any, **kw: Any) -> ToolCall:
        """Build a call from already-parsed arguments (Anthropic's ``input``)."""
        return cls(id=id, name=name, arguments=json.dumps(input, ensure_ascii=False), **kw)

    def input(self) -> Any:
        """The arguments parsed from JSON; the raw text when it is not valid JSON."""
        try:
            return json.loads(self.arguments)
        except (ValueError, RecursionError):  # a model's text nested deeper than Python's json follows
            return self.arguments

    def input_object(self) -> dict[str, Any]:
        """The arguments as a JSON object, as Anthropic and AgentScope want them.

        Blank arguments (what servers send for a tool without parameters) give ``{}``;
        anything that is not an object is kept under ``"arguments"``.
        """
        if not self.arguments.strip():
            return {}
        value = self.input()
        return value if isinstance(value, dict) else {"arguments": value}


@dataclass(frozen=True, kw_only=True, slots=True)
class ImageBlock:
    """An image. Its size, not its base64 text, is what counts toward the context."""

    media_type: str
    width: int | None = None
    height: int | None = None
    data: str | None = None  # base64, kept so the image survives export
    url: str | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)

    def __post_init__(self) -> None:
        _need(self.media_type, str, "ImageBlock.media_type")
        for name in ("data", "url"):
            _need(getattr(self, name), (str, type(None)), f"ImageBlock.{name}")
        for name in ("width", "height"):
            _need(getattr(self, name), (int, type(None)), f"ImageBlock.{name}")
        _freeze(self)

    @classmethod
    def from_url(cls, url: str, **kw: Any) -> ImageBlock:
        """An image from a ``data:<type>;base64,...`` URL (bytes kept) or a web URL."""
        m = _DATA_URL.match(url)
        if m:
            return cls(media_type=m["type"], data=m["data"], **kw)
        return cls(media_type=_media_type_of(url), url=url, **kw)


_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)
_MEDIA_TYPES = {"png": "image/png", "gif": "image/gif", "webp": "image/webp", "jpg": "image/jpeg", "jpeg": "image/jpeg"}


def _media_type_of(url: str) -> str:
    ext = url.split("?", 1)[0].rsplit(".", 1)[-1].lower()
    return _MEDIA_TYPES.get(ext, "image/jpeg")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    """The result of the call `call_id`: text, or a tuple of text and image blocks."""

    call_id: str
    content: str | tuple[TextBlock | ImageBlock, ...] = ""
    is_error: bool = False
    exit_code: int | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)

    def __post_init__(self) -> None:
        _need(self.call_id, str, "ToolResult.call_id")
        if not self.call_id:
            raise ValueError("ToolResult needs the non-empty id of its call")
        if isinstance(self.content, list):
            object.__setattr__(self, "content", tuple(self.content))
        _need(self.content, (str, tuple), "ToolResult.content")
        for part in self.content if isinstance(self.content, tuple) else ():
            _need(part, (TextBlock, ImageBlock), "a part of ToolResult.content")
        _need(self.exit_code, (int, type(None)), "ToolResult.exit_code")
        _freeze(self)

    @property
    def text(self) -> str:
        """The text of the result (image blocks left out)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


def result_content(parts: Sequence[TextBlock | ImageBlock]) -> str | tuple[TextBlock | ImageBlock, ...]:
    """Content for a `ToolResult`: the texts joined by newlines, or the parts when one is an image."""
    if all(isinstance(p, TextBlock) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextBlock))
    return tuple(parts)


Block: TypeAlias = TextBlock | ThinkingBlock | ToolCall | ToolResult | ImageBlock
_BLOCK_TYPES = (TextBlock, ThinkingBlock, ToolCall, ToolResult, ImageBlock)


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """One message of a conversation. Immutable: change it with `dataclasses.replace`.

    `id` is stable across imports of the same file; `source_id` is the id the source
    format gave the message, if any; `extra` keeps source fields ctxkeep does not model,
    so exporting to the same format loses nothing.
    """

    role: Role
    content: tuple[Block, ...]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    timestamp: datetime | None = None
    source_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)

    def __post_init__(self) -> None:
        _need(self.id, str, "Message.id")
        if self.role not in ROLES:
            raise ValueError(f"Message.role must be one of {sorted(ROLES)}, got {self.role!r}")
        if isinstance(self.content, str | bytes):
            raise TypeError("Message.content must be a tuple of blocks; use Message.of(role, text) for plain text")
        if not isinstance(self.content, tuple):
            object.__setattr__(self, "content", tuple(self.content))
        if self.timestamp is not None:
            _need(self.timestamp, datetime, "Message.timestamp")
            if self.timestamp.tzinfo is None:
                raise ValueError("Message.timestamp must carry a time zone (e.g. datetime.now(UTC))")
        for block in self.content:
            _need(block, _BLOCK_TYPES, "a block of Message.content")
            if isinstance(block, ToolResult) != (self.role == "tool"):
                if self.role == "tool":
                    raise ValueError("a tool message holds exactly one ToolResult and nothing else")
                raise ValueError(f"a ToolResult belongs in a tool message, not a {self.role} message")
            if isinstance(block, ToolCall) and self.role != "assistant":
                raise ValueError(f"a ToolCall belongs in an assistant message, not a {self.role} message")
        if self.role == "tool" and len(self.content) != 1:
            raise ValueError("a tool message holds exactly one ToolResult")
        _freeze(self)

    @classmethod
    def of(cls, role: Role, text: str, **kw: Any) -> Message:
        """A message with one text block."""
        return cls(role=role, content=(TextBlock(text=text),), **kw)

    @property
    def text(self) -> str:
        """The message's text blocks joined by newlines."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls in this message."""
        return tuple(b for b in self.content if isinstance(b, ToolCall))

    @property
    def tool_result(self) -> ToolResult | None:
        """The tool result, if this is a tool message."""
        block = self.content[0] if self.role == "tool" else None
        return block if isinstance(block, ToolResult) else None


# --- text no UTF-8 file can hold ------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
# The field names of each message and block class, read once: `fields()` builds them again on every call.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
# Values that hold no text: left as they are without a look inside.
_ATOMS = frozenset({type(None), bool, int, float, datetime})
_V = TypeVar("_V")


def without_surrogates(msg: Message) -> Message:
    """`msg` with every lone UTF-16 surrogate (which no UTF-8 file can hold) replaced by U+FFFD.

    Node's JSON.stringify writes them, and Python's json reads them back; a surrogate pair is joined
    into the character it encodes. Text, ids, arguments and `extra` alike; `msg` itself when it has none.
    """
    clean = _clean(msg)
    assert isinstance(clean, Message)
    return clean


def value_without_surrogates(value: _V) -> _V:
    """`value` (text, or JSON-like dicts, lists and tuples of it) with every lone UTF-16 surrogate replaced
    by U+FFFD, as `without_surrogates` does for a message; `value` itself when it has none."""
    clean: _V = _clean(value)
    return clean


def _clean(value: Any) -> Any:
    kind = type(value)
    if kind is str or isinstance(value, str):
        # An ASCII string (most tool output) holds no surrogate: CPython knows that without reading it.
        if value.isascii() or _SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if kind in _ATOMS:  # (checked by type first: every add scans every field of every message)
        return value
    names = _FIELD_NAMES.get(kind)
    if names is None and isinstance(value, Message | TextBlock | ThinkingBlock | ToolCall | ToolResult | ImageBlock):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in fields(value))
    if names is not None:
        changed = {}
        for name in names:
            old = getattr(value, name)
            if type(old) in _ATOMS or old is _EMPTY or (type(old) is str and old.isascii()):
                continue  # (no call for what holds no text: most fields of most messages)
            new = _clean(old)
            if new is not old:
                changed[name] = new
        return replace(value, **changed) if changed else value
    if isinstance(value, list | tuple):  # (before `Mapping`, whose check is the slower: a message's content)
        parts = [_clean(v) for v in value]
        if all(p is v for p, v in zip(parts, value, strict=True)):
            return value
        return tuple(parts) if isinstance(value, tuple) else parts
    if isinstance(value, Mapping):
        if not value:
            return value
        items = [(_clean(k), _clean(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    return value
