"""The tree of entries: parents (joined across compactions), sidechain trees, the branch imported."""

from __future__ import annotations

from collections.abc import Mapping

from ctxkeep.formats.claude_code.entries import _Entry
from ctxkeep.formats.source import Source
from ctxkeep.messages import ToolCall, ToolResult


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
        source.leave_out("user/assistant entry on another branch", left_out)
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
