"""The adapters' intake (`ctxkeep.host.core.Intake`): a host's whole history handed over every call, taken at the
cost of what is new, with the same entries, the same session and the same refusals as syncing it whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxkeep import Session
from ctxkeep.errors import MessageError
from ctxkeep.folder import MemoryFolder
from ctxkeep.host import core
from ctxkeep.host.inputs import convert
from ctxkeep.settings import EngineSettings

ROOMY = EngineSettings.for_window(1_000_000)


def turn(i: int) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return [
        {"role": "user", "content": "ok"},  # the same text every turn: ids count occurrences
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"file_{i}.py"},
    ]


def test_taking_what_is_new_gives_what_syncing_the_whole_history_gives() -> None:
    intake = core.Intake()
    history: list[dict[str, Any]] = []
    with Session(MemoryFolder(), settings=ROOMY) as mine, Session(MemoryFolder(), settings=ROOMY) as whole:
        for i in range(6):
            history = [*history, *turn(i)]  # a new list of the same objects, as frameworks hand it over
            _, pieces = intake.prepare(mine, history, "be brief", None)
            whole.sync(history)
            assert [m.id for m in mine.messages] == [m.id for m in whole.messages]
            assert intake._entries == convert(history)
            assert [p.items for p in pieces] == [range(k, k + 1) for k in range(len(history))]


def test_only_the_new_items_are_converted() -> None:
    converted: list[int] = []

    def counting(items: Any, start: int) -> Any:
        converted.append(len(items))
        return core.unnumbered(items, start)

    intake = core.Intake(counting)
    history = [m for i in range(50) for m in turn(i)]
    with Session(MemoryFolder(), settings=ROOMY) as s:
        intake.prepare(s, history, None, None)
        intake.prepare(s, [*history, *turn(50)], None, None)
    assert converted == [150, 4]  # the last message again (a run of items may have grown), then the new ones


def test_an_edited_history_is_refused_every_time_not_taken_as_seen() -> None:
    intake = core.Intake()
    history = [*turn(0), *turn(1)]
    with Session(MemoryFolder(), settings=ROOMY) as s:
        intake.prepare(s, history, None, None)
        edited = [{"role": "user", "content": "something else"}, *history[1:]]
        for _ in range(2):
            with pytest.raises(MessageError, match="edited"):
                intake.prepare(s, [*edited, *turn(2)], None, None)
        intake.prepare(s, [*history, *turn(2)], None, None)  # the history as it was goes on
        assert len(s.messages) == 9


def test_a_session_changed_elsewhere_makes_the_intake_take_the_history_whole() -> None:
    intake = core.Intake()
    history = turn(0)
    with Session(MemoryFolder(), settings=ROOMY) as s:
        intake.prepare(s, history, None, None)
        s.add({"role": "user", "content": "added by hand"})
        # The history lacks what was added by hand after what it holds: judged whole, it is a new host run.
        with pytest.raises(MessageError):
            intake.prepare(s, [*history, *turn(1)], None, None)


def test_a_run_of_responses_items_joined_by_the_next_call_is_judged_whole() -> None:
    intake = core.Intake()
    ask = {"role": "user", "content": "go"}
    thought = {"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "hm"}]}
    call = {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}
    with Session(MemoryFolder(), settings=ROOMY) as mine, Session(MemoryFolder(), settings=ROOMY) as whole:
        for history in ([ask, thought], [ask, thought, call]):
            intake.prepare(mine, history, None, None)
            whole.sync(history)
        # The reasoning item and the call make one assistant message, not the one held: the session judges the
        # history whole (a new host run), as it judges it for `Session.sync`, never adding the call alone.
        assert [m.id for m in mine.messages] == [m.id for m in whole.messages]
        assert len(mine.messages) == 4


def test_a_misspelt_setting_fails_where_the_adapter_is_made(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="'windw' is no setting"):
        core.SessionSource(tmp_path, {"windw": 16_000})
    with pytest.raises(ValueError, match="language"):
        core.SessionSource(tmp_path, {"window": 16_000, "language": "klingon"})
    source = core.SessionSource(tmp_path, {"window": 16_000, "recent_n": 4})  # nothing opened yet
    assert source.opened is None
    assert source.session().settings.offload.recent_n == 4
    source.close()


def test_the_keywords_of_session_open_reach_it_through_an_adapter(tmp_path: Path) -> None:
    # durability and store are Session.open's own keywords, not settings: an adapter given them must open
    # the session with them, not refuse them as unknown settings.
    source = core.SessionSource(tmp_path, {"window": 16_000, "durability": "batch", "background": False})
    session = source.session()
    assert session.store.durability.mode == "batch"
    source.close()
    with pytest.raises(ValueError, match="durability must be one of"):
        core.SessionSource(tmp_path, {"durability": "sometimes"})
