"""Assembling one conversation: its slots in order, and the model responses (turns) that hold the calls
and the tool messages answering them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ctxkeep.formats.openhands.content import _images
from ctxkeep.formats.openhands.records import _args, _key
from ctxkeep.formats.source import parse_timestamp
from ctxkeep.messages import Block, Message, Role, TextBlock, ToolCall, make_id

NAME = "openhands"  # defined here, where ids are made; the package re-exports it


@dataclass
class _Turn:
    """One model response: its tool calls (in order) and the tool messages answering them."""

    head: Message  # the assistant message without the calls, filled in as actions arrive
    calls: list[ToolCall] = field(default_factory=list)
    results: dict[str, Message] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)

    def render(self) -> list[Message]:
        extra = dict(self.head.extra)
        extra[NAME] = {**extra.get(NAME, {}), "events": self.events}
        message = replace(self.head, content=(*self.head.content, *self.calls), extra=extra)
        return [message, *(self.results[c.id] for c in self.calls if c.id in self.results)]


@dataclass
class _Action:
    """A V0 agent action without tool-call metadata: a call if an observation answers it, else text."""

    text: Message | None
    turn: _Turn

    def render(self) -> list[Message]:
        if self.turn.results:
            return self.turn.render()
        return [self.text] if self.text is not None else []


_Answer = tuple[_Turn, str]  # the turn holding a call, and the call's id


class _Assembly:
    """One conversation being built: its state, and the message-making both event generations share."""

    def __init__(self, conv_id: str) -> None:
        self.conv_id = conv_id
        self.slots: list[Message | _Turn | _Action] = []
        self.turns: dict[str, _Turn] = {}  # model response id -> its turn
        self.by_event: dict[str | int, _Answer] = {}  # action event id -> its call
        self.by_call: dict[str, _Turn] = {}
        self.pending: _Answer | None = None  # the action just before, for an observation naming none
        self.agent_acted = False
        self.left_out: Counter[str] = Counter()
        self.state_events: Counter[str] = Counter()  # the agent's state changes, left out on purpose

    def messages(self) -> list[Message]:
        out: list[Message] = []
        for slot in self.slots:
            out.extend([slot] if isinstance(slot, Message) else slot.render())
        return out

    def _ids(self, event: Mapping[str, Any], index: int) -> tuple[str, str | None]:
        event_id = event.get("id")
        if event_id is None:
            return make_id(NAME, self.conv_id, "index", index), None
        return make_id(NAME, self.conv_id, event_id), str(event_id)

    def _message(self, role: Role, blocks: list[Block], event: Mapping[str, Any], index: int, **extra: Any) -> Message:
        msg_id, source_id = self._ids(event, index)
        return Message(
            role=role,
            id=msg_id,
            source_id=source_id,
            timestamp=parse_timestamp(event.get("timestamp")),
            content=tuple(blocks),
            extra={NAME: extra} if extra else {},
        )

    def _text(self, role: Role, text: str, event: Mapping[str, Any], index: int, **extra: Any) -> None:
        blocks: list[Block] = [TextBlock(text=text)]
        if role == "user":
            args = _args(event)
            blocks.extend(_images(args.get("image_urls") or args.get("images_urls")))
        self._append(self._message(role, blocks, event, index, **extra))

    def _append(self, slot: Message | _Turn | _Action) -> None:
        self.agent_acted = self.agent_acted or not isinstance(slot, Message) or slot.role == "assistant"
        self.slots.append(slot)

    def _role(self, event: Mapping[str, Any], kind: Any) -> Role:
        source = event.get("source")
        if source in ("user", "environment"):
            return "user"
        if source == "agent":
            return "assistant"
        # the resolver's output records no source: its first message is the user's task
        return "user" if kind == "message" and not self.agent_acted else "assistant"

    def _register(self, turn: _Turn, call: ToolCall, event: Mapping[str, Any]) -> None:
        turn.calls.append(call)
        turn.events.append(event.get("id"))
        event_key = _key(event.get("id"))
        if event_key is not None:
            self.by_event[event_key] = (turn, call.id)
        self.by_call[call.id] = turn
        self.pending = (turn, call.id)
