"""Reading a session file: its entries (the nodes of the tree) and titles; ids the file leaves out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ctxkeep.formats.claude_code.attachments import (
    _ATTACHMENT_METADATA,
    _ATTACHMENT_TEXT,
    _attachment_blocks,
    _attachment_kind,
)
from ctxkeep.formats.claude_code.blocks import _blocks, _str
from ctxkeep.formats.source import RECORD_ERRORS, Source, describe, parse_timestamp
from ctxkeep.messages import Block, TextBlock, ToolCall, ToolResult

_CONVERSATION = frozenset({"user", "assistant"})
# Entry types that carry no conversation; left out without a note (see docs/formats.md, Claude Code).
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
_TITLES = {"custom-title": "customTitle", "ai-title": "aiTitle"}
_FLAGS = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly", "isApiErrorMessage")


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


def _read(source: Source) -> tuple[list[_Entry], dict[str, list[tuple[str, str]]]]:
    """The entries of the tree, in file order, and the titles by kind: (leafUuid or "", title)."""
    entries: list[_Entry] = []
    titles: dict[str, list[tuple[str, str]]] = {"summary": [], "custom-title": [], "ai-title": []}
    unknown: Counter[str] = Counter()
    attachments: Counter[str] = Counter()
    seen: set[str] = set()
    repeats: list[int] = []  # lines of entries whose uuid an earlier entry has
    queue: list[_QueueOp] = []
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
            source.leave_out(f"{kind} entry (unknown type)")
        if kind == "attachment":
            what = _attachment_kind(obj)
            if what not in _ATTACHMENT_TEXT and what not in _ATTACHMENT_METADATA:
                attachments[what] += 1
        elif kind == "queue-operation":
            queue.append(_QueueOp(line=lineno, at=len(entries), op=str(obj.get("operation")), text=obj.get("content")))
        elif kind in _METADATA:
            source.leave_out(f"{kind} entry (not conversation)")
        try:
            entry = _entry(obj, kind, lineno, len(entries))
        except RECORD_ERRORS as exc:
            source.skip(lineno, f"bad {kind} entry: {describe(exc)}")
            continue
        if kind == "attachment" and (entry is None or not entry.blocks):
            source.leave_out(f"attachment {_attachment_kind(obj)} (no text the model saw)")
        if entry is None:
            continue
        if entry.uuid in seen:
            repeats.append(lineno)
            source.leave_out(f"{kind} entry (repeats an earlier uuid)")
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
    return _pair_unnamed(_with_queued(entries, queue, source), source), titles


@dataclass(frozen=True, slots=True, kw_only=True)
class _QueueOp:
    """A ``queue-operation`` line: a prompt the user typed while the agent worked (``enqueue``), and its end."""

    line: int
    at: int  # how many entries came before it in the file
    op: str  # enqueue, dequeue (sent as the next prompt), remove (sent mid-turn), popAll (back to the input box)
    text: Any


def _with_queued(entries: list[_Entry], queue: Sequence[_QueueOp], source: Source) -> list[_Entry]:
    """`entries` with each prompt the user queued that reached the model but no entry of the file holds.

    Claude Code 2.0 records a prompt typed while the agent works as ``enqueue``; sent as the next prompt
    (``dequeue``) it is a user entry too, but sent mid-turn (``remove``) it is on no entry (2.1 writes a
    ``queued_command`` attachment instead). Such a prompt becomes a user entry hung on the first user
    entry after its removal, as the attachment would be; one taken back to the input box (``popAll``)
    was never sent.
    """
    said = {b.text.strip() for e in entries if e.kind == "user" for b in e.blocks if isinstance(b, TextBlock)}
    added: list[tuple[int, _Entry]] = []
    for n, op in enumerate(queue):
        if op.op != "enqueue":
            source.leave_out(f"queue-operation {op.op} (not conversation)")
            continue
        end = next((later for later in queue[n + 1 :] if later.op != "enqueue"), None)
        text = op.text.strip() if isinstance(op.text, str) else ""
        host = next((e for e in entries[end.at :] if e.kind == "user" and not e.sidechain), None) if end else None
        if not text or text in said or end is None or end.op != "remove" or host is None:
            source.leave_out("queue-operation enqueue (sent as a user entry, or never sent)")
            continue
        entry = _Entry(
            pos=0,
            line=op.line,
            kind="user",
            uuid=f"queued:{op.line}",
            parent=host.uuid,
            logical_parent=None,
            sidechain=False,
            session_id=host.session_id,
            blocks=[TextBlock(text=text)],
            timestamp=host.timestamp,
            info={"attachment": "queued_command", "queue": "remove"},
        )
        added.append((entries.index(host), entry))
        said.add(text)
    if not added:
        return entries
    source.notes.append(f"{len(added)} prompt(s) the user queued mid-turn are on no entry; read from the queue")
    out = list(entries)
    for index, entry in sorted(added, key=lambda a: -a[0]):
        out.insert(index + 1, entry)
    for pos, e in enumerate(out):
        e.pos = pos
    return out


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
            hook = obj["attachment"].get("hookName")
            if isinstance(hook, str) and hook:  # the hook whose output it is: a standing rule may come that way
                entry.info["hookName"] = hook
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
