"""Messages, their content blocks, and the pairing of tool calls with their results.

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

`validate` lists every pairing problem with its index; `repair` returns a sequence whose
tool-call pairing both OpenAI's and Anthropic's APIs accept, and reports every change it
made. (What else an API refuses, such as empty text or unsigned thinking for Anthropic, is
left out by the exporters in `ctxkeep.formats`, not changed in the messages.)
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections import deque
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, TypeVar

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})

NO_RESULT_TEXT = "[no result recorded]"

_ID_NAMESPACE = uuid.UUID("5b0f6f2e-7f43-4c55-9a59-6b0c1f1d2a10")
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
    return str(uuid.UUID(bytes=hashlib.sha1(_ID_NAMESPACE.bytes + name).digest()[:16], version=5))


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
        except ValueError:
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
    if isinstance(value, str):
        if _SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, Message | TextBlock | ThinkingBlock | ToolCall | ToolResult | ImageBlock):
        changed = {}
        for f in fields(value):
            old = getattr(value, f.name)
            new = _clean(old)
            if new is not old:
                changed[f.name] = new
        return replace(value, **changed) if changed else value
    if isinstance(value, Mapping):
        items = [(_clean(k), _clean(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        parts = [_clean(v) for v in value]
        if all(p is v for p, v in zip(parts, value, strict=True)):
            return value
        return tuple(parts) if isinstance(value, tuple) else parts
    return value


# --- pairing -------------------------------------------------------------------------

LinkKind: TypeAlias = Literal[
    "paired",  # answers a call of the newest assistant turn that was still waiting
    "separated",  # its call is older: other messages came between (the call was abandoned)
    "duplicate",  # its call was answered already
    "unknown",  # no call with its id came before it
]


@dataclass(frozen=True, slots=True)
class Link:
    """Where `pair_walk` placed one tool result: the call it answers (`call`, an index) and how."""

    index: int
    call_id: str
    kind: LinkKind
    call: int | None
    name: str


@dataclass(frozen=True, slots=True)
class Pairs:
    """What a walk leaves open, to resume it on the next batch (a live context adds messages in batches).

    `open` holds the calls of the newest assistant turn still waiting for their result (call id ->
    index of the message holding it, tool name); `abandoned` the calls that never got a result before
    the conversation moved on (call id -> index).
    """

    open: Mapping[str, tuple[int, str]] = field(default_factory=lambda: _EMPTY)
    abandoned: Mapping[str, int] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Walk:
    """What `pair_walk` found: a `Link` per tool result, the reused call ids, and the state to resume from."""

    links: list[Link]
    reused: list[tuple[int, str]]  # (message index, call id) of a call whose id was live already
    pairs: Pairs


def pair_walk(
    messages: Sequence[Message], *, start: int = 0, pairs: Pairs = Pairs(), answered: Container[str] = ()
) -> Walk:
    """The one rule that pairs tool results with their calls; validation, splitting and the live context use it.

    A result answers a call of the newest assistant turn that is still waiting; any message that
    is not a tool result ends the turn, and its waiting calls are abandoned. Indexes count from
    `start`; `pairs` resumes an earlier walk; `answered` holds call ids answered before it.
    """
    open_calls = dict(pairs.open)
    abandoned = dict(pairs.abandoned)
    done: dict[str, int] = {}
    links: list[Link] = []
    reused: list[tuple[int, str]] = []
    for offset, msg in enumerate(messages):
        i = start + offset
        result = msg.tool_result
        if result is None:
            if open_calls:
                abandoned.update((c, at) for c, (at, _) in open_calls.items())
                open_calls = {}
            for call in msg.tool_calls:
                if call.id in open_calls or call.id in abandoned or call.id in done or call.id in answered:
                    reused.append((i, call.id))
                    abandoned.pop(call.id, None)
                open_calls[call.id] = (i, call.name)
            continue
        cid = result.call_id
        if cid in open_calls:
            at, name = open_calls.pop(cid)
            done[cid] = at
            links.append(Link(i, cid, "paired", at, name))
        elif cid in done:
            links.append(Link(i, cid, "duplicate", done[cid], ""))
        elif cid in abandoned:
            links.append(Link(i, cid, "separated", abandoned[cid], ""))
        else:
            links.append(Link(i, cid, "unknown", None, ""))
    return Walk(links=links, reused=reused, pairs=Pairs(MappingProxyType(open_calls), MappingProxyType(abandoned)))


ProblemKind: TypeAlias = Literal[
    "orphan_result",  # a result whose call is nowhere in the conversation
    "missing_result",  # a call with no result
    "result_before_call",  # a result that comes before its call
    "separated_result",  # a result with other messages between it and its call
    "duplicate_call_id",  # two calls share an id
    "duplicate_result",  # a second result for the same call
    "duplicate_message_id",  # two messages share an id
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One pairing problem: what kind, at which message index, for which call id."""

    kind: ProblemKind
    index: int
    call_id: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = f"message {self.index}"
        if self.call_id:
            where += f" (call {self.call_id})"
        return f"{where}: {self.kind.replace('_', ' ')}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One change `repair` made: what it did and at which index of its input."""

    action: str
    index: int
    call_id: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        return f"message {self.index}: {self.action}" + (f" ({self.detail})" if self.detail else "")


def validate(messages: Sequence[Message]) -> list[Problem]:
    """Every tool-call pairing problem in `messages`, in order of index.

    A well-formed conversation has each assistant tool call followed, before any other
    message, by exactly one ``tool`` message per call.
    """
    problems: list[Problem] = []
    first_msg: dict[str, int] = {}
    first_call: dict[str, int] = {}
    for i, msg in enumerate(messages):
        if msg.id in first_msg:
            problems.append(
                Problem(kind="duplicate_message_id", index=i, detail=f"same id as message {first_msg[msg.id]}")
            )
        first_msg.setdefault(msg.id, i)
        for call in msg.tool_calls:
            if call.id in first_call:
                detail = f"first used at message {first_call[call.id]}"
                problems.append(Problem(kind="duplicate_call_id", index=i, call_id=call.id, detail=detail))
            first_call.setdefault(call.id, i)

    first_result: dict[str, int] = {}
    for link in pair_walk(messages).links:
        cid, i = link.call_id, link.index
        if cid in first_result:
            detail = f"first result at message {first_result[cid]}"
            problems.append(Problem(kind="duplicate_result", index=i, call_id=cid, detail=detail))
            continue
        first_result[cid] = i
        at = first_call.get(cid)
        if at is None:
            problems.append(Problem(kind="orphan_result", index=i, call_id=cid))
        elif link.kind == "unknown":
            problems.append(Problem(kind="result_before_call", index=i, call_id=cid, detail=f"call at message {at}"))
        elif link.kind == "separated":
            problems.append(Problem(kind="separated_result", index=i, call_id=cid, detail=f"call at message {at}"))
    for cid, at in first_call.items():
        if cid not in first_result:
            problems.append(Problem(kind="missing_result", index=at, call_id=cid))
    problems.sort(key=lambda p: p.index)
    return problems


def repair(messages: Sequence[Message]) -> tuple[list[Message], list[Change]]:
    """A copy of `messages` whose tool-call pairing both APIs accept, and the changes made.

    - each call's result is moved to sit right after its assistant message;
    - a call with no result gets an explicit error result reading "[no result recorded]";
    - a result with no call (or a second result for the same call) becomes user text;
    - a repeated call id or message id gets a fresh one.
    Nothing is dropped: every input message's content is in the output.
    """
    msgs, changes = renumber_duplicates(messages)

    calls: dict[str, int] = {}
    for i, msg in enumerate(msgs):
        for call in msg.tool_calls:
            calls[call.id] = i
    results: dict[str, tuple[int, Message]] = {}
    for i, msg in enumerate(msgs):
        result = msg.tool_result
        if result is None:
            continue
        if result.call_id in calls and result.call_id not in results:
            results[result.call_id] = (i, msg)

    out: list[Message] = []
    for i, msg in enumerate(msgs):
        result = msg.tool_result
        if result is not None:
            first = results.get(result.call_id)
            if first is not None and first[0] == i:
                continue  # placed after its call below
            reason = "second result for the same call" if first else "result with no matching call"
            changes.append(
                Change(action="turned result into user text", index=i, call_id=result.call_id, detail=reason)
            )
            out.append(_result_as_user_text(msg, result, reason))
            continue
        out.append(msg)
        for call in msg.tool_calls:
            found = results.get(call.id)
            if found is None:
                changes.append(
                    Change(action="added a result for a call with none", index=i, call_id=call.id, detail=call.name)
                )
                out.append(
                    Message(
                        role="tool",
                        id=make_id(msg.id, "no-result", call.id),
                        content=(ToolResult(call_id=call.id, content=NO_RESULT_TEXT, is_error=True),),
                    )
                )
                continue
            at, result_msg = found
            if not _directly_after(msgs, i, at):
                changes.append(
                    Change(
                        action="moved result next to its call", index=at, call_id=call.id, detail=f"call at message {i}"
                    )
                )
            out.append(result_msg)
    return out, changes


def _directly_after(msgs: Sequence[Message], call_index: int, result_index: int) -> bool:
    """True when only tool messages lie between the call's message and its result."""
    if result_index <= call_index:
        return False
    return all(msgs[j].role == "tool" for j in range(call_index + 1, result_index))


def renumber_duplicates(messages: Sequence[Message]) -> tuple[list[Message], list[Change]]:
    """Give repeated message ids and repeated call ids (and the results after them) new ids.

    Some agents reuse a tool-call id for a later, different call (tau-bench, SWE-agent), even
    within one message; the APIs reject that. A new call id is derived from the id of the
    message holding the call, so it is the same in every window that shows both uses. Returns
    the renumbered messages and one `Change` per new id.
    """
    changes: list[Change] = []
    out: list[Message] = []
    seen_msg: dict[str, int] = {}
    seen_call: set[str] = set()
    waiting: dict[str, deque[str]] = {}  # a call id as results name it -> the ids still to answer, in order
    for i, msg in enumerate(messages):
        if msg.id in seen_msg:
            seen_msg[msg.id] += 1
            new_id = make_id(msg.id, "dup", seen_msg[msg.id])
            changes.append(
                Change(action="gave a repeated message id a new one", index=i, detail=f"{msg.id} -> {new_id}")
            )
            msg = replace(msg, id=new_id)
        seen_msg.setdefault(msg.id, 0)
        if msg.tool_calls:
            msg = _renumber_calls(msg, i, seen_call, waiting, changes)
        result = msg.tool_result
        if result is not None and waiting.get(result.call_id):
            new_cid = waiting[result.call_id].popleft()
            if new_cid != result.call_id:
                msg = replace(msg, content=(replace(result, call_id=new_cid),))
        out.append(msg)
    return out, changes


def _renumber_calls(
    msg: Message, index: int, seen: set[str], waiting: dict[str, deque[str]], changes: list[Change]
) -> Message:
    """`msg` with each call id used before (here or in an earlier message) made unique."""
    blocks: list[Block] = []
    this_turn: dict[str, deque[str]] = {}
    for k, block in enumerate(msg.content):
        if isinstance(block, ToolCall):
            old = block.id
            if old in seen:
                new_cid = f"{old}_{make_id(msg.id, old, k)[:8]}"
                changes.append(
                    Change(action="gave a repeated call id a new one", index=index, call_id=old, detail=new_cid)
                )
                block = replace(block, id=new_cid)
            seen.add(old)
            seen.add(block.id)
            this_turn.setdefault(old, deque()).append(block.id)
        blocks.append(block)
    waiting.update(this_turn)  # results after this message answer its calls, in call order
    return replace(msg, content=tuple(blocks)) if blocks != list(msg.content) else msg


def _result_as_user_text(msg: Message, result: ToolResult, reason: str) -> Message:
    header = f"[tool result for call {result.call_id}: {reason}]"
    if result.is_error:
        header += " [error]"
    blocks: list[Block] = [TextBlock(text=f"{header}\n{result.text}")]
    if not isinstance(result.content, str):
        blocks.extend(b for b in result.content if isinstance(b, ImageBlock))
    return Message(role="user", id=msg.id, timestamp=msg.timestamp, source_id=msg.source_id, content=tuple(blocks))


def count_pairs(messages: Iterable[Message]) -> tuple[int, int]:
    """(tool calls, tool results) in `messages`."""
    calls = results = 0
    for msg in messages:
        calls += len(msg.tool_calls)
        results += msg.tool_result is not None
    return calls, results
