"""What a memory flush keeps without a model: stated preferences and try-error lessons, found by rule.

- A **preference** is a sentence of the user's that states one: "I prefer tabs", "please always run the
  linter", "never push to main", "my time zone is UTC+8", "我喜欢简洁的回答", "以后不要用 sudo".
- A **lesson** is a tool call that failed (an error result or a non-zero exit code) followed, later, by a
  call of the same tool that worked: what failed, why, and what worked instead.

Both are found the same way in any conversation: no tuning to a transcript.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxkeep.messages import Message, ToolCall, ToolResult

_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]?")
_PREFERENCE = re.compile(
    r"\b(?:i|we)\s+(?:really\s+|usually\s+|always\s+|never\s+|would\s+|do\s+not\s+|don'?t\s+)?"
    r"(?:prefer|like|love|hate|dislike|want\s+you\s+to|use|work\s+with)\b"
    r"|\b(?:i|we)\s+(?:always|never|usually)\b"
    r"|\bmy\s+(?:name|e-?mail|time\s*zone|timezone|preferred\s+\w+|favou?rite\s+\w+)\s+is\b"
    r"|\b(?:please\s+)?(?:always|never)\s+(?:use|run|write|call|add|put|commit|push|reply|answer|ask|keep|format)\b"
    r"|\b(?:please\s+)?(?:don'?t|do\s+not)\s+(?:ever\s+)?(?:use|run|push|commit|add|write|call|touch|delete)\b"
    r"|\bfrom\s+now\s+on\b|\bcall\s+me\b"
    r"|我(?:更|比较|很|最|一直|总是|通常|不)?(?:喜欢|偏好|习惯|讨厌|希望|想要|倾向)"
    r"|我(?:叫|的名字是|的邮箱是|的时区是)|请(?:总是|始终|一律|永远|不要|别|务必)|以后(?:都|请|不要|别)|(?:不要|别)再|记住",
    re.IGNORECASE,
)
_QUESTION = re.compile(r"[?？]\s*$")
SENTENCE_CHARS = 300
ARGUMENT_CHARS = 160
ERROR_CHARS = 200
_ERROR_LINE = re.compile(r"error|fail|denied|not found|no such|refused|invalid|exception|错误|失败", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Note:
    """Something to remember: its kind ("preference" or "lesson") and the text of the entry."""

    kind: str
    text: str


def extract(messages: Sequence[Message]) -> list[Note]:
    """The preferences the user stated and the lessons the tool calls teach, in order, without repeats."""
    notes = [*preferences(messages), *lessons(messages)]
    seen: set[str] = set()
    out = []
    for note in notes:
        key = " ".join(note.text.casefold().split())
        if key not in seen:
            seen.add(key)
            out.append(note)
    return out


def preferences(messages: Sequence[Message]) -> list[Note]:
    """The user's sentences that state a preference, habit or standing instruction."""
    out = []
    for message in messages:
        if message.role != "user":
            continue
        for raw in _SENTENCE.findall(message.text):
            sentence = " ".join(raw.split())
            if len(sentence) < 6 or _QUESTION.search(sentence) or not _PREFERENCE.search(sentence):
                continue
            out.append(Note("preference", sentence[:SENTENCE_CHARS]))
    return out


def lessons(messages: Sequence[Message]) -> list[Note]:
    """A failed call and the later call of the same tool, on the same thing, that worked: one lesson each.

    "The same thing": the two calls' arguments share at least half the words of the shorter one (so
    ``pip install -r req.txt`` then ``uv pip install -r req.txt`` is a lesson, and a ``ls`` in between is not).
    The very same call working on a second try is a flaky tool, not a lesson.
    """
    calls: dict[str, ToolCall] = {}
    pending: dict[str, list[tuple[ToolCall, ToolResult]]] = {}
    out = []
    for message in messages:
        for call in message.tool_calls:
            calls[call.id] = call
        result = message.tool_result
        if result is None or result.call_id not in calls:
            continue
        call = calls[result.call_id]
        failures = pending.setdefault(call.name, [])
        if _failed(result):
            failures.append((call, result))
            del failures[:-_PENDING]
            continue
        scored = [(_overlap(_argument(bad), _argument(call)), i) for i, (bad, _) in enumerate(failures)]
        best = max(scored, default=(0.0, -1))
        if best[0] < _SAME_THING:
            continue
        bad, error = failures.pop(best[1])
        if _argument(bad) != _argument(call):
            text = f"{call.name}: `{_argument(bad)}` failed ({_error_line(error)}); `{_argument(call)}` worked"
            out.append(Note("lesson", text))
    return out


_WORD = re.compile(r"\w+")
_SAME_THING = 0.5
_PENDING = 5


def _overlap(a: str, b: str) -> float:
    """Shared words over the words of the shorter text (0 when either has none)."""
    wa, wb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    return len(wa & wb) / min(len(wa), len(wb)) if wa and wb else 0.0


def _failed(result: ToolResult) -> bool:
    return result.is_error or (result.exit_code is not None and result.exit_code != 0)


def _argument(call: ToolCall) -> str:
    """The call in one line: its command or path when it has one, else its arguments."""
    value = call.input()
    if isinstance(value, dict):
        for key in ("command", "cmd", "code", "query", "path", "file_path", "url"):
            if isinstance(value.get(key), str):
                value = value[key]
                break
    text = value if isinstance(value, str) else call.arguments
    text = " ".join(str(text).split())
    return text if len(text) <= ARGUMENT_CHARS else text[: ARGUMENT_CHARS - 1] + "…"


def _error_line(result: ToolResult) -> str:
    lines = [line.strip() for line in result.text.splitlines() if line.strip()]
    chosen = next((line for line in lines if _ERROR_LINE.search(line)), lines[-1] if lines else "")
    if result.exit_code not in (None, 0):
        chosen = f"exit {result.exit_code}: {chosen}" if chosen else f"exit {result.exit_code}"
    chosen = chosen.replace("`", "'")
    return chosen[:ERROR_CHARS] or "error"
