"""Claude Code session files (``~/.claude/projects/<project>/<session>.jsonl``), 1.0.98 to 2.1.15x.

Entries form a tree; the conversation is the path from the newest user/assistant entry back to the
root, across compactions. The entries of one API response (and their parallel calls' results, on
side branches) become one assistant message followed by its tool messages; sidechains and the
subagent files beside a session are conversations of their own. What every entry becomes and what
is left out on purpose: docs/formats.md#claude-code.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ctxkeep.formats.claude_code.blocks import NAME
from ctxkeep.formats.claude_code.entries import _CONVERSATION, _read
from ctxkeep.formats.claude_code.tree import _branch, _link, _sidechain_trees
from ctxkeep.formats.claude_code.turns import _messages
from ctxkeep.formats.source import Conversation, Source
from ctxkeep.messages import make_id

__all__ = ["NAME", "parse", "sniff"]

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
