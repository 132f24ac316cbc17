"""What a fresh `ctxkeep` process imports for `--help` and `inspect`: only what the command needs.

Behaviour, not timing (bench/bench_startup.py prints the figures): each test runs a new interpreter
and looks at `sys.modules`, or checks that the lazily built parts give what the eager ones would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxkeep import formats
from ctxkeep.cli import COMMANDS, _command, _parser

ROOT = Path(__file__).resolve().parents[1]
CLAUDE_CODE = ROOT / "examples" / "claude_code_session.jsonl"


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    # the list is taken before `json` is imported to print it
    script = code + "\nimport sys\nloaded = sorted(sys.modules)\nimport json\nsys.stderr.write(json.dumps(loaded))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def _run_cli(*args: str) -> str:
    return f"import sys\nfrom ctxkeep.cli import main\ntry:\n    main({list(args)!r})\nexcept SystemExit:\n    pass"


def test_help_imports_only_argparse() -> None:
    loaded = _modules_after(_run_cli("--help"))
    assert "argparse" in loaded
    heavy = ("typing", "shutil", "json", "datetime", "dataclasses", "ctxkeep.errors", "ctxkeep.memory", "orjson")
    heavy += ("pydantic", "numpy", "httpx", "regex", "toktok", "ctxkeep.formats", "ctxkeep.summarize", "ctxkeep.tokens")
    assert sorted(m for m in loaded if m.startswith(heavy)) == []


def test_import_ctxkeep_imports_nothing_but_its_root() -> None:
    loaded = _modules_after("import ctxkeep")
    assert sorted(m for m in loaded if m.startswith(("ctxkeep.", "typing"))) == []


def test_a_usage_error_imports_no_command() -> None:
    loaded = _modules_after(_run_cli("inspect"))  # FILE missing
    assert sorted(m for m in loaded if m.startswith(("ctxkeep.formats", "ctxkeep.tokens", "ctxkeep.memory"))) == []


def test_detection_imports_importers_only_up_to_the_one_it_picks() -> None:
    loaded = _modules_after(_run_cli("inspect", str(CLAUDE_CODE)))
    importers = {m.split(".")[2] for m in loaded if m.startswith("ctxkeep.formats.") and m.count(".") >= 2}
    # native is sniffed first, claude_code recognises the file; no other importer is imported.
    assert importers - {"source"} == {"native", "claude_code"}
    # counted by the lazy BPE, split with `re`: neither `regex` nor toktok's vocabulary
    assert "ctxkeep.tokens.lazybpe" in loaded and "regex" not in loaded


def test_a_given_format_imports_only_its_importer(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]))
    loaded = _modules_after(_run_cli("inspect", str(path), "--format", "openai"))
    importers = {m.split(".")[2] for m in loaded if m.startswith("ctxkeep.formats.") and m.count(".") >= 2}
    assert importers - {"source", "chat"} == {"openai"}


def test_the_importer_table_names_every_importer_in_detection_order() -> None:
    # The table stands in for importing them all: each entry's module must carry that NAME.
    for name, module in formats._IMPORTERS.items():
        assert name == formats._importer(name).NAME, module
    assert formats.format_names()[0] == "ctxkeep" and formats.format_names()[-1] == "openai"


def test_unknown_format_still_lists_every_name(tmp_path: Path) -> None:
    path = tmp_path / "odd.json"
    path.write_text('{"neither": "a transcript"}')
    with pytest.raises(formats.UnknownFormatError, match=r"claude_code.*openai"):
        formats.load(path)
    with pytest.raises(formats.FormatError, match="unknown format 'nope'; choose one of ctxkeep, claude_code"):
        formats.load(path, format="nope")


def _shape(parser: object) -> object:
    """What a parser accepts: every option, positional and subcommand, recursively, with help and defaults."""
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    shape = []
    for action in parser._actions:
        entry: list[object] = [
            type(action).__name__,
            action.option_strings,
            action.dest,
            action.help,
            action.default,
            action.required,
        ]
        if isinstance(action, argparse._SubParsersAction):
            entry.append([(c.dest, c.help) for c in action._choices_actions])
            entry.append({name: _shape(sub) for name, sub in action.choices.items()})
        elif action.choices is not None:
            entry.append(list(action.choices))
        shape.append(entry)
    return shape


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_lazy_parser_gives_a_command_what_the_full_one_does(command: str) -> None:
    full = _shape(_parser())
    lazy = _shape(_parser([command]))
    assert isinstance(full, list) and isinstance(lazy, list)
    # The same top-level options and the same list of commands with the same help lines...
    assert [e[:6] for e in lazy] == [e[:6] for e in full]
    (full_sub,) = (e for e in full if e[0] == "_SubParsersAction")
    (lazy_sub,) = (e for e in lazy if e[0] == "_SubParsersAction")
    assert lazy_sub[6] == full_sub[6]
    # ...and the command being run has every option of the full parser's.
    assert lazy_sub[7][command] == full_sub[7][command]


def test_the_command_is_the_first_word_that_is_not_an_option() -> None:
    assert _command(["inspect", "f.json", "--json"]) == "inspect"
    assert _command(["--version"]) is None
    assert _command(["-h", "memory", "search", "q"]) == "memory"
    assert _command([]) is None


def test_help_lists_every_command_with_its_help_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ctxkeep.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    for name, help in COMMANDS.items():
        assert f"    {name}" in out and help in out, name


@pytest.mark.parametrize("columns", ["73", "0", "wide", None])
def test_help_is_as_wide_as_shutil_would_make_it(columns: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from ctxkeep.cli import _columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _columns() == shutil.get_terminal_size().columns
