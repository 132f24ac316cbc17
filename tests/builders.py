"""Messages the tests build again and again, in one place: a shell turn (the user asks, the assistant runs
a command, the tool answers, the assistant may answer back), with ids a test can point at.
"""

from __future__ import annotations

import json

from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult


def shell_turn(
    i: int, *, ask: str, output: str, command: str | None = None, note: str = "running", answer: str | None = None
) -> list[Message]:
    """Turn `i`: the user's `ask` (id ``u{i}``); the assistant's `note` and a ``bash`` call ``c{i}`` of
    `command` (no arguments when None; id ``a{i}``); its `output` (``r{i}``); the assistant's `answer`
    (``d{i}``), when given."""
    arguments = json.dumps({"command": command}) if command is not None else "{}"
    turn = [
        Message.of("user", ask, id=f"u{i}"),
        Message(
            role="assistant",
            content=(TextBlock(text=note), ToolCall(id=f"c{i}", name="bash", arguments=arguments)),
            id=f"a{i}",
        ),
        Message(role="tool", content=(ToolResult(call_id=f"c{i}", content=output),), id=f"r{i}"),
    ]
    if answer is not None:
        turn.append(Message.of("assistant", answer, id=f"d{i}"))
    return turn
