"""Attachment entries (Claude Code 2.1): which kinds hold text the model saw, and that text as blocks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxkeep.formats.claude_code.blocks import _block
from ctxkeep.messages import Block, ImageBlock, TextBlock

# Attachments holding text Claude Code sent the model, and where the text is ("*": each item of a list).
_ATTACHMENT_TEXT: dict[str, tuple[str, ...]] = {
    "queued_command": ("prompt",),  # a prompt the user typed while the agent worked: text or blocks
    "hook_additional_context": ("content",),
    "nested_memory": ("content", "content"),  # a CLAUDE.md file
    "file": ("content", "file", "content"),  # a file the user @-mentioned
    "edited_text_file": ("snippet",),  # a file changed outside the agent
    "hook_blocking_error": ("blockingError", "blockingError"),
    "invoked_skills": ("skills", "*", "content"),
    "skill_listing": ("content",),
    "total_tokens_reminder": ("text",),
    "silent_turn_reminder": ("text",),
    "batching_reminder_sent": ("text",),
}
# Hooks whose success output Claude Code shows the model (as "<hook> hook success: <output>"); the output of
# the others' success is for the terminal only.
_SEEN_HOOK_SUCCESS = frozenset({"SessionStart", "UserPromptSubmit", "UserPromptExpansion"})
# Attachments the model saw only as wording Claude Code builds from their fields, or never saw: metadata.
_ATTACHMENT_METADATA = frozenset(
    {
        "hook_success",
        "hook_non_blocking_error",
        "hook_cancelled",
        "command_permissions",
        "deferred_tools_delta",
        "mcp_instructions_delta",
        "agent_listing_delta",
        "todo",
        "todo_reminder",
        "task_reminder",
        "task_status",
        "plan_mode",
        "plan_mode_exit",
        "auto_mode",
        "ultra_effort_enter",
        "ultra_effort_exit",
        "budget_usd",
        "date_change",
        "compact_file_reference",
        "dynamic_skill",
        "read_truncation_notice",
    }
)


def _attachment_kind(obj: Mapping[str, Any]) -> str:
    attachment = obj.get("attachment")
    kind = attachment.get("type") if isinstance(attachment, Mapping) else None
    return kind if isinstance(kind, str) else "?"


def _attachment_blocks(obj: Mapping[str, Any]) -> list[Block]:
    """The text (and images) an attachment sent the model; empty for one that is metadata."""
    kind = _attachment_kind(obj)
    if kind == "hook_success":  # a SessionStart hook's output (`bd prime`, a project's rules) reaches the model
        attachment = obj["attachment"]
        event = attachment.get("hookEvent") or str(attachment.get("hookName") or "").split(":")[0]
        content = attachment.get("content")
        seen = event in _SEEN_HOOK_SUCCESS and isinstance(content, str) and content.strip()
        return [TextBlock(text=content)] if seen else []
    where = _ATTACHMENT_TEXT.get(kind)
    if where is None:
        return []
    blocks: list[Block] = []
    for value in _dig(obj["attachment"], where):
        if isinstance(value, str):
            blocks.append(TextBlock(text=value))
        elif isinstance(value, list):  # a queued prompt with images, or several hook contexts
            blocks.extend(TextBlock(text=v) if isinstance(v, str) else _block(v, None) for v in value)
        elif value is not None:
            raise TypeError(f"attachment text must be text or a list, got {type(value).__name__}")
    for block in blocks:
        if not isinstance(block, TextBlock | ImageBlock):
            raise TypeError(f"an attachment holds a {type(block).__name__}, not text")
    return [b for b in blocks if not isinstance(b, TextBlock) or b.text]


def _dig(value: Any, path: tuple[str, ...]) -> list[Any]:
    """The values at `path` inside `value` ("*" steps into each item of a list); missing ones left out."""
    found = [value]
    for step in path:
        if step == "*":
            found = [item for v in found if isinstance(v, list) for item in v]
        else:
            found = [v[step] for v in found if isinstance(v, Mapping) and step in v]
    return found
