"""pydantic-ai 2.x messages both ways: `from_pydantic_ai` (a history as ctxkeep messages, with content ids)
and `to_pydantic_ai` (ctxkeep messages as a model request's messages).

Each ctxkeep block keeps the part it came from (without its text, which the block holds) in
``extra["pydantic_ai"]``, so a message converted there and back is the same part, ids, timestamps and
provider fields included; a tool result's text is the one ctxkeep holds (offloaded results are cut). The
pydantic-ai capability (`ctxkeep.adapters.pydantic_ai`) is hook glue over these. Needs ``pydantic-ai``
(``pip install 'ctxkeep[pydantic-ai]'``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter
from pydantic_ai.messages import (
    BinaryContent,
    CompactionPart,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)

from ctxkeep.content_ids import Entry, key_of, number
from ctxkeep.errors import MessageError
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    without_surrogates,
)

__all__ = [
    "KEY",
    "SUMMARY_MARK",
    "Converted",
    "Made",
    "from_pydantic_ai",
    "head_of",
    "message_entries",
    "to_pydantic_ai",
]

KEY = "pydantic_ai"  # where a block or message keeps the pydantic-ai fields ctxkeep does not model
SUMMARY_MARK = {"ctxkeep": "summary"}  # CompactionPart.metadata of the summary ctxkeep sends
WHOLE = "ctxkeep_whole"  # marks a response part kept whole: its block's text is only for the summary

_T = TypeVar("_T")
_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_REQUEST_PART: TypeAdapter[ModelRequestPart] = TypeAdapter(ModelRequestPart)
_RESPONSE_PART: TypeAdapter[ModelResponsePart] = TypeAdapter(ModelResponsePart)
_ITEM: TypeAdapter[UserContent] = TypeAdapter(UserContent)
# The request parts whose text a ctxkeep block holds (the rest of the part is in `extra`); others are kept whole.
_TEXT_FIELD = {"user-prompt": "content", "system-prompt": "content", "compaction": "content"}


# --- pydantic-ai -> ctxkeep ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Converted:
    """A pydantic-ai history as ctxkeep sees it: the standing system prompt apart, the rest as messages."""

    head: tuple[SystemPromptPart, ...]  # the system prompts that open the history: never compacted
    messages: list[Message]  # the conversation, ids derived from content (the same history, the same ids)

    @property
    def system(self) -> str:
        """The standing system prompt's text, for `prepare` to count."""
        return "\n\n".join(p.content for p in self.head)


def from_pydantic_ai(history: Sequence[ModelMessage]) -> Converted:
    """ctxkeep messages for a pydantic-ai history.

    A request becomes one message per part (a user message per prompt, a tool message per result),
    a response one assistant message. The system prompts that open the history are the `head`; a
    later one is a system message of the conversation. ctxkeep's own summary (a `CompactionPart` it
    sent) is left out. Raises `MessageError` naming the item that is not a pydantic-ai message.
    """
    head = head_of(history)
    return Converted(head, [e.message for e in number(message_entries(history, 0, head=head), {})])


def head_of(history: Sequence[object]) -> tuple[SystemPromptPart, ...]:
    """The system prompts that open `history` (before its first other part or response): the standing prompt."""
    head: list[SystemPromptPart] = []
    for message in history:
        if not isinstance(message, ModelRequest):
            break
        for part in message.parts:
            if not (isinstance(part, SystemPromptPart) and part.scope == "conversation"):
                return tuple(head)
            head.append(part)
    return tuple(head)


def message_entries(history: Sequence[object], start: int, *, head: Sequence[SystemPromptPart] = ()) -> list[Entry]:
    """The entries of pydantic-ai messages, a history's from its item `start` on, ids not derived yet; the parts
    of its `head` (`head_of`) are left out. Raises `MessageError` naming the item that is not a pydantic-ai
    message."""
    entries: list[Entry] = []
    standing = {id(p) for p in head}
    for i, message in enumerate(history, start):
        try:
            if isinstance(message, ModelRequest):
                shell = _shell(message)
                for part in message.parts:
                    if id(part) in standing:
                        continue
                    msg = _request_part(part, shell)
                    if msg is not None:
                        entries.append(_entry(i, msg, None))
            elif isinstance(message, ModelResponse):
                entries.append(_entry(i, _response(message), message.provider_response_id))
            else:
                raise TypeError(f"expected a ModelRequest or ModelResponse, got {type(message).__name__}")
        except (TypeError, ValueError) as exc:
            raise MessageError(f"pydantic-ai message {i}: {exc}", index=i) from exc
    return entries


def _entry(index: int, msg: Message, source_id: str | None) -> Entry:
    """The entry whose id derives from the message's content (and its occurrence, counted when the history is
    numbered), as `ctxkeep.host.inputs` does.

    The key is that of the text with lone UTF-16 surrogates replaced by U+FFFD, which no id can be made of;
    the message keeps them until `sync` replaces them, with a warning, once, when it is added.
    """
    return Entry(index, msg, key_of(without_surrogates(msg), source_id))


def _shell(message: ModelMessage) -> dict[str, Any]:
    """The message's own fields (timestamps, run and provider ids, ...) without its parts."""
    dumped: dict[str, Any] = _MESSAGE.dump_python(message, mode="json", exclude_none=True, exclude={"parts"})
    return dumped


def _kept(adapter: TypeAdapter[Any], part: object, *, without: str | None = None) -> dict[str, Any]:
    """The part as JSON, without the field whose text the ctxkeep block holds (not even copied)."""
    # The digests of a content's files are derived from it, and recomputed when it is rebuilt.
    exclude = {without, f"{without}_file_digests"} if without is not None else None
    dumped: dict[str, Any] = adapter.dump_python(part, mode="json", exclude_none=True, exclude=exclude)
    return dumped


def _request_part(part: ModelRequestPart, shell: dict[str, Any]) -> Message | None:
    kind = part.part_kind
    extra = {KEY: {"request": shell}}
    if isinstance(part, ToolReturnPart):
        content = _result_content(part)
        kept = _kept(_REQUEST_PART, part, without="content")
        result = ToolResult(call_id=part.tool_call_id, content=content, is_error=part.outcome in ("failed", "retried"))
        return Message(role="tool", content=(replace(result, extra={KEY: kept}),), extra=extra)
    if isinstance(part, RetryPromptPart) and part.tool_name is not None:  # deprecated, still built by old code
        result = ToolResult(call_id=part.tool_call_id, content=part.model_response(), is_error=True)
        return Message(role="tool", content=(replace(result, extra={KEY: _kept(_REQUEST_PART, part)}),), extra=extra)
    if isinstance(part, UserPromptPart):
        if isinstance(part.content, str):
            block = TextBlock(text=part.content, extra={KEY: _kept(_REQUEST_PART, part, without="content")})
            return Message(role="user", content=(block,), extra=extra)
        blocks = tuple(_item_block(item) for item in part.content)
        return Message(role="user", content=blocks, extra={KEY: {"request": shell, "part": _without_content(part)}})
    if isinstance(part, CompactionPart) and part.metadata == SUMMARY_MARK:
        return None  # ctxkeep's own summary, sent back: the session holds it already
    if isinstance(part, SystemPromptPart | CompactionPart):
        voice: Role = "system" if isinstance(part, SystemPromptPart) else "user"
        block = TextBlock(text=part.content or "", extra={KEY: _kept(_REQUEST_PART, part, without="content")})
        return Message(role=voice, content=(block,), extra=extra)
    # Retry feedback (user-voice on the wire) and the records of instruction, tool and setting changes (the
    # system's): kept whole, in place, their text for the summary; sent back exactly as they were while live.
    kept = _kept(_REQUEST_PART, part)
    said = kept.get("content")
    readable = said if isinstance(said, str) else json.dumps(said) if said is not None else f"[{kind}]"
    role: Role = "user" if kind in ("retry-feedback", "retry-prompt") else "system"
    return Message(role=role, content=(TextBlock(text=readable, extra={KEY: kept}),), extra=extra)


def _without_content(part: UserPromptPart) -> dict[str, Any]:
    return _kept(_REQUEST_PART, replace(part, content=""), without="content")


def _result_content(part: ToolReturnPart) -> str | tuple[TextBlock | ImageBlock, ...]:
    """A tool return's content as ctxkeep holds it: the text the model is sent, then any files it returned.

    A value that is not text (a dict, a model) is held as the JSON text pydantic-ai sends for it."""
    text = part.model_response_str(wrap_if_error=False)
    items: list[Any] = part.content if isinstance(part.content, list) else [part.content]
    files: list[UserContent] = [item for item in items if _is_file(item)]
    if not files:
        return text
    return (TextBlock(text=text), *(_item_block(f) for f in files))


def _is_file(item: object) -> bool:
    return isinstance(item, ImageUrl | BinaryContent) or getattr(item, "kind", None) in (
        "audio-url",
        "document-url",
        "video-url",
        "uploaded-file",
    )


def _item_block(item: UserContent) -> TextBlock | ImageBlock:
    """A block for one item of a prompt or tool return: text as text, an image as an image, the rest kept whole."""
    if isinstance(item, str):
        return TextBlock(text=item)
    dumped = _ITEM.dump_python(item, mode="json", exclude_none=True)
    if isinstance(item, TextContent):
        dumped.pop("content", None)
        return TextBlock(text=item.content, extra={KEY: dumped})
    if isinstance(item, ImageUrl):
        return ImageBlock(media_type=item.media_type, url=item.url, extra={KEY: dumped})
    if isinstance(item, BinaryContent) and item.is_image:
        data = dumped.pop("data")  # held once, as the image's bytes
        return ImageBlock(media_type=item.media_type, data=data, extra={KEY: dumped})
    return TextBlock(text=f"[{dumped.get('kind', 'file')}]", extra={KEY: dumped})


def _response(message: ModelResponse) -> Message:
    blocks: list[Block] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            blocks.append(TextBlock(text=part.content, extra={KEY: _kept(_RESPONSE_PART, part, without="content")}))
        elif isinstance(part, ThinkingPart):
            kept = _kept(_RESPONSE_PART, part, without="content")
            blocks.append(ThinkingBlock(text=part.content, signature=part.signature, extra={KEY: kept}))
        elif isinstance(part, ToolCallPart) and part.part_kind == "tool-call":
            kept = _kept(_RESPONSE_PART, part, without="args")
            if not isinstance(part.args, str):
                kept["args_parsed"] = True  # built from a dict: rebuilt as one
            arguments = part.args if isinstance(part.args, str) else part.args_as_json_str()
            call = ToolCall(id=part.tool_call_id, name=part.tool_name, arguments=arguments)
            blocks.append(replace(call, extra={KEY: kept}))
        else:  # native tool calls and returns, files, a provider's compaction: sent back as they were
            text = getattr(part, "content", None)
            readable = text if isinstance(text, str) else f"[{part.part_kind}]"
            blocks.append(TextBlock(text=readable, extra={KEY: _kept(_RESPONSE_PART, part) | {WHOLE: True}}))
    return Message(role="assistant", content=tuple(blocks), extra={KEY: {"response": _shell(message)}})


# --- ctxkeep -> pydantic-ai ------------------------------------------------------------


class Made:
    """pydantic-ai objects built for ctxkeep messages, kept between calls by what they were built from: a context
    is mostly the same message objects call after call, so each is built once (`to_pydantic_ai(..., made=)`).
    What a call did not use is let go at the next."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, object], tuple[object, Any]] = {}
        self._used: dict[tuple[int, object], tuple[object, Any]] = {}

    def get(self, source: object, extra: object, build: Callable[[], _T]) -> _T:
        """What `build` made for `source` (and `extra`, what else it depends on), built now when it is new."""
        key = (id(source), extra)
        hit = self._used.get(key) or self._kept.get(key)
        if hit is None or hit[0] is not source:  # held with its source, so an id is never another's
            hit = (source, build())
        self._used[key] = hit
        return cast("_T", hit[1])

    def next_call(self) -> None:
        """Let go of what the call before this one did not use."""
        self._kept, self._used = self._used, {}


def to_pydantic_ai(
    messages: Sequence[Message],
    *,
    head: Sequence[SystemPromptPart] = (),
    summary: str | None = None,
    made: Made | None = None,
) -> list[ModelMessage]:
    """pydantic-ai messages for ctxkeep messages, after the standing system prompt `head` and the `summary`.

    Consecutive user, tool and system messages form one `ModelRequest` (as pydantic-ai merges them
    anyway); an assistant message is one `ModelResponse`. The summary is a `CompactionPart` in the first
    request, after the system prompts. Messages that did not come from pydantic-ai convert too (a tool
    result takes its tool's name from its call). `made` keeps what was built for the same messages before.
    """
    made = made if made is not None else Made()
    made.next_call()
    out: list[ModelMessage] = []
    opening: list[ModelRequestPart] = [*head]
    if summary:
        opening.append(CompactionPart(content=summary, metadata=dict(SUMMARY_MARK)))
    pending: list[ModelRequestPart] = opening
    shell: dict[str, Any] = {}
    names: dict[str, str] = {}
    for msg in messages:
        if msg.role == "assistant":
            if pending:
                out.append(_request(pending, shell, made))
            pending, shell = [], {}
            names.update((c.id, c.name) for c in msg.tool_calls)
            out.append(made.get(msg, None, lambda m=msg: _response_of(m)))  # type: ignore[misc]
            continue
        own = msg.extra.get(KEY, {}).get("request")
        if pending and own is not None and shell and own != shell:
            out.append(_request(pending, shell, made))  # the next of two requests no response came between
            pending = []
        shell = own if own is not None else shell
        result = msg.tool_result
        name = names.get(result.call_id) if result is not None else None  # a result's part names its call's tool
        pending.append(made.get(msg, name, lambda m=msg: _request_part_of(m, names)))  # type: ignore[misc]
    if pending:
        out.append(_request(pending, shell, made))
    return out


def _request(parts: list[ModelRequestPart], shell: Mapping[str, Any], made: Made) -> ModelRequest:
    def empty() -> ModelRequest:
        fields = {k: v for k, v in shell.items() if k not in ("parts", "kind")}
        request = _MESSAGE.validate_python({**fields, "kind": "request", "parts": []})
        assert isinstance(request, ModelRequest)
        return request

    return replace(made.get(shell, "request", empty), parts=parts)


def _response_of(msg: Message) -> ModelResponse:
    parts: list[dict[str, Any]] = []
    for block in msg.content:
        kept = dict(block.extra.get(KEY, {}))
        if isinstance(block, ToolCall):
            parsed = kept.pop("args_parsed", False)
            args = block.input_object() if parsed else block.arguments
            parts.append({"part_kind": "tool-call", "tool_name": block.name, "tool_call_id": block.id} | kept)
            parts[-1]["args"] = args
        elif isinstance(block, ThinkingBlock):
            parts.append({"part_kind": "thinking", "signature": block.signature} | kept | {"content": block.text})
        elif isinstance(block, TextBlock) and kept.pop(WHOLE, False):
            parts.append(kept)
        elif isinstance(block, TextBlock):
            parts.append({"part_kind": "text"} | kept | {"content": block.text})
        # An image in an assistant message has no pydantic-ai response part: ctxkeep never makes one from pydantic-ai.
    shell = dict(msg.extra.get(KEY, {}).get("response", {}))
    response = _MESSAGE.validate_python({**shell, "kind": "response", "parts": parts})
    assert isinstance(response, ModelResponse)
    return response


def _request_part_of(msg: Message, names: Mapping[str, str]) -> ModelRequestPart:
    if msg.role == "tool":
        result = msg.tool_result
        assert result is not None  # a tool message holds exactly one result
        kept = dict(result.extra.get(KEY, {}))
        if "content" in kept:  # a part kept whole (a deprecated retry prompt)
            return _REQUEST_PART.validate_python(kept)
        base = {
            "part_kind": "tool-return",
            "tool_name": names.get(result.call_id, ""),
            "tool_call_id": result.call_id,
            "outcome": "failed" if result.is_error else "success",
        }
        part = _REQUEST_PART.validate_python(base | kept | {"content": ""})
        assert isinstance(part, ToolReturnPart)
        return replace(part, content=_return_content(result))
    blocks = msg.content
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        kept = dict(blocks[0].extra.get(KEY, {}))
        default = "system-prompt" if msg.role == "system" else "user-prompt"
        field = _TEXT_FIELD.get(kept.get("part_kind", default))
        data = {"part_kind": default} | kept
        if field is not None and field not in kept:
            data[field] = blocks[0].text
        return _REQUEST_PART.validate_python(data)
    kept = dict(msg.extra.get(KEY, {}).get("part", {"part_kind": "user-prompt"}))
    part = _REQUEST_PART.validate_python(kept | {"content": ""})
    assert isinstance(part, UserPromptPart)
    return replace(part, content=[_item_of(b) for b in blocks if isinstance(b, TextBlock | ImageBlock)])


def _return_content(result: ToolResult) -> Any:
    if isinstance(result.content, str):
        return result.content
    return [_item_of(b) for b in result.content]


def _item_of(block: TextBlock | ImageBlock) -> UserContent:
    kept = dict(block.extra.get(KEY, {}))
    if isinstance(block, ImageBlock):
        if not kept:
            return ImageUrl(url=block.url) if block.url else BinaryContent.from_data_uri(_data_uri(block))
        if block.data is not None and "data" not in kept:
            kept["data"] = block.data
        return _ITEM.validate_python(kept)
    if not kept:
        return block.text
    if kept.get("kind") == "text-content":
        kept["content"] = block.text
    return _ITEM.validate_python(kept)


def _data_uri(block: ImageBlock) -> str:
    return f"data:{block.media_type};base64,{block.data or ''}"
