"""Reading transcript files: decoding, JSON lines, errors with file and line."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxkeep.errors import FormatError
from ctxkeep.formats import load
from ctxkeep.formats.source import Source, parse_timestamp


def test_invalid_utf8_is_replaced_and_reported() -> None:
    raw = b'{"a": "ok"}\n{"a": "caf\xe9"}\n{"a": "\xff\xfe"}\n'
    src = Source.from_bytes(raw, path="t.jsonl")
    records = list(src.records())
    assert [r["a"] for _, r in records] == ["ok", "caf\ufffd", "\ufffd\ufffd"]
    assert len(src.notes) == 1 and "invalid UTF-8 on 2 line(s) (2, 3)" in src.notes[0]


def test_bad_json_line_names_file_and_line() -> None:
    src = Source.from_bytes(b'{"a": 1}\n\n{"a": \n{"a": 3}\n', path="t.jsonl")
    with pytest.raises(FormatError) as err:
        list(src.records())
    assert err.value.line == 3 and err.value.path == "t.jsonl"
    assert str(err.value).startswith("t.jsonl:3: not valid JSON")


def test_lenient_skips_and_reports() -> None:
    src = Source.from_bytes(b'{"a": 1}\nnope\n{"a": 3}\n', path="t.jsonl", lenient=True)
    assert [r["a"] for _, r in src.records()] == [1, 3]
    assert len(src.notes) == 1 and src.notes[0].startswith("skipped line 2: not valid JSON")


def test_unicode_line_separators_inside_json_strings_stay_in_their_line() -> None:
    src = Source.from_bytes('{"a": "x\u2028y\u0085z"}\n'.encode(), path="t.jsonl")
    assert [r["a"] for _, r in src.records()] == ["x\u2028y\u0085z"]


def test_bom_is_ignored_and_document_errors_have_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'\xef\xbb\xbf[\n  {"a": 1},\n  oops\n]')
    src = Source.from_path(path)
    with pytest.raises(FormatError) as err:
        src.document()
    assert err.value.line == 3


def test_missing_file_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read file"):
        Source.from_path(tmp_path / "absent.jsonl")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-08T20:53:23.483Z", datetime(2026, 1, 8, 20, 53, 23, 483000, tzinfo=UTC)),
        ("2026-01-08T21:53:23+01:00", datetime(2026, 1, 8, 20, 53, 23, tzinfo=UTC)),
        ("2026-01-08 20:53:23", datetime(2026, 1, 8, 20, 53, 23, tzinfo=UTC)),  # no zone: UTC
        (1767905603483, datetime(2026, 1, 8, 20, 53, 23, 483000, tzinfo=UTC)),  # epoch ms
        ("yesterday", None),
        (None, None),
        (True, None),
    ],
)
def test_parse_timestamp(value: object, expected: datetime | None) -> None:
    assert parse_timestamp(value) == expected


def test_native_format_odd_lines_are_format_errors(tmp_path: Path) -> None:
    good = '{"v":"ctxkeep/1","id":"a","role":"user","content":[{"type":"text","text":"hi"}]}'
    path = tmp_path / "archive.jsonl"
    path.write_text("\n".join([good, '{"v":"ctxkeep/1","id":"b","role":"user","content":["hello"]}', "[1, 2]"]))
    with pytest.raises(FormatError, match=":2: not a ctxkeep message"):
        load(path)
    transcript = load(path, lenient=True)
    assert [m.id for m in transcript.messages] == ["a"] and len(transcript.notes) == 2
