"""Retention of the saved originals: which files live messages still point at, and removing the expired rest.

`offload` (and the argument, thinking and oversize cuts) save full texts to ``tool_result/``; a message
notes its file in an offload record, and an agent may copy a path into its own text. `cleanup` removes
only files ctxkeep named (`offload.is_original`) that are past `retention_days` and no live message
references either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from .originals import is_original
from .oversize import ARGUMENTS_CUT_KEY
from .reasoning import THINKING_KEY
from .store import OFFLOAD_KEY, TOOL_RESULT_DIR, Store

_SECONDS_PER_DAY = 86_400
# A reference to a saved file inside some text: what the notice prints, or what an agent copied.
_REFERENCE = re.compile(TOOL_RESULT_DIR + r"/([\w.-]+)")


def _noted_file(extra: Mapping[str, Any], key: str) -> str | None:
    """The file a note under `key` names; read leniently: even a damaged record protects the file it names."""
    raw = extra.get(key)
    return raw["file"] if isinstance(raw, Mapping) and isinstance(raw.get("file"), str) else None


def referenced_files(messages: Iterable[Message]) -> set[str]:
    """Names of saved files the messages point at: through their offload records or a path in their text."""
    names: set[str] = set()
    for message in messages:
        # a command's output, or dropped thinking, notes its file on the message
        noted = [_noted_file(message.extra, OFFLOAD_KEY), _noted_file(message.extra, THINKING_KEY)]
        texts: list[str] = []
        for block in message.content:
            if isinstance(block, ToolResult):
                noted.append(_noted_file(block.extra, OFFLOAD_KEY))
                parts = [block.content] if isinstance(block.content, str) else block.content
                texts.extend(p if isinstance(p, str) else p.text for p in parts if isinstance(p, str | TextBlock))
            elif isinstance(block, TextBlock | ThinkingBlock):
                texts.append(block.text)
            elif isinstance(block, ToolCall):
                # a cut call's arguments keep their records (the old cut's, and an oversize cut's)
                noted += [_noted_file(block.extra, OFFLOAD_KEY), _noted_file(block.extra, ARGUMENTS_CUT_KEY)]
                texts.append(block.arguments)
        names.update(n for n in noted if n is not None)
        for text in texts:
            if TOOL_RESULT_DIR + "/" not in text:
                continue
            for match in _REFERENCE.finditer(text):
                # "see tool_result/x.txt." ends a sentence: keep both readings.
                names.add(f"{TOOL_RESULT_DIR}/{match[1]}")
                names.add(f"{TOOL_RESULT_DIR}/{match[1].rstrip('.-')}")
    return names


def cleanup(store: Store, live: Iterable[Message], *, retention_days: int, now: float) -> list[str]:
    """Remove the originals ctxkeep saved that are older than `retention_days` and no live message references.

    Only names `original_name` gives are touched: anything else in ``tool_result/`` is not ctxkeep's.
    `now` is the current time in epoch seconds (passed in, so tests pin it). Returns the removed
    names, sorted.
    """
    if not isinstance(retention_days, int) or isinstance(retention_days, bool) or retention_days < 1:
        raise ValueError(f"retention_days must be a whole number, 1 or more; got {retention_days!r}")
    cutoff = now - retention_days * _SECONDS_PER_DAY
    expired = [info for info in store.originals() if info.mtime < cutoff and is_original(info.name)]
    if not expired:
        return []  # the common case: no need to read every live message for references
    keep = referenced_files(live)
    removed: list[str] = []
    for info in expired:
        if info.name not in keep:
            store.drop_original(info.name)
            removed.append(info.name)
    return removed
