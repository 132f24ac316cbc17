"""OpenAI chat completions messages, both ways.

    from_openai(list of message dicts) -> list[Message]
    to_openai(list[Message])           -> list of message dicts

``system`` and ``developer`` messages become system messages; assistant ``tool_calls``
become `ToolCall` blocks; each ``tool`` message becomes a tool message. Fields ctxkeep
does not model (``name``, ``refusal``, ``audio``, ...) are kept in ``Message.extra["openai"]``
and written back, so OpenAI -> ctxkeep -> OpenAI gives back equal dicts.

Exporting messages that came from elsewhere: thinking blocks are left out (the chat
completions API has no field for them) and images inside tool results become a text
note, because tool messages accept text only. Call `repair` first if the messages may
have pairing problems: `to_openai` writes what it is given.

A file in this format is a JSON list of messages, a JSON object with ``messages``
(a request body), JSONL with one message per line, or JSONL with one ``{"messages": [...]}``
conversation per line (the fine-tuning format).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxkeep.formats.chat import parse_message_file, storable
from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source, describe
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    make_id,
)

NAME = "openai"


_KNOWN = frozenset({"role", "content", "tool_calls", "tool_call_id"})
_FORM = "openai:content"  # how `content` was written: "str", "parts", "null" or "absent"
_PART = "openai:part"  # an unmodelled content part, written back as it was
_CALL_TYPE = "openai:type"


def from_openai(messages: Sequence[Mapping[str, Any]], *, conversation_id: str = "", start: int = 0) -> list[Message]:
    """Messages from OpenAI chat message dicts. Raises ValueError naming a bad message.

    Ids are derived from `conversation_id` and the position (`start` + index): converting
    the same history again gives the same ids; pass `start` when converting a continuation.
    Lone UTF-16 surrogates are replaced by U+FFFD, with a warning.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise ValueError(f"expected a list of messages, got {type(messages).__name__}")
    out: list[Message] = []
    for i, raw in enumerate(messages, start):
        try:
            out.append(storable(message_from_openai(raw, make_id(NAME, conversation_id, i)), f"message {i}"))
        except ValueError as exc:
            raise ValueError(f"message {i}: {exc}") from exc
    return out


def message_from_openai(raw: Mapping[str, Any], msg_id: str) -> Message:
    """One OpenAI chat message dict as a `Message` with id `msg_id`, its text as given: for a caller that replaced
    lone surrogates in `raw` already (`ctxkeep.host.inputs`), where `from_openai` would scan it again. Raises
    ValueError naming what is wrong."""
    try:
        return _message(raw, msg_id)
    except RECORD_ERRORS as exc:
        raise ValueError(describe(exc)) from exc


def _message(raw: Mapping[str, Any], msg_id: str) -> Message:
    if not isinstance(raw, Mapping):
        raise TypeError(f"expected a message object, got {type(raw).__name__}")
    role = raw["role"]
    extra: dict[str, Any] = {}
    unknown = {k: v for k, v in raw.items() if k not in _KNOWN}
    if unknown:
        extra[NAME] = unknown
    content = raw.get("content")
    form = (
        "absent"
        if "content" not in raw
        else "null"
        if content is None
        else "str"
        if isinstance(content, str)
        else "parts"
    )
    extra[_FORM] = form

    if role == "tool":
        result = ToolResult(
            call_id=raw["tool_call_id"],
            content=content if isinstance(content, str) else tuple(_parts_in(content or [])),
        )
        return Message(role="tool", id=msg_id, content=(result,), extra=extra)

    if role in ("system", "developer"):
        if role == "developer":
            extra["openai:role"] = "developer"
        role = "system"
    elif role not in ("user", "assistant"):
        raise ValueError(f"unknown role {role!r}")

    blocks: list[Block] = []
    if isinstance(content, str):
        blocks.append(TextBlock(text=content))
    elif content is not None:
        blocks.extend(_parts_in(content))
    for call in raw.get("tool_calls") or ():
        blocks.append(_call_in(call))
    return Message(role=role, id=msg_id, content=tuple(blocks), extra=extra)


def _call_in(call: Mapping[str, Any]) -> ToolCall:
    declared = call.get("type")  # None when absent: written back the same way
    kind = declared or "function"
    body = call[kind]
    args_key = "input" if kind == "custom" else "arguments"
    extra: dict[str, Any] = {_CALL_TYPE: declared}
    rest = {k: v for k, v in call.items() if k not in ("id", "type", kind)}
    body_rest = {k: v for k, v in body.items() if k not in ("name", args_key)}
    if rest or body_rest:
        extra[NAME] = {"call": rest, "body": body_rest}
    arguments = body.get(args_key, "")
    if args_key not in body:
        extra["openai:arguments"] = "absent"
    elif isinstance(arguments, dict | list):  # some servers send an object, not JSON text
        extra["openai:arguments"] = "object"
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=call["id"], name=body["name"], arguments=arguments, extra=extra)


def _parts_in(parts: Sequence[Mapping[str, Any]]) -> list[TextBlock | ImageBlock]:
    blocks: list[TextBlock | ImageBlock] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text" and set(part) <= {"type", "text"}:
            blocks.append(TextBlock(text=part["text"]))
        elif kind == "image_url" and set(part) == {"type", "image_url"}:
            blocks.append(_image_in(part["image_url"]))
        else:
            # refusal, input_audio, file, text with extra keys...: kept whole, shown as text
            text = part.get("text") or part.get("refusal") or f"[{kind}]"
            blocks.append(TextBlock(text=str(text), extra={_PART: dict(part)}))
    return blocks


def _image_in(image_url: Mapping[str, Any]) -> ImageBlock:
    url = image_url["url"]
    extra = {NAME: {k: v for k, v in image_url.items() if k != "url"}} if len(image_url) > 1 else {}
    return ImageBlock.from_url(url, extra=extra)


# --- export --------------------------------------------------------------------------


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI chat message dicts for `messages`."""
    return [_message_out(m) for m in messages]


def _message_out(msg: Message) -> dict[str, Any]:
    form = msg.extra.get(_FORM)
    out: dict[str, Any] = {"role": msg.extra.get("openai:role", msg.role)}
    if msg.role == "tool":
        result = msg.content[0]
        assert isinstance(result, ToolResult)
        out["tool_call_id"] = result.call_id
        if form == "null":
            out["content"] = None
        elif form != "absent":
            out["content"] = _result_content_out(result)
    else:
        blocks = [b for b in msg.content if isinstance(b, TextBlock | ImageBlock)]
        calls = [b for b in msg.content if isinstance(b, ToolCall)]
        if form is None:
            form = _default_form(msg.role, blocks, bool(calls))
        if form == "str":
            out["content"] = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
        elif form == "parts":
            out["content"] = [_part_out(b) for b in blocks]
        elif form == "null":
            out["content"] = None
        if calls:
            out["tool_calls"] = [_call_out(c) for c in calls]
    out.update(msg.extra.get(NAME, {}))
    return out


def _default_form(role: str, blocks: Sequence[TextBlock | ImageBlock], has_calls: bool) -> str:
    if not blocks:
        return "null" if has_calls else "str"
    if role == "user" and any(isinstance(b, ImageBlock) or b.extra for b in blocks):
        return "parts"
    return "str"


def _result_content_out(result: ToolResult) -> str | list[dict[str, Any]]:
    if isinstance(result.content, str):
        return result.content
    parts: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, ImageBlock) and block.extra.get(_PART) is None:
            # tool messages take text only: say what was there instead of sending it
            parts.append({"type": "text", "text": f"[image {block.media_type} not sent: tool messages take text]"})
        else:
            parts.append(_part_out(block))
    return parts


def _part_out(block: TextBlock | ImageBlock | ThinkingBlock) -> dict[str, Any]:
    part = block.extra.get(_PART)
    if part is not None:
        return dict(part)
    if isinstance(block, ImageBlock):
        url = block.url if block.url is not None else f"data:{block.media_type};base64,{block.data or ''}"
        return {"type": "image_url", "image_url": {"url": url, **block.extra.get(NAME, {})}}
    return {"type": "text", "text": block.text}


def _call_out(call: ToolCall) -> dict[str, Any]:
    declared = call.extra.get(_CALL_TYPE, "function")
    kind = declared or "function"
    kept = call.extra.get(NAME, {"call": {}, "body": {}})
    out: dict[str, Any] = {"id": call.id}
    if declared is not None:
        out["type"] = declared
    args_key = "input" if kind == "custom" else "arguments"
    form = call.extra.get("openai:arguments")
    out[kind] = {"name": call.name, args_key: call.input() if form == "object" else call.arguments}
    if form == "absent":
        del out[kind][args_key]
    out[kind].update(kept["body"])
    out.update(kept["call"])
    return out


# --- files ---------------------------------------------------------------------------


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value[:5])


def sniff(source: Source) -> bool:
    """A list of role messages, a request body with ``messages``, or JSONL of either."""
    sample = source.sample()
    if isinstance(sample, dict):
        return _is_message_list(sample.get("messages")) or ("role" in sample and "content" in sample)
    return _is_message_list(sample)


def parse(source: Source) -> list[Conversation]:
    """Conversations from a JSON or JSONL file of OpenAI chat messages."""
    return parse_message_file(source, from_openai)
