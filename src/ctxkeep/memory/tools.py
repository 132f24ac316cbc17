"""The agent's memory tools as plain data: a name, a Python callable and JSON schemas for OpenAI and Anthropic.

    memory_write    append to the day's log, or to a section of MEMORY.md
    memory_read     read lines of MEMORY.md, a day log, an archive file (dialog/*.jsonl) or a saved original
    memory_search   search MEMORY.md and the day logs (full text and vectors)
    dialog_search   search the archived dialog: what compaction moved out of the context
    recall          archived messages word for word (dialog/DATE.jsonl:FROM-TO), saved originals put back

`memory_tools(workspace)` gives the five; an adapter registers each with its framework from `name`,
`description`, `parameters` and `function` (or `openai()` / `anthropic()`), and calls `invoke` with the
model's arguments, which answers a bad call with an error text the model can act on instead of raising.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxkeep.errors import CtxkeepError
from ctxkeep.folder import LocalFolder
from ctxkeep.store import DIALOG_DIR, MEMORY_FILE, Store
from ctxkeep.workspace import recall

from .embed import Embedder, default_embedder
from .files import append_daily, append_to_section, read_lines
from .search import MIN_RELEVANCE, Hit, open_index, search

# Of each hit's lines, how many characters a tool shows the model: enough to judge it; memory_read gives the rest.
HIT_CHARS = 700
MAX_K = 20
MAX_READ_LINES = 500
# What one recall answers by default, and at most: a few results' worth, then the line to go on from.
RECALL_CHARS = 20_000
MAX_RECALL_CHARS = 200_000
# The model's arguments are bounded before they are read: no tool takes more than a memory entry's worth
# of text, even escaped (16,384 bytes of \uXXXX escapes are about 60,000 characters), and every argument is
# one string or number, so nothing nested deeper than Python's json follows reaches a tool.
MAX_ARGUMENT_CHARS = 65_536


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryTool:
    """One tool: its `name`, what it does (`description`), its arguments' JSON schema and the callable."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., str]

    def openai(self) -> dict[str, Any]:
        """The tool for OpenAI function calling (``tools=[...]`` of chat completions)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }

    def anthropic(self) -> dict[str, Any]:
        """The tool for Anthropic tool use (``tools=[...]`` of the Messages API)."""
        return {"name": self.name, "description": self.description, "input_schema": dict(self.parameters)}

    def invoke(self, arguments: str | Mapping[str, Any]) -> str:
        """Run the tool with the model's arguments (JSON text or a dict); a bad call gives an error text."""
        try:
            return self.function(**_arguments(arguments, self.name, self.parameters["properties"]))
        except (ValueError, TypeError, FileNotFoundError, CtxkeepError) as exc:
            return f"error: {exc}"  # CtxkeepError: a file the store refuses (a link where a file belongs)


class _Memory:
    """What the tools share: the workspace, the clock and one embedder, loaded on the first search."""

    def __init__(
        self, store: Store, embedder: Embedder | str | None, now: Callable[[], datetime], min_relevance: float
    ) -> None:
        self.store = store
        self.now = now
        self.min_relevance = min_relevance
        self._embedder = embedder
        self._lock = threading.Lock()

    def embedder(self) -> Embedder | None:
        with self._lock:
            if self._embedder == "default":
                self._embedder = default_embedder()
            assert not isinstance(self._embedder, str)
            return self._embedder

    def write(self, text: str, target: str = "daily", section: str | None = None) -> str:
        _text(text, "text")
        if target == "daily":
            if section is not None:
                raise ValueError("section is for target 'memory' (MEMORY.md); the day's log has none")
            name = append_daily(self.store, text, at=self.now())
        elif target == "memory":
            name = append_to_section(self.store, text, section=section or "Notes")
        else:
            raise ValueError(f"target is 'daily' (today's log) or 'memory' (MEMORY.md); got {target!r}")
        return f"saved to {name}"

    def read(self, path: str = MEMORY_FILE, start_line: int = 1, lines: int = 200) -> str:
        _whole(start_line, "start_line")
        _whole(lines, "lines")
        try:
            text, total = read_lines(self.store, path, start=start_line, count=min(lines, MAX_READ_LINES))
        except FileNotFoundError:
            raise FileNotFoundError(f"{path} does not exist yet") from None
        if not text:
            return f"{path} has {total} lines; nothing from line {start_line}"
        last = min(total, start_line + min(lines, MAX_READ_LINES) - 1)
        return f"{path}, lines {start_line}-{last} of {total}:\n{text}"

    def search(self, query: str, k: int = 5, *, source: str) -> str:
        _text(query, "query")
        _whole(k, "k")
        with open_index(self.store, embedder=self.embedder()) as index:
            index.update()
            hits = search(index, query, k=min(k, MAX_K), source=source, min_relevance=self.min_relevance)
        if not hits:
            return "no results"
        return "\n\n".join(_show(hit) for hit in hits)

    def recall(self, source: str, max_chars: int = RECALL_CHARS) -> str:
        _text(source, "source")
        _whole(max_chars, "max_chars")
        return recalled_text(self.store, source, min(max_chars, MAX_RECALL_CHARS))


def recalled_text(store: Store, source: str, max_chars: int) -> str:
    """What the recall tool answers: the messages (or the saved original) `source` names, word for word, in at
    most about `max_chars` characters; past them, where to go on from."""
    name = recall.original_name(store, source)
    if name is not None:
        data = recall.read_original(store, name)
        if data is None:
            raise FileNotFoundError(f"{name} is no longer kept (removed by retention); the archive has its head")
        text = data.decode("utf-8", "replace")
        if len(text) <= max_chars:
            return text
        shown = text[:max_chars]
        line = shown.count("\n") + 1
        return (
            f"{shown}\n[cut at max_chars={max_chars} of {len(text)} characters; go on with"
            f" memory_read path={name} start_line={line}]"
        )
    items = recall.recall(store, source)
    out: list[str] = []
    used = 0
    for at, item in enumerate(items):
        text = recall.render(item)
        if used + len(text) > max_chars:
            rest = at
            if not out:  # one message over the limit: its head, and where the rest is
                where = (
                    f"path={item.restored[0]}" if item.restored else f"path={item.file} start_line={item.line} lines=1"
                )
                out.append(
                    f"{text[:max_chars]}\n[cut at max_chars={max_chars} of {len(text)} characters; the rest:"
                    f" memory_read {where}, or recall with a larger max_chars]"
                )
                rest = at + 1
            if rest < len(items):
                out.append(
                    f"[lines {items[rest].line}-{items[-1].line} not shown (max_chars={max_chars});"
                    f" recall source={item.file}:{items[rest].line}-{items[-1].line}]"
                )
            break
        out.append(text)
        used += len(text) + 2
    return "\n\n".join(out)


def _show(hit: Hit) -> str:
    """A result for the model: ``file:line``, relevance, how to read the whole chunk (an archived one: how to
    recall it), then the matching lines."""
    span = hit.end_line - hit.start_line + 1
    # An archived message is one JSON line holding what the context held (an offloaded output's head only):
    # recall gives it word for word, with the saved original.
    where = (
        f"word for word: recall source={hit.path}:{hit.start_line}" + (f"-{hit.end_line}" if span > 1 else "")
        if hit.path.startswith(f"{DIALOG_DIR}/")
        else f"whole chunk: memory_read path={hit.path} start_line={hit.start_line} lines={span}"
    )
    head = f"[{hit.path}:{hit.line}, relevance {round(hit.score)}/100] ({where})"
    one_line = span == 1  # an archived message: every text line is the same file line
    body, used = [], 0
    for line in hit.lines:
        if not (line.text.strip() or line.match):
            continue
        text = (
            f"{'>' if line.match else ' '} {line.text}"
            if one_line
            else f"{'>' if line.match else ' '} {line.number}: {line.text}"
        )
        if used + len(text) > HIT_CHARS:
            body.append(text[: max(0, HIT_CHARS - used)] + " …")
            break
        body.append(text)
        used += len(text)
    return "\n".join([head, *body])


def _arguments(arguments: str | Mapping[str, Any], tool: str, allowed: Collection[str]) -> dict[str, Any]:
    """The model's `arguments` for `tool`, checked: a JSON object (or a mapping an adapter parsed) of at most
    `MAX_ARGUMENT_CHARS`, naming only `allowed` arguments, each one string, number, boolean or null."""
    if isinstance(arguments, str):
        if len(arguments) > MAX_ARGUMENT_CHARS:
            raise ValueError(
                f"the arguments are {len(arguments):,} characters; a tool takes at most {MAX_ARGUMENT_CHARS:,}"
            )
        try:
            args = json.loads(arguments)
        except RecursionError:
            raise ValueError("the arguments are nested too deep; each argument is one string or number") from None
    else:
        args = dict(arguments)
    if not isinstance(args, dict):
        raise ValueError("the arguments must be a JSON object")
    unknown = sorted(str(name) for name in args if name not in allowed)
    if unknown:
        raise ValueError(f"unknown argument {_shown(unknown[0])}; {tool} takes {', '.join(sorted(allowed))}")
    for name, value in args.items():
        if not isinstance(value, str | int | float | bool | None):
            raise ValueError(f"{name} is one string or number, never nested (got a {type(value).__name__})")
        if isinstance(value, str) and len(value) > MAX_ARGUMENT_CHARS:
            raise ValueError(f"{name} is {len(value):,} characters; a tool takes at most {MAX_ARGUMENT_CHARS:,}")
    return args


def _shown(value: object) -> str:
    """`value` as an error names it: its repr, cut short (the model reads the error back into its context)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def _text(value: object, name: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be some text; got {_shown(value)}")


def _whole(value: object, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a whole number, 1 or more; got {_shown(value)}")


def memory_tools(
    workspace: str | os.PathLike[str] | Store,
    *,
    embedder: Embedder | str | None = "default",
    now: Callable[[], datetime] | None = None,
    min_relevance: float = MIN_RELEVANCE,
) -> list[MemoryTool]:
    """The memory tools of `workspace` (a folder path, or a `Store` such as a session's). `embedder` "default"
    loads MiniLM when installed; None searches full text only. `now` (default: local time) dates the day's log.
    The searches leave out results under `min_relevance` (0-100; see `ctxkeep.memory.search`)."""
    store = LocalFolder(workspace) if isinstance(workspace, str | Path | os.PathLike) else workspace
    if isinstance(min_relevance, bool) or not isinstance(min_relevance, int | float) or not 0 <= min_relevance <= 100:
        raise ValueError(f"min_relevance must be a number from 0 to 100; got {min_relevance!r}")
    memory = _Memory(store, embedder, now or (lambda: datetime.now().astimezone()), min_relevance)
    k_schema = {"type": "integer", "minimum": 1, "maximum": MAX_K, "description": "how many results (default 5)"}
    return [
        MemoryTool(
            name="memory_write",
            description=(
                "Save something worth remembering across sessions: a user's preference or habit, a decision, a"
                " lesson (what failed and what fixed it). target 'daily' (default) appends to today's log;"
                " 'memory' adds it to a section of MEMORY.md, the long-term memory."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "what to remember, self-contained"},
                    "target": {"type": "string", "enum": ["daily", "memory"], "description": "default 'daily'"},
                    "section": {"type": "string", "description": "the MEMORY.md section (target 'memory')"},
                },
                "required": ["text"],
                "additionalProperties": False,
            },
            function=memory.write,
        ),
        MemoryTool(
            name="memory_read",
            description=(
                "Read lines of MEMORY.md, a day log (memory/YYYY-MM-DD.md), an archived dialog file"
                " (dialog/YYYY-MM-DD.jsonl, one message per line) or the saved full text of a cut output"
                " (tool_result/<uuid>.txt), numbered."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "default MEMORY.md"},
                    "start_line": {"type": "integer", "minimum": 1, "description": "first line, 1-based"},
                    "lines": {"type": "integer", "minimum": 1, "maximum": MAX_READ_LINES, "description": "how many"},
                },
                "required": [],
                "additionalProperties": False,
            },
            function=memory.read,
        ),
        MemoryTool(
            name="memory_search",
            description=(
                "Search long-term memory (MEMORY.md and the day logs) by meaning and by words, in any language."
                " Each result names the file and line, a relevance out of 100 and the lines that match (marked >);"
                " read the whole chunk with memory_read. Nothing matching well gives no results."
            ),
            parameters={
                "type": "object",
                "properties": {"query": {"type": "string"}, "k": k_schema},
                "required": ["query"],
                "additionalProperties": False,
            },
            function=lambda query, k=5: memory.search(query, k, source="memory"),
        ),
        MemoryTool(
            name="dialog_search",
            description=(
                "Search the earlier conversation that was compacted out of the context (dialog/*.jsonl):"
                " exact commands, paths, errors, what was said. Each result names the file and line to read."
            ),
            parameters={
                "type": "object",
                "properties": {"query": {"type": "string"}, "k": k_schema},
                "required": ["query"],
                "additionalProperties": False,
            },
            function=lambda query, k=5: memory.search(query, k, source="dialog"),
        ),
        MemoryTool(
            name="recall",
            description=(
                "Get earlier messages back word for word: source 'dialog/YYYY-MM-DD.jsonl:FROM-TO' (archive lines, as"
                " a summary or dialog_search names them) or 'tool_result/<uuid>.txt'. A cut output comes back whole"
                " from its saved original, so an error line past the kept head can be found."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "source": {
                        "type": "string",
                        "description": "dialog/YYYY-MM-DD.jsonl:FROM-TO, or tool_result/<uuid>.txt",
                    },
                    "max_chars": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_RECALL_CHARS,
                        "description": f"at most this many characters (default {RECALL_CHARS})",
                    },
                },
                "required": ["source"],
                "additionalProperties": False,
            },
            function=memory.recall,
        ),
    ]
