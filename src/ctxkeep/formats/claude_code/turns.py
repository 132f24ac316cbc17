"""The chosen entries as messages: one assistant message per API response, its tool results after it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxkeep.formats.claude_code.blocks import NAME
from ctxkeep.formats.claude_code.entries import _Entry
from ctxkeep.formats.source import Source, few
from ctxkeep.messages import Block, Message, Role, ToolCall, ToolResult
from ctxkeep.pairing import validate


@dataclass(slots=True)
class _Turn:
    """One API response being assembled from its entries, and the results of its calls."""

    entries: list[_Entry]
    blocks: list[Block]
    results: list[Message] = field(default_factory=list)


def _messages(chosen: list[_Entry], source: Source, conv_id: str) -> tuple[Message, ...]:
    slots: list[_Turn | Message] = []
    turns: dict[str, _Turn] = {}
    owner: dict[str, _Turn] = {}  # call id -> the turn that made the call
    for e in chosen:
        if e.kind == "assistant":
            key = e.response
            turn = turns.get(key)
            if turn is None:
                turn = turns[key] = _Turn(entries=[], blocks=[])
                slots.append(turn)
            turn.entries.append(e)
            for block in e.blocks:
                if isinstance(block, ToolCall):
                    if owner.get(block.id) is turn:
                        continue  # the same call written twice for one response
                    owner.setdefault(block.id, turn)
                turn.blocks.append(block)
            continue
        for msg in _user_pieces(e):
            result = msg.tool_result
            target = owner.get(result.call_id) if result is not None else None
            if target is not None:
                target.results.append(msg)
            else:
                slots.append(msg)
    out: list[Message] = []
    for slot in slots:
        if isinstance(slot, Message):
            out.append(slot)
        else:
            out.extend(_turn_messages(slot))
    _report_pairing(out, source, conv_id)
    return tuple(out)


def _user_pieces(e: _Entry) -> list[Message]:
    """A user entry as messages: one per tool result, one per run of other blocks, in order."""
    groups: list[list[Block]] = []
    for block in e.blocks:
        if isinstance(block, ToolResult) or not groups or isinstance(groups[-1][0], ToolResult):
            groups.append([block])
        else:
            groups[-1].append(block)
    if not groups:
        groups.append([])  # an empty user message is still a message
    uuid = e.uuid
    extra = {NAME: dict(e.info)} if e.info else {}
    pieces: list[Message] = []
    for k, blocks in enumerate(groups):
        role: Role = "tool" if blocks and isinstance(blocks[0], ToolResult) else "user"
        msg_id = uuid if len(groups) == 1 else f"{uuid}:{k}"
        pieces.append(
            Message(role=role, content=tuple(blocks), id=msg_id, timestamp=e.timestamp, source_id=uuid, extra=extra)
        )
    return pieces


def _turn_messages(turn: _Turn) -> list[Message]:
    """The assistant message of a turn, then its results in call order."""
    first = turn.entries[0]
    info: dict[str, Any] = {k: v for e in turn.entries for k, v in e.info.items()}  # last entry's usage wins
    if first.mid:
        info["message_id"] = first.mid
    if len(turn.entries) > 1:
        info["entries"] = [e.uuid for e in turn.entries]
    msg = Message(
        role="assistant",
        content=tuple(turn.blocks),
        id=first.uuid,
        timestamp=first.timestamp,
        source_id=first.uuid,
        extra={NAME: info},
    )
    order = {b.id: i for i, b in enumerate(turn.blocks) if isinstance(b, ToolCall)}
    results = sorted(turn.results, key=lambda m: order.get(m.tool_result.call_id if m.tool_result else "", 0))
    return [msg, *results]


def _report_pairing(messages: Sequence[Message], source: Source, conv_id: str) -> None:
    problems = validate(messages)
    missing = [p.call_id for p in problems if p.kind == "missing_result" and p.call_id is not None]
    orphans = [p.call_id for p in problems if p.kind == "orphan_result" and p.call_id is not None]
    if missing:
        source.notes.append(f"conversation {conv_id}: {len(missing)} tool calls have no result: {few(missing)}")
    if orphans:
        source.notes.append(
            f"conversation {conv_id}: {len(orphans)} tool results have no call in the conversation: {few(orphans)}"
        )
