"""Reading records: the instance a line names, the events of its history (2024 outputs pair them),
the flat fields of the resolver's events, and typed reads of JSON fields."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# fields of a flat (resolver) event that are the event's own, not the action's args / observation's extras
_ACTION_FIELDS = frozenset(
    {"id", "timestamp", "source", "message", "action", "cause", "tool_call_metadata", "llm_metrics", "timeout"}
    | {"action_risk", "security_risk", "is_confirmed"}
)
_OBSERVATION_FIELDS = frozenset(
    {"id", "timestamp", "source", "message", "observation", "cause", "content", "tool_call_metadata", "llm_metrics"}
)


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


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    """`value` if it is a string, else ""."""
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
