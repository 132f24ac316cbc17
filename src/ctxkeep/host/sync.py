"""Which messages of a host's whole history are new to a session: the history is what the session holds
(live or archived; or the compacted view ctxkeep returned) followed by a new suffix, and only that suffix
is added. A history that no longer holds what the session has is refused, never silently rewritten.

    history:  [archived ...][live ...][new ...]      or   [ctxkeep-system][ctxkeep-summary][live ...][new ...]
                                       ^ appended                                                   ^ appended

A host that never saved its history (a new run of an agent loop on an old workspace) starts over: what
its history shares with the session is at most its opening system prompt and requests (the same first
request, asked again), never a model's answer. Its messages are appended after the live context, which
goes on, and its later histories continue the live context's newest messages:

    live:     [run 1 ...][run 2 ...]       history of run 2:  [run 2 ...][new ...]
                                                                          ^ appended
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence

from ..content_ids import Entry, key_of, renumber
from ..context import SUMMARY_ID, SUMMARY_TAG, SYSTEM_ID, summary_message_text
from ..errors import MessageError
from ..live import Live, message_ids
from ..messages import NO_RESULT_TEXT, Message, ToolResult

CTXKEEP_IDS = frozenset({SYSTEM_ID, SUMMARY_ID})


class Held(Container[str]):
    """The message ids a live context holds, live or archived, without copying either."""

    def __init__(self, live: Live) -> None:
        self._archived = live.archived
        self._live = message_ids(live)

    def __contains__(self, mid: object) -> bool:
        return mid in self._archived or mid in self._live


def new_entries(live: Live, history: Sequence[Entry]) -> list[Entry]:
    """The entries of `history` that `live` does not hold, with ids that `live` has not used; all of them
    for a new host run (see the module docstring).

    Raises `MessageError` when the history diverges from what `live` holds (an earlier message edited,
    removed or inserted), naming the history item.
    """
    known = Held(live)
    entries = [e for e in history if not _ctxkeep_own(e.message, live, known)]
    held = live.messages
    if not held:
        start = _known_prefix(entries, known)
    elif (at := _live_run(entries, held)) is not None:
        for e in entries[:at]:
            if e.message.id not in known and _summary_shaped(e.message):
                raise MessageError(
                    f"history item {e.index} is a context summary, but not the one the session holds now, and it"
                    " comes before the messages the session holds: sync the host's own history, or the view the"
                    " session's last prepare returned",
                    index=e.index,
                )
            if e.message.id not in known:
                raise MessageError(
                    f"history item {e.index} ({_describe(e.message)}) is not one the session holds, yet it comes"
                    " before the messages the session holds: an earlier message was edited or inserted, and"
                    " ctxkeep does not rewrite what it holds. Sync the history as it was, or start a new workspace",
                    index=e.index,
                )
        start = at + len(held)
    elif (tail := _continued_tail(entries, held)) is not None:
        start = tail
    elif _starts_over(entries, known):
        start = 0
    else:
        raise _diverged(entries, held)
    return renumber(entries[start:], known)


def appended(live: Live, entries: Sequence[Entry]) -> list[Entry]:
    """What `new_entries` gives for a history that only added `entries` after one it took whole (and nothing
    changed `live` since), without matching the whole history again: ctxkeep's own messages left out, ids
    past those `live` has used."""
    known = Held(live)
    return renumber([e for e in entries if not _ctxkeep_own(e.message, live, known)], known)


def _continued_tail(entries: Sequence[Entry], held: Sequence[Message]) -> int | None:
    """How many leading entries are the newest live messages (the run a new host run appended so far), when
    the history starts with them; None when it does not. The longest such tail is taken."""
    if not entries:
        return None
    first = _same_as(entries[0])
    for m in range(1, len(held)):
        tail = held[m:]
        if first(held[m]) and len(tail) <= len(entries) and all(map(_matches, entries, tail)):
            return len(tail)
    return None


def _starts_over(entries: Sequence[Entry], known: Held) -> bool:
    """Whether the history is a new host run: what it shares with the session is only what a host writes
    itself (its system prompt, its requests: the same first request, asked again), before anything new. A
    host that kept no history cannot hold the model's earlier answers, nor a call of the old run: a history
    with those is an old one cut or edited, refused (a proxy's client then gets a branch of its own)."""
    fresh = False
    for e in entries:
        if e.message.id not in known:
            fresh = True
        elif fresh or e.message.role not in ("system", "user"):
            return False
    return True


def _matches(entry: Entry, msg: Message) -> bool:
    return _same_as(entry)(msg)


def _same_as(entry: Entry) -> Callable[[Message], bool]:
    """Whether a held message is the entry's: by id, or by content key (a renumbered or offloaded one)."""
    key = key_of(entry.message)
    return lambda msg: msg.id == entry.message.id or key_of(msg) == key


def _ctxkeep_own(msg: Message, live: Live, known: Held) -> bool:
    """The system prompt, summary and placeholder results ctxkeep put in a context it returned.

    Recognised by identity, never by shape: a summary is this session's own when it has ctxkeep's summary
    id or exactly the text of the summary the session holds. A message that only looks like one (a
    context.json resumed in a new workspace, a ctxkeep in front of this one) is the host's and is kept:
    dropping it would lose everything it summarises.
    """
    if msg.id in CTXKEEP_IDS:
        return True
    if msg.id in known:
        return False
    if msg.role == "user" and live.summary is not None and msg.text == summary_message_text(live.summary):
        return True
    if msg.role == "system" and live.system is not None and msg.text == live.system:
        return True
    # A call that never got its result is sent with an explicit error result (see `context.of`).
    return msg.role == "tool" and any(isinstance(b, ToolResult) and b.content == NO_RESULT_TEXT for b in msg.content)


def _summary_shaped(msg: Message) -> bool:
    text = msg.text
    return msg.role == "user" and text.startswith(f"<{SUMMARY_TAG}>\n") and text.endswith(f"\n</{SUMMARY_TAG}>")


def _known_prefix(entries: Sequence[Entry], known: Held) -> int:
    """How many leading entries the session holds (it holds no live messages); the rest must be new."""
    start = 0
    while start < len(entries) and entries[start].message.id in known:
        start += 1
    for e in entries[start:]:
        if e.message.id in known:
            raise MessageError(
                f"history item {e.index} ({_describe(e.message)}) is one the session holds, yet an item it does"
                " not hold comes before it: an earlier message was edited or inserted, and ctxkeep does not"
                " rewrite what it holds",
                index=e.index,
            )
    return start


def _live_run(entries: Sequence[Entry], held: Sequence[Message]) -> int | None:
    """Where the live messages sit in `entries`, in order and together: by id (the whole history), else by
    content key (the compacted view, where an earlier duplicate's absence shifts the occurrence)."""
    ids = [e.message.id for e in entries]
    n = len(held)
    with_ids = [m.id for m in held]
    if held[-1].id in ids:
        start = ids.index(held[-1].id) - n + 1
        if start >= 0 and ids[start : start + n] == with_ids:
            return start
    keys = [key_of(e.message) for e in entries]
    want = [key_of(m) for m in held]
    for start in range(len(keys) - n + 1):
        if keys[start : start + n] == want:
            return start
    return None


def _diverged(entries: Sequence[Entry], held: Sequence[Message]) -> MessageError:
    """What differs between the history and the live messages, for the error: one line that says the fix."""
    fix = (
        " ctxkeep does not rewrite what it holds: sync the history as it was, or, for a new run of the host,"
        " its own new history (the session's live messages go on before it)"
    )
    first = held[0]
    match = [i for i, e in enumerate(entries) if e.message.id == first.id or key_of(e.message) == key_of(first)]
    if not match:
        return MessageError(
            f"the history does not hold the session's oldest live message ({_describe(first)}, id {first.id}):"
            " it was edited or removed." + fix
        )
    at = match[0]
    for k, msg in enumerate(held):
        if at + k >= len(entries):
            return MessageError(
                f"the history ends before the session's live message {k} ({_describe(msg)}, id {msg.id}):"
                " messages the session holds were removed from it." + fix
            )
        e = entries[at + k]
        if e.message.id != msg.id and key_of(e.message) != key_of(msg):
            return MessageError(
                f"history item {e.index} ({_describe(e.message)}) differs from the session's live message {k}"
                f" ({_describe(msg)}, id {msg.id}): it was edited, or messages were inserted or removed." + fix,
                index=e.index,
            )
    return MessageError("the history does not hold the session's live messages in order." + fix)


def _describe(msg: Message) -> str:
    """A message named without its content (which may be private): role, size, call ids."""
    calls = [c.id for c in msg.tool_calls]
    results = [b.call_id for b in msg.content if isinstance(b, ToolResult)]
    if results:
        return f"the tool result for call {results[0]}"
    what = f"a {msg.role} message of {len(msg.text)} characters"
    return what + (f" with the tool calls {', '.join(calls)}" if calls else "")
