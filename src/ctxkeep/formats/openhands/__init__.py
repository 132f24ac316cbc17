"""OpenHands output: evaluation ``output.jsonl`` (one conversation per line) and trajectories.

Three containers are read:

    output.jsonl       one instance per line, its events in ``history``; the conversation id is
                       ``instance_id``, else ``id`` or ``instance.instance_id`` (2024 outputs),
                       else the resolver's ``issue.number``
    trajectory         a JSON list of events (OpenHands' trajectory download / replay file): one
                       conversation, named after the file
    history pairs      older outputs store ``history`` as ``[action, observation]`` pairs; both
                       shapes are read

**V0 events** (OpenHands before the agent SDK) are *actions* (``action`` key) or *observations*
(``observation`` key) from ``source`` user, agent or environment, with ``args``/``extras`` (the
resolver's output writes those fields flat on the event and records no ``source``):

    agent action with tool_call_metadata   a ToolCall; the actions of one model response (same
                                           ``model_response.id``) are parallel calls in one
                                           assistant message, whose text is the response's text
    other agent action answered by an      (CodeAct before function calling) a call named after
    observation                            the action (``run``, ``run_ipython``...) with its
                                           args, the thought as the assistant's text
    observation answering an action        its tool message, matched by ``cause`` (else by the
                                           metadata's ``tool_call_id``; an observation with
                                           neither answers the action just before it);
                                           ``extras.metadata`` gives ``exit_code`` and the
                                           prefix/suffix lines the model saw around the output
    ``system``                             system message (the tools offered kept in extra)
    ``message``                            user or assistant text; ``image_urls`` as images
    ``finish``                             user or assistant text (thought and final message):
                                           OpenHands itself sends it to the model this way, the
                                           finish call never gets a result
    ``recall`` observation                 user text with the microagent knowledge and the
                                           instructions it injected; nothing when it has none
    any other action or observation        text of its source's role (agent -> assistant, user and
                                           environment -> user), from its content or ``message``

**V1 events** (the OpenHands agent SDK; ``kind`` names the event class):

    SystemPromptEvent      system message (prompt and dynamic context; the tools kept in extra)
    MessageEvent           ``llm_message`` as a user or assistant message (text, images,
                           reasoning), with the ``extended_content`` the agent context added
    ActionEvent            a ToolCall from ``tool_call``; the actions of one model response (same
                           ``llm_response_id``) share one assistant message with the response's
                           thought and reasoning
    ObservationEvent       the tool message of ``tool_call_id``: the observation's ``content``
                           (else ``output`` or ``message``), ``error``/``is_error`` and exit code
    AgentErrorEvent        an error result of its ``tool_call_id`` (user text when no call matches)
    UserRejectObservation  an error result "Action rejected: <reason>"
    CondensationSummaryEvent, Condensation with a summary
                           user text with the summary the model saw in place of older events

An instance whose history holds no user message (V1 benchmark outputs start at the first action)
gets its ``instruction``, the task the benchmark sent, as the first user message.

Left out on purpose, as state rather than conversation: V0 ``recall`` actions (the query
repeats the user's message), ``change_agent_state``, ``agent_state_changed`` and ``null``
events; V1 ``PauseEvent``, ``ConversationStateUpdateEvent``, ``CondensationRequest`` and other
events that carry no message (each noted); an instance's ``test_result``, ``metadata``,
``metrics``, ``error`` and ``instance`` fields. Browser screenshots are left out (the page text is
kept). Timestamps carry no offset (OpenHands writes the machine's local time); they are read as
UTC.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ctxkeep.formats.openhands.history import _build, _with_instruction
from ctxkeep.formats.openhands.records import _record_names
from ctxkeep.formats.openhands.turns import NAME as NAME
from ctxkeep.formats.source import Conversation, Source
from ctxkeep.messages import renumber_duplicates

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
