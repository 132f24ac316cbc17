"""The memory tools as plain data, sent through the real openai and anthropic SDKs' types, and run."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

import pytest

from ctxkeep.archive import Archive
from ctxkeep.archive import append as archive_append
from ctxkeep.folder import MemoryFolder
from ctxkeep.memory.tools import MemoryTool, memory_tools
from ctxkeep.messages import Message

if TYPE_CHECKING:
    from pathlib import Path

NOW = datetime(2026, 7, 1, 8, 15, tzinfo=UTC)


def _tools(folder: MemoryFolder) -> dict[str, MemoryTool]:
    return {t.name: t for t in memory_tools(folder, embedder=None, now=lambda: NOW)}


def test_every_tool_has_schemas_both_sdks_accept() -> None:
    from anthropic.types import ToolParam
    from openai.types.chat import ChatCompletionToolParam
    from pydantic import TypeAdapter

    tools = memory_tools(MemoryFolder(), embedder=None)
    assert [t.name for t in tools] == ["memory_write", "memory_read", "memory_search", "dialog_search", "recall"]
    for tool in tools:
        TypeAdapter(ChatCompletionToolParam).validate_python(tool.openai())
        TypeAdapter(ToolParam).validate_python(tool.anthropic())
        assert tool.openai()["function"]["parameters"]["type"] == "object"
        assert set(tool.parameters["required"]) <= set(tool.parameters["properties"])
        assert callable(tool.function) and tool.description


def test_write_read_and_search_memory() -> None:
    folder = MemoryFolder()
    tools = _tools(folder)
    saved = tools["memory_write"].invoke({"text": "Ana reviews every PR touching billing/"})
    assert saved == "saved to memory/2026-07-01.md"
    saved = tools["memory_write"].function(text="会议改到周四下午三点", target="memory", section="日程")
    assert saved == "saved to MEMORY.md"
    read = tools["memory_read"].invoke('{"path": "memory/2026-07-01.md"}')
    assert read == (
        "memory/2026-07-01.md, lines 1-3 of 3:\n1: # 2026-07-01\n2: \n3: - 08:15 Ana reviews every PR touching billing/"
    )
    found = tools["memory_search"].invoke({"query": "who reviews billing"})
    assert found == (
        "[memory/2026-07-01.md:3, relevance 100/100] (whole chunk: memory_read path=memory/2026-07-01.md"
        " start_line=1 lines=3)\n> 3: - 08:15 Ana reviews every PR touching billing/"
    )
    assert "MEMORY.md" in tools["memory_search"].invoke({"query": "周四的会议"})
    assert tools["memory_search"].invoke({"query": "kubernetes"}) == "no results"


def test_dialog_search_names_the_archive_line_to_read() -> None:
    folder = MemoryFolder()
    archive_append(
        folder,
        Archive(),
        [Message.of("user", "hello"), Message.of("assistant", "The migration id is 7f3a2c and it ran at 02:00.")],
        date(2026, 6, 30),
    )
    tools = _tools(folder)
    found = tools["dialog_search"].invoke({"query": "7f3a2c", "k": 2})
    assert found.startswith(
        "[dialog/2026-06-30.jsonl:2, relevance 100/100] (word for word: recall source=dialog/2026-06-30.jsonl:2)"
    )
    assert found.endswith("\n> assistant: The migration id is 7f3a2c and it ran at 02:00.")
    assert tools["memory_search"].invoke({"query": "7f3a2c"}) == "no results"
    line = tools["memory_read"].invoke({"path": "dialog/2026-06-30.jsonl", "start_line": 2, "lines": 1})
    assert "7f3a2c" in line


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("memory_write", {"text": "  "}, "text must be some text"),
        ("memory_write", {"text": "x", "target": "disk"}, "target is 'daily'"),
        ("memory_write", {"text": "x", "section": "A"}, "section is for target 'memory'"),
        ("memory_write", {"text": "x", "colour": "red"}, "unknown argument 'colour'"),
        ("memory_read", {"path": "state.json"}, "can be read"),
        ("memory_read", {"path": "MEMORY.md"}, "does not exist yet"),
        ("memory_read", {"start_line": 0}, "start_line must be"),
        ("memory_search", {"query": "x", "k": "five"}, "k must be"),
        ("memory_search", {}, "query"),
        ("dialog_search", "not json", "error: "),
    ],
)
def test_a_bad_call_gives_the_model_an_error_it_can_act_on(name: str, arguments: object, error: str) -> None:
    folder = MemoryFolder()
    answer = _tools(folder)[name].invoke(arguments)  # type: ignore[arg-type]
    assert answer.startswith("error: ") and error in answer
    assert "MEMORY.md" not in folder.files


def test_a_path_gives_a_local_folder(tmp_path: Path) -> None:
    tools = {t.name: t for t in memory_tools(tmp_path, embedder=None, now=lambda: NOW)}
    tools["memory_write"].invoke({"text": "x"})
    assert (tmp_path / "memory" / "2026-07-01.md").read_text().endswith("- 08:15 x\n")
    assert json.loads(json.dumps(tools["memory_search"].openai()))["function"]["name"] == "memory_search"


# ── hostile arguments: a model (or a prompt injection) can send anything ──────────────────────────────────────

DEEP_TEXT = "[" * 20_000 + "]" * 20_000  # under the size limit, past what Python's json follows


def _nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "arguments",
    [DEEP_TEXT, '{"text": ' + DEEP_TEXT + "}", '{"query": ' + '{"a": ' * 5_000 + '"x"' + "}" * 5_001],
)
def test_arguments_nested_too_deep_are_an_error_text(arguments: str) -> None:
    """Python's json raised RecursionError into the agent loop."""
    folder = MemoryFolder()
    for tool in _tools(folder).values():
        answer = tool.invoke(arguments)
        assert answer.startswith("error: ") and "nested" in answer and len(answer) < 300, (tool.name, answer[:300])
    assert not folder.files


def test_a_nested_value_given_as_a_dict_is_an_error_text_that_does_not_echo_it() -> None:
    """An adapter hands the parsed arguments over: the error named the value by its repr (RecursionError, or
    megabytes of text back into the context)."""
    folder = MemoryFolder()
    tools = _tools(folder)
    for value in (_nested(100_000), _nested(50), ["x"] * 1_000_000):
        for tool, name in (("memory_write", "text"), ("memory_search", "query"), ("recall", "source")):
            answer = tools[tool].invoke({name: value})
            assert answer.startswith("error: ") and len(answer) < 300, answer[:300]
    assert not folder.files


@pytest.mark.parametrize("as_text", [True, False])
def test_arguments_over_the_size_limit_are_refused_before_they_are_read(as_text: bool) -> None:
    folder = MemoryFolder()
    tools = _tools(folder)
    big = "x" * 20_000_000
    for tool, name in (("memory_write", "text"), ("memory_search", "query"), ("memory_read", "path")):
        arguments = json.dumps({name: big}) if as_text else {name: big}
        answer = tools[tool].invoke(arguments)
        assert answer.startswith("error: ") and "at most" in answer and len(answer) < 300, answer[:300]
    assert not folder.files


def test_memory_write_keeps_its_cap_and_single_line_titles_through_the_tool() -> None:
    folder = MemoryFolder()
    tools = _tools(folder)
    answer = tools["memory_write"].invoke({"text": "y" * 20_000})
    assert answer.startswith("error: a memory entry holds at most 16,384 bytes"), answer
    for title in ("Notes\u2028# Injected", "Notes\r# Injected", "Notes\n# Injected", "Notes\x85x"):
        answer = tools["memory_write"].invoke({"text": "fact", "target": "memory", "section": title})
        assert answer.startswith("error: "), answer
    assert not folder.files
