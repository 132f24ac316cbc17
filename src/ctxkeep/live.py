"""The live context between steps: the messages still sent verbatim, and what makes a step cheap.

`Live` is an immutable value carrying the token count of every live message, the running total,
the pairing state of the newest turn and the positions of the tool results that may still be
offloaded, so a step without compaction only counts and offloads what changed. `add` appends (and
refuses a result that would reach the provider as an orphan, and an id already used), `rebuild`
starts over from the tail a compaction kept; `ctxkeep.aging` writes the step-1 cuts back. The
threshold it is held to and its pins are `ctxkeep.budget`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeAlias

import orjson

from .archive import Archive
from .costs import Decision
from .errors import MessageError
from .messages import Message, without_surrogates
from .offload import is_output
from .pairing import Link, Pairs, Walk, pair_walk
from .seq import Seq
from .tokens import Counter

_EMPTY_NAMES: Mapping[str, str] = MappingProxyType({})

# The tool schemas a request carries (OpenAI or Anthropic form), or None.
Tools: TypeAlias = Sequence[Mapping[str, Any]] | None


class Ids:
    """Where each message id and tool-call id of a `Live`'s messages sits (the newest position of each).

    `Live` values are immutable, but a set copied on every `add` would cost the whole history. So
    the values `add` makes one from another share one index, and `add` extends it in place; it is
    used only by a value whose messages it describes exactly (`_ids_of`), and rebuilt otherwise (an
    older value extended again, a value built by hand), which a `Session` never needs.
    """

    __slots__ = ("calls", "length", "messages")

    def __init__(self, messages: Sequence[Message] = ()) -> None:
        self.messages: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.length = 0
        self.extend(messages)

    def extend(self, messages: Sequence[Message]) -> None:
        """Index `messages`, which follow the ones indexed so far."""
        for i, msg in enumerate(messages, self.length):
            self.messages[msg.id] = i
            if msg.role == "assistant":
                for call in msg.tool_calls:
                    self.calls[call.id] = i
        self.length += len(messages)


@dataclass(frozen=True, kw_only=True, slots=True)
class Live:
    """The live context between steps. Build it with `add`; `ctxkeep.engine.prepare` returns the next one."""

    # `Seq`s (read like tuples), so a step appends and rewrites without copying the history; `add`
    # takes tuples or lists given here too.
    messages: Sequence[Message] = Seq()
    counts: Sequence[int] = Seq()
    total: int = 0
    summary: str | None = None
    # The summary as the summarizer wrote it, without the archive guide (what the next update starts from).
    summary_body: str | None = None
    summary_tokens: int = 0
    archive: Archive = field(default_factory=Archive)
    pinned: frozenset[str] = frozenset()
    # Calls of the newest assistant turn still waiting for their result, and calls that never got one.
    pairs: Pairs = field(default_factory=Pairs)
    # Positions of the results (and user-side command outputs, `ctxkeep.offload.is_output`) that may still
    # change, oldest first: the `waiting` oldest passed `recent_n` and wait for their "old" cut (with the
    # assistant messages whose calls' arguments wait for theirs), the others are the newest. Results that got
    # it, or are too small to need it, are final and never looked at again. Their tool names, by call id, in
    # `result_tools`.
    tool_positions: tuple[int, ...] = ()
    result_tools: Mapping[str, str] = field(default_factory=lambda: _EMPTY_NAMES)
    waiting: int = 0
    # About what the "old" cut would free from the waiting results (bytes): when it is enough, they age.
    waiting_bytes: int = 0
    # Messages before this were offloaded as new results already (what `offload_recent` saw last).
    checked: int = 0
    system: str | None = None
    system_tokens: int = 0
    # The tool schemas sent with each request (their JSON, what they were counted from) and their tokens.
    tools: str = ""
    tools_tokens: int = 0
    # Total tokens when the last compaction failed or freed nothing; no retry until the context grows.
    failed_at: int | None = None
    # Positions of the messages the last `prepare` offloaded (what a store must rewrite).
    offloaded: tuple[int, ...] = ()
    # What the last `offload_recent` decided about the waiting results, with its expected saving (`ctxkeep.costs`);
    # None when nothing waited. For the step's record only: not part of the value.
    aging: Decision | None = field(default=None, compare=False)
    # When the last `offload_recent` given the time ran: the previous request, for a cache gone cold between
    # messages without timestamps (None: unknown, as after a reopen). Not part of the value.
    passed_at: datetime | None = field(default=None, compare=False)
    # Ids of the messages compacted into the archive: an id names one message of a workspace, ever.
    archived: frozenset[str] = frozenset()
    # The message and call ids of `messages`, for `add`'s checks (see `Ids`); not part of the value.
    ids: Ids = field(default_factory=Ids, compare=False, repr=False)

    @property
    def tokens(self) -> int:
        """What the context costs: system prompt, summary and live messages."""
        return self.fixed_tokens + self.summary_tokens + self.total

    @property
    def fixed_tokens(self) -> int:
        """What every request carries whatever the pass does: the system prompt and the tool schemas."""
        return self.system_tokens + self.tools_tokens


def add(
    live: Live,
    messages: Sequence[Message],
    counter: Counter,
    *,
    counts: Sequence[int] | None = None,
    checked: Checked | None = None,
) -> Live:
    """`live` with `messages` appended, counted once (or given their saved `counts`). Raises `MessageError`
    (and changes nothing) when a message's id is live or archived already (or repeated in the batch), a
    call's id is live already, or a result answers no waiting call (its call is not live, or was answered
    already). `checked`, what `check` found for this `live` and these messages (or their offloaded form),
    spares walking them again; for any other value or batch it is ignored.

    A result must follow its call (it may come in the same batch); anything else would be sent to
    the provider as an orphan and refused. Text a tokenizer cannot read because it holds lone UTF-16
    surrogates is kept with U+FFFD in their place (`ctxkeep.messages.without_surrogates`). The cost
    is proportional to the batch, not the history.
    """
    if not messages:
        return live
    if checked is not None and checked.holds(live, messages):
        ids, walk = _ids_of(live), checked.walk
    else:
        ids, walk = _checked(live, messages)
    start = len(live.messages)
    if counts is not None:
        if len(counts) != len(messages):
            raise ValueError(f"{len(counts)} counts for {len(messages)} messages")
        counts = list(counts)
    else:
        try:
            counts = counter.count_each(messages)
        except UnicodeError:
            clean = [without_surrogates(m) for m in messages]
            if all(a is b for a, b in zip(clean, messages, strict=True)):
                raise
            return add(live, clean, counter)
    names = dict(live.result_tools)
    names.update((link.call_id, link.name) for link in walk.links)
    ids.extend(messages)  # last: nothing above may fail once the index has grown
    return replace(
        live,
        messages=Seq.of(live.messages).extended(messages),
        counts=Seq.of(live.counts).extended(counts),
        total=live.total + sum(counts),
        pairs=walk.pairs,
        result_tools=MappingProxyType(names),
        tool_positions=live.tool_positions + _outputs(messages, walk.links, start),
        ids=ids,
    )


def _outputs(messages: Sequence[Message], links: Sequence[Link], start: int) -> tuple[int, ...]:
    """Positions of what offloading may cut among `messages` (the first at `start`): the paired results in
    `links`, and the user messages that are a command's output, in order."""
    commands = [start + i for i, m in enumerate(messages) if m.role == "user" and is_output(m)]
    results = [link.index for link in links]
    return tuple(sorted(results + commands)) if commands else tuple(results)


def message_ids(live: Live) -> Mapping[str, int]:
    """The live message ids, each with its position: the index `add` keeps, so no pass over the history."""
    return _ids_of(live).messages


@dataclass(frozen=True, slots=True)
class Checked:
    """A batch `check` took for a `Live`, with its pairing, which `add` then need not work out again."""

    live: Live
    messages: tuple[Message, ...]
    walk: Walk

    def holds(self, live: Live, messages: Sequence[Message]) -> bool:
        """Whether this is what `check` found for `live` and `messages`: the same value, and a batch that pairs as
        the one checked (the same messages, or with outputs offloaded: ids, roles, calls and results kept)."""
        return (
            live is self.live
            and len(messages) == len(self.messages)
            and all(a is b or _pairs_alike(a, b) for a, b in zip(self.messages, messages, strict=True))
        )


def _pairs_alike(a: Message, b: Message) -> bool:
    calls = [(c.id, c.name) for c in a.tool_calls] == [(c.id, c.name) for c in b.tool_calls]
    ra, rb = a.tool_result, b.tool_result
    results = (ra.call_id if ra else None) == (rb.call_id if rb else None)
    return a.id == b.id and a.role == b.role and calls and results


def check(live: Live, messages: Sequence[Message]) -> Checked:
    """Raise the `MessageError` `add` would raise for `messages`, without counting them: a host cuts a big
    output before it is counted and held, and must know first that the batch will be taken. What it found
    goes to `add` (`checked`), which then does not walk the batch again."""
    messages = tuple(messages)
    _, walk = _checked(live, messages)
    return Checked(live, messages, walk)


def _checked(live: Live, messages: Sequence[Message]) -> tuple[Ids, Walk]:
    """The id index of `live` and the pairing of `messages` after it; `MessageError` for a batch `add` refuses."""
    for i, msg in enumerate(messages):
        if not isinstance(msg, Message):
            raise MessageError(f"expected a Message at position {i}, got {type(msg).__name__}", index=i)
    ids = _ids_of(live)
    walk = pair_walk(messages, start=len(live.messages), pairs=live.pairs, answered=ids.calls)
    problems = [
        p
        for p in (_unpaired(walk.links, walk.reused, len(live.messages)), _known_id(messages, ids, live.archived))
        if p
    ]
    if problems:
        raise min(problems, key=lambda p: p.index or 0)  # the first in the batch; its pairing on a tie
    return ids, walk


def _ids_of(live: Live) -> Ids:
    """`live.ids` when it describes exactly `live.messages` (always, for values `add` made), else a new index."""
    ids, messages = live.ids, live.messages
    if ids.length == len(messages) and (not messages or ids.messages.get(messages[-1].id) == len(messages) - 1):
        return ids
    return Ids(messages)


def _known_id(messages: Sequence[Message], ids: Ids, archived: frozenset[str]) -> MessageError | None:
    seen: set[str] = set()
    for i, msg in enumerate(messages):
        mid = msg.id
        if mid in seen:
            where = "used earlier in this batch"
        elif mid in ids.messages:
            where = "already live"
        elif mid in archived:
            where = "already archived (compacted into dialog/)"
        else:
            seen.add(mid)
            continue
        return MessageError(
            f"the message id {mid!r} at position {i} is {where}; an id names one message of a workspace:"
            " add each message once, and give a new message a new id",
            index=i,
        )
    return None


def _unpaired(links: Sequence[Link], reused: Sequence[tuple[int, str]], start: int) -> MessageError | None:
    bad: list[tuple[int, str, str]] = [(link.index, link.kind, link.call_id) for link in links if link.kind != "paired"]
    bad += [(i, "reused", cid) for i, cid in reused]
    if not bad:
        return None
    at, kind, cid = min(bad)
    i = at - start
    if kind == "reused":
        return MessageError(
            f"the tool call id {cid!r} at position {i} is already live; providers refuse two calls with one"
            " id in a context: give the new call a new id",
            index=i,
        )
    if kind == "separated":
        return MessageError(
            f"the tool result at position {i} answers call {cid!r}, but other messages came after"
            " that call; providers refuse a result that does not directly follow its call. Add results"
            " right after their call (or `ctxkeep.repair` the list first)",
            index=i,
        )
    return MessageError(
        f"the tool result at position {i} answers call {cid!r}, which is not waiting for a"
        " result in the live context (never added, or answered already); add the assistant message with"
        " that call first (or `ctxkeep.repair` the list)",
        index=i,
    )


def with_tools(live: Live, tools: Tools, counter: Counter) -> Live:
    """`live` with the tool schemas the next requests carry, counted when they change (as their JSON text)."""
    text = orjson.dumps(list(tools)).decode() if tools else ""
    if text == live.tools:
        return live
    return replace(live, tools=text, tools_tokens=counter.count_text(text) if text else 0)


def rebuild(live: Live, kept: Sequence[Message]) -> Live:
    """A fresh `Live` holding `kept` (what a compaction left), counts carried over by identity: nothing is recounted.

    The messages of `live` not kept join the archived ids. Summary, archive and failure mark start
    empty; the caller sets the new ones.
    """
    count_of = {id(m): n for m, n in zip(live.messages, live.counts, strict=True)}
    counts = tuple(count_of[id(m)] for m in kept)
    walk = pair_walk(kept)
    kept_ids = {m.id for m in kept}
    archived = live.archived.union(m.id for m in live.messages if m.id not in kept_ids)
    return Live(
        messages=Seq(kept),
        counts=Seq(counts),
        total=sum(counts),
        pinned=frozenset(p for p in live.pinned if p in kept_ids),
        pairs=walk.pairs,
        # Every kept result may still change: the next `offload_recent` sorts out which.
        result_tools=MappingProxyType({link.call_id: link.name for link in walk.links}),
        tool_positions=_outputs(kept, walk.links, 0),
        system=live.system,
        system_tokens=live.system_tokens,
        tools=live.tools,
        tools_tokens=live.tools_tokens,
        archived=archived,
        ids=Ids(kept),
    )
