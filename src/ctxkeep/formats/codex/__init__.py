"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``), read-only.

Each line is ``{"timestamp", "type", "payload"}``. What each record becomes:

    session_meta              the conversation id; ``base_instructions`` -> a leading system message
    response_item message     user -> user; assistant -> assistant text; developer and system -> system
                              (``extra["codex:role"] == "developer"`` says which)
    response_item reasoning   ThinkingBlock with the summary text (the raw reasoning text when there is
                              no summary); ``encrypted_content`` kept in the block's extra, and the block
                              marked ``redacted`` when it has no readable text
    function_call, custom_tool_call, local_shell_call, tool_search_call
                              a ToolCall on an assistant message. A custom (freeform) tool's raw input
                              becomes ``{"input": "..."}`` JSON, as Codex itself sends it to chat APIs;
                              a local shell call's ``action`` becomes its arguments
    *_output                  a tool message with one ToolResult (see "Outputs" below)
    web_search_call           assistant text such as "[web search: query]": the provider runs the search
                              and the rollout records no output, so it is not a tool-call pair
    image_generation_call     an ImageBlock (PNG) on the assistant message
    agent_message             a user message (a message from another agent); author/recipient in extra
    compacted                 a user message holding the summary, at its position; the messages before
                              it stay (Codex would swap them for ``replacement_history`` on resume; that
                              list is kept in the message's extra)
    compaction (encrypted)    a user marker message; the opaque summary is kept in extra and noted

Left out on purpose, because they are not conversation: ``turn_context`` (per-turn settings; it only
ends the current assistant message), ``event_msg`` (UI events that repeat the response items:
user_message, agent_message, agent_reasoning, token_count, exec_command_end, patch_apply_end,
web_search_end, task_started/complete, turn_aborted...), ``ghost_snapshot``, ``compaction_trigger``,
``configuration_update`` and ``additional_tools`` items, and the ``record_type: state`` lines of old
files. Unknown record or item types (newer Codex versions) are left out with a note.

Files with no response items at all (some tools write only the UI events) are read from their
``event_msg`` records instead, with a note: ``user_message`` -> user text (and images),
``agent_message`` -> assistant text, ``agent_reasoning`` -> ThinkingBlock, ``web_search_end`` ->
assistant text as above, and each ``exec_command_end``, ``patch_apply_end`` or ``mcp_tool_call_end``
-> a ToolCall (from its ``*_begin`` event when there is one, else from the end event, which repeats
the command) with its ToolResult. A ``*_begin`` with no end is left out with a note. A file whose
response items hold no user or assistant message while its events do gets a note saying so (the
events are not imported then). A file that gives no user, assistant or tool message either way is a
`FormatError`, not an empty import.

Grouping: assistant-side items (reasoning, text, calls) with nothing from the user or a tool between
them came from one model response, so they go into one assistant message in file order. Newer Codex
records a call's output as soon as the tool ends, while the model is still streaming; assistant-side
items that arrive while calls of the current response await their outputs join that response's
message. A developer, user or system message (or an agent_message) that arrives while calls still
await their outputs (Codex records its notices as they happen) is moved to just after those outputs,
in order, so no message separates a call from its result; a note says how many were moved. If the
outputs never come (a new turn, a compaction, or the model answering a held user message), the
held messages are placed where that becomes clear.

Outputs: a string, a list of ``input_text``/``input_image`` items (a single item given on its own
counts as a one-item list), or ``{"content", "success"}``.
Older versions wrap shell output as the JSON text ``{"output": ..., "metadata": {"exit_code": N}}``:
the inner output becomes the content and the metadata goes to extra. Newer ones start the text with
``Exit code: N`` or ``Process exited with code N`` headers; the exit code is read from there. A
non-zero exit code or ``success: false`` sets ``is_error``. A unified-exec call whose process is still
running has no exit code; it appears in the later ``write_stdin`` output that reports the exit.

Pairing is imported as the file has it: a call interrupted before its output keeps no result
(`validate` reports it, `repair` adds one).

Files from before mid-2025 have no ``payload`` wrapper: the first line is the session meta and the
others are bare response items. They are read the same way.
"""

from __future__ import annotations

from ctxkeep.formats.codex.events import _SPOKEN_EVENTS, _read_events
from ctxkeep.formats.codex.records import (
    _RECORD_TYPES,
    _conversation_id,
    _event_type,
    _reason,
    _records,
    _what_is_there,
)
from ctxkeep.formats.codex.turns import COMPACTED_HEADER as COMPACTED_HEADER
from ctxkeep.formats.codex.turns import ENCRYPTED_COMPACTION_TEXT as ENCRYPTED_COMPACTION_TEXT
from ctxkeep.formats.codex.turns import NAME as NAME
from ctxkeep.formats.codex.turns import _Builder
from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source

__all__ = ["parse", "sniff"]

_LEGACY_META_KEYS = frozenset({"id", "timestamp", "instructions", "git"})


def sniff(source: Source) -> bool:
    """A rollout line ``{"type": "session_meta"|..., "payload": {...}}``, or an old unwrapped session meta."""
    sample = source.sample()
    if not isinstance(sample, dict):
        return False
    if sample.get("type") in _RECORD_TYPES and isinstance(sample.get("payload"), dict):
        return True
    keys = set(sample)
    return "type" not in keys and {"id", "timestamp"} <= keys <= _LEGACY_META_KEYS


def parse(source: Source) -> list[Conversation]:
    """The one conversation of a rollout file."""
    records, events = _records(source)
    meta = next((p for kind, _, p, _ in records if kind == "session_meta"), None)
    conv_id = _conversation_id(meta, source.path)
    builder = _Builder(source=source, conv_id=conv_id)
    seen_meta = False
    has_items = any(kind in ("response_item", "compacted") for kind, _, _, _ in records)
    for kind, lineno, payload, ts in records:
        try:
            if kind == "session_meta":
                if not seen_meta:
                    builder.session_meta(payload, ts)
                seen_meta = True  # later ones (resumed or forked sessions) repeat the header
            elif kind == "response_item":
                builder.item(payload, ts)
            elif kind == "compacted":
                builder.compacted(payload, ts)
            elif kind == "turn_context":
                builder.settle()  # a new turn: the previous assistant message is complete
        except RECORD_ERRORS as exc:  # _Bad is a ValueError
            source.skip(lineno, _reason(kind, exc))
    if not has_items:
        _read_events(builder, events)
    builder.settle()
    builder.report()
    if has_items and not builder.spoken and any(_event_type(e) in _SPOKEN_EVENTS for e in events):
        source.notes.append(
            "the response items hold no user or assistant message, but user_message/agent_message events do; "
            "those events were not imported (they normally repeat the response items)"
        )
    if not any(m.role in ("user", "assistant", "tool") for m in builder.messages):
        raise source.error(f"no conversation in this file: {_what_is_there(records, events)}")
    return [Conversation(id=conv_id, messages=tuple(builder.messages))]
