"""Step 1's write-back between steps: the new results get their "recent" cut, the older ones age.

A result past the `recent_n` newest waits for its "old" cut; rewriting a message sent before costs a prompt
cache everything from it to the end, so `offload_recent` ages the waiting ones only where that keeps the
cache warm, or pays for itself (`ctxkeep.costs`), or the cache is gone anyway (`cold_cache`). `aged_tokens`
says what aging would bring a context down to, and `age_all` is the last resort of a compaction whose kept
tail is still over the threshold. The `Live` they rewrite is `ctxkeep.live`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from .costs import Decision, Kind, decided, pays
from .live import Live
from .messages import Message
from .offload import arguments_excess, offload
from .oversize import cut_arguments, cut_oversized
from .reasoning import last_answer, loop_start, without_thinking
from .seq import Seq
from .settings import OffloadSettings
from .store import Store
from .tokens import Counter


def offload_recent(
    live: Live,
    settings: OffloadSettings,
    store: Store,
    counter: Counter,
    *,
    age: bool = False,
    now: datetime | None = None,
) -> Live:
    """Offload the new results, and age the older ones only where that keeps a prompt cache warm.

    A new result gets its "recent" cut. A result past the `recent_n` newest waits for its "old" cut
    (one at most `old_max_bytes` already never needs it, and is left alone). Rewriting a message sent
    before costs a prompt cache everything from it to the end, so waiting results age:

    - at once, those whose cut makes a cache re-send at most `settings.age_tail_tokens` tokens (what
      follows them up to the end of the previous request, and their own cut size) and pays for itself at
      the cache's prices within its horizon (`ctxkeep.costs`, `settings.cache`: the cut is cheap now, only
      dearer later; older waiting ones stay as they are);
    - all together once they would free `settings.age_batch_bytes`, or when `age` is set (at a
      compaction, where the prompt cache is lost anyway), or after a pause longer than
      `settings.cache_lifetime` (`cold_cache`: the cache is gone anyway; for messages without timestamps,
      the pause since the previous call given `now`).

    A call whose results are all past `recent_n` waits too when its arguments are over `old_max_bytes`,
    and ages in any rewrite that reaches it (never starting one, nor filling a batch, on its own). The
    reasoning of turns before the current tool loop is dropped in the new messages and in every message
    a rewrite reaches anyway (`ctxkeep.reasoning`).

    The cost is the new messages, the few within the tail budget, and the waiting ones when they age.
    The positions rewritten are added to the returned `Live.offloaded`, for the caller to persist; what was
    decided (cut, batch, all, cold or wait), with its expected saving, is the returned `Live.aging`.
    """
    length = len(live.messages)
    rewritten: dict[int, Message] = {}
    cold = cold_cache(live.messages, settings.cache_lifetime, live.checked - 1)
    cold = cold or (now is not None and _paused(live, now, settings.cache_lifetime))
    forced: Kind | None = "cold" if cold else "all" if age else None
    decision: Decision | None = None
    # What changes in the value, set below in one copy of it (a `Live` has ~25 fields: each copy costs ~9 us).
    changes: dict[str, Any] = {"checked": length, "passed_at": live.passed_at if now is None else now}
    if live.tool_positions:
        waited, rewritten, decision = _offload_waiting(live, settings, store, forced=forced)
        changes.update(waited)
    if cold and decision is None:  # nothing waited, but the step's record says the cache was gone
        decision = Decision(kind="cold", freed=0, resent=0, saving=0.0)
    # Reasoning before the current tool loop is dropped where that costs a prompt cache nothing more: in the
    # messages it never held (new since the previous request), and from the first one rewritten anyway (all of
    # them when the cache is cold).
    first = 0 if cold else min((p for p in rewritten if p < live.checked), default=live.checked)
    end = loop_start(live.messages, first)
    if end > first:
        span = [rewritten.get(p, live.messages[p]) for p in range(first, end)]
        for i, message in without_thinking(span, store).items():
            if message.id not in live.pinned:
                rewritten[first + i] = message
    if not rewritten:
        return replace(live, aging=decision, **changes)
    positions = sorted(rewritten)
    fresh = counter.count_each([rewritten[p] for p in positions])
    counts = dict(zip(positions, fresh, strict=True))
    total = live.total + sum(n - live.counts[at] for at, n in counts.items())
    if decision is not None and decision.kind != "wait":
        decision = _made(decision.kind, live, counts, settings)
    return replace(
        live,
        aging=decision,
        **changes,
        # Only the blocks holding a rewritten message are copied (`Seq.replaced`), not the history.
        messages=Seq.of(live.messages).replaced(rewritten),
        counts=Seq.of(live.counts).replaced(counts),
        total=total,
        offloaded=tuple(sorted({*live.offloaded, *positions})),
    )


def cold_cache(messages: Sequence[Message], lifetime: float, floor: int = 0) -> bool:
    """True when the pause before the newest message passed `lifetime` seconds: a prompt cache is gone anyway.

    The previous request ended with the newest assistant message (the model's answer to it), so the pause
    is from that message's time to the newest message's (a user back after a while, a tool that ran long).
    Read from the messages alone, so a replay and a reopened session decide alike; without timestamps
    (or with a `lifetime` of 0) the cache is never taken for cold. Only the messages from `floor` on are
    looked at (those since the previous pass, and the last it saw), so a step costs what it added.
    """
    if not lifetime or not messages or messages[-1].timestamp is None:
        return False
    newest = messages[-1].timestamp
    for at in range(len(messages) - 1, max(0, floor) - 1, -1):
        message = messages[at]
        if message.role == "assistant":
            return message.timestamp is not None and (newest - message.timestamp).total_seconds() > lifetime
    return False


def _paused(live: Live, now: datetime, lifetime: float) -> bool:
    """True when the messages say no time (the newest has no timestamp) and more than `lifetime` seconds passed
    since the previous pass: the previous request, whose cache is then gone."""
    if not lifetime or live.passed_at is None or not live.messages or live.messages[-1].timestamp is not None:
        return False
    try:
        return (now - live.passed_at).total_seconds() > lifetime
    except TypeError:  # one time zone-aware, the other naive: no pause can be told
        return False


def _made(kind: Kind, live: Live, counts: Mapping[int, int], settings: OffloadSettings) -> Decision:
    """The decision of `kind` as made: the tokens the rewrite of the messages sent before (new `counts` by position)
    took out, and what a cache writes again for it: everything from the first of them to the previous request's end."""
    sent = [p for p in counts if p < live.checked]
    freed = sum(live.counts[p] - counts[p] for p in sent)
    resent = 0
    if sent:
        first = min(sent)
        resent = sum(counts.get(p, live.counts[p]) for p in range(first, live.checked))
    return decided(kind, freed, resent, settings.cache)


def _offload_waiting(
    live: Live, settings: OffloadSettings, store: Store, *, forced: Kind | None
) -> tuple[dict[str, Any], dict[int, Message], Decision | None]:
    """The fields of `live` that say which results and calls wait (`Live.tool_positions`, `result_tools`, `waiting`,
    `waiting_bytes`) as they are now, the messages `offload` rewrote (by position), and what was
    decided about the waiting ones (`forced`: they all age, for that reason). A decision that ages any carries no
    figures yet: `_made` counts them once the rewritten messages are."""
    positions = live.tool_positions
    recent_n = settings.recent_n
    passed = len(positions) - recent_n if recent_n else len(positions)
    passed = max(passed, live.waiting)
    waiting = list(positions[: live.waiting])
    waiting_bytes = live.waiting_bytes
    for p in positions[live.waiting : passed]:
        # A call whose results are all old is old too: its big arguments wait and age with them (only results fill
        # a batch: a call's arguments age in a rewrite that reaches them anyway).
        call = _call_of(live.messages, p)
        if call is not None and _waits(live, call, waiting, settings.old_max_bytes):
            waiting.append(call)
        excess = _excess(live.messages[p], settings.old_max_bytes)
        if excess and live.messages[p].id not in live.pinned:
            waiting.append(p)
            waiting_bytes += excess
    kind: Kind | None = forced or ("batch" if waiting_bytes >= settings.age_batch_bytes else None)
    first, nearest = (0, None) if kind else _cheap(live, waiting, settings)
    decision = None
    if waiting:  # (nothing to decide otherwise)
        if kind is None:
            kind = "cut" if first < len(waiting) else "wait"
        decision = Decision(kind=kind, freed=0, resent=0, saving=0.0)
        if kind == "wait" and nearest is not None:
            decision = decided("wait", *nearest, settings.cache)
    run = None  # the settings' `recent_n`
    if kind in ("batch", "all", "cold"):
        start = min([positions[0], *waiting[:1]])
        still, waiting, waiting_bytes = list(positions[passed:]), [], 0
    elif first < len(waiting):
        # Everything from the first of these on is rewritten anyway: the waiting results after it age too.
        aged = waiting[first:]
        start = min(aged[0], max(positions[0], live.checked))
        waiting = waiting[:first]
        freed = sum(
            _excess(live.messages[p], settings.old_max_bytes) for p in aged if live.messages[p].role != "assistant"
        )
        waiting_bytes = max(0, waiting_bytes - freed)
        still = waiting + list(positions[passed:])
    else:
        # Only the new messages can change: each result among them is cut as a recent one.
        start = max(live.checked, positions[0])
        run = max(1, len(positions))
        still = waiting + list(positions[passed:])
    part = live.messages[start:]
    done = offload(part, settings, store, tool_names=live.result_tools, recent_n=run)
    rewritten = {
        start + i: b
        for i, (a, b) in enumerate(zip(part, done, strict=True))
        if a is not b and a.id not in live.pinned  # pinned messages are never offloaded
    }
    names = live.result_tools
    if len(still) != len(positions):
        # Results that became final need no tool name any more: the map stays as small as the results that may change.
        names = MappingProxyType({c: names[c] for p in still if (c := _call_id(live.messages[p])) in names})
    waited = {
        "tool_positions": tuple(still),
        "result_tools": names,
        "waiting": len(waiting),
        "waiting_bytes": waiting_bytes,
    }
    return waited, rewritten, decision


def _cheap(live: Live, waiting: Sequence[int], settings: OffloadSettings) -> tuple[int, tuple[int, int] | None]:
    """The index in `waiting` of the first result whose cut pays for itself (`ctxkeep.costs.pays`) and re-sends at
    most `settings.age_tail_tokens`; `len(waiting)` when there is none. With it, the tokens freed and re-sent by
    the nearest cut looked at (None: none was), for the record of a step that waits.

    Cutting a result makes the cache re-read what follows it up to the end of the previous request, and
    the result itself at its new, cut size; its old size is not sent at all, so a big result is not dear
    to cut for being big (counting it whole left the results most worth cutting uncut for good). Results
    after it among `waiting` age with it, so they count at their cut size too.

    The previous request ended before the newest assistant message (a host asks for a context before each
    assistant turn): read from the messages alone, so the rule is the same whether or not the process
    restarted since. Only the new messages and those within the budget are looked at.
    """
    budget = settings.age_tail_tokens
    if not waiting or not budget:
        return len(waiting), None
    messages, counts = live.messages, live.counts
    at = len(messages)
    while at > waiting[-1] and messages[at - 1].role != "assistant":
        at -= 1
    at = max(at - 1, waiting[-1])  # the newest assistant message itself was not sent either
    aging = set(waiting)
    spent, freed, first, chosen = 0, 0, len(waiting), len(waiting)
    nearest: tuple[int, int] | None = None
    while first > 0:
        p = waiting[first - 1]
        while at > p + 1:
            at -= 1
            spent += _cut_tokens(messages[at], counts[at], settings.old_max_bytes) if at in aging else counts[at]
            if spent > budget:
                return chosen, nearest or (0, spent)
        cut = _cut_tokens(messages[p], counts[p], settings.old_max_bytes)
        if spent + cut > budget:
            return chosen, nearest or (counts[p] - cut, spent + cut)
        first -= 1
        freed += counts[p] - cut
        nearest = (freed, spent + cut)
        # The cut pays for the cache break (the cost model's rule). A call's arguments never start a rewrite at
        # once; they age with the results, in a rewrite that reaches them anyway.
        if messages[p].role != "assistant" and pays(freed, spent + cut, settings.cache):
            chosen = first
    return chosen, nearest


def aged_tokens(live: Live, settings: OffloadSettings) -> int:
    """About the tokens of `live` once its waiting results and calls get their "old" cut (`offload_recent` with
    `age`), counted without cutting any: what aging would bring the context down to."""
    positions = live.tool_positions[: live.waiting]
    freed = sum(
        live.counts[p] - _cut_tokens(live.messages[p], live.counts[p], settings.old_max_bytes) for p in positions
    )
    return live.tokens - freed


def _cut_tokens(message: Message, tokens: int, old_max_bytes: int) -> int:
    """About the tokens a result takes after its "old" cut: its tokens in the share of its bytes that stays."""
    excess = _excess(message, old_max_bytes)
    if not excess:
        return tokens
    return -(-tokens * old_max_bytes // (excess + old_max_bytes))


def _waits(live: Live, call: int, waiting: Sequence[int], old_max_bytes: int) -> bool:
    """True when the call message at `call` is new among `waiting` and has arguments to cut (and is not pinned)."""
    if waiting and waiting[-1] >= call:
        return False
    message = live.messages[call]
    return bool(_excess(message, old_max_bytes)) and message.id not in live.pinned


def _call_of(messages: Sequence[Message], result: int) -> int | None:
    """The position of the assistant message whose call the result at `result` answers (results follow their call)."""
    if messages[result].role != "tool":
        return None  # a command's output answers no call
    at = result - 1
    while at >= 0 and messages[at].role == "tool":
        at -= 1
    return at if at >= 0 and messages[at].role == "assistant" else None


def _excess(message: Message, old_max_bytes: int) -> int:
    """The bytes of a result (or command output, or a call's arguments) past `old_max_bytes`: about what its
    "old" cut frees (0: none)."""
    if message.role == "assistant":
        return arguments_excess(message, old_max_bytes)
    result = message.tool_result
    text = result.text if result is not None else message.text
    if len(text) * 4 <= old_max_bytes:  # a character takes at most 4 bytes
        return 0
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))  # (ASCII: no encoding)
    return max(0, size - old_max_bytes)


def age_all(live: Live, settings: OffloadSettings, store: Store, counter: Counter) -> Live:
    """Give every live result (and call) its "old" cut now (the second cut they would get later, only earlier).

    The last resort when what a compaction keeps is over the threshold: a message whose text is still over
    `settings.recent_max_bytes` (a pasted log in the newest group) keeps its head and tail
    (`ctxkeep.oversize`), rather than the request going over the window.
    """
    aged = offload_recent(live, replace(settings, recent_n=0), store, counter, age=True)
    return replace(cut_oversize(aged, settings, store, counter), offloaded=())


def cut_oversize(live: Live, settings: OffloadSettings, store: Store, counter: Counter) -> Live:
    """`live` with every user or assistant message whose text, or call's arguments, are over
    `settings.recent_max_bytes` cut to their head and tail, the whole saved (`ctxkeep.oversize`), and every
    assistant message before the newest without its thinking (`ctxkeep.reasoning`: the newest one's stays
    whole, as a provider requires); the positions cut join `offloaded`. Pinned ones stay.

    The last resort over the window: the newest group's messages have had no cut of their own (a whole file
    in a write's arguments, a long reasoning in the loop), and the request would be refused whole.
    """
    limit, messages = settings.recent_max_bytes, live.messages
    earlier = without_thinking(messages[: last_answer(messages)], store)
    cut: dict[int, Message] = {}
    for at, message in enumerate(messages):
        if message.role not in ("user", "assistant") or message.id in live.pinned:
            continue
        message = earlier.get(at, message)
        text = cut_oversized(message, limit, store) or message
        new = (cut_arguments(text, limit, store) if text.tool_calls else None) or text
        if new is not messages[at]:
            cut[at] = new
    if not cut:
        return live
    fresh = dict(zip(cut, counter.count_each(list(cut.values())), strict=True))
    return replace(
        live,
        messages=Seq.of(live.messages).replaced(cut),
        counts=Seq.of(live.counts).replaced(fresh),
        total=live.total + sum(n - live.counts[at] for at, n in fresh.items()),
        offloaded=tuple(sorted({*live.offloaded, *cut})),
    )


def _call_id(msg: Message) -> str:
    result = msg.tool_result
    return result.call_id if result is not None else ""
