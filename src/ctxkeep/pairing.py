"""The pairing of tool calls with their results: one walk, and what is built on it.

`pair_walk` pairs each tool result with a call of the newest assistant turn still waiting; any message
that is not a tool result ends the turn and abandons its waiting calls. `validate` lists every pairing
problem with its index; `pair_groups` and `safe_cuts` say where a history may be cut (never inside a
call's pair group); `repair` returns a sequence whose tool-call pairing both OpenAI's and
Anthropic's APIs accept, and reports every change it made. (What else an API refuses, such as empty
text or unsigned thinking for Anthropic, is left out by the exporters in `ctxkeep.formats`, not changed
in the messages.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from .messages import NO_RESULT_TEXT, Block, ImageBlock, Message, TextBlock, ToolCall, ToolResult, make_id

_EMPTY: Mapping[str, Any] = MappingProxyType({})

LinkKind: TypeAlias = Literal[
    "paired",  # answers a call of the newest assistant turn that was still waiting
    "separated",  # its call is older: other messages came between (the call was abandoned)
    "duplicate",  # its call was answered already
    "unknown",  # no call with its id came before it
]


@dataclass(frozen=True, slots=True)
class Link:
    """Where `pair_walk` placed one tool result: the call it answers (`call`, an index) and how."""

    index: int
    call_id: str
    kind: LinkKind
    call: int | None
    name: str


@dataclass(frozen=True, slots=True)
class Pairs:
    """What a walk leaves open, to resume it on the next batch (a live context adds messages in batches).

    `open` holds the calls of the newest assistant turn still waiting for their result (call id ->
    index of the message holding it, tool name); `abandoned` the calls that never got a result before
    the conversation moved on (call id -> index).
    """

    open: Mapping[str, tuple[int, str]] = field(default_factory=lambda: _EMPTY)
    abandoned: Mapping[str, int] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Walk:
    """What `pair_walk` found: a `Link` per tool result, the reused call ids, and the state to resume from."""

    links: list[Link]
    reused: list[tuple[int, str]]  # (message index, call id) of a call whose id was live already
    pairs: Pairs


def pair_walk(
    messages: Sequence[Message], *, start: int = 0, pairs: Pairs = Pairs(), answered: Container[str] = ()
) -> Walk:
    """The one rule that pairs tool results with their calls; validation, splitting and the live context use it.

    A result answers a call of the newest assistant turn that is still waiting; any message that
    is not a tool result ends the turn, and its waiting calls are abandoned. Indexes count from
    `start`; `pairs` resumes an earlier walk; `answered` holds call ids answered before it.
    """
    open_calls = dict(pairs.open)
    abandoned = dict(pairs.abandoned)
    done: dict[str, int] = {}
    links: list[Link] = []
    reused: list[tuple[int, str]] = []
    for offset, msg in enumerate(messages):
        i = start + offset
        result = msg.tool_result
        if result is None:
            if open_calls:
                abandoned.update((c, at) for c, (at, _) in open_calls.items())
                open_calls = {}
            for call in msg.tool_calls:
                if call.id in open_calls or call.id in abandoned or call.id in done or call.id in answered:
                    reused.append((i, call.id))
                    abandoned.pop(call.id, None)
                open_calls[call.id] = (i, call.name)
            continue
        cid = result.call_id
        if cid in open_calls:
            at, name = open_calls.pop(cid)
            done[cid] = at
            links.append(Link(i, cid, "paired", at, name))
        elif cid in done:
            links.append(Link(i, cid, "duplicate", done[cid], ""))
        elif cid in abandoned:
            links.append(Link(i, cid, "separated", abandoned[cid], ""))
        else:
            links.append(Link(i, cid, "unknown", None, ""))
    return Walk(links=links, reused=reused, pairs=Pairs(MappingProxyType(open_calls), MappingProxyType(abandoned)))


ProblemKind: TypeAlias = Literal[
    "orphan_result",  # a result whose call is nowhere in the conversation
    "missing_result",  # a call with no result
    "result_before_call",  # a result that comes before its call
    "separated_result",  # a result with other messages between it and its call
    "duplicate_call_id",  # two calls share an id
    "duplicate_result",  # a second result for the same call
    "duplicate_message_id",  # two messages share an id
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One pairing problem: what kind, at which message index, for which call id."""

    kind: ProblemKind
    index: int
    call_id: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = f"message {self.index}"
        if self.call_id:
            where += f" (call {self.call_id})"
        return f"{where}: {self.kind.replace('_', ' ')}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One change `repair` made: what it did and at which index of its input."""

    action: str
    index: int
    call_id: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        return f"message {self.index}: {self.action}" + (f" ({self.detail})" if self.detail else "")


def validate(messages: Sequence[Message]) -> list[Problem]:
    """Every tool-call pairing problem in `messages`, in order of index.

    A well-formed conversation has each assistant tool call followed, before any other
    message, by exactly one ``tool`` message per call.
    """
    problems: list[Problem] = []
    first_msg: dict[str, int] = {}
    first_call: dict[str, int] = {}
    for i, msg in enumerate(messages):
        if msg.id in first_msg:
            problems.append(
                Problem(kind="duplicate_message_id", index=i, detail=f"same id as message {first_msg[msg.id]}")
            )
        first_msg.setdefault(msg.id, i)
        for call in msg.tool_calls:
            if call.id in first_call:
                detail = f"first used at message {first_call[call.id]}"
                problems.append(Problem(kind="duplicate_call_id", index=i, call_id=call.id, detail=detail))
            first_call.setdefault(call.id, i)

    first_result: dict[str, int] = {}
    for link in pair_walk(messages).links:
        cid, i = link.call_id, link.index
        if cid in first_result:
            detail = f"first result at message {first_result[cid]}"
            problems.append(Problem(kind="duplicate_result", index=i, call_id=cid, detail=detail))
            continue
        first_result[cid] = i
        at = first_call.get(cid)
        if at is None:
            problems.append(Problem(kind="orphan_result", index=i, call_id=cid))
        elif link.kind == "unknown":
            problems.append(Problem(kind="result_before_call", index=i, call_id=cid, detail=f"call at message {at}"))
        elif link.kind == "separated":
            problems.append(Problem(kind="separated_result", index=i, call_id=cid, detail=f"call at message {at}"))
    for cid, at in first_call.items():
        if cid not in first_result:
            problems.append(Problem(kind="missing_result", index=at, call_id=cid))
    problems.sort(key=lambda p: p.index)
    return problems


def repair(messages: Sequence[Message]) -> tuple[list[Message], list[Change]]:
    """A copy of `messages` whose tool-call pairing both APIs accept, and the changes made.

    - each call's result is moved to sit right after its assistant message;
    - a call with no result gets an explicit error result reading "[no result recorded]";
    - a result with no call (or a second result for the same call) becomes user text;
    - a repeated call id or message id gets a fresh one.
    Nothing is dropped: every input message's content is in the output.
    """
    msgs, changes = renumber_duplicates(messages)

    calls: dict[str, int] = {}
    for i, msg in enumerate(msgs):
        for call in msg.tool_calls:
            calls[call.id] = i
    results: dict[str, tuple[int, Message]] = {}
    for i, msg in enumerate(msgs):
        result = msg.tool_result
        if result is None:
            continue
        if result.call_id in calls and result.call_id not in results:
            results[result.call_id] = (i, msg)

    out: list[Message] = []
    for i, msg in enumerate(msgs):
        result = msg.tool_result
        if result is not None:
            first = results.get(result.call_id)
            if first is not None and first[0] == i:
                continue  # placed after its call below
            reason = "second result for the same call" if first else "result with no matching call"
            changes.append(
                Change(action="turned result into user text", index=i, call_id=result.call_id, detail=reason)
            )
            out.append(_result_as_user_text(msg, result, reason))
            continue
        out.append(msg)
        for call in msg.tool_calls:
            found = results.get(call.id)
            if found is None:
                changes.append(
                    Change(action="added a result for a call with none", index=i, call_id=call.id, detail=call.name)
                )
                out.append(
                    Message(
                        role="tool",
                        id=make_id(msg.id, "no-result", call.id),
                        content=(ToolResult(call_id=call.id, content=NO_RESULT_TEXT, is_error=True),),
                    )
                )
                continue
            at, result_msg = found
            if not _directly_after(msgs, i, at):
                changes.append(
                    Change(
                        action="moved result next to its call", index=at, call_id=call.id, detail=f"call at message {i}"
                    )
                )
            out.append(result_msg)
    return out, changes


def _directly_after(msgs: Sequence[Message], call_index: int, result_index: int) -> bool:
    """True when only tool messages lie between the call's message and its result."""
    if result_index <= call_index:
        return False
    return all(msgs[j].role == "tool" for j in range(call_index + 1, result_index))


def renumber_duplicates(messages: Sequence[Message]) -> tuple[list[Message], list[Change]]:
    """Give repeated message ids and repeated call ids (and the results after them) new ids.

    Some agents reuse a tool-call id for a later, different call (tau-bench, SWE-agent), even
    within one message; the APIs reject that. A new call id is derived from the id of the
    message holding the call, so it is the same in every window that shows both uses. Returns
    the renumbered messages and one `Change` per new id.
    """
    changes: list[Change] = []
    out: list[Message] = []
    seen_msg: dict[str, int] = {}
    seen_call: set[str] = set()
    waiting: dict[str, deque[str]] = {}  # a call id as results name it -> the ids still to answer, in order
    for i, msg in enumerate(messages):
        if msg.id in seen_msg:
            seen_msg[msg.id] += 1
            new_id = make_id(msg.id, "dup", seen_msg[msg.id])
            changes.append(
                Change(action="gave a repeated message id a new one", index=i, detail=f"{msg.id} -> {new_id}")
            )
            msg = replace(msg, id=new_id)
        seen_msg.setdefault(msg.id, 0)
        if msg.tool_calls:
            msg = _renumber_calls(msg, i, seen_call, waiting, changes)
        result = msg.tool_result
        if result is not None and waiting.get(result.call_id):
            new_cid = waiting[result.call_id].popleft()
            if new_cid != result.call_id:
                msg = replace(msg, content=(replace(result, call_id=new_cid),))
        out.append(msg)
    return out, changes


def _renumber_calls(
    msg: Message, index: int, seen: set[str], waiting: dict[str, deque[str]], changes: list[Change]
) -> Message:
    """`msg` with each call id used before (here or in an earlier message) made unique."""
    blocks: list[Block] = []
    this_turn: dict[str, deque[str]] = {}
    for k, block in enumerate(msg.content):
        if isinstance(block, ToolCall):
            old = block.id
            if old in seen:
                new_cid = f"{old}_{make_id(msg.id, old, k)[:8]}"
                changes.append(
                    Change(action="gave a repeated call id a new one", index=index, call_id=old, detail=new_cid)
                )
                block = replace(block, id=new_cid)
            seen.add(old)
            seen.add(block.id)
            this_turn.setdefault(old, deque()).append(block.id)
        blocks.append(block)
    waiting.update(this_turn)  # results after this message answer its calls, in call order
    return replace(msg, content=tuple(blocks)) if blocks != list(msg.content) else msg


def _result_as_user_text(msg: Message, result: ToolResult, reason: str) -> Message:
    header = f"[tool result for call {result.call_id}: {reason}]"
    if result.is_error:
        header += " [error]"
    blocks: list[Block] = [TextBlock(text=f"{header}\n{result.text}")]
    if not isinstance(result.content, str):
        blocks.extend(b for b in result.content if isinstance(b, ImageBlock))
    return Message(role="user", id=msg.id, timestamp=msg.timestamp, source_id=msg.source_id, content=tuple(blocks))


def count_pairs(messages: Iterable[Message]) -> tuple[int, int]:
    """(tool calls, tool results) in `messages`."""
    calls = results = 0
    for msg in messages:
        calls += len(msg.tool_calls)
        results += msg.tool_result is not None
    return calls, results


# --- where a history may be cut: never inside a call's pair group ----------------------------------------


def pair_groups(messages: Sequence[Message]) -> list[int]:
    """For each message, the index of its pair group's root: the assistant message holding its call.

    A message that is not a tool result is its own root; so is a result whose call is nowhere.
    A result answers the call `pair_walk` pairs it with, or else the first later message holding
    its call id (a result recorded before its call).
    """
    roots = list(range(len(messages)))
    later: dict[str, int] | None = None
    for link in pair_walk(messages).links:
        if link.call is not None:
            roots[link.index] = link.call
            continue
        if later is None:
            later = {}
            for i, msg in enumerate(messages):
                for call in msg.tool_calls:
                    later.setdefault(call.id, i)
        roots[link.index] = later.get(link.call_id, link.index)
    return roots


def safe_cuts(messages: Sequence[Message]) -> list[bool]:
    """One flag per cut point 0..len(messages): True when ``messages[i:]`` can be a kept tail.

    A cut is safe when no pair group has members on both sides of it. Cut 0 (keep all) and
    cut ``len(messages)`` (keep none) are always safe.
    """
    return safe_from_groups(pair_groups(messages))


def safe_from_groups(roots: Sequence[int]) -> list[bool]:
    """`safe_cuts` for messages whose pair groups are `roots` (as `pair_groups` gives them)."""
    n = len(roots)
    lo = list(range(n))
    hi = list(range(n))
    for i, root in enumerate(roots):
        lo[root] = min(lo[root], i)
        hi[root] = max(hi[root], i)
    # Cuts lo+1..hi split the group at `root`; count covering spans with a difference array (O(n)).
    cover = [0] * (n + 2)
    for root in set(roots):
        if lo[root] < hi[root]:
            cover[lo[root] + 1] += 1
            cover[hi[root] + 1] -= 1
    safe: list[bool] = []
    depth = 0
    for i in range(n + 1):
        depth += cover[i]
        safe.append(depth == 0)
    return safe
