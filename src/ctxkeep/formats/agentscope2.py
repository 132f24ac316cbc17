"""AgentScope 2.x ``Msg`` dicts (``Msg.model_dump(mode="json")``), both ways.

    from_agentscope2(list of Msg dicts) -> list[Message]
    to_agentscope2(list[Message])       -> list of Msg dicts

In 2.x one assistant ``Msg`` holds a whole reply: the hints the agent injected, the model's text and
thinking, its tool calls and the tool results, appended block by block as the reply goes on. ctxkeep
keeps one result per ``tool`` message right after its call, so an assistant Msg is split into pieces:

    Msg [hint, text, call A, call B, result A, result B, text]
     -> user(hint) assistant(text) assistant(call A, call B) tool(A) tool(B) assistant(text)

A hint becomes a user message (AgentScope's own formatters send it as one); each text, thinking or data
block before the first call of a run is a piece of its own; the calls (with anything between them)
are one piece; each result is a tool message. Pieces never change once the Msg grows, because blocks
are only appended and a run of calls is always followed by its results, so a host's whole history
converts to the same pieces every time (their ids come from the Msg id and the block id). Every field
of the Msg and of each block rides along in ``extra``, and `to_agentscope2` rejoins the pieces of one
Msg, so a round trip gives back equal dicts. A Msg with no blocks (AgentScope uses one to carry token
usage) has nothing to send and gives no piece.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxkeep.messages import Block, ImageBlock, Message, Role, TextBlock, ThinkingBlock, ToolCall, ToolResult, make_id

NAME = "agentscope2"

_MSG = "agentscope2:msg"  # the Msg's own fields other than content
_HINT = "agentscope2:hint"  # on a piece made of a hint block: the block's other fields
_WHOLE = "agentscope2:whole"  # a block ctxkeep does not model (audio, PDF...), kept whole
_ERROR_STATES = frozenset({"error", "denied", "interrupted"})
_SAYING = frozenset({"text", "thinking", "data"})


def from_agentscope2(msgs: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Messages from AgentScope 2.x Msg dicts. Raises ValueError naming a bad Msg."""
    if not isinstance(msgs, Sequence) or isinstance(msgs, str | bytes):
        raise ValueError(f"expected a list of Msg dicts, got {type(msgs).__name__}")
    out: list[Message] = []
    for i, raw in enumerate(msgs):
        try:
            out.extend(msg_pieces(raw))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"Msg {i}: {type(exc).__name__}: {exc}") from exc
    return out


def msg_pieces(raw: Mapping[str, Any]) -> list[Message]:
    """The ctxkeep messages of one Msg dict, oldest first."""
    if not isinstance(raw, Mapping):
        raise TypeError(f"expected a Msg dict, got {type(raw).__name__}")
    role = raw["role"]
    if role not in ("user", "assistant", "system"):
        raise ValueError(f"role must be user, assistant or system, got {role!r}")
    msg_id = str(raw["id"])
    fields = {k: v for k, v in raw.items() if k != "content"}
    blocks = raw["content"]
    if not isinstance(blocks, list):
        raise TypeError(f"content must be a list of blocks, got {type(blocks).__name__}")

    def piece(piece_role: Role, content: Sequence[Block], key: str, **extra: Any) -> Message:
        return Message(
            role=piece_role,
            id=make_id(NAME, msg_id, key),
            source_id=msg_id,
            content=tuple(content),
            extra={_MSG: fields, **extra},
        )

    if role != "assistant":
        return [piece(role, [_block_in(b) for b in blocks], "all")] if blocks else []
    out: list[Message] = []
    calls: list[Block] = []  # the open run of calls, with what lies between them
    calls_key = ""
    for k, block in enumerate(blocks):
        kind = block.get("type")
        key = f"{kind}:{block.get('id', k)}"
        if kind in ("tool_result", "hint") and calls:
            out.append(piece("assistant", calls, calls_key))
            calls = []
        if kind == "tool_result":
            out.append(piece("tool", [_result_in(block)], key))
        elif kind == "hint":
            rest = {k2: v for k2, v in block.items() if k2 not in ("type", "hint")}
            hint = block["hint"]
            parts = [TextBlock(text=hint)] if isinstance(hint, str) else [_block_in(b) for b in hint]
            out.append(piece("user", parts, key, **{_HINT: {**rest, "str": isinstance(hint, str)}}))
        elif kind == "tool_call" or calls:
            if not calls:
                calls_key = key
            calls.append(_block_in(block))
        else:
            out.append(piece("assistant", [_block_in(block)], key))
    if calls:
        out.append(piece("assistant", calls, calls_key))
    return out


def _block_in(block: Mapping[str, Any]) -> Block:
    kind = block.get("type")
    if kind == "text":
        return TextBlock(text=block["text"], extra={NAME: _rest(block, "text")})
    if kind == "thinking":
        return ThinkingBlock(text=block["thinking"], extra={NAME: _rest(block, "thinking")})
    if kind == "tool_call":
        return ToolCall(
            id=block["id"], name=block["name"], arguments=block["input"], extra={NAME: _rest(block, "input")}
        )
    source = block.get("source") if kind == "data" else None
    if isinstance(source, Mapping) and str(source.get("media_type", "")).startswith("image/"):
        rest = {NAME: _rest(block, "source")}
        if source.get("type") == "base64":
            return ImageBlock(media_type=source["media_type"], data=source["data"], extra=rest)
        if source.get("type") == "url":
            return ImageBlock(media_type=source["media_type"], url=source["url"], extra=rest)
    # audio, PDF, anything unmodelled: kept whole, shown to ctxkeep as a marker
    what = source.get("media_type") if isinstance(source, Mapping) else kind
    return TextBlock(text=f"[{what}]", extra={_WHOLE: dict(block)})


def _result_in(block: Mapping[str, Any]) -> ToolResult:
    output = block["output"]
    content: str | tuple[TextBlock | ImageBlock, ...]
    if isinstance(output, str):
        content = output
    else:
        parts = [_block_in(b) for b in output]
        content = tuple(p if isinstance(p, TextBlock | ImageBlock) else TextBlock(text=str(p)) for p in parts)
    return ToolResult(
        call_id=block["id"],
        content=content,
        is_error=block.get("state") in _ERROR_STATES,
        extra={NAME: _rest(block, "output")},
    )


def _rest(block: Mapping[str, Any], *modelled: str) -> dict[str, Any]:
    """A block's fields that ctxkeep does not model (ids, times, states), to write back."""
    return {k: v for k, v in block.items() if k not in modelled}


# --- export --------------------------------------------------------------------------


def to_agentscope2(messages: Sequence[Message], *, names: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """AgentScope 2.x Msg dicts for `messages`: the pieces of one Msg rejoined (`msg_groups`), other messages a
    Msg each.

    A message that did not come from a Msg (the summary ctxkeep writes, a placeholder result) gets a Msg
    of its role with the message's id; a ``tool`` message becomes a result block of an assistant Msg,
    named after its call's tool (`names`, call id to tool name; default: the calls in `messages`).
    """
    names = {c.id: c.name for m in messages for c in m.tool_calls} if names is None else names
    out: list[dict[str, Any]] = []
    for group in msg_groups(messages):
        out.append(_new_msg(group[0], group[0].extra.get(_MSG)))
        for msg in group:
            out[-1]["content"].extend(_piece_out(msg, names))
    return out


def msg_groups(messages: Sequence[Message]) -> list[list[Message]]:
    """`messages` in the runs that make one Msg each: consecutive pieces of the same Msg, or one message."""
    out: list[list[Message]] = []
    group_id: str | None = None
    for msg in messages:
        fields = msg.extra.get(_MSG)
        joins = isinstance(fields, Mapping) and group_id is not None and fields.get("id") == group_id and out
        if not joins:
            out.append([])
        out[-1].append(msg)
        group_id = fields.get("id") if isinstance(fields, Mapping) else None
    return out


def _new_msg(msg: Message, fields: object) -> dict[str, Any]:
    if isinstance(fields, Mapping):
        return {**fields, "content": []}
    role = "assistant" if msg.role == "tool" else msg.role
    return {"id": msg.id, "name": role, "role": role, "metadata": {}, "content": []}


def _piece_out(msg: Message, names: Mapping[str, str]) -> list[dict[str, Any]]:
    hint = msg.extra.get(_HINT)
    if isinstance(hint, Mapping):
        rest = {k: v for k, v in hint.items() if k != "str"}
        parts = [_block_out(b, names) for b in msg.content]
        if hint.get("str"):
            return [{"type": "hint", "hint": msg.text, **rest}]
        return [{"type": "hint", "hint": parts, **rest}]
    return [_block_out(b, names) for b in msg.content]


def _block_out(block: Block, names: Mapping[str, str]) -> dict[str, Any]:
    whole = block.extra.get(_WHOLE)
    if isinstance(whole, Mapping):
        return dict(whole)
    rest = dict(block.extra.get(NAME) or {})
    if isinstance(block, TextBlock):
        return {"type": "text", **rest, "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", **rest, "thinking": block.text}
    if isinstance(block, ToolCall):
        return {"type": "tool_call", "id": block.id, "name": block.name, **rest, "input": block.arguments}
    if isinstance(block, ImageBlock):
        source: dict[str, Any] = {"type": "base64", "data": block.data or "", "media_type": block.media_type}
        if block.url is not None:
            source = {"type": "url", "url": block.url, "media_type": block.media_type}
        return {"type": "data", **rest, "source": source}
    output: str | list[dict[str, Any]]
    output = block.content if isinstance(block.content, str) else [_block_out(b, names) for b in block.content]
    result = {"type": "tool_result", "id": block.call_id, "name": names.get(block.call_id, "")}
    if not rest:  # a result ctxkeep wrote (no Msg behind it): its state says whether it failed
        result["state"] = "error" if block.is_error else "success"
    return {**result, **rest, "output": output}
