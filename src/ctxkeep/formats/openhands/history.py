"""One history into messages: each event to the classic or the SDK reader, bad events skipped, and the
benchmark's instruction added when no user speaks."""

from __future__ import annotations

from typing import Any

from ctxkeep.formats.openhands.classic import _ClassicEvents
from ctxkeep.formats.openhands.records import _events, _is_event
from ctxkeep.formats.openhands.sdk import _SdkEvents
from ctxkeep.formats.openhands.turns import NAME
from ctxkeep.formats.source import RECORD_ERRORS, Source, describe
from ctxkeep.messages import Message, make_id

_STATE_ACTIONS = frozenset({"recall", "change_agent_state", "null"})
_STATE_OBSERVATIONS = frozenset({"agent_state_changed", "null"})


class _Builder(_ClassicEvents, _SdkEvents):
    """Turns one instance's events into messages, keeping parallel calls together."""

    def add(self, event: dict[str, Any], index: int) -> None:
        # a V1 event names its class in "kind"; its action/observation is an object, a V0 one's a name
        if isinstance(event.get("kind"), str) and not isinstance(event.get("action") or event.get("observation"), str):
            self._v1(event, index)
        elif "action" in event:
            if event.get("action") in _STATE_ACTIONS:
                self.state_events[f"{event['action']} action"] += 1
                return
            self.pending = None
            self._action(event, index)
        elif event.get("observation") not in _STATE_OBSERVATIONS:
            pending, self.pending = self.pending, None
            self._observation(event, index, pending)
        else:
            self.state_events[f"{event.get('observation')} observation"] += 1


def _build(source: Source, lineno: int | None, conv_id: str, history: list[Any]) -> list[Message]:
    builder = _Builder(conv_id)
    for index, event in enumerate(_events(history)):
        if not _is_event(event):
            source.skip(lineno, f"history event {index} of {conv_id} is not an OpenHands event")
            continue
        try:
            builder.add(event, index)
        except RECORD_ERRORS as exc:
            source.skip(lineno, f"history event {index} of {conv_id} is malformed ({describe(exc)})")
    for kind, n in sorted(builder.left_out.items()):
        source.notes.append(f"{conv_id}: left out {n} {kind} event(s), which carry no message")
        source.leave_out(f"{kind} event (no message)", n)
    for kind, n in sorted(builder.state_events.items()):  # the agent's state, on purpose: counted, not noted
        source.leave_out(f"{kind} (agent state)", n)
    return builder.messages()


def _with_instruction(messages: list[Message], conv_id: str, instruction: Any) -> list[Message]:
    """The benchmark's instruction as the first user message, when the history holds none."""
    if not isinstance(instruction, str) or not instruction.strip() or any(m.role == "user" for m in messages):
        return messages
    task = Message.of(
        "user", instruction, id=make_id(NAME, conv_id, "instruction"), extra={NAME: {"from": "instruction"}}
    )
    at = 1 if messages and messages[0].role == "system" else 0
    return [*messages[:at], task, *messages[at:]]
