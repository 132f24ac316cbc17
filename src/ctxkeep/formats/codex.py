"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``), read-only.

Each line is ``{"timestamp", "type", "payload"}``. What each record becomes:

    session_meta              the conversation id; ``base_instructions`` -> a leading system message
    response_item message     user -> user; assistant -> assistant text; developer and system -> system
                              (``extra["codex:role"] == "developer"`` says which)
    response_item reasoning   ThinkingBlock with the summary text (the raw reasoning text when there is
                              no summary); ``encrypted_content`` kept in the block's extra, and the block
                              marked ``redacted`` when it has no readable text
    function_call, custom_tool_call, local_shell_call, tool_search_call
                              a ToolCall on an assistant message. A custom (freeform) tool's raw input
                              becomes ``{"input": "..."}`` JSON, as Codex itself sends it to chat APIs;
                              a local shell call's ``action`` becomes its arguments
    *_output                  a tool message with one ToolResult (see "Outputs" below)
    web_search_call           assistant text such as "[web search: query]": the provider runs the search
                              and the rollout records no output, so it is not a tool-call pair
    image_generation_call     an ImageBlock (PNG) on the assistant message
    agent_message             a user message (a message from another agent); author/recipient in extra
    compacted                 a user message holding the summary, at its position; the messages before
                              it stay (Codex would swap them for ``replacement_history`` on resume; that
                              list is kept in the message's extra)
    compaction (encrypted)    a user marker message; the opaque summary is kept in extra and noted

Left out on purpose, because they are not conversation: ``turn_context`` (per-turn settings; it only
ends the current assistant message), ``event_msg`` (UI events that repeat the response items:
user_message, agent_message, agent_reasoning, token_count, exec_command_end, patch_apply_end,
web_search_end, task_started/complete, turn_aborted...), ``ghost_snapshot``, ``compaction_trigger``,
``configuration_update`` and ``additional_tools`` items, and the ``record_type: state`` lines of old
files. Unknown record or item types (newer Codex versions) are left out with a note.

Files with no response items at all (some tools write only the UI events) are read from their
``event_msg`` records instead, with a note: ``user_message`` -> user text (and images),
``agent_message`` -> assistant text, ``agent_reasoning`` -> ThinkingBlock, ``web_search_end`` ->
assistant text as above, and each ``exec_command_end``, ``patch_apply_end`` or ``mcp_tool_call_end``
-> a ToolCall (from its ``*_begin`` event when there is one, else from the end event, which repeats
the command) with its ToolResult. A ``*_begin`` with no end is left out with a note. A file whose
response items hold no user or assistant message while its events do gets a note saying so (the
events are not imported then). A file that gives no user, assistant or tool message either way is a
`FormatError`, not an empty import.

Grouping: assistant-side items (reasoning, text, calls) with nothing from the user or a tool between
them came from one model response, so they go into one assistant message in file order. Newer Codex
records a call's output as soon as the tool ends, while the model is still streaming; assistant-side
items that arrive while calls of the current response await their outputs join that response's
message. A developer, user or system message (or an agent_message) that arrives while calls still
await their outputs (Codex records its notices as they happen) is moved to just after those outputs,
in order, so no message separates a call from its result; a note says how many were moved. If the
outputs never come (a new turn, a compaction, or the model answering a held user message), the
held messages are placed where that becomes clear.

Outputs: a string, a list of ``input_text``/``input_image`` items (a single item given on its own
counts as a one-item list), or ``{"content", "success"}``.
Older versions wrap shell output as the JSON text ``{"output": ..., "metadata": {"exit_code": N}}``:
the inner output becomes the content and the metadata goes to extra. Newer ones start the text with
``Exit code: N`` or ``Process exited with code N`` headers; the exit code is read from there. A
non-zero exit code or ``success: false`` sets ``is_error``. A unified-exec call whose process is still
running has no exit code; it appears in the later ``write_stdin`` output that reports the exit.

Pairing is imported as the file has it: a call interrupted before its output keeps no result
(`validate` reports it, `repair` adds one).

Files from before mid-2025 have no ``payload`` wrapper: the first line is the session meta and the
others are bare response items. They are read the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxkeep.formats.source import Conversation, Source, parse_timestamp
from ctxkeep.messages import Block, ImageBlock, Message, Role, TextBlock, ThinkingBlock, ToolCall, ToolResult, make_id

NAME = "codex"

__all__ = ["parse", "sniff"]

_RECORD_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_LEGACY_META_KEYS = frozenset({"id", "timestamp", "instructions", "git"})
_CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call", "tool_search_call"})
_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output", "tool_search_output"})
_ASSISTANT_TYPES = _CALL_TYPES | {"reasoning", "web_search_call", "image_generation_call"}
_COMPACTION_TYPES = frozenset({"compaction", "compaction_summary", "context_compaction"})
# harness bookkeeping and request controls: never conversation
_IGNORED_ITEMS = frozenset({"ghost_snapshot", "compaction_trigger", "configuration_update", "additional_tools"})
_ITEM_TYPES = _ASSISTANT_TYPES | _OUTPUT_TYPES | _COMPACTION_TYPES | _IGNORED_ITEMS | {"message", "agent_message"}

# exit-code headers of shell outputs: "Exit code: 1" (shell tool), "Process exited with code 1" (unified exec)
_EXIT_RE = re.compile(r"^(?:Exit code:|Process exited with code)\s*(-?\d+)\s*$", re.MULTILINE)
_HEADER_CHARS = 600  # the headers sit above "Output:"; the command's own output is never searched

COMPACTED_HEADER = "[Summary of the earlier conversation, written when Codex compacted its context]\n\n"
ENCRYPTED_COMPACTION_TEXT = "[The earlier conversation was compacted here; the provider's summary is encrypted]"


class _Bad(ValueError):
    """A record that does not have the shape the format requires."""


def sniff(source: Source) -> bool:
    """A rollout line ``{"type": "session_meta"|..., "payload": {...}}``, or an old unwrapped session meta."""
    sample = source.sample()
    if not isinstance(sample, dict):
        return False
    if sample.get("type") in _RECORD_TYPES and isinstance(sample.get("payload"), dict):
        return True
    keys = set(sample)
    return "type" not in keys and {"id", "timestamp"} <= keys <= _LEGACY_META_KEYS


def parse(source: Source) -> list[Conversation]:
    """The one conversation of a rollout file."""
    records, events = _records(source)
    meta = next((p for kind, _, p, _ in records if kind == "session_meta"), None)
    conv_id = _conversation_id(meta, source.path)
    builder = _Builder(source=source, conv_id=conv_id)
    seen_meta = False
    has_items = any(kind in ("response_item", "compacted") for kind, _, _, _ in records)
    for kind, lineno, payload, ts in records:
        try:
            if kind == "session_meta":
                if not seen_meta:
                    builder.session_meta(payload, ts)
                seen_meta = True  # later ones (resumed or forked sessions) repeat the header
            elif kind == "response_item":
                builder.item(payload, ts)
            elif kind == "compacted":
                builder.compacted(payload, ts)
            elif kind == "turn_context":
                builder.settle()  # a new turn: the previous assistant message is complete
        except (_Bad, KeyError, TypeError, AttributeError, ValueError) as exc:
            source.skip(lineno, _reason(kind, exc))
    if not has_items:
        _read_events(builder, events)
    builder.settle()
    builder.report()
    if has_items and not builder.spoken and any(_event_type(e) in _SPOKEN_EVENTS for e in events):
        source.notes.append(
            "the response items hold no user or assistant message, but user_message/agent_message events do; "
            "those events were not imported (they normally repeat the response items)"
        )
    if not any(m.role in ("user", "assistant", "tool") for m in builder.messages):
        raise source.error(f"no conversation in this file: {_what_is_there(records, events)}")
    return [Conversation(id=conv_id, messages=tuple(builder.messages))]


def _reason(kind: str, exc: Exception) -> str:
    detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
    return f"{kind} record: {detail}"


_Record = tuple[str, int, Mapping[str, Any], datetime | None]


def _records(source: Source) -> tuple[list[_Record], list[_Record]]:
    """(kind, line, payload, timestamp) for the records that matter, and the event_msg records apart."""
    out: list[_Record] = []
    events: list[_Record] = []
    unknown: dict[str, int] = {}
    first = True
    for lineno, rec in source.records():
        is_first, first = first, False
        if not isinstance(rec, dict):
            source.skip(lineno, f"expected a JSON object, got {type(rec).__name__}")
            continue
        kind = rec.get("type")
        payload = rec.get("payload")
        if "payload" in rec:
            if not isinstance(kind, str) or not isinstance(payload, dict):
                source.skip(lineno, "a rollout line needs a string 'type' and an object 'payload'")
                continue
            if kind == "event_msg":
                events.append((kind, lineno, payload, parse_timestamp(rec.get("timestamp"))))
                continue
            if kind not in _RECORD_TYPES:
                unknown[kind] = unknown.get(kind, 0) + 1
                continue
            out.append((kind, lineno, payload, parse_timestamp(rec.get("timestamp"))))
        elif is_first and kind is None and "id" in rec:  # old files: a bare session meta first
            out.append(("session_meta", lineno, rec, parse_timestamp(rec.get("timestamp"))))
        elif "record_type" in rec:  # old files: {"record_type": "state"} bookkeeping lines
            continue
        elif isinstance(kind, str) and kind in _ITEM_TYPES:  # old files: a bare response item
            out.append(("response_item", lineno, rec, parse_timestamp(rec.get("timestamp"))))
        else:
            source.skip(lineno, "not a Codex rollout record (no 'payload', not a response item)")
    for kind, n in sorted(unknown.items()):
        source.notes.append(f"left out {n} record(s) of unknown type {kind!r}")
    return out, events


def _conversation_id(meta: Mapping[str, Any] | None, path: str) -> str:
    if meta is not None and isinstance(meta.get("id"), str) and meta["id"]:
        return str(meta["id"])
    return Path(path).stem


def _event_type(event: _Record) -> str:
    kind = event[2].get("type")
    return kind if isinstance(kind, str) else "?"


def _what_is_there(records: Sequence[_Record], events: Sequence[_Record]) -> str:
    """A short account of a file that holds no conversation, for the error message."""
    counts: dict[str, int] = {}
    for kind, _, _, _ in records:
        counts[kind] = counts.get(kind, 0) + 1
    for event in events:
        name = f"event_msg {_event_type(event)}"
        counts[name] = counts.get(name, 0) + 1
    if not counts:
        return "no Codex records at all"
    shown = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1])[:8])
    return f"no message, tool call or user/agent message event, only {shown}"


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
    spoken: bool = False  # a user or assistant message item was seen

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
            pass
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
        self.spoken = self.spoken or role in ("user", "assistant")
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


def _content_item(part: Any) -> TextBlock | ImageBlock | None:
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
        return TextBlock(text=part["text"])
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        extra = {"codex:detail": part["detail"]} if part.get("detail") is not None else {}
        return ImageBlock.from_url(part["image_url"], extra=extra)
    return None


def _rest(item: Mapping[str, Any], modelled: frozenset[str] | set[str]) -> dict[str, Any]:
    """The item's fields ctxkeep does not model, kept in extra."""
    rest = {k: v for k, v in item.items() if k not in modelled}
    return {"codex": rest} if rest else {}


def _texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def _reasoning(item: Mapping[str, Any]) -> ThinkingBlock:
    summary = _texts(item.get("summary"))
    raw = _texts(item.get("content"))
    text = "\n\n".join(summary or raw)
    extra = _rest(item, {"type", "summary", "content", "encrypted_content", "id"})
    if summary and raw:
        extra["codex:reasoning_text"] = "\n\n".join(raw)
    encrypted = item.get("encrypted_content")
    if encrypted is not None:
        extra["codex:encrypted_content"] = encrypted
    return ThinkingBlock(text=text, redacted=not text and encrypted is not None, extra=extra)


def _call(item: Mapping[str, Any], kind: str) -> ToolCall:
    call_id = item.get("call_id") or (item.get("id") if kind == "local_shell_call" else None)
    if not isinstance(call_id, str) or not call_id:
        raise _Bad(f"{kind} without a 'call_id'")
    extra: dict[str, Any] = {"codex:type": kind}
    if kind == "function_call":
        args = item["arguments"]
        arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        name = item["name"]
        extra.update(_rest(item, {"type", "arguments", "name", "call_id", "id"}))
    elif kind == "custom_tool_call":
        if not isinstance(item.get("input"), str):
            raise _Bad("custom_tool_call 'input' must be text")
        arguments = json.dumps({"input": item["input"]}, ensure_ascii=False)
        name = item["name"]
        extra.update(_rest(item, {"type", "input", "name", "call_id", "id"}))
    elif kind == "local_shell_call":
        arguments = json.dumps(item["action"], ensure_ascii=False)
        name = "local_shell"
        extra.update(_rest(item, {"type", "action", "call_id", "id"}))
    else:  # tool_search_call
        arguments = json.dumps(item.get("arguments"), ensure_ascii=False)
        name = "tool_search"
        extra.update(_rest(item, {"type", "arguments", "call_id", "id"}))
    if not isinstance(name, str) or not name:
        raise _Bad(f"{kind} without a tool 'name'")
    return ToolCall(id=call_id, name=name, arguments=arguments, extra=extra)


def _web_search(item: Mapping[str, Any]) -> TextBlock:
    action = item.get("action")
    action = action if isinstance(action, dict) else {}
    kind = action.get("type")
    if kind == "search":
        queries = action.get("queries")
        what = "; ".join(q for q in queries if isinstance(q, str)) if isinstance(queries, list) and queries else None
        text = f"[web search: {what or action.get('query') or ''}]"
    elif kind == "open_page":
        text = f"[web search: open {action.get('url') or ''}]"
    elif kind == "find_in_page":
        text = f"[web search: find {action.get('pattern') or ''!r} in {action.get('url') or ''}]"
    else:
        text = "[web search]"
    return TextBlock(text=text, extra={"codex:item": dict(item)})


def _image_generation(item: Mapping[str, Any]) -> Block:
    result = item.get("result")
    extra = _rest(item, {"type", "result", "id"})
    if isinstance(result, str) and result:
        return ImageBlock(media_type="image/png", data=result, extra=extra)
    prompt = item.get("revised_prompt")
    return TextBlock(text=f"[image generation: {prompt or item.get('status') or 'no image'}]", extra=extra)


def _output(item: Mapping[str, Any], kind: str) -> ToolResult:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise _Bad(f"{kind} without a 'call_id'")
    extra: dict[str, Any] = {"codex:type": kind}
    if kind == "tool_search_output":
        extra.update(_rest(item, {"type", "call_id", "tools", "id"}))
        return ToolResult(call_id=call_id, content=json.dumps(item.get("tools"), ensure_ascii=False), extra=extra)
    extra.update(_rest(item, {"type", "call_id", "output", "id"}))
    content, exit_code, failed = _output_body(item.get("output"), extra)
    is_error = failed or (exit_code is not None and exit_code != 0)
    return ToolResult(call_id=call_id, content=content, is_error=is_error, exit_code=exit_code, extra=extra)


def _output_body(
    output: Any, extra: dict[str, Any]
) -> tuple[str | tuple[TextBlock | ImageBlock, ...], int | None, bool]:
    """(content, exit code, explicit failure) of an output; `extra` gets what is not content."""
    if isinstance(output, dict) and "type" in output and "content" not in output:
        output = [output]  # a single content item given on its own
    if isinstance(output, list):
        parts = tuple(_content_item(p) or TextBlock(text=json.dumps(p, ensure_ascii=False)) for p in output)
        return parts, None, False
    failed = False
    if isinstance(output, dict):  # {"content": ..., "success": false}
        if not isinstance(output.get("content"), str):
            raise _Bad("output object without text 'content'")
        failed = output.get("success") is False
        if "success" in output:
            extra["codex:success"] = output["success"]
        output = output["content"]
    if not isinstance(output, str):
        raise _Bad(f"output must be text or a list of content items, got {type(output).__name__}")
    wrapped = _json_wrapped(output)
    if wrapped is not None:
        text, metadata = wrapped
        extra["codex:output_form"] = "json"
        extra["codex:metadata"] = metadata
        code = metadata.get("exit_code")
        return text, code if isinstance(code, int) and not isinstance(code, bool) else None, failed
    return output, _header_exit_code(output), failed


def _json_wrapped(text: str) -> tuple[str, dict[str, Any]] | None:
    """Older Codex: ``{"output": "...", "metadata": {"exit_code": 0, ...}}`` as text."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("output"), str) and isinstance(value.get("metadata"), dict):
        return value["output"], value["metadata"]
    return None


def _header_exit_code(text: str) -> int | None:
    """The exit code from the header lines above ``Output:``, if the output has such headers."""
    end = text.find("\nOutput:", 0, _HEADER_CHARS)
    if end < 0:  # no header block: any "Exit code" line would be the command's own output
        return None
    m = _EXIT_RE.search(text, 0, end)
    return int(m.group(1)) if m else None


# --- event_msg fallback ----------------------------------------------------------------


def _read_events(builder: _Builder, events: Sequence[_Record]) -> None:
    """Rebuild the conversation from UI events, for files that have no response items."""
    if not any(_event_type(e) in _SPOKEN_EVENTS or _event_type(e) in _TOOL_ENDS for e in events):
        return
    ended = {e[2].get("call_id") for e in events if _event_type(e) in _TOOL_ENDS}
    called: set[str] = set()
    unended = 0
    for record in events:
        _, lineno, event, ts = record
        kind = _event_type(record)
        try:
            if kind in _TOOL_BEGINS and event.get("call_id") not in ended:
                unended += 1
            else:
                _read_event(builder, kind, event, ts, called)
        except (_Bad, KeyError, TypeError, AttributeError, ValueError) as exc:
            builder.source.skip(lineno, _reason(f"event_msg {kind}", exc))
    builder.source.notes.append(
        "this file has no response items; the conversation was rebuilt from its event_msg records "
        "(user_message, agent_message, agent_reasoning, web search and tool events)"
    )
    if unended:
        builder.source.notes.append(f"left out {unended} tool call(s) whose begin event has no end event")


def _read_event(builder: _Builder, kind: str, event: Mapping[str, Any], ts: datetime | None, called: set[str]) -> None:
    """One event of the fallback; `called` holds the ids of the calls already placed."""
    if kind == "user_message":
        builder.add_other("user", _user_event(event), ts, None, {"codex:event": kind})
    elif kind == "agent_message":
        builder.add_assistant(TextBlock(text=_text_field(event, "message")), ts, None)
    elif kind == "agent_reasoning":
        builder.add_assistant(ThinkingBlock(text=_text_field(event, "text")), ts, None)
    elif kind == "web_search_end":
        action = event.get("action")
        if not isinstance(action, dict):
            action = {"type": "search", "query": event.get("query")}
        builder.add_assistant(_web_search({"action": action}), ts, None)
    elif kind in _TOOL_BEGINS or kind in _TOOL_ENDS:
        call = _event_call(_TOOL_BEGINS.get(kind) or _TOOL_ENDS[kind], event)
        if call.id not in called:  # newer Codex persists only the end event, which repeats the call
            builder.add_assistant(call, ts, None)
            called.add(call.id)
        if kind in _TOOL_ENDS:
            builder.add_result(_event_result(kind, event), ts, None)


_SPOKEN_EVENTS = frozenset({"user_message", "agent_message"})
# event type -> the kind of tool call it describes
_TOOL_BEGINS = {"exec_command_begin": "exec", "patch_apply_begin": "patch", "mcp_tool_call_begin": "mcp"}
_TOOL_ENDS = {"exec_command_end": "exec", "patch_apply_end": "patch", "mcp_tool_call_end": "mcp"}


def _text_field(event: Mapping[str, Any], key: str) -> str:
    value = event.get(key)
    if not isinstance(value, str):
        raise _Bad(f"{key!r} must be text")
    return value


def _user_event(event: Mapping[str, Any]) -> list[Block]:
    blocks: list[Block] = [TextBlock(text=_text_field(event, "message"))]
    images = event.get("images")
    for url in images if isinstance(images, list) else []:
        if isinstance(url, str) and url:
            blocks.append(ImageBlock.from_url(url))
    return blocks


def _event_call(kind: str, event: Mapping[str, Any]) -> ToolCall:
    """The tool call a begin or end event describes."""
    call_id = event.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise _Bad("tool event without a 'call_id'")
    if kind == "exec":
        name, args = "shell", {"command": event.get("command"), "workdir": event.get("cwd")}
    elif kind == "patch":
        name, args = "apply_patch", {"changes": event.get("changes")}
    else:
        invocation = event["invocation"]
        name, args = f"{invocation['server']}__{invocation['tool']}", invocation.get("arguments")
    extra = {"codex:event": "reconstructed from event_msg records"}
    return ToolCall(id=call_id, name=name, arguments=json.dumps(args, ensure_ascii=False), extra=extra)


def _event_result(kind: str, event: Mapping[str, Any]) -> ToolResult:
    """The result an end event reports."""
    call_id = str(event["call_id"])
    extra = {"codex:event": kind}
    if kind == "mcp_tool_call_end":
        result = event.get("result")
        if isinstance(result, dict) and isinstance(result.get("Ok"), dict):
            ok = result["Ok"]
            text = "\n".join(_texts(ok.get("content")))
            return ToolResult(call_id=call_id, content=text, is_error=ok.get("isError") is True, extra=extra)
        error = result.get("Err") if isinstance(result, dict) else result
        return ToolResult(call_id=call_id, content=str(error), is_error=True, extra=extra)
    stdout, stderr = event.get("stdout"), event.get("stderr")
    streams = "".join(s for s in (stdout, stderr) if isinstance(s, str))
    if kind == "patch_apply_end":
        return ToolResult(call_id=call_id, content=streams, is_error=event.get("success") is False, extra=extra)
    output = event.get("aggregated_output")
    code = event.get("exit_code")
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    content = output if isinstance(output, str) else streams
    return ToolResult(call_id=call_id, content=content, is_error=bool(exit_code), exit_code=exit_code, extra=extra)
