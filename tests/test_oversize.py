"""Over the window, the last resort of `ctxkeep.aging.cut_oversize`: a call's arguments too big keep their head and
tail (still a JSON object, the whole saved), and the thinking of every assistant message but the newest goes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from ctxkeep.folder import MemoryFolder
from ctxkeep.messages import Message, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.oversize import ARGUMENTS_CUT_KEY, cut_arguments
from ctxkeep.reasoning import THINKING_KEY
from ctxkeep.retention import referenced_files
from ctxkeep.session import Session
from ctxkeep.settings import EngineSettings
from ctxkeep.store import OFFLOAD_KEY
from ctxkeep.tokens import get_counter

NOW = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
COUNTER = get_counter("o200k_base")


class _Refusing:
    def summarize(self, request: object) -> str:
        raise RuntimeError("no summary today")


def _call(arguments: str, id: str = "c1") -> Message:
    return Message(role="assistant", content=(ToolCall(id=id, name="write", arguments=arguments),), id=f"a-{id}")


def _cut(message: Message, limit: int) -> tuple[ToolCall, MemoryFolder]:
    store = MemoryFolder()
    cut = cut_arguments(message, limit, store)
    assert cut is not None
    return cut.tool_calls[0], store


def test_a_whole_file_in_a_write_keeps_its_head_and_tail_and_the_call_stays_whole() -> None:
    body = "".join(f"line {k}: x = {k} * 2\n" for k in range(3_000))
    arguments = json.dumps({"path": "src/big.py", "content": body})
    call, store = _cut(_call(arguments), 4_000)
    value = json.loads(call.arguments)  # still a JSON object
    assert call.id == "c1" and call.name == "write" and value["path"] == "src/big.py"
    assert value["content"].startswith("line 0: x = 0") and value["content"].rstrip().endswith("x = 2999 * 2")
    assert "the call's full arguments (JSON) are in" in value["content"]
    assert len(call.arguments.encode()) < 4_600
    record = call.extra[ARGUMENTS_CUT_KEY]
    assert store.read(record["file"]) == arguments.encode() and record["bytes"] == len(arguments.encode())


def test_many_small_values_become_one_text_cut_in_its_middle() -> None:
    # A long todo list: no value is big enough to cut alone, so the list becomes its own JSON text, cut there.
    todos = [{"content": f"check module {k} for the retry bug", "status": "pending"} for k in range(400)]
    arguments = json.dumps({"todos": todos, "note": "keep it short"})
    call, _ = _cut(_call(arguments), 2_000)
    value = json.loads(call.arguments)
    assert value["note"] == "keep it short" and isinstance(value["todos"], str)
    assert value["todos"].startswith('[{"content": "check module 0') and "module 399" in value["todos"]
    assert len(call.arguments.encode()) < 2_400


def test_broken_json_arguments_are_cut_as_one_text_and_made_an_object() -> None:
    arguments = '{"path": "a.py", "content": "' + "y" * 20_000  # the model's JSON ends too early
    call, _ = _cut(_call(arguments), 3_000)
    value = json.loads(call.arguments)
    assert list(value) == ["arguments"] and value["arguments"].startswith('{"path": "a.py"')


def test_arguments_within_the_limit_or_not_worth_a_note_stay() -> None:
    store = MemoryFolder()
    assert cut_arguments(_call('{"path": "a.py"}'), 100, store) is None
    assert cut_arguments(_call(json.dumps({"k": "v" * 150})), 100, store) is None  # the note would take as much


def test_over_the_window_the_loops_earlier_thinking_goes_whole_and_the_newest_stays() -> None:
    # One step brings a whole tool loop; its first reasoning alone is over the window, and no compaction helps (the
    # summary is refused). Anthropic needs the newest assistant message's signed thinking unchanged and lets earlier
    # ones be left out: they go, whole and saved, rather than the request going over the window.
    long = ThinkingBlock(text="\n".join(f"step {k}: weigh the parser's state" for k in range(1_500)), signature="c2ln")
    short = ThinkingBlock(text="now edit the parser", signature="c2ln")
    group = [
        Message.of("user", "fix the parser", id="u"),
        Message(role="assistant", content=(long, ToolCall(id="c1", name="read_file")), id="a1"),
        Message(role="tool", content=(ToolResult(call_id="c1", content="def parse(): ..."),), id="r1"),
        Message(role="assistant", content=(short, ToolCall(id="c2", name="edit")), id="a2"),
        Message(role="tool", content=(ToolResult(call_id="c2", content="ok"),), id="r2"),
    ]
    with Session(
        MemoryFolder(), settings=EngineSettings.for_window(4_096), counter=COUNTER, summarizer=_Refusing()
    ) as session:
        session.add(group)
        step = session.prepare("be brief", now=NOW)
        sent = {m.id: m for m in step.context.messages}
        assert step.failure is not None and step.context.tokens <= 4_096
        assert not any("over the model's window" in w for w in step.warnings)
        assert sent["a2"].content[0] == short  # the newest keeps its signed block, byte for byte
        assert not any(isinstance(b, ThinkingBlock) for b in sent["a1"].content)
        saved = session.store.read(sent["a1"].extra[THINKING_KEY]["file"])
        assert saved == long.text.encode()


def test_over_the_window_a_long_todo_list_in_the_newest_call_is_cut() -> None:
    # Every value small, so the old cut of a call frees nothing; over the window the list is cut head and tail.
    todos = [{"content": f"check module {k} for the retry bug", "status": "pending"} for k in range(600)]
    group = [
        Message.of("user", "plan the fix", id="u"),
        Message(
            role="assistant", content=(ToolCall.from_input(id="c", name="todo_write", input={"todos": todos}),), id="a"
        ),
        Message(role="tool", content=(ToolResult(call_id="c", content="ok"),), id="r"),
    ]
    with Session(MemoryFolder(), settings=EngineSettings.for_window(4_096), counter=COUNTER) as session:
        session.add(group)
        step = session.prepare("be brief", now=NOW)
    assert step.context.tokens <= 4_096 and not step.warnings
    call = next(m for m in step.context.messages if m.id == "a").tool_calls[0]
    assert call.id == "c" and call.name == "todo_write" and "module 599" in json.loads(call.arguments)["todos"]


def test_arguments_the_old_cut_spared_point_at_its_saved_original_and_stay_kept() -> None:
    # The old cut saved the whole arguments and cut nothing of a list of small values; the oversize cut then points
    # at that same file, and retention keeps the file the call's record names.
    todos = [{"content": f"check module {k}", "status": "pending"} for k in range(300)]
    arguments = json.dumps({"todos": todos})
    call = ToolCall(id="c", name="todo_write", arguments=arguments, extra={OFFLOAD_KEY: {"file": "tool_result/x.txt"}})
    cut = cut_arguments(Message(role="assistant", content=(call,), id="a"), 1_000, MemoryFolder())
    assert cut is not None
    after = cut.tool_calls[0]
    assert after.extra[ARGUMENTS_CUT_KEY]["file"] == "tool_result/x.txt" and OFFLOAD_KEY in after.extra
    assert "tool_result/x.txt" in referenced_files([cut])
