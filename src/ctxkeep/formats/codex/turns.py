"""Assembling messages: one per model response, outputs right after their calls, other messages held."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ctxkeep.formats.codex.items import _call, _content_item, _image_generation, _reasoning, _web_search
from ctxkeep.formats.codex.outputs import _output
from ctxkeep.formats.codex.records import (
    _CALL_TYPES,
    _COMPACTION_TYPES,
    _IGNORED_ITEMS,
    _OUTPUT_TYPES,
    _Bad,
)
from ctxkeep.formats.source import Source
from ctxkeep.messages import Block, ImageBlock, Message, Role, TextBlock, ToolCall, ToolResult, make_id

NAME = "codex"  # defined here, where ids are made; the package re-exports it

COMPACTED_HEADER = "[Summary of the earlier conversation, written when Codex compacted its context]\n\n"
ENCRYPTED_COMPACTION_TEXT = "[The earlier conversation was compacted here; the provider's summary is encrypted]"


_Held = tuple[Role, list[Block], datetime | None, str | None, Mapping[str, Any]]


@dataclass
class _Builder:
    """Turns records into messages, holding the assistant message still being assembled.

    `awaiting` holds the ids of the current response's calls that have no output yet. While it is
    not empty, assistant-side items join that response's message (`open_index` once it is
    emitted) and user-side messages are held in `held` until the outputs are in.
    """

    source: Source
    conv_id: str
    messages: list[Message] = field(default_factory=list)
    used_ids: set[str] = field(default_factory=set)
    unknown: dict[str, int] = field(default_factory=dict)
    pending: list[Block] = field(default_factory=list)
    pending_ts: datetime | None = None
    pending_source_id: str | None = None
    awaiting: set[str] = field(default_factory=set)
    open_index: int | None = None
    held: list[_Held] = field(default_factory=list)
    held_passed: bool = False  # an output was placed while messages were held: releasing them moves them
    moved: int = 0

    # --- emitting ----------------------------------------------------------------------

    def emit(
        self,
        role: Role,
        blocks: Sequence[Block],
        ts: datetime | None,
        source_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Append a message, with the source's id when it has an unused one."""
        if source_id and source_id not in self.used_ids:
            msg_id = source_id
        else:
            msg_id = make_id(NAME, self.conv_id, len(self.messages))
        self.used_ids.add(msg_id)
        self.messages.append(
            Message(role=role, content=tuple(blocks), id=msg_id, timestamp=ts, source_id=source_id, extra=extra or {})
        )

    def add_assistant(self, block: Block, ts: datetime | None, source_id: str | None) -> None:
        """Add a block to the assistant message of the current model response."""
        if any(role == "user" for role, *_ in self.held):
            # the model answers a user who spoke after the calls: their outputs will not come. A
            # held notice (developer/system) says nothing of the kind; the response goes on
            self.settle()
        elif self.open_index is not None:
            # the response goes on while its calls' outputs come in: the block joins its message
            msg = self.messages[self.open_index]
            self.messages[self.open_index] = replace(msg, content=(*msg.content, block))
            if isinstance(block, ToolCall):
                self.awaiting.add(block.id)
            return
        if not self.pending:
            self.pending_ts = ts
        if self.pending_source_id is None:
            self.pending_source_id = source_id
        self.pending.append(block)
        if isinstance(block, ToolCall):
            self.awaiting.add(block.id)

    def flush(self) -> None:
        """Close the assistant message being assembled, if any."""
        if self.pending:
            self.emit("assistant", self.pending, self.pending_ts, self.pending_source_id)
            if self.awaiting:
                self.open_index = len(self.messages) - 1
        self.pending = []
        self.pending_ts = None
        self.pending_source_id = None

    def add_other(
        self,
        role: Role,
        blocks: Sequence[Block],
        ts: datetime | None,
        source_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """A user-side message: held back while calls await their outputs, else placed here."""
        if self.awaiting:
            self.held.append((role, list(blocks), ts, source_id, extra or {}))
            return
        self.flush()
        self.emit(role, blocks, ts, source_id, extra)

    def add_result(self, result: ToolResult, ts: datetime | None, source_id: str | None) -> None:
        """A tool message; the last awaited output releases the messages held back."""
        self.flush()
        self.emit("tool", [result], ts, source_id)
        if self.held:
            self.held_passed = True
        self.awaiting.discard(result.call_id)
        if not self.awaiting:
            self.settle()

    def settle(self) -> None:
        """End the current response: close its message, place held messages, stop waiting."""
        self.flush()
        if self.held_passed:
            self.moved += len(self.held)
        for role, blocks, ts, source_id, extra in self.held:
            self.emit(role, blocks, ts, source_id, extra)
        self.held = []
        self.held_passed = False
        self.awaiting.clear()
        self.open_index = None

    def report(self) -> None:
        """Note what was left out or moved."""
        for kind, n in sorted(self.unknown.items()):
            self.source.notes.append(f"left out {n} response item(s) of unknown type {kind!r}")
            self.source.leave_out(f"response_item {kind} (unknown type)", n)
        if self.moved:
            self.source.notes.append(
                f"moved {self.moved} message(s) that Codex recorded between tool calls and their outputs "
                "to just after the outputs, so no message separates a call from its result"
            )

    # --- records -----------------------------------------------------------------------

    def session_meta(self, meta: Mapping[str, Any], ts: datetime | None) -> None:
        """The base instructions (the system prompt Codex sends) become a system message."""
        base = meta.get("base_instructions")
        text = base.get("text") if isinstance(base, dict) else base
        if isinstance(text, str) and text:
            self.emit("system", [TextBlock(text=text)], ts, extra={"codex:source": "base_instructions"})

    def compacted(self, payload: Mapping[str, Any], ts: datetime | None) -> None:
        """A local compaction: its summary becomes user text at this point."""
        message = payload.get("message")
        if not isinstance(message, str):
            raise _Bad("'message' must be the summary text")
        self.settle()
        extra: dict[str, Any] = {"codex:type": "compacted"}
        if payload.get("replacement_history") is not None:
            extra["codex:replacement_history"] = payload["replacement_history"]
        text = COMPACTED_HEADER + message if message else ENCRYPTED_COMPACTION_TEXT
        if not message:
            self.source.notes.append("a compacted record has no summary text; a marker message stands in for it")
        self.emit("user", [TextBlock(text=text)], ts, extra=extra)

    def item(self, item: Mapping[str, Any], ts: datetime | None) -> None:
        """One response item."""
        kind = item.get("type")
        source_id = item.get("id") if isinstance(item.get("id"), str) else None
        if kind == "message":
            self.message(item, ts, source_id)
        elif kind == "reasoning":
            self.add_assistant(_reasoning(item), ts, source_id)
        elif kind in _CALL_TYPES:
            self.add_assistant(_call(item, str(kind)), ts, source_id)
        elif kind == "web_search_call":
            self.add_assistant(_web_search(item), ts, source_id)
        elif kind == "image_generation_call":
            self.add_assistant(_image_generation(item), ts, source_id)
        elif kind in _OUTPUT_TYPES:
            self.add_result(_output(item, str(kind)), ts, source_id)
        elif kind == "agent_message":
            self.agent_message(item, ts, source_id)
        elif kind in _COMPACTION_TYPES:
            self.settle()
            extra = {"codex:type": kind, "codex:encrypted_content": item.get("encrypted_content")}
            self.source.notes.append(f"a {kind} item holds an encrypted summary; a marker message stands in for it")
            self.emit("user", [TextBlock(text=ENCRYPTED_COMPACTION_TEXT)], ts, source_id, extra)
        elif kind in _IGNORED_ITEMS:
            self.source.leave_out(f"response_item {kind} (harness bookkeeping)")
        elif isinstance(kind, str):
            self.unknown[kind] = self.unknown.get(kind, 0) + 1
        else:
            raise _Bad("response item without a 'type'")

    def message(self, item: Mapping[str, Any], ts: datetime | None, source_id: str | None) -> None:
        """A user, assistant, developer or system message."""
        role = item["role"]
        content = item.get("content")
        if not isinstance(content, list):
            raise _Bad("message 'content' must be a list")
        if role not in ("user", "assistant", "developer", "system"):
            raise _Bad(f"message with unknown role {role!r}")
        blocks = [self.content_item(part) for part in content]
        if role == "assistant":
            phase = item.get("phase")
            for block in blocks:
                if phase is not None and isinstance(block, TextBlock):
                    block = TextBlock(text=block.text, extra={**block.extra, "codex:phase": phase})
                self.add_assistant(block, ts, source_id)
        elif role == "user":
            self.add_other("user", blocks, ts, source_id)
        else:
            self.add_other("system", blocks, ts, source_id, {"codex:role": role})

    def agent_message(self, item: Mapping[str, Any], ts: datetime | None, source_id: str | None) -> None:
        """A message from another agent: user text, the sender in extra."""
        content = item.get("content")
        if not isinstance(content, list):
            raise _Bad("agent_message 'content' must be a list")
        texts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if len(texts) < len(content):
            self.source.notes.append("an agent_message has encrypted parts; only its plain text was imported")
        extra = {
            "codex:type": "agent_message",
            "codex:author": item.get("author"),
            "codex:recipient": item.get("recipient"),
        }
        self.add_other("user", [TextBlock(text=t) for t in texts], ts, source_id, extra)

    def content_item(self, part: Any) -> TextBlock | ImageBlock:
        """One content item of a message: text, an image, or something kept whole as text."""
        block = _content_item(part)
        if block is None:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            self.source.notes.append(f"a message part of type {kind!r} was kept as a text description")
            desc = json.dumps(part, ensure_ascii=False)[:2000]
            return TextBlock(text=f"[{kind}] {desc}", extra={"codex:part": part})
        return block
