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

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ctxkeep.formats.source import Conversation, Source, parse_timestamp
from ctxkeep.messages import (
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    make_id,
    renumber_duplicates,
)

NAME = "openhands"

__all__ = ["parse", "sniff"]

_ERRORS = (KeyError, TypeError, ValueError, AttributeError)
_STATE_ACTIONS = frozenset({"recall", "change_agent_state", "null"})
_STATE_OBSERVATIONS = frozenset({"agent_state_changed", "null"})
_EDITOR_OBSERVATIONS = frozenset({"edit", "read"})
_V1_STATE = frozenset(
    {"PauseEvent", "ConversationStateUpdateEvent", "CondensationRequest", "TokenEvent", "StreamingDeltaEvent"}
)
_V1_RESULTS = frozenset({"ObservationEvent", "AgentErrorEvent", "UserRejectObservation"})
# fields of a flat (resolver) event that are the event's own, not the action's args / observation's extras
_ACTION_FIELDS = frozenset(
    {"id", "timestamp", "source", "message", "action", "cause", "tool_call_metadata", "llm_metrics", "timeout"}
    | {"action_risk", "security_risk", "is_confirmed"}
)
_OBSERVATION_FIELDS = frozenset(
    {"id", "timestamp", "source", "message", "observation", "cause", "content", "tool_call_metadata", "llm_metrics"}
)

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


def _record_names(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(id, title) of an instance line; None when it names no instance."""
    for value in (record.get("instance_id"), record.get("id"), _dict(record.get("instance")).get("instance_id")):
        if _is_name(value):
            return str(value), str(value)
    issue = _dict(record.get("issue"))  # the resolver's output: one issue or pull request
    number = issue.get("number")
    if not _is_name(number):
        return None
    repo = "/".join(part for part in (_str(issue.get("owner")), _str(issue.get("repo"))) if part)
    return str(number), f"{repo}#{number}"


def _is_name(value: Any) -> bool:
    return (isinstance(value, str) and value != "") or (isinstance(value, int) and not isinstance(value, bool))


def _build(source: Source, lineno: int | None, conv_id: str, history: list[Any]) -> list[Message]:
    builder = _Builder(conv_id)
    for index, event in enumerate(_events(history)):
        if not _is_event(event):
            source.skip(lineno, f"history event {index} of {conv_id} is not an OpenHands event")
            continue
        try:
            builder.add(event, index)
        except _ERRORS as exc:
            source.skip(lineno, f"history event {index} of {conv_id} is malformed ({exc})")
    for kind, n in sorted(builder.left_out.items()):
        source.notes.append(f"{conv_id}: left out {n} {kind} event(s), which carry no message")
    return builder.messages()


def _events(history: list[Any]) -> Iterator[Any]:
    """The events in order; older outputs pair each action with its observation."""
    for item in history:
        if isinstance(item, list):
            yield from item
        else:
            yield item


def _is_event(event: Any) -> bool:
    return isinstance(event, dict) and (
        "action" in event or "observation" in event or isinstance(event.get("kind"), str)
    )


def _with_instruction(messages: list[Message], conv_id: str, instruction: Any) -> list[Message]:
    """The benchmark's instruction as the first user message, when the history holds none."""
    if not isinstance(instruction, str) or not instruction.strip() or any(m.role == "user" for m in messages):
        return messages
    task = Message.of(
        "user", instruction, id=make_id(NAME, conv_id, "instruction"), extra={NAME: {"from": "instruction"}}
    )
    at = 1 if messages and messages[0].role == "system" else 0
    return [*messages[:at], task, *messages[at:]]


# --- building one conversation --------------------------------------------------------


@dataclass
class _Turn:
    """One model response: its tool calls (in order) and the tool messages answering them."""

    head: Message  # the assistant message without the calls, filled in as actions arrive
    calls: list[ToolCall] = field(default_factory=list)
    results: dict[str, Message] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)

    def render(self) -> list[Message]:
        extra = dict(self.head.extra)
        extra[NAME] = {**extra.get(NAME, {}), "events": self.events}
        message = replace(self.head, content=(*self.head.content, *self.calls), extra=extra)
        return [message, *(self.results[c.id] for c in self.calls if c.id in self.results)]


@dataclass
class _Action:
    """A V0 agent action without tool-call metadata: a call if an observation answers it, else text."""

    text: Message | None
    turn: _Turn

    def render(self) -> list[Message]:
        if self.turn.results:
            return self.turn.render()
        return [self.text] if self.text is not None else []


_Answer = tuple[_Turn, str]  # the turn holding a call, and the call's id


class _Builder:
    """Turns one instance's events into messages, keeping parallel calls together."""

    def __init__(self, conv_id: str) -> None:
        self.conv_id = conv_id
        self.slots: list[Message | _Turn | _Action] = []
        self.turns: dict[str, _Turn] = {}  # model response id -> its turn
        self.by_event: dict[str | int, _Answer] = {}  # action event id -> its call
        self.by_call: dict[str, _Turn] = {}
        self.pending: _Answer | None = None  # the action just before, for an observation naming none
        self.agent_acted = False
        self.left_out: Counter[str] = Counter()

    def messages(self) -> list[Message]:
        out: list[Message] = []
        for slot in self.slots:
            out.extend([slot] if isinstance(slot, Message) else slot.render())
        return out

    def add(self, event: dict[str, Any], index: int) -> None:
        # a V1 event names its class in "kind"; its action/observation is an object, a V0 one's a name
        if isinstance(event.get("kind"), str) and not isinstance(event.get("action") or event.get("observation"), str):
            self._v1(event, index)
        elif "action" in event:
            if event.get("action") in _STATE_ACTIONS:
                return
            self.pending = None
            self._action(event, index)
        elif event.get("observation") not in _STATE_OBSERVATIONS:
            pending, self.pending = self.pending, None
            self._observation(event, index, pending)

    def _ids(self, event: Mapping[str, Any], index: int) -> tuple[str, str | None]:
        event_id = event.get("id")
        if event_id is None:
            return make_id(NAME, self.conv_id, "index", index), None
        return make_id(NAME, self.conv_id, event_id), str(event_id)

    def _message(self, role: Role, blocks: list[Block], event: Mapping[str, Any], index: int, **extra: Any) -> Message:
        msg_id, source_id = self._ids(event, index)
        return Message(
            role=role,
            id=msg_id,
            source_id=source_id,
            timestamp=parse_timestamp(event.get("timestamp")),
            content=tuple(blocks),
            extra={NAME: extra} if extra else {},
        )

    def _text(self, role: Role, text: str, event: Mapping[str, Any], index: int, **extra: Any) -> None:
        blocks: list[Block] = [TextBlock(text=text)]
        if role == "user":
            args = _args(event)
            blocks.extend(_images(args.get("image_urls") or args.get("images_urls")))
        self._append(self._message(role, blocks, event, index, **extra))

    def _append(self, slot: Message | _Turn | _Action) -> None:
        self.agent_acted = self.agent_acted or not isinstance(slot, Message) or slot.role == "assistant"
        self.slots.append(slot)

    def _role(self, event: Mapping[str, Any], kind: Any) -> Role:
        source = event.get("source")
        if source in ("user", "environment"):
            return "user"
        if source == "agent":
            return "assistant"
        # the resolver's output records no source: its first message is the user's task
        return "user" if kind == "message" and not self.agent_acted else "assistant"

    # --- V0 actions ---

    def _action(self, event: dict[str, Any], index: int) -> None:
        kind = event.get("action")
        args = _args(event)
        meta = _dict(event.get("tool_call_metadata"))
        role = self._role(event, kind)
        if kind == "system":
            tools = args.get("tools")
            text = _str(args.get("content")) or _str(event.get("message"))
            self._text("system", text, event, index, **({"tools": tools} if tools else {}))
        elif kind == "message":
            self._text(role, _str(args.get("content")), event, index, action="message")
        elif kind == "finish":
            self._text(role, _finish_text(event, args, meta), event, index, action="finish", args=args)
        elif meta.get("tool_call_id") and role == "assistant":
            self._call(event, index, args, meta)
        elif role == "assistant":
            self._uncalled_action(event, index, args)
        else:
            text = _describe(event, args)
            if text:
                self._text(role, text, event, index, action=kind)

    def _call(self, event: dict[str, Any], index: int, args: dict[str, Any], meta: dict[str, Any]) -> None:
        call_id = str(meta["tool_call_id"])
        response = _dict(meta.get("model_response"))
        name = _str(meta.get("function_name")) or _str(event.get("action")) or "tool"
        call = ToolCall(id=call_id, name=name, arguments=_arguments(response, call_id, args))
        key = _str(response.get("id")) or f"call:{call_id}"
        turn = self.turns.get(key)
        if turn is None:
            turn = _Turn(head=self._head(event, index, response, args))
            self.turns[key] = turn
            self._append(turn)
        self._register(turn, call, event)

    def _register(self, turn: _Turn, call: ToolCall, event: Mapping[str, Any]) -> None:
        turn.calls.append(call)
        turn.events.append(event.get("id"))
        event_key = _key(event.get("id"))
        if event_key is not None:
            self.by_event[event_key] = (turn, call.id)
        self.by_call[call.id] = turn
        self.pending = (turn, call.id)

    def _head(self, event: dict[str, Any], index: int, response: dict[str, Any], args: dict[str, Any]) -> Message:
        said = _response_message(response)
        blocks: list[Block] = []
        reasoning = _str(said.get("reasoning_content"))
        if reasoning.strip():
            blocks.append(ThinkingBlock(text=reasoning))
        text = _str(said.get("content")) or _thought(args)
        if text.strip():
            blocks.append(TextBlock(text=text))
        response_id = _str(response.get("id"))
        return self._message(
            "assistant", blocks, event, index, **({"model_response": response_id} if response_id else {})
        )

    def _uncalled_action(self, event: dict[str, Any], index: int, args: dict[str, Any]) -> None:
        """An action the model wrote in its text (CodeAct's ``<execute_bash>``): a call once answered."""
        kind = _str(event.get("action")) or "action"
        text = _describe(event, args)
        shown = self._message("assistant", [TextBlock(text=text)], event, index, action=kind) if text else None
        thought = _thought(args)
        head = self._message("assistant", [TextBlock(text=thought)] if thought.strip() else [], event, index)
        source_id = self._ids(event, index)[1]
        call = ToolCall(
            id=make_id(NAME, self.conv_id, "call", source_id if source_id is not None else index),
            name=kind,
            arguments=json.dumps({k: v for k, v in args.items() if k != "thought"}, ensure_ascii=False),
        )
        turn = _Turn(head=replace(head, extra={NAME: {"action": kind, "call": "from the action's args"}}))
        self._append(_Action(text=shown, turn=turn))
        self._register(turn, call, event)

    # --- V0 observations ---

    def _observation(self, event: dict[str, Any], index: int, pending: _Answer | None) -> None:
        kind = event.get("observation")
        target = self._answered_call(event, pending)
        if target is not None:
            turn, call_id = target
            turn.results[call_id] = self._result(event, index, call_id)
            return
        extras = _extras(event)
        if kind == "recall":
            text = _recall_text(extras)
            if text:
                self._text("user", text, event, index, observation="recall")
            return
        text = _str(event.get("content")) or _str(event.get("message"))
        if text:
            self._text("user", text, event, index, observation=kind)

    def _answered_call(self, event: Mapping[str, Any], pending: _Answer | None) -> _Answer | None:
        cause = _key(event.get("cause"))
        found = self.by_event.get(cause) if cause is not None else None
        call_id = _str(_dict(event.get("tool_call_metadata")).get("tool_call_id"))
        if found is None and call_id:
            turn = self.by_call.get(call_id)
            found = (turn, call_id) if turn is not None else None
        if found is None and event.get("cause") is None and not call_id:
            found = pending  # no link recorded (the resolver's output): it answers the action before it
        if found is None or found[1] in found[0].results:
            return None  # a second observation for one call is kept as plain text
        return found

    def _result(self, event: Mapping[str, Any], index: int, call_id: str) -> Message:
        kind = event.get("observation")
        extras = _extras(event)
        meta = _dict(extras.get("metadata"))
        text = _str(meta.get("prefix")) + _str(event.get("content")) + _str(meta.get("suffix"))
        images = _images(extras.get("image_urls"))
        exit_code = _int(meta.get("exit_code"))
        is_error = kind == "error" or (kind in _EDITOR_OBSERVATIONS and text.lstrip().startswith("ERROR:"))
        result = ToolResult(
            call_id=call_id,
            content=(TextBlock(text=text), *images) if images else text,
            is_error=is_error,
            exit_code=exit_code if exit_code is not None else _int(extras.get("exit_code")),
        )
        return self._message("tool", [result], event, index, observation=kind)

    # --- V1 events ---

    def _v1(self, event: dict[str, Any], index: int) -> None:
        kind = event["kind"]
        if kind == "ActionEvent":
            self._v1_action(event, index)
        elif kind in _V1_RESULTS:
            self._v1_result(event, index)
        elif kind == "SystemPromptEvent":
            self._v1_system(event, index)
        elif kind in ("CondensationSummaryEvent", "Condensation"):
            summary = _str(event.get("summary"))
            if summary.strip():
                self._append(self._message("user", [TextBlock(text=summary)], event, index, kind=kind))
        elif kind == "MessageEvent" or isinstance(event.get("llm_message"), dict):
            self._v1_message(event, index)
        elif kind not in _V1_STATE:
            self.left_out[kind] += 1

    def _v1_system(self, event: Mapping[str, Any], index: int) -> None:
        texts = [_content_text(event.get(key)) for key in ("system_prompt", "dynamic_context")]
        blocks: list[Block] = [TextBlock(text=t) for t in texts if t]
        tools = event.get("tools")
        self._append(self._message("system", blocks, event, index, **({"tools": tools} if tools else {})))

    def _v1_message(self, event: Mapping[str, Any], index: int) -> None:
        said = _dict(event.get("llm_message"))
        role: Role = "user" if event.get("source") in ("user", "environment") else "assistant"
        if said.get("role") in ("system", "user", "assistant"):
            role = said["role"]
        blocks: list[Block] = _v1_reasoning(said) if role == "assistant" else []
        blocks.extend(_content_blocks(said.get("content")))
        blocks.extend(_content_blocks(event.get("extended_content")))
        extra = {key: event[key] for key in ("activated_skills", "sender") if event.get(key)}
        self._append(self._message(role, blocks, event, index, **extra))

    def _v1_action(self, event: dict[str, Any], index: int) -> None:
        raw = _dict(event.get("tool_call"))
        call_id = _str(raw.get("id")) or _str(event.get("tool_call_id"))
        action = _dict(event.get("action"))
        name = _str(raw.get("name")) or _str(event.get("tool_name")) or _str(action.get("kind")) or "tool"
        arguments = raw.get("arguments")
        if not isinstance(arguments, str):
            given = arguments if isinstance(arguments, dict) else {k: v for k, v in action.items() if k != "kind"}
            arguments = json.dumps(given, ensure_ascii=False)
        call = ToolCall(id=call_id, name=name, arguments=arguments)
        said = [*_v1_reasoning(event), *_content_blocks(event.get("thought"))]
        key = _str(event.get("llm_response_id")) or f"call:{call_id}"
        turn = self.turns.get(key)
        if turn is None:
            extra = {"llm_response_id": key} if event.get("llm_response_id") else {}
            turn = _Turn(head=self._message("assistant", said, event, index, **extra))
            self.turns[key] = turn
            self._append(turn)
        else:  # later actions of a response usually repeat nothing; keep what they add
            added = [b for b in said if b not in turn.head.content]
            turn.head = replace(turn.head, content=(*turn.head.content, *added))
        self._register(turn, call, event)

    def _v1_result(self, event: Mapping[str, Any], index: int) -> None:
        kind = event["kind"]
        call_id = _str(event.get("tool_call_id"))
        turn = self.by_call.get(call_id)
        if turn is None:
            found = self.by_event.get(_key(event.get("action_id")) or "")
            turn, call_id = found if found is not None else (None, call_id)
        if kind == "ObservationEvent":
            content, is_error, exit_code = _v1_observation(_dict(event.get("observation")))
            content = [*content, *_content_blocks(event.get("extended_content"))]
        elif kind == "AgentErrorEvent":
            content, is_error, exit_code = [TextBlock(text=_str(event.get("error")))], True, None
        else:
            reason = _str(event.get("rejection_reason")) or "User rejected the action"
            content, is_error, exit_code = [TextBlock(text=f"Action rejected: {reason}")], True, None
        if turn is None or call_id in turn.results:
            text = "\n".join(b.text for b in content if isinstance(b, TextBlock))
            self._append(self._message("user", [TextBlock(text=text)], event, index, kind=kind))
            return
        result = ToolResult(call_id=call_id, content=_result_content(content), is_error=is_error, exit_code=exit_code)
        turn.results[call_id] = self._message("tool", [result], event, index, kind=kind)


# --- small readers ----------------------------------------------------------------------


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _key(value: Any) -> str | int | None:
    """An event id usable as a dict key (a list or dict in its place is not one)."""
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _args(event: Mapping[str, Any]) -> dict[str, Any]:
    """An action's arguments: ``args``, or the event's own fields when written flat (resolver)."""
    if "args" in event:
        return _dict(event["args"])
    return {k: v for k, v in event.items() if k not in _ACTION_FIELDS}


def _extras(event: Mapping[str, Any]) -> dict[str, Any]:
    """An observation's extras: ``extras``, or the event's own fields when written flat (resolver)."""
    if "extras" in event:
        return _dict(event["extras"])
    return {k: v for k, v in event.items() if k not in _OBSERVATION_FIELDS}


def _thought(args: Mapping[str, Any]) -> str:
    # newer OpenHands stores the thought as {"text": ..., "reasoning_content": ...}
    thought = args.get("thought")
    return _str(thought.get("text")) if isinstance(thought, dict) else _str(thought)


def _describe(event: Mapping[str, Any], args: Mapping[str, Any]) -> str:
    """An action with no better mapping: its content, else its thought and its one-line message."""
    content = _str(args.get("content"))
    if content:
        return content
    thought, message = _thought(args), _str(event.get("message"))
    if thought and message and thought not in message:
        return f"{thought}\n\n{message}"
    return message or thought


def _response_message(response: Mapping[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return _dict(choices[0].get("message"))
    return {}


def _arguments(response: Mapping[str, Any], call_id: str, args: Mapping[str, Any]) -> str:
    """The arguments as the model wrote them; rebuilt from the action's args when not recorded."""
    calls = _response_message(response).get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict) and call.get("id") == call_id:
            raw = _dict(call.get("function")).get("arguments")
            if isinstance(raw, str):
                return raw
    return json.dumps({k: v for k, v in args.items() if k != "thought"}, ensure_ascii=False)


def _finish_text(event: Mapping[str, Any], args: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    said = _str(_response_message(_dict(meta.get("model_response"))).get("content"))
    parts: list[str] = []
    for part in (_thought(args), said, _str(args.get("final_thought")), _str(args.get("message"))):
        if part.strip() and part not in parts:
            parts.append(part)
    return "\n\n".join(parts) or _str(event.get("message"))


def _recall_text(extras: Mapping[str, Any]) -> str:
    """What a recall observation added to the prompt: instructions and microagent knowledge."""
    parts = [
        _str(extras.get(key)).strip()
        for key in ("repo_instructions", "additional_agent_instructions", "conversation_instructions")
    ]
    agents = extras.get("microagent_knowledge")
    for agent in agents if isinstance(agents, list) else ():
        if isinstance(agent, dict) and _str(agent.get("content")).strip():
            parts.append(f"<{_str(agent.get('name')) or 'microagent'}>\n{agent['content'].strip()}")
    return "\n\n".join(p for p in parts if p)


def _images(urls: Any) -> list[ImageBlock]:
    return [ImageBlock.from_url(url) for url in (urls if isinstance(urls, list) else ()) if _str(url).strip()]


def _content_text(value: Any) -> str:
    """The text of a V1 ``TextContent`` (``{"type": "text", "text": ...}``) or a plain string."""
    return _str(value.get("text")) if isinstance(value, dict) else _str(value)


def _content_blocks(content: Any) -> list[TextBlock | ImageBlock]:
    """V1 message content: a string, or a list of text and image parts."""
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    blocks: list[TextBlock | ImageBlock] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            raise TypeError(f"a content part must be an object, got {type(part).__name__}")
        if part.get("type") == "image" or "image_urls" in part:
            blocks.extend(_images(part.get("image_urls")))
        elif _str(part.get("text")):
            blocks.append(TextBlock(text=part["text"]))
    return blocks


def _v1_reasoning(said: Mapping[str, Any]) -> list[Block]:
    """Thinking blocks (Anthropic), else the reasoning text, of a V1 action or LLM message."""
    blocks: list[Block] = []
    raw = said.get("thinking_blocks")
    for block in raw if isinstance(raw, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "redacted_thinking":
            blocks.append(ThinkingBlock(text="", signature=_str(block.get("data")) or None, redacted=True))
        elif _str(block.get("thinking")):
            blocks.append(ThinkingBlock(text=block["thinking"], signature=_str(block.get("signature")) or None))
    reasoning = _str(said.get("reasoning_content"))
    if not blocks and reasoning.strip():
        blocks.append(ThinkingBlock(text=reasoning))
    return blocks


def _v1_observation(obs: Mapping[str, Any]) -> tuple[list[TextBlock | ImageBlock], bool, int | None]:
    """(content, is_error, exit_code) of a V1 observation, as the model was shown it."""
    content = _content_blocks(obs.get("content"))
    meta = _dict(obs.get("metadata"))
    if not content and _str(obs.get("output")):  # SDK versions before ``content``: the command's output
        text = _str(meta.get("prefix")) + obs["output"] + _str(meta.get("suffix"))
        content = [TextBlock(text=text)]
    if not content and _str(obs.get("message")):  # FinishObservation
        content = [TextBlock(text=obs["message"])]
    error = _str(obs.get("error"))  # older SDK observations: the error text, or a flag
    if error and not any(isinstance(b, TextBlock) and error in b.text for b in content):
        content.append(TextBlock(text=error))
    is_error = obs.get("is_error") is True or obs.get("error") is True or bool(error)
    exit_code = _int(obs.get("exit_code"))
    return content, is_error, exit_code if exit_code is not None else _int(meta.get("exit_code"))


def _result_content(blocks: list[TextBlock | ImageBlock]) -> str | tuple[TextBlock | ImageBlock, ...]:
    if all(isinstance(b, TextBlock) for b in blocks):
        return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
    return tuple(blocks)
