"""OpenHands output: evaluation ``output.jsonl`` (one conversation per instance), trajectories, resolver output.

V0 actions and observations and V1 SDK events both become messages: tool calls from
``tool_call_metadata`` (V0) or ``tool_call`` (V1), the actions of one model response in one
assistant message, each observation the tool message of its action. State events are left out.
What every event becomes and what is left out on purpose: docs/formats.md#openhands.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ctxkeep.formats.openhands.history import _build, _with_instruction
from ctxkeep.formats.openhands.records import _record_names
from ctxkeep.formats.openhands.turns import NAME as NAME
from ctxkeep.formats.source import Conversation, Source
from ctxkeep.pairing import renumber_duplicates

__all__ = ["parse", "sniff"]

_SWE_AGENT = re.compile(r'"trajectory"\s*:\s*\[|"message_type"\s*:')
_HISTORY = re.compile(r'"history"\s*:\s*\[')
_V1_KIND = re.compile(r"\w+Event|Condensation\w*|UserRejectObservation")
_EVENT = re.compile(r'"(?:action|observation)"\s*:\s*"|"kind"\s*:\s*"(?:' + _V1_KIND.pattern + ')"')
_EVENT_LIST = re.compile(r'\[\s*\[?\s*\{\s*"(?:id|kind|timestamp|source|message|action|observation)"\s*:')


def sniff(source: Source) -> bool:
    """An instance line with an event ``history``, or a JSON list of OpenHands events."""
    head = source.head()
    start = head.lstrip()[:1]
    if start == "[":
        return bool(_EVENT_LIST.match(head.lstrip())) and _is_first_event(source.sample())
    if start != "{" or _SWE_AGENT.search(head):
        return False
    if _HISTORY.search(head) and _EVENT.search(head):
        return True
    # "history" can sit after a long test_result patch, beyond the head
    return '"instance_id"' in head and ('"instruction"' in head or '"test_result"' in head)


def _is_first_event(sample: Any) -> bool:
    """Whether a JSON list starts with an OpenHands event (or an [action, observation] pair)."""
    first = sample[0] if isinstance(sample, list) and sample else None
    first = first[0] if isinstance(first, list) and first else first
    if not isinstance(first, dict):
        return False
    if isinstance(first.get("kind"), str):
        return bool(_V1_KIND.fullmatch(first["kind"]))
    named = isinstance(first.get("action") or first.get("observation"), str)
    return named and ("args" in first or "extras" in first or first.get("source") in ("agent", "user", "environment"))


def parse(source: Source) -> list[Conversation]:
    """One conversation per instance line, or the one conversation of a trajectory file."""
    if source.text.lstrip().startswith("["):
        return _parse_trajectory(source)
    conversations: list[Conversation] = []
    renamed = 0
    for lineno, record in source.records():
        if not isinstance(record, dict):
            source.skip(lineno, "expected an instance object")
            continue
        names = _record_names(record)
        history = record.get("history")
        if names is None or not isinstance(history, list):
            source.skip(lineno, "expected an object with instance_id (or id) and a history list")
            continue
        conv_id, title = names
        messages = _build(source, lineno, conv_id, history)
        messages = _with_instruction(messages, conv_id, record.get("instruction"))
        messages, changes = renumber_duplicates(messages)
        renamed += len(changes)
        conversations.append(Conversation(id=conv_id, messages=tuple(messages), title=title))
    if renamed:
        source.notes.append(f"gave {renamed} repeated tool-call or message id(s) a new one")
    return conversations


def _parse_trajectory(source: Source) -> list[Conversation]:
    events = source.document()
    if not isinstance(events, list):
        raise source.error("expected a JSON list of OpenHands events")
    conv_id = Path(source.path).stem
    messages, changes = renumber_duplicates(_build(source, None, conv_id, events))
    if changes:
        source.notes.append(f"gave {len(changes)} repeated tool-call or message id(s) a new one")
    return [Conversation(id=conv_id, messages=tuple(messages), title=conv_id)]
