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

Grouping: assistant-side items (reasoning, text, calls) with nothing from the user or a tool between
them came from one model response, so they go into one assistant message in file order.

Outputs: a string, a list of ``input_text``/``input_image`` items, or ``{"content", "success"}``.
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
from dataclasses import dataclass, field
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
    records = _records(source)
    meta = next((p for kind, _, p, _ in records if kind == "session_meta"), None)
    conv_id = _conversation_id(meta, source.path)
    builder = _Builder(source=source, conv_id=conv_id)
    seen_meta = False
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
                builder.flush()  # a new turn: the previous assistant message is complete
        except (_Bad, KeyError, TypeError, AttributeError, ValueError) as exc:
            source.skip(lineno, _reason(kind, exc))
    builder.flush()
    builder.report_unknown()
    return [Conversation(id=conv_id, messages=tuple(builder.messages))]


def _reason(kind: str, exc: Exception) -> str:
    detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
    return f"{kind} record: {detail}"


_Record = tuple[str, int, Mapping[str, Any], datetime | None]


def _records(source: Source) -> list[_Record]:
    """(kind, line, payload, timestamp) for the records that matter; event_msg and unknown kinds dropped."""
    out: list[_Record] = []
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
    return out


def _conversation_id(meta: Mapping[str, Any] | None, path: str) -> str:
    if meta is not None and isinstance(meta.get("id"), str) and meta["id"]:
        return str(meta["id"])
    return Path(path).stem


@dataclass
class _Builder:
    """Turns records into messages, holding the assistant message still being assembled."""

    source: Source
    conv_id: str
    messages: list[Message] = field(default_factory=list)
    used_ids: set[str] = field(default_factory=set)
    unknown: dict[str, int] = field(default_factory=dict)
    pending: list[Block] = field(default_factory=list)
    pending_ts: datetime | None = None
    pending_source_id: str | None = None

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
        """Add a block to the assistant message being assembled."""
        if not self.pending:
            self.pending_ts = ts
        if self.pending_source_id is None:
            self.pending_source_id = source_id
        self.pending.append(block)

    def flush(self) -> None:
        """Close the assistant message being assembled, if any."""
        if self.pending:
            self.emit("assistant", self.pending, self.pending_ts, self.pending_source_id)
        self.pending = []
        self.pending_ts = None
        self.pending_source_id = None

    def report_unknown(self) -> None:
        """Note the response item types that were left out because they are unknown."""
        for kind, n in sorted(self.unknown.items()):
            self.source.notes.append(f"left out {n} response item(s) of unknown type {kind!r}")

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
        self.flush()
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
            result = _output(item, str(kind))
            self.flush()
            self.emit("tool", [result], ts, source_id)
        elif kind == "agent_message":
            self.agent_message(item, ts, source_id)
        elif kind in _COMPACTION_TYPES:
            self.flush()
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
        blocks = [self.content_item(part) for part in content]
        if role == "assistant":
            phase = item.get("phase")
            for block in blocks:
                if phase is not None and isinstance(block, TextBlock):
                    block = TextBlock(text=block.text, extra={**block.extra, "codex:phase": phase})
                self.add_assistant(block, ts, source_id)
            return
        if role not in ("user", "developer", "system"):
            raise _Bad(f"message with unknown role {role!r}")
        self.flush()
        if role == "user":
            self.emit("user", blocks, ts, source_id)
        else:
            self.emit("system", blocks, ts, source_id, {"codex:role": role})

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
        self.flush()
        self.emit("user", [TextBlock(text=t) for t in texts], ts, source_id, extra)

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
