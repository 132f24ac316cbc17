"""Claude Code session files (``~/.claude/projects/<project>/<session>.jsonl``), 1.0.98 to 2.1.15x.

Each line is an entry; entries with a ``uuid`` form a tree through ``parentUuid``. What
becomes what:

    user / assistant        the conversation (Anthropic message in ``message``)
    system compact_boundary not a message; the entry after it (``isCompactSummary``) is
                            the summary text the model saw, kept as user text
    isMeta user entries     kept as user text (caveats, slash-command prompts: the model saw them)
    attachment              context Claude Code sent the model as a user message (2.1): kept as
                            user text when the entry holds that text (a prompt queued while the
                            agent worked, hook context, a CLAUDE.md file, an @-mentioned file, an
                            edit snippet, a blocking hook error, skills, reminders with their
                            text); reminders Claude Code words at request time from structured
                            fields (todo lists, plan mode, tool and agent deltas, budgets, hook
                            status, dates) are metadata; an unknown kind is counted in a note
    summary, custom-title,  session titles, not conversation: the main conversation's title is
    ai-title                the last ``custom-title`` (set by the user), else the last summary
                            whose ``leafUuid`` is in it, else the last ``ai-title``
    file-history-snapshot, progress (hook / bash / subagent progress), queue-operation,
    last-prompt, agent-name, pr-link, permission-mode and the other state records,
    other system entries    metadata, not conversation: not imported (progress entries still
                            link the tree, so they are walked through)
    any other entry type    not imported, and counted in a note

The conversation is one path through the tree, from the newest user/assistant entry (last
in the file) back to the root. A root that is not the first (a ``compact_boundary``)
continues from its ``logicalParentUuid``, or, when that entry is not in the file, from the
last user/assistant entry before it: so the main conversation spans compactions, with the
summary where the compaction happened.

Claude Code writes one API response as several assistant entries sharing ``message.id``
(one block each) and hangs each tool result off the entry of its own call, so parallel
calls and their results sit on side branches of the path. Those are taken back in: an
off-path assistant entry of a response on the path, and an off-path user entry holding
results of that response's calls. Every other user/assistant entry off the path belongs
to a rewound or abandoned branch; it is left out and counted in a note.

The entries of one response become one assistant message (id and ``source_id``: the uuid
of its first entry; ``extra["claude_code"]["message_id"]`` the API id); each tool result
becomes a ``tool`` message right after it, in call order (``is_error`` from the block,
``exit_code`` from ``toolUseResult.exitCode`` or the ``Exit code N`` text of a failed
Bash call; its other short scalar fields go to ``extra``). User text in the same entry as
results follows them. Results whose call is not
in the conversation and calls with no result are kept as they are and reported in a note.

Trimmed or hand-made files leave ids out. An assistant entry with no ``message.id`` is a
response of its own. A result with no ``tool_use_id`` takes the entry's ``sourceToolUseID``,
else the id of the one call of the entry it answers (``sourceToolAssistantUUID``, else its
parent); with neither it is a bad record. A call with no ``id`` takes the id a result
answering its entry names, else a made-up stable one (both counted in a note).

``isSidechain`` entries are a subagent's conversation: each sidechain tree is returned as
its own `Conversation`, titled ``subagent <agentId>`` (subagent files) or
``sidechain <n>`` (older versions, inline in the main file). Loading a main session file
also loads the subagent files Claude Code 2.1 keeps beside it, in
``<session>/subagents/agent-*.jsonl``, each as its own conversation.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxkeep.formats.source import Conversation, Source, parse_timestamp
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    make_id,
)

NAME = "claude_code"

__all__ = ["NAME", "parse", "sniff"]

_CONVERSATION = frozenset({"user", "assistant"})
# Entry types that carry no conversation; left out without a note (see the module docstring).
_METADATA = frozenset(
    {
        "summary",
        "custom-title",
        "ai-title",
        "file-history-snapshot",
        "progress",
        "queue-operation",
        "system",
        "attachment",  # the ones with text the model saw become user entries, see _ATTACHMENT_TEXT
        "last-prompt",  # a copy of the last prompt, for resuming
        "agent-name",
        "pr-link",
        "frame-link",
        "permission-mode",
        "mode",
        "worktree-state",
        "relocated",
        "bridge-session",
    }
)
# What the first line of a session holds besides its type, for each type a session may start with.
_SNIFF_FIELDS: dict[str, tuple[str, ...]] = {
    "progress": ("parentUuid", "sessionId"),
    "system": ("parentUuid", "sessionId"),
    "attachment": ("attachment", "parentUuid", "sessionId"),
    "summary": ("leafUuid",),
    "file-history-snapshot": ("messageId", "snapshot"),
    "queue-operation": ("operation", "sessionId"),
    "last-prompt": ("lastPrompt", "sessionId"),
    "custom-title": ("customTitle", "sessionId"),
    "ai-title": ("aiTitle", "sessionId"),
    "agent-name": ("agentName", "sessionId"),
    "permission-mode": ("permissionMode", "sessionId"),
}
_TITLES = {"custom-title": "customTitle", "ai-title": "aiTitle"}
# Attachments holding text Claude Code sent the model, and where the text is ("*": each item of a list).
_ATTACHMENT_TEXT: dict[str, tuple[str, ...]] = {
    "queued_command": ("prompt",),  # a prompt the user typed while the agent worked: text or blocks
    "hook_additional_context": ("content",),
    "nested_memory": ("content", "content"),  # a CLAUDE.md file
    "file": ("content", "file", "content"),  # a file the user @-mentioned
    "edited_text_file": ("snippet",),  # a file changed outside the agent
    "hook_blocking_error": ("blockingError", "blockingError"),
    "invoked_skills": ("skills", "*", "content"),
    "skill_listing": ("content",),
    "total_tokens_reminder": ("text",),
    "silent_turn_reminder": ("text",),
    "batching_reminder_sent": ("text",),
}
# Attachments the model saw only as wording Claude Code builds from their fields, or never saw: metadata.
_ATTACHMENT_METADATA = frozenset(
    {
        "hook_success",
        "hook_non_blocking_error",
        "hook_cancelled",
        "command_permissions",
        "deferred_tools_delta",
        "mcp_instructions_delta",
        "agent_listing_delta",
        "todo",
        "todo_reminder",
        "task_reminder",
        "task_status",
        "plan_mode",
        "plan_mode_exit",
        "auto_mode",
        "ultra_effort_enter",
        "ultra_effort_exit",
        "budget_usd",
        "date_change",
        "compact_file_reference",
        "dynamic_skill",
        "read_truncation_notice",
    }
)
_FLAGS = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly", "isApiErrorMessage")
_EXIT_CODE = re.compile(r"(?:Error: )?Exit code (-?\d+)\b")


@dataclass(slots=True, kw_only=True)
class _Entry:
    """An entry of the tree: a user or assistant entry, or one that only links the tree (no blocks)."""

    pos: int  # order in the file
    line: int
    kind: str
    uuid: str
    parent: str | None
    logical_parent: str | None
    sidechain: bool
    session_id: str | None = None
    agent_id: str | None = None
    mid: str | None = None  # API message id of an assistant entry
    blocks: list[Block] = field(default_factory=list)
    timestamp: datetime | None = None
    info: dict[str, Any] = field(default_factory=dict)  # small fields kept in Message.extra
    answers: str | None = None  # the assistant entry whose calls a user entry answers
    unnamed: list[int] = field(default_factory=list)  # blocks whose call or result named no id

    @property
    def talks(self) -> bool:
        """True for user and assistant entries."""
        return self.kind in _CONVERSATION

    @property
    def response(self) -> str:
        """The API response an assistant entry is part of: its message id, else the entry alone."""
        return self.mid or self.uuid


# --- detection -----------------------------------------------------------------------


def sniff(source: Source) -> bool:
    """A JSONL line of a Claude Code session: an entry with ``parentUuid``/``sessionId`` and a known type."""
    first = source.sample()
    if isinstance(first, dict) and isinstance(first.get("type"), str):
        kind = first["type"]
        if kind in _CONVERSATION:  # older or trimmed files may leave out parentUuid
            return "sessionId" in first and ("parentUuid" in first or ("uuid" in first and "message" in first))
        if kind in _SNIFF_FIELDS:
            return all(name in first for name in _SNIFF_FIELDS[kind])
    head = source.head()
    return '"parentUuid"' in head and '"sessionId"' in head and '"isSidechain"' in head


# --- parsing -------------------------------------------------------------------------


def parse(source: Source) -> list[Conversation]:
    """The main conversation (if any) and one conversation per sidechain tree."""
    entries, titles = _read(source)
    parents = _link(entries, source)
    main = [e for e in entries if not e.sidechain]
    conversations: list[Conversation] = []
    if any(e.talks for e in main):
        session = next((e.session_id for e in main if e.session_id), None)
        conv_id = session or make_id(NAME, main[0].uuid)
        chosen = _branch(main, parents, source, "the main conversation")
        title = _title(titles, {e.uuid for e in chosen})
        conversations.append(Conversation(id=conv_id, messages=_messages(chosen, source, conv_id), title=title))
    for n, tree in enumerate(_sidechain_trees(entries, parents), start=1):
        root = tree[0]
        agent = next((e.agent_id for e in tree if e.agent_id), None)
        title = f"subagent {agent}" if agent else f"sidechain {n}"
        conv_id = f"{root.session_id or ''}:{'agent-' + agent if agent else 'sidechain-' + root.uuid}"
        chosen = _branch(tree, parents, source, title)
        conversations.append(Conversation(id=conv_id, messages=_messages(chosen, source, conv_id), title=title))
    known = {c.id for c in conversations}
    for path in _subagent_files(source.path):
        sub = Source.from_path(path, lenient=source.lenient)
        found = [c for c in parse(sub) if c.id not in known]
        source.notes.extend(f"{path.name}: {note}" for note in sub.notes)
        conversations.extend(found)
        known.update(c.id for c in found)
    return conversations


def _title(titles: Mapping[str, list[tuple[str, str]]], in_tree: set[str]) -> str:
    """The main conversation's title: set by the user, else a summary of its branch, else generated."""
    if titles["custom-title"]:
        return titles["custom-title"][-1][1]
    summary = next((text for leaf, text in reversed(titles["summary"]) if leaf in in_tree), None)
    if summary is not None:
        return summary
    return titles["ai-title"][-1][1] if titles["ai-title"] else ""


def _subagent_files(session_path: str) -> list[Path]:
    """Subagent files Claude Code 2.1 writes beside a session: ``<session>/subagents/agent-*.jsonl``."""
    path = Path(session_path)
    if path.suffix != ".jsonl":
        return []
    folder = path.with_suffix("") / "subagents"
    return sorted(folder.glob("agent-*.jsonl")) if folder.is_dir() else []


def _read(source: Source) -> tuple[list[_Entry], dict[str, list[tuple[str, str]]]]:
    """The entries of the tree, in file order, and the titles by kind: (leafUuid or "", title)."""
    entries: list[_Entry] = []
    titles: dict[str, list[tuple[str, str]]] = {"summary": [], "custom-title": [], "ai-title": []}
    unknown: Counter[str] = Counter()
    attachments: Counter[str] = Counter()
    seen: set[str] = set()
    repeats: list[int] = []  # lines of entries whose uuid an earlier entry has
    for lineno, obj in source.records():
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            source.skip(lineno, "not a Claude Code entry (no 'type')")
            continue
        kind = obj["type"]
        title = obj.get(_TITLES.get(kind, "summary"))
        if kind in titles and isinstance(title, str) and title:
            titles[kind].append((str(obj.get("leafUuid") or ""), title))
        if kind not in _CONVERSATION and kind not in _METADATA:
            unknown[kind] += 1
        if kind == "attachment":
            what = _attachment_kind(obj)
            if what not in _ATTACHMENT_TEXT and what not in _ATTACHMENT_METADATA:
                attachments[what] += 1
        try:
            entry = _entry(obj, kind, lineno, len(entries))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            source.skip(lineno, f"bad {kind} entry: {detail}")
            continue
        if entry is None:
            continue
        if entry.uuid in seen:
            repeats.append(lineno)
            continue
        seen.add(entry.uuid)
        entries.append(entry)
    if unknown:
        kinds = ", ".join(f"{n} {k!r}" for k, n in sorted(unknown.items()))
        source.notes.append(f"entries of unknown type not imported: {kinds}")
    if attachments:
        kinds = ", ".join(f"{n} {k!r}" for k, n in sorted(attachments.items()))
        source.notes.append(f"attachments of unknown kind not imported: {kinds}")
    if repeats:
        lines = ", ".join(map(str, repeats[:5])) + (" ..." if len(repeats) > 5 else "")
        source.notes.append(
            f"{len(repeats)} entries repeat the uuid of an earlier entry and were not imported (lines {lines})"
        )
    return _pair_unnamed(entries, source), titles


def _entry(obj: Mapping[str, Any], kind: str, lineno: int, pos: int) -> _Entry | None:
    """An `_Entry` for a user/assistant entry or another entry of the tree; None for one outside it."""
    uuid = obj.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        if kind in _CONVERSATION:
            raise ValueError("no 'uuid'")
        return None
    entry = _Entry(
        pos=pos,
        line=lineno,
        kind=kind,
        uuid=uuid,
        parent=_str(obj.get("parentUuid")),
        logical_parent=_str(obj.get("logicalParentUuid")),
        sidechain=bool(obj.get("isSidechain")),
    )
    if kind == "attachment":
        blocks = _attachment_blocks(obj)
        if blocks:
            _fill(entry, obj, "user")
            entry.blocks = blocks
            entry.info["attachment"] = _attachment_kind(obj)
        return entry
    if kind not in _CONVERSATION:
        return entry
    msg = obj["message"]
    if not isinstance(msg, Mapping):
        raise TypeError("'message' is not an object")
    _fill(entry, obj, kind)
    if kind == "assistant":
        entry.mid = _str(msg.get("id"))
        for key in ("model", "usage"):
            if msg.get(key) is not None:
                entry.info[key] = msg[key]
    else:
        entry.answers = _str(obj.get("sourceToolAssistantUUID")) or entry.parent
    entry.blocks, entry.unnamed = _blocks(msg["content"], obj, uuid)
    wrong = ToolResult if kind == "assistant" else ToolCall
    if any(isinstance(b, wrong) for b in entry.blocks):
        raise ValueError(f"a {'tool_result' if kind == 'assistant' else 'tool_use'} block in a {kind} entry")
    return entry


def _fill(entry: _Entry, obj: Mapping[str, Any], kind: str) -> None:
    """The fields of an entry that talks."""
    entry.kind = kind
    entry.session_id = _str(obj.get("sessionId"))
    entry.agent_id = _str(obj.get("agentId"))
    entry.timestamp = parse_timestamp(obj.get("timestamp"))
    entry.info = {k: obj[k] for k in _FLAGS if obj.get(k)}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- attachments ---------------------------------------------------------------------


def _attachment_kind(obj: Mapping[str, Any]) -> str:
    attachment = obj.get("attachment")
    kind = attachment.get("type") if isinstance(attachment, Mapping) else None
    return kind if isinstance(kind, str) else "?"


def _attachment_blocks(obj: Mapping[str, Any]) -> list[Block]:
    """The text (and images) an attachment sent the model; empty for one that is metadata."""
    where = _ATTACHMENT_TEXT.get(_attachment_kind(obj))
    if where is None:
        return []
    blocks: list[Block] = []
    for value in _dig(obj["attachment"], where):
        if isinstance(value, str):
            blocks.append(TextBlock(text=value))
        elif isinstance(value, list):  # a queued prompt with images, or several hook contexts
            blocks.extend(TextBlock(text=v) if isinstance(v, str) else _block(v, None) for v in value)
        elif value is not None:
            raise TypeError(f"attachment text must be text or a list, got {type(value).__name__}")
    for block in blocks:
        if not isinstance(block, TextBlock | ImageBlock):
            raise TypeError(f"an attachment holds a {type(block).__name__}, not text")
    return [b for b in blocks if not isinstance(b, TextBlock) or b.text]


def _dig(value: Any, path: tuple[str, ...]) -> list[Any]:
    """The values at `path` inside `value` ("*" steps into each item of a list); missing ones left out."""
    found = [value]
    for step in path:
        if step == "*":
            found = [item for v in found if isinstance(v, list) for item in v]
        else:
            found = [v[step] for v in found if isinstance(v, Mapping) and step in v]
    return found


# --- content blocks ------------------------------------------------------------------


def _blocks(content: Any, obj: Mapping[str, Any], uuid: str) -> tuple[list[Block], list[int]]:
    """The blocks of an entry's message, and the positions of the calls and results that name no id.

    Those get a stable made-up id here; `_pair_unnamed` replaces it when the file tells more.
    """
    if isinstance(content, str):
        return [TextBlock(text=content)], []
    if not isinstance(content, list):
        raise TypeError(f"'message.content' must be text or a list, got {type(content).__name__}")
    n_results = sum(1 for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result")
    # toolUseResult and sourceToolUseID describe the entry's result; only unambiguous when there is one
    tool_use_result = obj.get("toolUseResult") if n_results == 1 else None
    source_call = _str(obj.get("sourceToolUseID")) if n_results == 1 else None
    blocks: list[Block] = []
    unnamed: list[int] = []
    for i, block in enumerate(content):
        key = _missing_id(block)
        if key == "tool_use_id" and source_call:
            block = {**block, key: source_call}
        elif key is not None:
            block = {**block, key: make_id(NAME, uuid, i)}
            unnamed.append(i)
        blocks.append(_block(block, tool_use_result))
    return blocks, unnamed


def _missing_id(block: Any) -> str | None:
    """The id field a tool_use or tool_result block leaves out or empty (trimmed files), else None."""
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    key = "id" if kind == "tool_use" else "tool_use_id" if kind == "tool_result" else None
    return key if key is not None and block.get(key) in (None, "") else None


def _block(block: Any, tool_use_result: Any) -> Block:
    if not isinstance(block, Mapping):
        raise TypeError(f"a content block must be an object, got {type(block).__name__}")
    kind = block["type"]
    if kind == "text":
        return TextBlock(text=block["text"])
    if kind == "thinking":
        return ThinkingBlock(text=block["thinking"], signature=block.get("signature"))
    if kind == "redacted_thinking":
        return ThinkingBlock(text="", signature=block["data"], redacted=True)
    if kind == "tool_use":
        return ToolCall.from_input(id=block["id"], name=block["name"], input=block.get("input", {}))
    if kind == "tool_result":
        return _result(block, tool_use_result)
    image = _image(block)
    return image if image is not None else _kept_whole(block)


def _image(block: Mapping[str, Any]) -> ImageBlock | None:
    source = block.get("source")
    if block.get("type") != "image" or not isinstance(source, Mapping):
        return None
    if source.get("type") == "base64":
        return ImageBlock(media_type=source.get("media_type") or "image/png", data=source.get("data"))
    if source.get("type") == "url":
        return ImageBlock(media_type=source.get("media_type") or "image/jpeg", url=source.get("url"))
    return None


def _kept_whole(block: Mapping[str, Any]) -> TextBlock:
    """A block ctxkeep does not model (document, tool_reference, ...): readable text, original in extra."""
    text = block.get("text") or block.get("content")
    if not isinstance(text, str):
        text = f"[{block.get('type')}] " + json.dumps(block, ensure_ascii=False)[:2000]
    return TextBlock(text=text, extra={NAME: {"block": dict(block)}})


def _result(block: Mapping[str, Any], tool_use_result: Any) -> ToolResult:
    raw = block.get("content", "")
    content: str | tuple[TextBlock | ImageBlock, ...]
    if raw is None:
        content = ""
    elif isinstance(raw, str):
        content = raw
    elif isinstance(raw, list):
        parts = [_block(b, None) for b in raw]
        content = tuple(p if isinstance(p, TextBlock | ImageBlock) else TextBlock(text=str(p)) for p in parts)
    else:
        raise TypeError(f"tool_result content must be text or a list, got {type(raw).__name__}")
    is_error = bool(block.get("is_error"))
    result = ToolResult(call_id=block["tool_use_id"], content=content, is_error=is_error)
    details = _small_fields(tool_use_result)
    exit_code = _exit_code(tool_use_result, result.text if is_error else "")
    if details or exit_code is not None:
        return ToolResult(
            call_id=result.call_id,
            content=content,
            is_error=is_error,
            exit_code=exit_code,
            extra={NAME: {"toolUseResult": details}} if details else {},
        )
    return result


def _exit_code(tool_use_result: Any, error_text: str) -> int | None:
    """The exit code when the record states one: ``exitCode``, or a failed Bash call's "Exit code N"."""
    if isinstance(tool_use_result, Mapping):
        code = tool_use_result.get("exitCode")
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    for text in (error_text, tool_use_result if isinstance(tool_use_result, str) else ""):
        match = _EXIT_CODE.match(text)
        if match:
            return int(match.group(1))
    return None


def _small_fields(tool_use_result: Any) -> dict[str, Any]:
    """The scalar fields of ``toolUseResult`` (flags, codes); file copies and outputs are left out."""
    if not isinstance(tool_use_result, Mapping):
        return {}
    return {
        k: v
        for k, v in tool_use_result.items()
        if isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 200)
    }


# --- ids missing from the file -------------------------------------------------------


def _pair_unnamed(entries: list[_Entry], source: Source) -> list[_Entry]:
    """Give the calls and results that named no id the ids the rest of the file implies.

    A call takes an id that a result answering its entry names; a result takes the id of
    the one call of the entry it answers. A result left with none is a bad record; a call
    keeps its made-up id (and will show as a call with no result).
    """
    if not any(e.unnamed for e in entries):
        return entries
    by_uuid = {e.uuid: e for e in entries}
    named: dict[str, list[str]] = {}  # assistant entry -> ids its answers name
    for e in entries:
        if e.kind == "user" and e.answers:
            ids = [b.call_id for i, b in enumerate(e.blocks) if isinstance(b, ToolResult) and i not in e.unnamed]
            named.setdefault(e.answers, []).extend(ids)
    taken = made_up = 0
    for e in entries:
        if e.kind != "assistant" or not e.unnamed:
            continue
        own = {b.id for b in e.blocks if isinstance(b, ToolCall)}
        free = iter(dict.fromkeys(cid for cid in named.get(e.uuid, ()) if cid not in own))
        for i in e.unnamed:
            cid = next(free, None)
            block = e.blocks[i]
            if cid is not None and isinstance(block, ToolCall):
                e.blocks[i] = replace(block, id=cid)
                taken += 1
            else:
                made_up += 1
        e.unnamed = []
    if taken or made_up:
        source.notes.append(
            f"{taken + made_up} tool calls have no id in the file: {taken} took the id their result names,"
            f" {made_up} got a made-up one"
        )
    kept: list[_Entry] = []
    for e in entries:
        if e.unnamed and not _name_results(e, by_uuid.get(e.answers or "")):
            source.skip(
                e.line,
                "a tool_result names no tool_use_id, its entry no sourceToolUseID, and the entry it answers"
                " has not exactly one tool call",
            )
            e.kind, e.blocks = "skipped", []  # still links the tree
        kept.append(e)
    return kept


def _name_results(e: _Entry, answered: _Entry | None) -> bool:
    """Give a user entry's one id-less result the id of the one call of `answered`; False if it cannot."""
    calls = [b for b in answered.blocks if isinstance(b, ToolCall)] if answered and answered.kind == "assistant" else []
    block = e.blocks[e.unnamed[0]]
    if len(e.unnamed) != 1 or len(calls) != 1 or not isinstance(block, ToolResult):
        return False
    e.blocks[e.unnamed[0]] = replace(block, call_id=calls[0].id)
    e.unnamed = []
    return True


# --- the tree ------------------------------------------------------------------------


def _link(entries: list[_Entry], source: Source) -> dict[str, _Entry]:
    """Each entry's effective parent (uuid -> entry), joining compaction roots to what they continue.

    A main entry with no parent in the file, other than the first, continues from its
    ``logicalParentUuid`` or else from the last main user/assistant entry before it; a
    sidechain entry with none starts a sidechain tree.
    """
    by_uuid = {e.uuid: e for e in entries}
    parents: dict[str, _Entry] = {}
    last_main: _Entry | None = None  # newest main user/assistant entry so far
    last_any: _Entry | None = None
    missing = 0
    for e in entries:
        named = e.parent or e.logical_parent
        parent = by_uuid.get(named) if named else None
        if parent is None and e.parent and e.logical_parent:
            parent = by_uuid.get(e.logical_parent)
        if parent is not None and (parent.sidechain != e.sidechain or parent is e):
            parent = None
        if parent is None and named:
            missing += 1
        if parent is None and not e.sidechain:
            parent = last_main or last_any
        if parent is not None:
            parents[e.uuid] = parent
        if not e.sidechain:
            last_any = e
            if e.talks:
                last_main = e
    if missing:
        source.notes.append(
            f"{missing} entries name a parent that is not in the file: a main entry continues from the entry"
            " before it, a sidechain entry starts a new sidechain"
        )
    return parents


def _sidechain_trees(entries: list[_Entry], parents: Mapping[str, _Entry]) -> list[list[_Entry]]:
    """The entries of each sidechain tree, in file order, trees ordered by their root; only trees that talk."""
    trees: dict[int, list[_Entry]] = {}
    root_of: dict[str, int] = {}
    for e in entries:
        if not e.sidechain:
            continue
        parent = parents.get(e.uuid)
        root = root_of.get(parent.uuid, e.pos) if parent is not None else e.pos
        root_of[e.uuid] = root
        trees.setdefault(root, []).append(e)
    return [tree for _, tree in sorted(trees.items()) if any(e.talks for e in tree)]


def _branch(tree: list[_Entry], parents: Mapping[str, _Entry], source: Source, what: str) -> list[_Entry]:
    """The user/assistant entries of the newest branch of `tree`, in file order.

    The path from the newest user/assistant entry to the root, plus the pieces of its API
    responses and the results of their calls that hang off the path.
    """
    tip = next(e for e in reversed(tree) if e.talks)
    path: dict[str, _Entry] = {}
    node: _Entry | None = tip
    while node is not None and node.uuid not in path:
        path[node.uuid] = node
        node = parents.get(node.uuid)
    responses = {e.response for e in path.values() if e.kind == "assistant"}
    calls = {
        b.id
        for e in tree
        if e.kind == "assistant" and e.response in responses
        for b in e.blocks
        if isinstance(b, ToolCall)
    }
    children: dict[str, list[_Entry]] = {}
    for e in tree:
        parent = parents.get(e.uuid)
        if parent is not None:
            children.setdefault(parent.uuid, []).append(e)

    chosen = dict(path)
    stack = [c for uuid in path for c in children.get(uuid, ()) if c.uuid not in path]
    while stack:
        e = stack.pop()
        if e.uuid in chosen:
            continue
        if e.talks and not _answers(e, responses, calls):
            continue  # the start of another branch
        chosen[e.uuid] = e
        stack.extend(children.get(e.uuid, ()))
    left_out = sum(1 for e in tree if e.talks and e.uuid not in chosen)
    if left_out:
        source.notes.append(
            f"{what}: {left_out} user/assistant entries on other (rewound or abandoned) branches were not imported"
        )
    return sorted((e for e in chosen.values() if e.talks), key=lambda e: e.pos)


def _answers(e: _Entry, responses: set[str], calls: set[str]) -> bool:
    """True for an off-path piece of a response on the path, an entry with results of its calls,
    or an attachment hung on an entry taken (context sent with that step)."""
    if e.kind == "assistant":
        return e.response in responses
    if "attachment" in e.info:
        return True
    results = [b.call_id for b in e.blocks if isinstance(b, ToolResult)]
    return bool(results) and all(cid in calls for cid in results)


# --- messages ------------------------------------------------------------------------


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
    orphans: list[str] = []
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
                if result is not None:
                    orphans.append(result.call_id)
                slots.append(msg)
    out: list[Message] = []
    for slot in slots:
        if isinstance(slot, Message):
            out.append(slot)
        else:
            out.extend(_turn_messages(slot))
    _report_pairing(out, orphans, source, conv_id)
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


def _report_pairing(messages: Iterable[Message], orphans: list[str], source: Source, conv_id: str) -> None:
    answered: set[str] = set()
    calls: list[str] = []
    for msg in messages:
        calls.extend(c.id for c in msg.tool_calls)
        if msg.tool_result is not None:
            answered.add(msg.tool_result.call_id)
    missing = [c for c in calls if c not in answered]
    if missing:
        source.notes.append(f"conversation {conv_id}: {len(missing)} tool calls have no result: {_few(missing)}")
    if orphans:
        source.notes.append(
            f"conversation {conv_id}: {len(orphans)} tool results have no call in the conversation: {_few(orphans)}"
        )


def _few(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (" ..." if len(ids) > 3 else "")
