"""What a host hands over becomes Messages with content-derived ids, and `Session.sync` adds only what is new."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageToolCall
from openai.types.chat.chat_completion_message_tool_call import Function

from ctxkeep import (
    CompactSettings,
    EngineSettings,
    Message,
    MessageError,
    OffloadSettings,
    Session,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    to_anthropic,
    to_messages,
    to_openai,
)

NOW = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
SMALL = EngineSettings(
    compact=CompactSettings(max_input_length=2_000, compact_ratio=0.7, reserve_ratio=0.2),
    offload=OffloadSettings(recent_n=2, recent_max_bytes=1_500, old_max_bytes=300),
)


def chat_turn(i: int, size: int = 40) -> list[dict[str, Any]]:
    """One OpenAI chat turn: a request, a call, its result, and an answer."""
    call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": f'{{"cmd": "ls {i}"}}'}}
    return [
        {"role": "user", "content": f"request {i}: " + "word " * size},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "out\n" * size},
        {"role": "assistant", "content": f"step {i} done"},
    ]


def history(turns: range) -> list[dict[str, Any]]:
    return [m for i in turns for m in chat_turn(i)]


# --- each input kind ------------------------------------------------------------------------------


def test_openai_chat_dicts() -> None:
    msgs = to_messages(chat_turn(0))
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    call = msgs[1].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("c0", "bash", '{"cmd": "ls 0"}')
    assert isinstance(msgs[2].content[0], ToolResult) and msgs[2].content[0].call_id == "c0"
    assert to_openai(msgs) == chat_turn(0)


def test_an_openai_sdk_message_object() -> None:
    call = ChatCompletionMessageToolCall(
        id="call_1", type="function", function=Function(name="bash", arguments='{"cmd": "ls"}')
    )
    reply = ChatCompletionMessage(role="assistant", content="looking", tool_calls=[call], annotations=[])
    (msg,) = to_messages(reply)
    assert msg.role == "assistant" and msg.text == "looking"
    assert [(c.id, c.name, c.arguments) for c in msg.tool_calls] == [("call_1", "bash", '{"cmd": "ls"}')]
    # Nothing the response carried that a request would refuse or repeat as null goes back out.
    (out,) = to_openai([msg])
    assert out == {"role": "assistant", "content": "looking", "tool_calls": [call.model_dump(exclude_none=True)]}


def test_the_session_takes_the_sdk_object_in_a_loop(tmp_path: Path) -> None:
    call = ChatCompletionMessageToolCall(id="call_1", type="function", function=Function(name="ls", arguments="{}"))
    reply = ChatCompletionMessage(role="assistant", content=None, tool_calls=[call])
    with Session.open(tmp_path) as s:
        s.add({"role": "user", "content": "list it"})
        s.add(reply)
        s.add({"role": "tool", "tool_call_id": "call_1", "content": "a b"})
        assert [m.role for m in s.messages] == ["user", "assistant", "tool"]
        assert s.sync([{"role": "user", "content": "list it"}, reply, s.messages[2]]) == []


def test_anthropic_message_dicts() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "what is here?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "look", "signature": "sig"},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b"},
                {"type": "text", "text": "and?"},
            ],
        },
    ]
    msgs = to_messages(items)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "user"]
    assert isinstance(msgs[1].content[0], ThinkingBlock)
    assert msgs[1].tool_calls[0].input() == {"path": "."}
    assert len({m.id for m in msgs}) == 4
    # The pieces of one message go back together, and only they.
    assert to_anthropic(msgs)[1][1:] == items[1:]


def test_an_anthropic_response_object_loses_its_response_fields() -> None:
    response = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    msgs = to_messages([response])
    assert to_anthropic(msgs)[1] == [{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]
    # The source's own id takes part in the key: the same text under another id is another message.
    assert to_messages([{**response, "id": "msg_2"}])[0].id != msgs[0].id


def test_a_dict_holding_the_anthropic_sdks_blocks(tmp_path: Path) -> None:
    """The usual anthropic loop: `{"role": "assistant", "content": reply.content}`, SDK block objects inside."""
    from anthropic.types import TextBlock, ToolUseBlock

    blocks = [
        TextBlock(type="text", text="Reading it."),
        ToolUseBlock(type="tool_use", id="toolu_1", name="read", input={"path": "a.py"}),
    ]
    history = [
        {"role": "user", "content": "fix a.py"},
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1"}]},
    ]
    plain = [{**history[1], "content": [b.model_dump(exclude_none=True) for b in blocks]}]
    assert [m.id for m in to_messages(history[1:2])] == [m.id for m in to_messages(plain)]
    with Session.open(tmp_path / "ws") as session:
        assert len(session.sync(history)) == 3
        assert session.sync(history) == []
        assert session.messages[1].tool_calls[0].name == "read"


def test_responses_api_items(tmp_path: Path) -> None:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "two files"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "both"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "cat", "arguments": '{"f": "a"}'},
        {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "cat", "arguments": '{"f": "b"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "A"},
        {"type": "function_call_output", "call_id": "call_b", "output": "B"},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "A and B"}],
        },
    ]
    msgs = to_messages(items)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c.id for c in msgs[1].tool_calls] == ["call_a", "call_b"]  # parallel calls: one turn
    assert msgs[1].content[0] == ThinkingBlock(text="both")
    assert [b.content for m in msgs[2:4] for b in m.content if isinstance(b, ToolResult)] == ["A", "B"]
    with Session.open(tmp_path) as s:
        assert s.sync(items) == msgs  # the pairing is one the live context accepts
        assert s.sync(items) == []


def test_a_ctxkeep_message_keeps_its_id_among_dicts() -> None:
    own = Message.of("user", "mine", id="m-1")
    msgs = to_messages([own, {"role": "assistant", "content": "yours"}])
    assert msgs[0] is own and msgs[1].id != "m-1"


@pytest.mark.parametrize(
    ("items", "at", "says"),
    [
        ([{"role": "user", "content": "hi"}, "hello"], 1, "got str"),
        ([{"role": "user", "content": "hi"}, {"content": "no role"}], 1, "needs a 'role'"),
        ([{"type": "web_search_call", "id": "ws_1"}], 0, "unknown item type 'web_search_call'"),
        ([{"role": "robot", "content": "beep"}], 0, "unknown role 'robot'"),
        ([{"role": "tool", "content": "no call id"}], 0, "tool_call_id"),
        ([{"role": "user"}], 0, "needs 'content'"),
    ],
)
def test_anything_else_is_refused_naming_its_position(items: list[Any], at: int, says: str) -> None:
    with pytest.raises(MessageError, match=f"item {at}") as err:
        to_messages(items)
    assert says in str(err.value) and err.value.index == at


def test_a_lone_string_is_refused(tmp_path: Path) -> None:
    with Session.open(tmp_path) as s, pytest.raises(MessageError, match="got str"):
        s.add("hello")


# --- ids ----------------------------------------------------------------------------------------------


def test_ids_are_stable_across_conversions_and_follow_content_not_position() -> None:
    items = history(range(3))
    first, again = to_messages(items), to_messages(json.loads(json.dumps(items)))
    assert [m.id for m in first] == [m.id for m in again]
    assert len({m.id for m in first}) == len(first)
    # The same message at another position keeps its id.
    shifted = to_messages([{"role": "user", "content": "before"}, *items])
    assert [m.id for m in shifted[1:]] == [m.id for m in first]


def test_identical_messages_get_different_ids_in_turn() -> None:
    ok = {"role": "user", "content": "ok"}
    a, b = to_messages([ok, {"role": "assistant", "content": "fine"}, ok])[::2]
    assert a.text == b.text == "ok" and a.id != b.id
    # The same again, converted as a history of one: the first "ok" has the first id.
    assert to_messages([ok])[0].id == a.id


def test_adding_per_turn_gives_the_ids_the_whole_history_gets(tmp_path: Path) -> None:
    turns = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "fine"}] * 3
    with Session.open(tmp_path) as s:
        for item in turns:
            s.add(item)  # the second "ok" is not refused as a duplicate: it takes the next id
        assert [m.id for m in s.messages] == [m.id for m in to_messages(turns)]
        assert s.sync(turns) == []


# --- sync ---------------------------------------------------------------------------------------------


def live_log(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((path / "live").iterdir()))


def test_syncing_twice_changes_nothing(tmp_path: Path) -> None:
    with Session.open(tmp_path) as s:
        added = s.sync(history(range(2)))
        assert [m.id for m in added] == [m.id for m in to_messages(history(range(2)))]
        before = live_log(tmp_path)
        assert s.sync(history(range(2))) == []
        assert list(s.messages) == added and live_log(tmp_path) == before


def test_syncing_after_reopening_changes_nothing(tmp_path: Path) -> None:
    with Session.open(tmp_path) as s:
        s.sync(history(range(2)))
        held = s.messages
    before = live_log(tmp_path)
    with Session.open(tmp_path) as s:
        assert s.sync(history(range(2))) == []
        assert s.messages == held
    assert live_log(tmp_path) == before


def test_syncing_new_messages_appends_exactly_them(tmp_path: Path) -> None:
    with Session.open(tmp_path) as s:
        s.sync(history(range(1)))
        added = s.sync(history(range(3)))
        assert added == to_messages(history(range(3)))[4:]
        assert len(s.messages) == 12


def test_archived_messages_are_recognised_after_a_compaction_and_a_restart(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SMALL) as s:
        for i in range(6):
            s.sync(history(range(i + 1)))
            if i == 3:
                s.compact(now=NOW)
        assert s.live.archived  # some of the history is only in dialog/ now
        held = s.messages
    with Session.open(tmp_path, settings=SMALL) as s:
        assert s.sync(history(range(6))) == []
        added = s.sync(history(range(7)))
        assert added == to_messages(history(range(7)))[24:]
        assert s.messages == held + tuple(added)


def test_the_compacted_view_plus_new_messages(tmp_path: Path) -> None:
    ok = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "fine"}]
    with Session.open(tmp_path, settings=SMALL) as s:
        s.sync(ok + history(range(3)))
        step = s.compact(system="be brief", now=NOW)
        assert step.compaction is not None and s.live.archived
        view = to_openai(step.context.as_messages())
        assert view[0] == {"role": "system", "content": "be brief"}
        assert view[1]["content"].startswith("<context-summary>")
        assert s.sync(view) == []  # the view alone is what the session holds
        # New messages after the view, one of them the same text as an archived one.
        new = [*ok, *chat_turn(9)]
        added = s.sync(view + new)
        assert [m.text for m in added] == [m.text for m in to_messages(new)]
        assert not {m.id for m in added} & (s.live.archived | {m.id for m in step.live.messages})
        # The host's whole history, later, gives the same ids: nothing is new.
        assert s.sync(ok + history(range(3)) + new) == []
        # The ctxkeep messages themselves, as returned, are skipped too.
        assert s.sync([*step.context.as_messages(), *added]) == []


def test_a_diverged_history_is_refused(tmp_path: Path) -> None:
    items = history(range(2))
    with Session.open(tmp_path) as s:
        s.sync(items)
        before = live_log(tmp_path)
        edited = [dict(m) for m in items]
        edited[3]["content"] = "step 0 done, and something else"
        with pytest.raises(MessageError, match=r"history item 3 .* differs from the session's live message 3"):
            s.sync([*edited, {"role": "user", "content": "next"}])
        with pytest.raises(MessageError, match="ends before the session's live message 4"):
            s.sync(items[:4])
        assert live_log(tmp_path) == before and len(s.messages) == 8


def test_an_edited_archived_message_is_refused(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SMALL) as s:
        s.sync(history(range(3)))
        s.compact(now=NOW)
        edited = history(range(3))
        edited[0] = {"role": "user", "content": "request 0, reworded"}
        with pytest.raises(MessageError, match=r"history item 0 .* not one the session holds") as err:
            s.sync([*edited, {"role": "user", "content": "next"}])
        assert err.value.index == 0
        assert "reworded" not in str(err.value)  # the error names the message, never quotes it


def test_sync_takes_a_list_not_one_message(tmp_path: Path) -> None:
    with Session.open(tmp_path) as s, pytest.raises(MessageError, match="got dict"):
        s.sync({"role": "user", "content": "hi"})


def test_a_message_of_the_session_is_not_added_twice(tmp_path: Path) -> None:
    mine = [Message.of("user", "hi", id="u1"), Message(role="assistant", content=(TextBlock(text="yo"),), id="a1")]
    with Session.open(tmp_path) as s:
        assert s.sync(mine) == mine
        assert s.sync([*mine, Message.of("user", "more", id="u2")]) == [Message.of("user", "more", id="u2")]


def test_offloaded_results_in_the_view_are_still_recognised(tmp_path: Path) -> None:
    items = [m for i in range(4) for m in chat_turn(i, size=200)]
    roomy = EngineSettings(
        compact=CompactSettings(max_input_length=50_000),
        offload=OffloadSettings(recent_n=1, recent_max_bytes=1_500, old_max_bytes=300, age_batch_bytes=0),
    )
    with Session.open(tmp_path, settings=roomy) as s:
        s.sync(items)
        step = s.prepare("be brief", now=NOW)
        view = to_openai(step.context.as_messages())
        assert next(m for m in view if m["role"] == "tool")["content"] != items[2]["content"]  # offloaded
        new = {"role": "user", "content": "and now?"}
        assert [m.text for m in s.sync([*view, new])] == ["and now?"]
        assert s.sync([*items, new]) == []


# --- summaries: ctxkeep's own by identity, any other kept ---------------------------------------------


def test_a_summary_from_another_workspace_is_kept_when_resuming(tmp_path: Path) -> None:
    """The compacted view of one workspace (what context.json holds) synced into a new one: the summary is
    the only account of what came before, so it is kept as the user message it is."""
    with Session.open(tmp_path / "old", settings=SMALL) as s:
        s.sync(history(range(3)))
        view = to_openai(s.compact(system="be brief", now=NOW).context.as_messages())
    assert view[1]["content"].startswith("<context-summary>\n")
    with Session.open(tmp_path / "new", settings=SMALL) as s:
        added = s.sync([*view, {"role": "user", "content": "go on"}])
        assert view[1]["content"] in [m.text for m in added]
        assert [m.text for m in s.messages][:2] == ["be brief", view[1]["content"]]
        assert s.sync([*view, {"role": "user", "content": "go on"}]) == []  # and recognised the next time
        # Its own summary, once it has one, is still left out of what it holds.
        step = s.compact(system="be brief", now=NOW)
        own = to_openai(step.context.as_messages())
        assert s.sync([*own, {"role": "user", "content": "more"}])[0].text == "more"


def test_the_summary_of_a_ctxkeep_in_front_is_kept(tmp_path: Path) -> None:
    """One ctxkeep behind another: what the front one sends starts with its summary, a user message here."""
    summary = "<context-summary>\n## Goal\nfix the retry limit\n</context-summary>"
    front = [{"role": "user", "content": summary}, *chat_turn(1)]
    with Session.open(tmp_path) as s:
        assert s.sync(front)[0].text == summary
        assert s.live.summary is None and s.messages[0].text == summary
        assert s.sync(front) == []


def test_an_older_summary_of_the_session_before_what_it_holds_is_refused_saying_what_to_sync(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SMALL) as s:
        s.sync(history(range(3)))
        old = to_openai(s.compact(system="be brief", now=NOW).context.as_messages())
        s.sync([*old, *chat_turn(5)])
        s.compact(system="be brief", now=NOW)
        with pytest.raises(MessageError, match="is a context summary, but not the one the session holds now"):
            s.sync([*old, *chat_turn(5), {"role": "user", "content": "next"}])


# --- a new host run on an old workspace ----------------------------------------------------------------


def test_a_new_host_run_goes_on_after_the_live_context(tmp_path: Path) -> None:
    """A host that never saved its history starts over with the same request: the session, which compacted
    its first run, appends the new run after what it holds, and follows the new run from then on."""
    with Session.open(tmp_path, settings=SMALL) as s:
        s.sync(history(range(3)))
        assert s.compact(now=NOW).compaction is not None
        first_live = list(s.messages)
    run = [chat_turn(0)[0]]  # the same first request, archived in the first run
    with Session.open(tmp_path, settings=SMALL) as s:
        assert [m.text for m in s.sync(run)] == [run[0]["content"]]
        for i in (7, 8):
            turn = [dict(m, content=f"run 2, {i}") if m["role"] == "user" else m for m in chat_turn(i)]
            run += turn
            assert [m.text for m in s.sync(run)] == [m.text for m in to_messages(turn)]
            assert s.sync(run) == []
        assert list(s.messages)[: len(first_live)] == first_live
        assert s.summary is not None and len(s.messages) == len(first_live) + len(run)
    with Session.open(tmp_path, settings=SMALL) as s:  # and after a restart of the second run
        assert s.sync(run) == []


def test_a_host_run_sharing_nothing_is_appended(tmp_path: Path) -> None:
    with Session.open(tmp_path) as s:
        s.sync(history(range(2)))
        other = chat_turn(5)
        assert len(s.sync(other)) == 4 and len(s.messages) == 12
        assert s.sync(other) == []


def test_a_history_that_partly_overlaps_is_refused_in_one_line(tmp_path: Path) -> None:
    items = history(range(2))
    with Session.open(tmp_path) as s:
        s.sync(items)
        for bad in ([*items[:2], *chat_turn(5)], items[2:5], items[:6]):
            with pytest.raises(MessageError) as caught:
                s.sync(bad)
            assert "\n" not in str(caught.value) and "sync the history as it was" in str(caught.value)
        assert len(s.messages) == 8


def test_an_old_history_cut_before_the_live_context_is_refused_not_taken_for_a_new_run(tmp_path: Path) -> None:
    """A history holding the model's earlier answers is an old one (a client rewinding, an edit), not a host
    that kept nothing: refused even when all it shares with the session was archived."""
    items = history(range(3))
    with Session.open(tmp_path, settings=SMALL) as s:
        s.sync(items)
        s.compact(now=NOW)
        live = {m.id for m in s.messages}
        assert not any(m.id in live for m in to_messages(items[:2]))  # both archived
        with pytest.raises(MessageError, match="sync the history as it was"):
            s.sync([*items[:1], {"role": "assistant", "content": "step 0 done"}, {"role": "user", "content": "x"}])
        with pytest.raises(MessageError, match="sync the history as it was"):
            s.sync([{"role": "user", "content": "new"}, items[0]])  # a request it holds after a new one
