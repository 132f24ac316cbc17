"""Command outputs the user ran (pi's ``!command``, Codex's user shell command, Claude Code's ``!`` in
``<bash-stdout>``) are offloaded like tool results; what the user typed is never cut."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import raw_params

from ctxkeep.folder import MemoryFolder
from ctxkeep.formats import claude_code, codex, load, pi
from ctxkeep.formats.source import Source
from ctxkeep.messages import Message
from ctxkeep.offload import OFFLOAD_KEY, is_output, offload, record_in, saved_texts
from ctxkeep.origin import origin
from ctxkeep.pairing import repair
from ctxkeep.replay import split_system, turns
from ctxkeep.retention import referenced_files
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.tokens import get_counter
from ctxkeep.workspace.records import offloaded

TS = "2026-01-02T03:04:05.678Z"
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
# `find .` in a repository: what a user pastes with ``!`` and then asks about.
LISTING = "".join(f"./packages/pkg{i // 100}/src/module_{i:05d}.ts\n" for i in range(1_500))
ASK = "Which of these packages has no tests? " + "Look closely at every path listed. " * 900
SETTINGS = OffloadSettings(recent_n=1, recent_max_bytes=4_000, old_max_bytes=600)


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(r) for r in records) + "\n").encode()


def pi_messages() -> list[Message]:
    """pi: a ``bashExecution`` entry (what ``!find .`` writes) after a typed message."""
    header = {"type": "session", "version": 3, "id": "s1", "timestamp": TS, "cwd": "/w"}

    def entry(i: int, message: dict[str, Any]) -> dict[str, Any]:
        parent = f"e{i - 1}" if i else None
        return {"type": "message", "id": f"e{i}", "parentId": parent, "timestamp": TS, "message": message}

    bash = {
        "role": "bashExecution",
        "command": "find .",
        "output": LISTING,
        "exitCode": 0,
        "cancelled": False,
        "truncated": False,
        "timestamp": 1765238302057,
    }
    records = [header, entry(0, bash), entry(1, {"role": "user", "content": [{"type": "text", "text": ASK}]})]
    source = Source.from_bytes(_jsonl(records), path="session.jsonl")
    return list(pi.parse(source)[0].messages)


def codex_messages() -> list[Message]:
    """Codex: the user message a user shell command records (``<user_shell_command>`` with its result)."""
    shell = (
        "<user_shell_command>\n<command>\nfind .\n</command>\n<result>\nExit code: 0\nDuration: 0.0312 seconds\n"
        f"Output:\n{LISTING}</result>\n</user_shell_command>"
    )

    def user(text: str) -> dict[str, Any]:
        payload = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        return {"timestamp": TS, "type": "response_item", "payload": payload}

    meta = {"timestamp": TS, "type": "session_meta", "payload": {"id": "s1", "cwd": "/w", "cli_version": "0.125.0"}}
    source = Source.from_bytes(_jsonl([meta, user(shell), user(ASK)]), path="rollout.jsonl")
    return list(codex.parse(source)[0].messages)


def claude_code_messages() -> list[Message]:
    """Claude Code: ``!find .`` is a ``<bash-input>`` user entry, then its ``<bash-stdout>``/``<bash-stderr>``."""
    texts = [
        "<bash-input>find .</bash-input>",
        f"<bash-stdout>{LISTING}</bash-stdout><bash-stderr></bash-stderr>",
        ASK,
    ]
    records = [
        {
            "parentUuid": f"u{i - 1}" if i else None,
            "isSidechain": False,
            "type": "user",
            "uuid": f"u{i}",
            "sessionId": "s1",
            "timestamp": TS,
            "message": {"role": "user", "content": text},
        }
        for i, text in enumerate(texts)
    ]
    source = Source.from_bytes(_jsonl(records), path="session.jsonl")
    return list(claude_code.parse(source)[0].messages)


FORMATS: dict[str, Callable[[], list[Message]]] = {
    "pi": pi_messages,
    "codex": codex_messages,
    "claude_code": claude_code_messages,
}


def split(messages: list[Message]) -> tuple[Message, Message]:
    """The big command output and the typed message of an imported sample."""
    output = next(m for m in messages if LISTING[:200] in m.text)
    typed = next(m for m in messages if m.text == ASK)
    return output, typed


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_command_output_is_cut_and_saved_a_typed_message_is_not(fmt: str) -> None:
    messages = FORMATS[fmt]()
    output, typed = split(messages)
    assert origin(output) == "command_output" and is_output(output)
    assert origin(typed) == "typed" and not is_output(typed)
    full = output.text
    folder = MemoryFolder()
    out = offload(messages, SETTINGS, folder)
    cut = out[messages.index(output)]
    assert out[messages.index(typed)] is typed  # as long as it is, typed text is never cut
    record = record_in(cut)
    assert record is not None and record.stage == "recent" and record.original_bytes == len(full.encode())
    assert folder.read(record.file) == full.encode()
    assert len(cut.text.encode()) <= SETTINGS.recent_max_bytes
    assert cut.text.startswith(full[: record.kept_bytes]) and "[ctxkeep: output truncated" in cut.text
    assert f"the full output is in {folder.location(record.file)}" in cut.text
    assert origin(cut) == "command_output"  # the cut copy is still told apart from typed text
    assert {k: v for k, v in cut.extra.items() if k != OFFLOAD_KEY} == dict(output.extra)
    assert referenced_files([cut]) == {record.file}
    assert offloaded([cut]) == [
        {
            "id": cut.id,
            "call_id": "",
            "tool": "",
            "file": record.file,
            "stage": "recent",
            "original_bytes": record.original_bytes,
            "kept_bytes": record.kept_bytes,
        }
    ]
    assert saved_texts([(output, cut)]) == {record.file: full.encode()}
    assert offload(out, SETTINGS, folder) == out  # idempotent


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_command_output_ages_with_the_results_and_keeps_its_file(fmt: str) -> None:
    messages = FORMATS[fmt]()
    output, _ = split(messages)
    folder = MemoryFolder()
    first = offload(messages, SETTINGS, folder)
    later = [*first, Message.of("user", "$ ls\nREADME.md", id="ls", extra={"pi:role": "bashExecution"})]
    aged = offload(later, SETTINGS, folder)[messages.index(output)]  # a newer output makes it old
    recent, old = record_in(first[messages.index(output)]), record_in(aged)
    assert recent is not None and old is not None
    assert old.stage == "old" and old.file == recent.file and old.kept_bytes < recent.kept_bytes
    assert len(aged.text.encode()) <= SETTINGS.old_max_bytes
    assert folder.read(old.file) == output.text.encode()


def test_a_head_cut_away_entirely_still_marks_a_command_output() -> None:
    messages = claude_code_messages()
    output, _ = split(messages)
    tiny = OffloadSettings(recent_n=1, recent_max_bytes=100, old_max_bytes=100)
    cut = offload([output], tiny, MemoryFolder())[0]
    record = record_in(cut)
    assert record is not None and record.kept_bytes == 0 and cut.text.startswith("[ctxkeep: output offloaded")
    assert origin(cut) == "command_output"


def test_a_pi_command_that_failed_says_to_read_its_end() -> None:
    failing = Message.of("user", "$ make\n" + LISTING + "(exit code 2)", extra={"pi:role": "bashExecution"})
    ok = offload([failing], SETTINGS, MemoryFolder())[0]
    assert "read its last lines too" not in ok.text
    failed = Message.of("user", failing.text, id=failing.id, extra={"pi:role": "bashExecution", "pi:exitCode": 2})
    assert "read its last lines too" in offload([failed], SETTINGS, MemoryFolder())[0].text


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_session_offloads_it_and_reads_it_back(tmp_path: Path, fmt: str) -> None:
    messages = FORMATS[fmt]()
    output, typed = split(messages)
    settings = EngineSettings(offload=SETTINGS)
    with Session.open(tmp_path, settings=settings) as s:
        s.add(messages)
        s.prepare("sys")
        live = {m.id: m for m in s.messages}
    record = record_in(live[output.id])
    assert record is not None
    assert (tmp_path / record.file).read_text() == output.text
    assert live[typed.id] == typed
    with Session.open(tmp_path, settings=settings) as s:
        assert {m.id: m for m in s.messages} == live
        s.prepare("sys")
        assert {m.id: m for m in s.messages} == live  # the newest output: no second cut while recent


def test_an_original_a_power_loss_cut_short_is_rewritten_from_the_live_log(tmp_path: Path) -> None:
    script = f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
        from tests.test_command_outputs import SETTINGS, pi_messages
        from ctxkeep.messages import Message
        from ctxkeep.session import Session
        from ctxkeep.settings import EngineSettings
        s = Session.open({str(tmp_path)!r}, settings=EngineSettings(offload=SETTINGS))
        s.add(pi_messages())
        s.prepare("sys")
        s.add([Message.of("assistant", "looking", id="a1")])  # writes the offload of the step before
        os._exit(0)
    """
    root = Path(__file__).parent.parent  # this checkout's ctxkeep, whatever the environment installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True, env=env, timeout=120)
    log = (tmp_path / "live" / "00000000.jsonl").read_bytes()
    assert b"ctxkeep-replace/1" in log
    output, _ = split(pi_messages())
    with Session.open(tmp_path, settings=EngineSettings(offload=SETTINGS)) as s:
        record = record_in(next(m for m in s.messages if m.id == output.id))
    assert record is not None
    original = tmp_path / record.file
    assert original.read_text() == output.text
    original.write_text(output.text[:100])  # what a power loss can leave of a file written without fsync
    (tmp_path / "live" / "00000000.jsonl").write_bytes(log)
    with Session.open(tmp_path, settings=EngineSettings(offload=SETTINGS)):
        pass
    assert original.read_text() == output.text


@pytest.mark.parametrize("path", raw_params("pi"))
def test_a_pasted_find_no_longer_holds_a_real_pi_session_over_its_threshold(path: Path) -> None:
    """The shared pi session pastes a 51,000-character ``find .``: kept whole, a compaction at a 32,000-token
    window left 28,135 tokens (over the 22,400 threshold) and squeezed the summary to 2,147 characters."""
    settings = EngineSettings.for_window(32_000)
    threshold = settings.compact.compact_threshold
    counter = get_counter("o200k_base")
    messages, _ = repair(load(path).conversations[0].messages)
    system, rest = split_system(messages)
    biggest = max((m for m in rest if m.role == "user" and is_output(m)), key=lambda m: len(m.text))
    assert len(biggest.text) > 50_000
    compactions = 0
    with Session(MemoryFolder(), settings=settings, counter=counter) as s:
        for group in turns(rest):
            s.add(group)
            step = s.prepare(system)
            assert step.context.tokens <= settings.compact.max_input_length
            if step.compaction is not None:
                compactions += 1
                assert step.compaction.tokens_after <= threshold
            live = {m.id: m for m in s.messages}
            if biggest.id in live:
                assert len(live[biggest.id].text.encode()) <= settings.offload.recent_max_bytes
    assert compactions > 0


def test_command_outputs_wait_and_age_in_the_batches_of_the_results() -> None:
    """Between batches the context only grows at its end, command outputs included; a batch ages both."""
    settings = EngineSettings(
        compact=CompactSettings(max_input_length=1_000_000),
        offload=OffloadSettings(recent_n=2, recent_max_bytes=4_000, old_max_bytes=600, age_batch_bytes=20_000),
    )
    body = "".join(f"./src/file_{k:05d}.py\n" for k in range(130))  # 2,600 bytes: cut only once old
    changed: list[int] = []
    sent: list[Message] = []
    with Session(MemoryFolder(), settings=settings) as session:
        for i in range(30):
            output = Message.of("user", f"$ find src\n{body}", id=f"o{i}", extra={"pi:role": "bashExecution"})
            session.add([Message.of("user", f"step {i}", id=f"u{i}"), output])
            session.add([Message.of("assistant", "noted", id=f"a{i}")])
            now = list(session.prepare("sys", now=NOW).context.messages)
            if now[: len(sent)] != sent:
                changed.append(i)
            sent = now
        stages = [r.stage if (r := record_in(m)) else None for m in session.messages if m.id.startswith("o")]
    # 2,011 bytes freed per output, 20,000 wanted: ten age together, once ten are past the two newest.
    assert changed == [11, 21]
    assert stages == ["old"] * 20 + [None] * 10
