"""pi coding-agent sessions (``~/.pi/agent/sessions/<cwd>/<time>_<id>.jsonl``), versions 1 to 3, read-only.

The active branch of the entry tree is imported, as pi itself rebuilds it; compaction and branch
summaries are kept as user text at their position, and settings entries are left out. What every
entry becomes and what is left out on purpose: docs/formats.md#pi.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source, describe, few, parse_timestamp
from ctxkeep.messages import Block, ImageBlock, Message, Role, TextBlock, ThinkingBlock, ToolCall, ToolResult, make_id
from ctxkeep.pairing import validate

NAME = "pi"


COMPACTION_HEADER = "[Summary of the earlier conversation, written when pi compacted its context]\n\n"
BRANCH_SUMMARY_HEADER = "[Summary of a branch this conversation came back from]\n\n"

_SETTINGS = frozenset({"model_change", "thinking_level_change", "custom", "label", "session_info"})
_USER_LIKE = frozenset({"custom", "hookMessage"})
_BASH_EXIT = "Command exited with code "
_INT = re.compile(r"-?\d+")


class _Bad(ValueError):
    """An entry that does not have the shape the format requires."""


@dataclass(frozen=True, slots=True)
class _Entry:
    lineno: int
    index: int  # position in the file, header = 0 (version 1 ids and firstKeptEntryIndex)
    data: Mapping[str, Any]


def sniff(source: Source) -> bool:
    """A first line ``{"type": "session", "id": ..., "cwd"|"version": ...}``."""
    sample = source.sample()
    return (
        isinstance(sample, dict)
        and sample.get("type") == "session"
        and isinstance(sample.get("id"), str)
        and ("cwd" in sample or "version" in sample)
    )


def parse(source: Source) -> list[Conversation]:
    """The active branch of a pi session file, as one conversation."""
    header, entries = _read(source)
    conv_id = str(header.get("id") or Path(source.path).stem) if header else Path(source.path).stem
    tree = _is_tree(header, entries)
    path = _active_path(source, entries) if tree else entries
    builder = _Builder(source=source, conv_id=conv_id, tree=tree)
    for entry in path:
        try:
            builder.entry(entry)
        except RECORD_ERRORS as exc:  # _Bad is a ValueError
            source.skip(entry.lineno, f"{entry.data.get('type')} entry: {describe(exc)}")
    builder.finish()
    return [Conversation(id=conv_id, messages=tuple(builder.messages), title=builder.title)]


def _read(source: Source) -> tuple[Mapping[str, Any] | None, list[_Entry]]:
    header: Mapping[str, Any] | None = None
    entries: list[_Entry] = []
    index = 0
    for lineno, rec in source.records():
        if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
            source.skip(lineno, "expected a JSON object with a string 'type'")
            continue
        if rec["type"] == "session":
            if header is None:
                header = rec
            index += 1
            continue
        entries.append(_Entry(lineno=lineno, index=index, data=rec))
        index += 1
    return header, entries


def _is_tree(header: Mapping[str, Any] | None, entries: Sequence[_Entry]) -> bool:
    version = header.get("version") if header else None
    if isinstance(version, int) and version >= 2:
        return True
    return bool(entries) and all("id" in e.data and "parentId" in e.data for e in entries)


def _active_path(source: Source, entries: Sequence[_Entry]) -> list[_Entry]:
    """The entries from the root to the last entry, following ``parentId``."""
    by_id: dict[str, _Entry] = {}
    for entry in entries:
        entry_id = entry.data.get("id")
        if not isinstance(entry_id, str):
            source.skip(entry.lineno, "entry without a string 'id' in a tree session")
            continue
        by_id[entry_id] = entry
    if not by_id:
        return []
    leaf = next(e for e in reversed(entries) if isinstance(e.data.get("id"), str))
    path: list[_Entry] = []
    seen: set[str] = set()
    current: _Entry | None = leaf
    while current is not None:
        cid = current.data["id"]
        if cid in seen:
            source.notes.append(f"entry {cid} is its own ancestor (parentId cycle); the path stops there")
            break
        seen.add(cid)
        path.append(current)
        parent = current.data.get("parentId")
        if parent is None:
            break
        current = by_id.get(parent) if isinstance(parent, str) else None
        if current is None:
            source.notes.append(f"entry {cid} names a parent {parent!r} that is not in the file; the path starts there")
    path.reverse()
    left_out = len(by_id) - len(path)
    if left_out:
        source.leave_out("entry on another branch of the session tree", left_out)
        source.notes.append(
            f"left out {left_out} entries on other branches of the session tree (the active one is imported)"
        )
    return path


def _timestamp(entry: Mapping[str, Any], message: Mapping[str, Any] | None = None) -> datetime | None:
    """The message's own time (epoch ms) when it has one, else the entry's ISO time."""
    own = parse_timestamp(message.get("timestamp")) if message is not None else None
    return own or parse_timestamp(entry.get("timestamp"))


@dataclass
class _Builder:
    """Turns the entries of the active path into messages."""

    source: Source
    conv_id: str
    tree: bool
    messages: list[Message] = field(default_factory=list)
    title: str = ""
    ids_by_index: dict[int, str] = field(default_factory=dict)
    pending_compactions: list[tuple[int, int]] = field(default_factory=list)  # (message index, kept entry index)
    unknown: dict[str, int] = field(default_factory=dict)
    excluded_bash: int = 0

    def emit(
        self, entry: _Entry, role: Role, blocks: Sequence[Block], ts: datetime | None, extra: Mapping[str, Any]
    ) -> None:
        """Append the message of one entry."""
        source_id = entry.data.get("id") if self.tree else None
        if isinstance(source_id, str) and source_id:
            msg_id = source_id
        else:
            source_id = None
            msg_id = make_id(NAME, self.conv_id, entry.index)
        self.ids_by_index[entry.index] = msg_id
        self.messages.append(
            Message(role=role, content=tuple(blocks), id=msg_id, timestamp=ts, source_id=source_id, extra=extra)
        )

    def entry(self, entry: _Entry) -> None:
        """One entry of the active path."""
        data = entry.data
        kind = data["type"]
        if kind == "message":
            self.message(entry)
        elif kind == "compaction":
            self.compaction(entry)
        elif kind == "branch_summary":
            summary = data["summary"]
            if not isinstance(summary, str):
                raise _Bad("'summary' must be text")
            extra = {"pi:type": "branch_summary", "pi:fromId": data.get("fromId")}
            self.emit(entry, "user", [TextBlock(text=BRANCH_SUMMARY_HEADER + summary)], _timestamp(data), extra)
        elif kind == "custom_message":
            self.custom(entry, data, _timestamp(data))
        elif kind in _SETTINGS:
            if kind == "session_info" and isinstance(data.get("name"), str):
                self.title = data["name"]
            self.source.leave_out(f"{kind} entry (settings)")
        else:
            self.unknown[kind] = self.unknown.get(kind, 0) + 1

    def message(self, entry: _Entry) -> None:
        msg = entry.data["message"]
        if not isinstance(msg, dict):
            raise _Bad("'message' must be an object")
        role = msg.get("role")
        ts = _timestamp(entry.data, msg)
        if role == "user":
            self.emit(entry, "user", _user_content(msg["content"]), ts, {})
        elif role == "assistant":
            self.emit(entry, "assistant", _assistant_content(msg["content"]), ts, _assistant_extra(msg))
        elif role == "toolResult":
            self.emit(entry, "tool", [_tool_result(msg)], ts, {"pi:toolName": msg.get("toolName")})
        elif role == "bashExecution":
            if msg.get("excludeFromContext"):
                self.excluded_bash += 1
                return
            extra = {
                "pi:role": "bashExecution",
                **{f"pi:{k}": v for k, v in msg.items() if k not in ("role", "output", "timestamp")},
            }
            self.emit(entry, "user", [TextBlock(text=_bash_text(msg))], ts, extra)
        elif role in _USER_LIKE:
            self.custom(entry, msg, ts)
        elif role in ("compactionSummary", "branchSummary"):
            header = COMPACTION_HEADER if role == "compactionSummary" else BRANCH_SUMMARY_HEADER
            self.emit(entry, "user", [TextBlock(text=header + str(msg["summary"]))], ts, {"pi:role": role})
        else:
            raise _Bad(f"message with unknown role {role!r}")

    def custom(self, entry: _Entry, data: Mapping[str, Any], ts: datetime | None) -> None:
        """An extension's message: user content, its type and details in extra."""
        extra = {"pi:role": data.get("role", "custom"), "pi:customType": data.get("customType")}
        for key in ("display", "details"):
            if key in data:
                extra[f"pi:{key}"] = data[key]
        self.emit(entry, "user", _user_content(data["content"]), ts, extra)

    def compaction(self, entry: _Entry) -> None:
        data = entry.data
        summary = data["summary"]
        if not isinstance(summary, str):
            raise _Bad("'summary' must be text")
        extra: dict[str, Any] = {"pi:type": "compaction", "pi:tokensBefore": data.get("tokensBefore")}
        for key in ("firstKeptEntryId", "fromHook", "details"):
            if key in data:
                extra[f"pi:{key}"] = data[key]
        kept = data.get("firstKeptEntryIndex")
        if isinstance(kept, int) and not isinstance(kept, bool):
            extra["pi:firstKeptEntryIndex"] = kept
            # version 1 points at a file position: name the message there, once all are built
            self.pending_compactions.append((len(self.messages), kept))
        self.emit(entry, "user", [TextBlock(text=COMPACTION_HEADER + summary)], _timestamp(data), extra)

    def finish(self) -> None:
        """Resolve version 1 compaction pointers to message ids; note what was left out."""
        for msg_index, kept in self.pending_compactions:
            kept_id = self.ids_by_index.get(kept)
            if kept_id is not None:
                msg = self.messages[msg_index]
                extra = {**msg.extra, "pi:firstKeptEntryId": kept_id}
                self.messages[msg_index] = dataclasses.replace(msg, extra=extra)
        for kind, n in sorted(self.unknown.items()):
            self.source.notes.append(f"left out {n} entries of unknown type {kind!r}")
            self.source.leave_out(f"{kind} entry (unknown type)", n)
        self.source.notes.extend(_unanswered_calls(self.messages))
        if self.excluded_bash:
            self.source.leave_out("bashExecution message (excludeFromContext)", self.excluded_bash)
            self.source.notes.append(
                f"left out {self.excluded_bash} bash execution(s) marked excludeFromContext (never sent to the model)"
            )


def _unanswered_calls(messages: Sequence[Message]) -> list[str]:
    """Notes on the tool calls that have no result, grouped by why."""
    by_message: dict[int, list[str]] = {}
    for problem in validate(messages):
        if problem.kind == "missing_result" and problem.call_id is not None:
            by_message.setdefault(problem.index, []).append(problem.call_id)
    missing: dict[str, list[str]] = {}
    for i, unanswered in by_message.items():
        msg = messages[i]
        stop = msg.extra.get("pi:stopReason")
        after = messages[i + 1] if i + 1 < len(messages) else None
        if stop in ("error", "aborted"):
            why = f"the response that made them ended with stopReason {stop!r}, so pi ran none of them"
        elif after is not None and after.extra.get("pi:type") == "compaction":
            why = "pi compacted the context right after the response that made them, instead of running them"
        elif after is None:
            why = "the session ends right after the response that made them"
        else:
            why = "the file does not say why"
        missing.setdefault(why, []).extend(unanswered)
    return [
        f"{len(ids)} tool call(s) have no result, kept as written: {why} ({few(ids)})" for why, ids in missing.items()
    ]


def _user_content(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [TextBlock(text=content)]
    if not isinstance(content, list):
        raise _Bad("'content' must be text or a list of blocks")
    blocks: list[Block] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            blocks.append(TextBlock(text=block["text"]))
        elif kind == "image":
            blocks.append(_image(block))
        else:
            raise _Bad(f"a user block of unknown type {kind!r}")
    return blocks


def _image(block: Mapping[str, Any]) -> ImageBlock:
    return ImageBlock(media_type=str(block.get("mimeType") or "image/png"), data=block["data"])


def _assistant_content(content: Any) -> list[Block]:
    if not isinstance(content, list):
        raise _Bad("assistant 'content' must be a list of blocks")
    blocks: list[Block] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            extra = {"pi:textSignature": block["textSignature"]} if "textSignature" in block else {}
            blocks.append(TextBlock(text=block["text"], extra=extra))
        elif kind == "thinking":
            blocks.append(
                ThinkingBlock(
                    text=block.get("thinking") or "",
                    signature=block.get("thinkingSignature"),
                    redacted=bool(block.get("redacted")),
                )
            )
        elif kind == "toolCall":
            blocks.append(_tool_call(block))
        else:
            raise _Bad(f"an assistant block of unknown type {kind!r}")
    return blocks


def _tool_call(block: Mapping[str, Any]) -> ToolCall:
    call_id, name, args = block["id"], block["name"], block.get("arguments", {})
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
        raise _Bad("a toolCall needs a string 'id' and 'name'")
    # a call cut off while streaming keeps the text it had so far
    extra = {f"pi:{k}": block[k] for k in ("partialJson", "thoughtSignature") if k in block}
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ToolCall(id=call_id, name=name, arguments=arguments, extra=extra)


def _assistant_extra(msg: Mapping[str, Any]) -> dict[str, Any]:
    return {f"pi:{k}": v for k, v in msg.items() if k not in ("role", "content", "timestamp")}


def _tool_result(msg: Mapping[str, Any]) -> ToolResult:
    call_id = msg["toolCallId"]
    if not isinstance(call_id, str) or not call_id:
        raise _Bad("toolResult without a 'toolCallId'")
    blocks = _user_content(msg.get("content", []))
    parts = tuple(b for b in blocks if isinstance(b, TextBlock | ImageBlock))
    content: str | tuple[TextBlock | ImageBlock, ...] = (
        parts[0].text if len(parts) == 1 and isinstance(parts[0], TextBlock) else parts
    )
    exit_code = _bash_exit_code(parts) if msg.get("toolName") == "bash" else None
    extra = {"pi:details": msg["details"]} if "details" in msg else {}
    return ToolResult(
        call_id=call_id, content=content, is_error=bool(msg.get("isError")), exit_code=exit_code, extra=extra
    )


def _bash_exit_code(parts: Sequence[TextBlock | ImageBlock]) -> int | None:
    """pi's bash tool ends a failed command's output with "Command exited with code N"."""
    texts = [p.text for p in parts if isinstance(p, TextBlock)]
    if not texts:
        return None
    # string methods, not one regex over the text: ``\n\s*...`` retried at every newline of a long
    # blank output was quadratic. Same rule: the phrase and a number end the text (trailing space
    # aside), and the space before the phrase starts the text or holds a newline.
    before, phrase, number = texts[-1].rstrip().rpartition(_BASH_EXIT)
    if not phrase or not _INT.fullmatch(number):
        return None
    kept = before.rstrip()
    if kept and "\n" not in before[len(kept) :]:
        return None
    return int(number)


def _bash_text(msg: Mapping[str, Any]) -> str:
    """The user's ``!command`` as the text the model sees: command, output, how it ended."""
    parts = [f"$ {msg.get('command', '')}", str(msg.get("output") or "(no output)")]
    code = msg.get("exitCode")
    if msg.get("cancelled"):
        parts.append("(cancelled)")
    elif isinstance(code, int) and code != 0:
        parts.append(f"(exit code {code})")
    if msg.get("truncated") and msg.get("fullOutputPath"):
        parts.append(f"(output truncated; full output in {msg['fullOutputPath']})")
    return "\n".join(parts)
