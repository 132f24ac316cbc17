"""What a host hands over, as Messages: ctxkeep messages, OpenAI chat dicts and SDK objects, Anthropic
message dicts, Responses-API items, mixed in one list.

Ids come from content, not position: role, text, tool-call ids (a tool result: its call id) and the
source's own id when it has one, plus an occurrence counter, so the second identical "ok" gets another
id than the first and converting the same history twice gives the same ids. A `Message` keeps its id.

Lone UTF-16 surrogates (Node's JSON.stringify writes them; no UTF-8 file or request body can hold them)
are replaced by U+FFFD before anything else, ids included, so a broken character neither loses the turn
nor fails every later one; a warning names each message when it is added (`renumber`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ctxkeep.bigoutput import cut_middle
from ctxkeep.content_ids import Entry, key_of, number, renumber
from ctxkeep.errors import MessageError
from ctxkeep.formats import anthropic as anthropic_format
from ctxkeep.formats.anthropic import from_anthropic
from ctxkeep.formats.openai import message_from_openai
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    make_id,
    value_without_surrogates,
    without_surrogates,
)
from ctxkeep.settings import MAX_MESSAGE_CHARS

log = logging.getLogger("ctxkeep")

# The texts of a message past this many characters have their middle dropped, with a note, as they come in
# (`OffloadSettings.max_message_chars` is a session's own): an output that runs away (a tool whose search
# reads its own workspace, each output holding the ones before) must not take the process down with it.
MAX_TEXT_CHARS = MAX_MESSAGE_CHARS

# The content part types of OpenAI's chat API. A part of any other type in a user or assistant message
# marks it as Anthropic's: ``compaction`` (server-side compaction), a block type added after this
# release. Anthropic keeps such a block whole and gives it back unchanged; the chat reading would
# send it to Anthropic as the text "[compaction]", the provider's summary lost.
_OPENAI_PARTS = frozenset({"text", "image_url", "input_audio", "file", None})
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file", "refusal"})
_RESPONSES_ASSISTANT = frozenset({"function_call", "reasoning"})
# Fields of an Anthropic response `Message` that a request's message must not carry.
_ANTHROPIC_RESPONSE_ONLY = ("id", "type", "model", "stop_reason", "stop_sequence", "usage", "container")


def to_messages(items: Iterable[object] | object, *, taken: Container[str] = frozenset()) -> list[Message]:
    """Messages from a host's items; a single item is taken as a list of one.

    An id in `taken` (the ids a workspace holds already) is not given again: the message takes the next
    occurrence instead, as it would in the host's whole history. Raises `MessageError` naming the
    position of an item that is none of the kinds above.
    """
    entries = convert(items)
    return [e.message for e in renumber(entries, taken)]


def to_batch(messages: object, taken: Container[str], max_chars: int) -> list[Message]:
    """What `Session.add` was given, as a list of messages, each capped to `max_chars` (a tool result's one
    text by `offload_new`, in one go with its cut), no id in `taken` given again (as `to_messages`);
    `MessageError` for anything else."""
    if isinstance(messages, Message):
        return [capped(messages, max_chars, cut_later=True)]  # what `convert` does to each of a list
    batch = convert(messages, max_chars=max_chars, cut_later=True)
    return [e.message for e in renumber(batch, taken)]


def convert(items: Iterable[object] | object, *, max_chars: int | None = None, cut_later: bool = False) -> list[Entry]:
    """The entries of `items`, ids numbered by occurrence within them; each message `capped` to `max_chars`
    (default `MAX_TEXT_CHARS`) before its id is derived, so a runaway text is never copied whole.
    `cut_later` is `capped`'s: the caller hands the messages to `offload_new`."""
    return number(_entries(as_list(items), _cap(max_chars, cut_later=cut_later)))


def unnumbered(items: Sequence[object], start: int = 0, *, max_chars: int | None = None) -> list[Entry]:
    """The entries of `items`, items of a history from its item `start` on, their ids not derived yet (`number`);
    each message `capped` to `max_chars` (default `MAX_TEXT_CHARS`)."""
    return _entries(list(items), _cap(max_chars), start)


def _cap(max_chars: int | None, *, cut_later: bool = False) -> Callable[[Message], Message]:
    return functools.partial(capped, max_chars=max_chars, cut_later=cut_later)


def as_list(items: object, *, single: bool = True) -> list[object]:
    """`items` as a list; a single message or item as a list of one when `single`, else refused."""
    if single and (isinstance(items, Message | Mapping) or _dumpable(items)):
        return [items]
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise MessageError(
            "expected a message or a list of messages (ctxkeep Messages, OpenAI or Anthropic message dicts,"
            f" SDK message objects, Responses-API items); got {type(items).__name__}"
        )
    return list(items)


def _dumpable(item: object) -> bool:
    return callable(getattr(item, "model_dump", None))


def _entries(items: list[object], cap: Callable[[Message], Message], start: int = 0) -> list[Entry]:
    out: list[Entry] = []
    run: list[tuple[int, Mapping[str, Any]]] = []  # consecutive assistant-side Responses items: one message
    replaced: set[int] = set()  # the items whose lone surrogates were replaced

    def flush() -> None:
        if run:
            entry = _responses_turn(run, cap)
            out.append(replace(entry, replaced=any(i in replaced for i, _ in run)))
            run.clear()

    for i, item in enumerate(items, start):
        try:
            if isinstance(item, Message):
                flush()
                clean = without_surrogates(item)
                out.append(Entry(i, cap(clean), replaced=clean is not item))
                continue
            given = _as_mapping(item)
            raw = value_without_surrogates(given)  # before ids are derived: they are made from the text
            if raw is not given:
                replaced.add(i)
            kind = _kind(raw)
            if kind == "responses-assistant" or (kind == "responses" and raw.get("role") == "assistant"):
                run.append((i, raw))
                continue
            flush()
            entries = _CONVERTERS[kind](i, raw, cap)
            out.extend([replace(e, replaced=True) for e in entries] if i in replaced else entries)
        except MessageError:
            raise
        except RecursionError:
            message = f"item {i}: a value in it is nested deeper than JSON here can hold (254 levels); flatten it"
            raise MessageError(message, index=i) from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MessageError(f"item {i}: {exc}", index=i) from exc
    flush()
    return out


def _as_mapping(item: object) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return _with_plain_parts(item)
    if _dumpable(item):
        dumped = item.model_dump(exclude_none=True)  # type: ignore[attr-defined]
        if isinstance(dumped, dict):
            return _request_form(dumped)
    raise TypeError(
        f"expected a Message, a message dict or an SDK message object, got {type(item).__name__};"
        " pass ctxkeep Messages, OpenAI chat or Anthropic message dicts, or Responses-API items"
    )


def _with_plain_parts(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """A dict whose parts may be SDK objects, as the usual loop builds it (`{"role": "assistant", "content":
    reply.content}` with the anthropic SDK's blocks): those parts dumped to dicts, the rest as it was."""
    lists = {k: v for k, v in raw.items() if k in ("content", "tool_calls") and isinstance(v, list)}
    if not any(_dumpable(part) for parts in lists.values() for part in parts):
        return raw
    plain = {k: [p.model_dump(exclude_none=True) if _dumpable(p) else p for p in v] for k, v in lists.items()}
    return {**raw, **plain}


def _request_form(d: dict[str, Any]) -> dict[str, Any]:
    """A response object's dump as the request would carry it: the SDK's `ChatCompletionMessage` has
    `annotations`, and `audio` with fields a request refuses (only `audio.id` may be sent back)."""
    if d.get("role") == "assistant" and "type" not in d:
        d.pop("annotations", None)
        if isinstance(d.get("audio"), dict):
            d["audio"] = {"id": d["audio"].get("id")}
    return d


def _kind(raw: Mapping[str, Any]) -> str:
    kind = raw.get("type")
    if kind in _RESPONSES_ASSISTANT:
        return "responses-assistant"
    if kind == "function_call_output":
        return "responses-output"
    if kind not in (None, "message"):
        raise ValueError(
            f"unknown item type {kind!r}; expected a chat or Anthropic message, or a Responses 'message',"
            " 'function_call', 'function_call_output' or 'reasoning' item"
        )
    if "role" not in raw:
        raise ValueError(f"a message needs a 'role'; got the keys {sorted(raw)}")
    content = raw.get("content")
    types = {p.get("type") for p in content if isinstance(p, Mapping)} if isinstance(content, list) else set()
    if types & _RESPONSES_PARTS:
        return "responses"
    if types - _OPENAI_PARTS and not raw.get("tool_calls") and raw.get("role") in ("user", "assistant"):
        return "anthropic"
    if kind == "message" and isinstance(content, list) and "model" in raw:  # an Anthropic response, text only
        return "anthropic"
    return "openai" if kind is None else "responses"


def _openai(i: int, raw: Mapping[str, Any], cap: Callable[[Message], Message]) -> list[Entry]:
    if "content" not in raw and not raw.get("tool_calls"):
        raise ValueError(f"a {raw['role']} message needs 'content' (text or a list of parts)")
    try:
        # `raw` holds no lone surrogate any more (`_entries`), and the id derives from the key (`number`): the
        # message is built alone, not through `from_openai`, which would scan it again and hash a position id.
        msg = cap(message_from_openai(raw, _UNNUMBERED))
    except ValueError as exc:
        raise MessageError(f"item {i}: {exc}", index=i) from exc
    return [Entry(i, msg, _key(msg, raw.get("id")))]


def _anthropic(i: int, raw: Mapping[str, Any], cap: Callable[[Message], Message]) -> list[Entry]:
    source_id = raw.get("id")
    clean = {k: v for k, v in raw.items() if k not in _ANTHROPIC_RESPONSE_ONLY}
    pieces = _one_or_error(from_anthropic, i, clean, cap)
    # The pieces of one message are rejoined by their group; a positional group would join pieces
    # of different messages converted in different calls, so it derives from the content too.
    group = make_id("ctxkeep-group", *(_key(m, source_id) for m in pieces))
    return [Entry(i, replace(m, extra={**m.extra, anthropic_format._GROUP: group}), _key(m, source_id)) for m in pieces]


def _one_or_error(
    convert_one: Callable[..., list[Message]], i: int, raw: Mapping[str, Any], cap: Callable[[Message], Message]
) -> list[Message]:
    try:
        return [cap(m) for m in convert_one([raw])]
    except ValueError as exc:
        detail = str(exc).removeprefix("message 0: ")
        raise MessageError(f"item {i}: {detail}", index=i) from exc


def _responses_message(i: int, raw: Mapping[str, Any], cap: Callable[[Message], Message]) -> list[Entry]:
    role = raw["role"]
    if role == "developer":
        role = "system"
    if role not in ("system", "user", "assistant"):
        raise ValueError(f"unknown role {role!r}")
    msg = cap(Message(role=role, content=tuple(_parts(raw["content"]))))
    return [Entry(i, msg, _key(msg, raw.get("id")))]


def _responses_output(i: int, raw: Mapping[str, Any], cap: Callable[[Message], Message]) -> list[Entry]:
    output = raw["output"]
    content = output if isinstance(output, str) else tuple(p for p in _parts(output) if not isinstance(p, ToolCall))
    msg = cap(Message(role="tool", content=(ToolResult(call_id=raw["call_id"], content=content),)))
    return [Entry(i, msg, _key(msg, None))]


def _responses_turn(run: list[tuple[int, Mapping[str, Any]]], cap: Callable[[Message], Message]) -> Entry:
    """One assistant message for a run of assistant-side items (reasoning, text, parallel calls)."""
    blocks: list[Block] = []
    ids: list[str] = []
    for i, raw in run:
        try:
            kind = raw.get("type")
            if kind == "function_call":
                blocks.append(ToolCall(id=raw["call_id"], name=raw["name"], arguments=raw.get("arguments", "")))
            elif kind == "reasoning":
                text = "\n".join(s.get("text", "") for s in raw.get("summary") or ())
                blocks.append(ThinkingBlock(text=text))
            else:
                blocks.extend(_parts(raw["content"]))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MessageError(f"item {i}: {exc}", index=i) from exc
        if isinstance(raw.get("id"), str):
            ids.append(raw["id"])
    msg = cap(Message(role="assistant", content=tuple(blocks)))
    return Entry(run[0][0], msg, _key(msg, " ".join(ids) or None))


def _parts(content: object) -> list[TextBlock | ImageBlock]:
    if isinstance(content, str):
        return [TextBlock(text=content)]
    if not isinstance(content, list):
        raise TypeError(f"content must be text or a list of parts, got {type(content).__name__}")
    out: list[TextBlock | ImageBlock] = []
    for part in content:
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            out.append(TextBlock(text=part["text"]))
        elif kind == "refusal":
            out.append(TextBlock(text=part["refusal"]))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            out.append(ImageBlock.from_url(part["image_url"]))
        else:
            out.append(TextBlock(text=f"[{kind}]", extra={"responses:part": dict(part)}))
    return out


def capped(msg: Message, max_chars: int | None = None, *, cut_later: bool = False) -> Message:
    """`msg` with its texts (text blocks, a tool result's) in at most `max_chars` characters together: past
    that, each text over its share is cut in its middle, where a note says how much was dropped, and a
    warning; `msg` itself when they fit. The head and the end are kept: a command's first lines and its last
    (an error, a summary line) say the most. `max_chars` defaults to `MAX_TEXT_CHARS`.

    With `cut_later`, a tool result of one text is returned whole: the caller hands it to `offload_new`,
    which saves its capped form in pieces and cuts it in one go. Building the capped text here held it
    beside the original and its two slices (2.6 times a 40 MB output, issue 24)."""
    max_chars = MAX_TEXT_CHARS if max_chars is None else max_chars
    result = msg.tool_result if cut_later and len(msg.content) == 1 else None
    if result is not None and isinstance(result.content, str):
        return msg
    sizes = [len(text) for text in _texts(msg)]
    if sum(sizes) <= max_chars:
        return msg
    share = _share(sizes, max_chars)
    blocks = tuple(_capped_block(b, share) for b in msg.content)
    log.warning("a %s message had texts over %s characters: their middle was dropped", msg.role, f"{max_chars:,}")
    return replace(msg, content=blocks)


def _share(sizes: list[int], budget: int) -> int:
    """The most characters each text may keep so that all fit in `budget`: the smaller texts whole, the
    budget left split evenly among the bigger ones."""
    left = len(sizes)
    for size in sorted(sizes):
        if size * left > budget:
            return budget // left
        budget -= size
        left -= 1
    return budget


def _texts(msg: Message) -> Iterable[str]:
    for b in msg.content:
        if isinstance(b, TextBlock):
            yield b.text
        elif isinstance(b, ToolResult):
            parts = (b.content,) if isinstance(b.content, str) else b.content
            yield from (p if isinstance(p, str) else p.text for p in parts if not isinstance(p, ImageBlock))


def _capped_block(block: Block, max_chars: int) -> Block:
    if isinstance(block, TextBlock) and len(block.text) > max_chars:
        return replace(block, text=cut_middle(block.text, max_chars))
    if isinstance(block, ToolResult):
        if isinstance(block.content, str):
            return (
                replace(block, content=cut_middle(block.content, max_chars))
                if len(block.content) > max_chars
                else block
            )
        parts = tuple(_capped_block(p, max_chars) for p in block.content)
        return replace(block, content=parts)  # type: ignore[arg-type]  # text and image parts stay what they were
    return block


_CONVERTERS: dict[str, Callable[[int, Mapping[str, Any], Callable[[Message], Message]], list[Entry]]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "responses": _responses_message,
    "responses-output": _responses_output,
}


_key = key_of
# The id a chat message has until `number` gives it the one its key derives (what `from_openai` gave one alone).
_UNNUMBERED = make_id("openai", "", 0)
