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
