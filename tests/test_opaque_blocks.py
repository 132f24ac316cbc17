"""Anthropic blocks ctxkeep does not model (a provider's ``compaction``, a type added later) go back byte for byte.

Through the format functions, through a workspace (the live log, a reopen), and through the proxy with the
anthropic SDK: the upstream receives each block exactly as the client had it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anthropic import Anthropic
from tests.proxy_harness import running_proxy
from tests.test_serve_robustness import Handler, ScriptedUpstream

from ctxkeep import Session
from ctxkeep.formats.anthropic import from_anthropic, to_anthropic
from ctxkeep.summarize import ExtractiveSummarizer, SummaryRequest
from ctxkeep.summarize.verbatim import earlier_summaries, host_summary
from ctxkeep.tokens import get_counter

COMPACTION = {
    "type": "compaction",
    "content": "Summary of the work so far: the parser of config.toml was fixed; tests pass.",
    "encrypted_content": "ZW5jcnlwdGVkLW1ldGFkYXRh",
    "signature": "c2lnbmF0dXJlLW92ZXItdGhlLXN1bW1hcnk=",
    "tool_changes": [],
    "cache_control": {"type": "ephemeral"},
}
FAILED_COMPACTION = {"type": "compaction", "content": None, "encrypted_content": "b3BhcXVl"}
UNKNOWN = {"type": "hologram_2031", "frames": [{"t": 0, "data": "AAEC"}], "meta": {"nested": [1, 2.5, None, True]}}


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "fix the config parser"},
        {"role": "assistant", "content": [COMPACTION, {"type": "text", "text": "Done, the parser is fixed."}]},
        {"role": "user", "content": [UNKNOWN, {"type": "text", "text": "and now?"}]},
        {"role": "assistant", "content": [FAILED_COMPACTION]},
        {"role": "user", "content": "go on"},
    ]


def test_from_and_to_anthropic_give_back_equal_dicts() -> None:
    messages = conversation()
    system, back = to_anthropic(from_anthropic(messages, system="be brief"))
    assert system == "be brief"
    assert json.dumps(back) == json.dumps(messages)  # key order too: byte for byte once serialised


def test_a_workspace_gives_the_blocks_back_after_a_reopen(tmp_path: Path) -> None:
    messages = conversation()
    with Session.open(tmp_path / "ws", window=100_000) as session:
        session.add(messages)
    with Session.open(tmp_path / "ws", window=100_000) as session:
        _, back = session.prepare().to_anthropic()
    assert json.dumps(back) == json.dumps([as_blocks(m) for m in messages])


def as_blocks(message: dict[str, Any]) -> dict[str, Any]:
    """`message` with string content as one text block: the form a workspace gives a plain message back in."""
    content = message["content"]
    return {**message, "content": [{"type": "text", "text": content}] if isinstance(content, str) else content}


BETA = "compact-2026-01-12"
CONTEXT_MANAGEMENT = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]}
REPLY_TEXT = {"type": "text", "text": "Continuing from the summary."}


def anthropic_answer(handler: Handler) -> None:
    """The upstream compacted: its answer opens with a compaction block, then text."""
    handler.send_json(
        200,
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "scripted",
            "content": [COMPACTION, REPLY_TEXT],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 30, "output_tokens": 8},
        },
    )


def anthropic_stream(handler: Handler) -> None:
    """The same answer as the API streams it: the compaction block's summary comes in a ``compaction_delta``."""
    start = {k: COMPACTION[k] for k in ("type", "cache_control")} | {"content": None}
    delta = {k: COMPACTION[k] for k in ("content", "encrypted_content")} | {"type": "compaction_delta"}
    rest = {k: COMPACTION[k] for k in ("signature", "tool_changes")}
    message = {"id": "msg_2", "type": "message", "role": "assistant", "model": "scripted", "content": []}
    events = [
        ("message_start", {"message": message | {"usage": {"input_tokens": 30, "output_tokens": 0}}}),
        ("content_block_start", {"index": 0, "content_block": start | rest}),
        ("content_block_delta", {"index": 0, "delta": delta}),
        ("content_block_stop", {"index": 0}),
        ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": REPLY_TEXT["text"]}}),
        ("content_block_stop", {"index": 1}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 8}}),
        ("message_stop", {}),
    ]
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    for name, data in events:
        handler.wfile.write(f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode())
    handler.wfile.flush()
    handler.close_connection = True


def test_the_proxy_passes_the_blocks_and_the_beta_through(tmp_path: Path) -> None:
    """Two conversations, one answered whole, one streamed: the provider's compaction block reaches the upstream
    again unchanged on the next turn, and so does an unknown block; `context_management` and the beta header go
    along on every request; the workspace holds the block as it was."""
    first = [{"role": "user", "content": [{"type": "text", "text": "fix the config parser"}]}]
    for name, behaviour in (("whole", anthropic_answer), ("streamed", anthropic_stream)):
        with (
            ScriptedUpstream() as up,
            running_proxy(up.base_url, tmp_path / name) as url,
            Anthropic(base_url=url, api_key="sk-test", max_retries=0) as client,
        ):
            kw: dict[str, Any] = {
                "model": "m",
                "max_tokens": 100,
                "betas": [BETA],
                "context_management": CONTEXT_MANAGEMENT,
                "extra_headers": {"x-ctxkeep-session": name},
            }
            up.plan.append(behaviour)
            if behaviour is anthropic_stream:
                with client.beta.messages.stream(messages=first, **kw) as stream:  # type: ignore[arg-type]
                    reply = stream.get_final_message()
            else:
                reply = client.beta.messages.create(messages=first, **kw)  # type: ignore[arg-type]
            assert reply.content[0].type == "compaction"
            assert reply.content[0].content == COMPACTION["content"]
            second = [
                *first,
                {"role": "assistant", "content": [COMPACTION, REPLY_TEXT]},
                {"role": "user", "content": [UNKNOWN, {"type": "text", "text": "and now?"}]},
            ]
            client.beta.messages.create(messages=second, **kw)  # type: ignore[arg-type]
        assert len(up.calls) == 2
        for headers, body in up.calls:
            assert BETA in headers["anthropic-beta"]
            assert body["context_management"] == CONTEXT_MANAGEMENT
        assert json.dumps(up.calls[1][1]["messages"]) == json.dumps(second)
        with Session.open(tmp_path / name / name / "0", window=100_000) as session:
            _, held = session.prepare().to_anthropic()
        assert json.dumps(held) == json.dumps(second)


def test_a_streamed_reply_never_carried_back_keeps_its_compaction_block(tmp_path: Path) -> None:
    """The proxy records the reassembled reply when the client does not send it back: the block with its summary."""
    first = [{"role": "user", "content": "fix the config parser"}]
    with (
        ScriptedUpstream() as up,
        running_proxy(up.base_url, tmp_path) as url,
        Anthropic(base_url=url, api_key="sk-test", max_retries=0) as client,
    ):
        up.plan.append(anthropic_stream)
        kw: dict[str, Any] = {"model": "m", "max_tokens": 100, "extra_headers": {"x-ctxkeep-session": "s"}}
        with client.messages.stream(messages=first, **kw) as stream:  # type: ignore[arg-type]
            stream.until_done()
    with Session.open(tmp_path / "s" / "0", window=100_000) as session:
        _, held = session.prepare().to_anthropic()
    assert held[-1] == {"role": "assistant", "content": [COMPACTION, REPLY_TEXT]}


def test_the_providers_summary_is_the_host_summary_a_new_one_builds_on() -> None:
    """The compaction block's readable text is merged as the host's summary; a failed compaction (no text) is not."""
    messages = from_anthropic(conversation())
    assert host_summary(messages) == COMPACTION["content"]
    assert earlier_summaries(SummaryRequest(messages=tuple(messages), previous="Older: the repo was cloned.")) == [
        "Older: the repo was cloned.",
        COMPACTION["content"],
    ]
    assert host_summary(from_anthropic(conversation()[2:])) is None


def test_the_blocks_count_in_the_window() -> None:
    """A compaction block counts its summary's tokens; an unknown block, the tokens of its JSON."""
    counter = get_counter("o200k_base")
    compaction, _, unknown = from_anthropic(conversation()[1:4])[:3]
    bare = from_anthropic([{"role": "assistant", "content": [REPLY_TEXT]}])[0]
    summary = counter.count_text(str(COMPACTION["content"]))
    assert counter.count_message(compaction) >= counter.count_message(bare) + summary
    assert counter.count_message(unknown) >= counter.count_text(json.dumps(UNKNOWN["frames"]))


# ── a conversation the provider compacted is not compacted again over the same span ─────────────────────────


def compacted_by_provider(turns_before: int, turns_after: int) -> list[dict[str, Any]]:
    """`turns_before` user/assistant turns, the assistant reply opening with the provider's compaction block
    (its summary of all of them), then `turns_after` turns."""
    words = "the parser reads the nested tables of config.toml and the tests cover each of them " * 6
    out: list[dict[str, Any]] = []
    for i in range(turns_before):
        out += [
            {"role": "user", "content": f"step {i}: {words}"},
            {"role": "assistant", "content": f"did {i}: {words}"},
        ]
    out += [
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": [COMPACTION, {"type": "text", "text": "Continuing from the summary."}]},
    ]
    for i in range(turns_after):
        out += [
            {"role": "user", "content": f"later {i}: {words}"},
            {"role": "assistant", "content": f"ok {i}: {words}"},
        ]
    return out


class Recording:
    """A summarizer that keeps each request and answers a valid summary."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        return ExtractiveSummarizer().summarize(request)


def before_the_block(history: list[dict[str, Any]]) -> set[str]:
    """The texts of the messages the provider's compaction block summarized."""
    at = next(i for i, m in enumerate(history) if isinstance(m["content"], list) and m["content"][0] is COMPACTION)
    return {m["content"] for m in history[: at - 1] if isinstance(m["content"], str)}


def test_what_the_providers_compaction_summarized_is_archived_not_summarized_again(tmp_path: Path) -> None:
    """The block is among what ctxkeep compacts: the summarizer sees the block (its text is the earlier summary
    it builds on) and what came after, never the messages before it nor a summary of those."""
    history = compacted_by_provider(turns_before=12, turns_after=12)
    summarizer = Recording()
    with Session.open(tmp_path / "ws", window=8_000, summarizer=summarizer) as session:
        session.add(history[:20])
        session.compact()  # ctxkeep's own summary of the first turns, before the provider's block
        session.add(history[20:])
        step = session.compact()
        archived = {m.text for m in session.history()[: -len(session.messages)]}
    assert step.compaction is not None and len(summarizer.requests) == 2
    request = summarizer.requests[-1]
    seen = {m.text for m in request.messages}
    assert not seen & before_the_block(history)
    assert host_summary(list(request.messages)) == COMPACTION["content"]
    assert request.previous is None  # ctxkeep's earlier summary came before the block: the provider's covers it
    assert before_the_block(history) <= archived  # archived all the same, word for word


def test_a_compaction_of_only_what_the_provider_summarized_asks_no_summarizer(tmp_path: Path) -> None:
    """The block stays live (sent back unchanged); what precedes it is archived with no summary written of it."""
    history = compacted_by_provider(turns_before=20, turns_after=1)
    summarizer = Recording()
    with Session.open(tmp_path / "ws", window=8_000, summarizer=summarizer) as session:
        session.add(history)
        step = session.compact()
        _, sent = step.to_anthropic()
    assert step.compaction is not None and step.failure is None
    assert summarizer.requests == []
    assert {
        "role": "assistant",
        "content": [COMPACTION, {"type": "text", "text": "Continuing from the summary."}],
    } in sent
    assert step.archived and {m.text for m in step.archived if m.role == "assistant"} <= before_the_block(history)
    assert not {m.text for m in step.context.messages} & before_the_block(history)  # all of them, not the oldest
    assert "the provider's own compaction" in (session.summary or "")
