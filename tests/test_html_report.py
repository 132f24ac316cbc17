"""`ctxkeep report` and `ctxkeep show`: a workspace's steps and compactions, as one HTML page checked in a real
headless browser (Debian's chromium), and in the terminal."""

from __future__ import annotations

import json
import re
import shutil
import stat
import struct
import subprocess
import threading
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from tests.extras import need

from ctxkeep.cli import main
from ctxkeep.folder import LocalFolder
from ctxkeep.html_report import render
from ctxkeep.messages import Message, TextBlock, ToolCall, ToolResult
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.summarize import ExtractiveSummarizer, SummaryRequest
from ctxkeep.workspace.view import Limits, read

NOW = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
SETTINGS = EngineSettings(
    compact=CompactSettings(max_input_length=3_000, compact_ratio=0.7, reserve_ratio=0.2),
    offload=OffloadSettings(recent_n=2, recent_max_bytes=1_500, old_max_bytes=300),
)
# Text a transcript may well hold: markup, a script, an image that reports back, a stylesheet to fetch.
PAYLOAD = (
    "<script>document.title='pwned'</script><img src=x onerror=\"document.body.dataset.pwned='1'\">"
    "</pre></td></tr></table><b>bold?</b>"
)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


class FailsOnce:
    """The extractive summarizer, but the first summary it writes has no sections (so it is refused)."""

    def __init__(self) -> None:
        self.calls = 0
        self.inner = ExtractiveSummarizer()

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        return "no sections" if self.calls == 1 else self.inner.summarize(request)


def turn(i: int, url: str) -> list[Message]:
    call = ToolCall(id=f"c{i}", name="web_fetch", arguments=json.dumps({"url": f"{url}/page/{i}"}))
    page = f"<html><link rel=stylesheet href='{url}/style-{i}.css'><img src='{url}/pixel-{i}.png'>{PAYLOAD}\n"
    return [
        Message.of("user", f"ask {i}: {PAYLOAD} fetch {url}/page/{i} " + "please " * 20, id=f"u{i}"),
        Message(role="assistant", content=(TextBlock(text=f"fetching page {i}"), call), id=f"a{i}"),
        Message(role="tool", content=(ToolResult(call_id=f"c{i}", content=page * 30),), id=f"r{i}"),
        Message.of("assistant", f"page {i} read: {PAYLOAD}", id=f"d{i}"),
    ]


def build(path: Path, url: str, turns: int = 24) -> int:
    """A workspace where a refused summary and then compactions happened; the number of steps."""
    steps = 0
    with Session.open(path, settings=SETTINGS, summarizer=FailsOnce()) as s:
        for i in range(turns):
            t = turn(i, url)
            s.add(t[:1])
            s.prepare("be brief", now=NOW)
            steps += 1
            s.add(t[1:])
    return steps


class Counting(BaseHTTPRequestHandler):
    """Counts every request a page makes to it: a self-contained page makes none."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def watcher() -> Iterator[str]:
    Counting.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def chromium() -> str:
    """The browser that checks the report: skips without it, fails where CTXKEEP_REQUIRE_EXTRAS requires it."""
    need("browser")
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found is not None
    return found


def browse(page: Path, profile: Path, *args: str, fragment: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri() + fragment],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )


def png_pixels(data: bytes) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    """Width, height and the RGB rows of an 8-bit RGB or RGBA PNG, as Chromium writes its screenshots."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    assert depth == 8 and colour in (2, 6), f"a PNG of depth {depth}, colour type {colour}"
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        if data[pos + 4 : pos + 8] == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    raw, bpp = zlib.decompress(idat), 3 if colour == 2 else 4
    stride, rows, prev = width * bpp, [], bytearray(width * bpp)
    for r in range(height):
        kind, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1 : (r + 1) * (stride + 1)])
        for i in range(stride):  # undo the row's filter (PNG spec, section 9)
            a, b = line[i - bpp] if i >= bpp else 0, prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([(line[i], line[i + 1], line[i + 2]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def near(pixel: tuple[int, int, int], colour: str, within: int = 40) -> bool:
    """Whether `pixel` is within `within` of the CSS colour `colour` (#rrggbb) in each channel. No grey is within
    40 of the report's red, brown and blue, nor within 70 of its blue: the text's antialiasing cannot pass."""
    want = (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))
    return all(abs(p - w) <= within for p, w in zip(pixel, want, strict=True))


def whole_history(records: list[dict[str, object]]) -> tuple[list[int], list[int]]:
    """The tokens sent at each step, and the whole history's at each, from the records alone: what was sent
    plus what every compaction up to that step took out (its tokens before less after)."""
    sent: list[int] = []
    taken: dict[int, int] = {}
    for r in records:
        if r["kind"] == "steps":
            sent += r["tokens"]  # type: ignore[operator]
        elif r["kind"] == "compaction":
            step = len(sent) - 1
            taken[step] = taken.get(step, 0) + r["tokens_before"] - r["tokens_after"]  # type: ignore[operator]
    whole, running = [], 0
    for i, n in enumerate(sent):
        running += taken.get(i, 0)
        whole.append(n + running)
    return sent, whole


def test_the_report_shows_the_window_what_was_sent_and_the_savings_in_a_real_browser_safely(
    tmp_path: Path, watcher: str
) -> None:
    ws, page = tmp_path / "ws", tmp_path / "report.html"
    steps = build(ws, watcher)
    # Nothing tells the report the window: the workspace recorded it.
    assert main(["report", str(ws), "-o", str(page), "--price", "openai:gpt-4o-mini"]) == 0
    assert stat.S_IMODE(page.stat().st_mode) == 0o600  # the page holds the conversation
    records = [json.loads(x) for x in (ws / "compactions.jsonl").read_text().splitlines()]
    compactions = [r for r in records if r["kind"] == "compaction"]
    assert len(compactions) >= 2 and any(r["kind"] == "failed" for r in records)
    noted = [r for r in records if r["kind"] == "steps"]
    assert all(r["window"] == 3_000 and r["threshold"] == 2_100 and r["reserve"] == 600 for r in noted)
    assert noted[-1]["settings"]["compact_ratio"] == 0.7

    dom = browse(page, tmp_path / "profile", "--dump-dom", "--virtual-time-budget=5000").stdout
    # The page's own script ran (under its CSP hash): it made the filter box. No script of a message ran.
    assert '<input id="filter"' in dom
    assert "<title>ctxkeep report: " in dom and "pwned" not in dom.split("</title>")[0]
    assert "data-pwned" not in dom and "<b>bold?</b>" not in dom and dom.count("<script>") == 1
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom  # shown as text
    assert Counting.requests == [], "the page fetched something"

    # The window and the threshold, each a line across the chart at its count.
    chart = dom.split('<svg class="chart"')[1].split("</svg>")[0]
    window = re.search(r'<g class="window-line"><title>window: 3,000 tokens</title><line [^>]*y1="([\d.]+)"', chart)
    threshold = re.search(
        r'<g class="threshold-line"><title>threshold: 2,100 tokens</title><line [^>]*y1="([\d.]+)"', chart
    )
    assert window is not None and threshold is not None
    # The series is what was sent: one point per step, each at its count on the scale the two lines set.
    series = re.search(r'<polyline id="sent" class="tokens" points="([^"]+)"', chart)
    assert series is not None
    ys = [float(p.split(",")[1]) for p in series.group(1).split()]
    sent, whole = whole_history(records)
    assert len(ys) == len(sent) == steps
    scale = (float(threshold.group(1)) - float(window.group(1))) / (3_000 - 2_100)  # pixels per token
    for y, tokens in zip(ys, sent, strict=True):
        assert abs(float(window.group(1)) + (3_000 - tokens) * scale - y) < 0.2
    # The count before each compaction is a mark (linking to its section), above what was sent at that step.
    befores = re.findall(r'<a href="#c\d+" class="marker">.*?<circle class="before" cx="[\d.]+" cy="([\d.]+)"', chart)
    assert len(befores) == len(compactions)
    for cy, rec in zip(befores, compactions, strict=True):
        assert abs(float(window.group(1)) + (3_000 - rec["tokens_before"]) * scale - float(cy)) < 0.2
    assert chart.count('<g class="failure">') == 1

    # The savings in the header: tokens against sending everything and against cutting at the threshold, and
    # dollars at the price asked for, net of the summarizer (the extractive one spends nothing).
    header = dom.split('id="savings"')[1].split("</table>")[0]
    saved_all = sum(whole) - sum(sent)
    saved_cut = sum(min(w, 2_100) for w in whole) - sum(sent)
    assert saved_all > sum(sent) > 0  # over 24 steps the history grew well past what was sent
    everything = header.split('id="saved-everything"')[1].split('id="saved-threshold"')[0]
    assert f"{saved_all:,} tokens" in everything and f"${saved_all * 0.15 / 1e6:,.4f} saved" in everything
    assert f"{saved_cut:,} tokens" in header.split('id="saved-threshold"')[1] and "openai:gpt-4o-mini" in header

    # Compactions collapsed, the newest open; each with its archived messages, dialog lines first to last.
    sections = re.findall(r'<details class="compaction" id="c(\d+)"( open="")?>', dom)
    assert [n for n, _ in sections] == [str(n) for n in range(1, len(compactions) + 1)]
    assert [n for n, o in sections if o] == [str(len(compactions))]
    # A mark's link opens the section it points to.
    linked = browse(page, tmp_path / "profile", "--dump-dom", "--virtual-time-budget=5000", fragment="#c1").stdout
    assert '<details class="compaction" id="c1" open="">' in linked
    first = compactions[0]["archive_lines"]
    body = dom.split('id="c1"')[1].split('id="c2"')[0]
    lines = [int(n.replace(",", "")) for n in re.findall(r'<td class="line">([\d,]+)</td>', body)]
    assert lines == list(range(first["first"], first["last"] + 1))
    assert "Offloaded results (" in body and "web_fetch" in body and "+## Goal" in body

    # On screen: the window a dashed red line across the chart, the sent series drawn across it, the savings.
    shot = tmp_path / "report.png"
    browse(page, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,1100", "--hide-scrollbars")
    width, height, rows = png_pixels(shot.read_bytes())
    assert (width, height) == (1280, 1100) and len({p for row in rows for p in row}) > 20, "the screenshot is blank"
    assert max(sum(near(p, "#b3261e") for p in row) for row in rows) > 300, "no window line on screen"
    assert max(sum(near(p, "#8a5a00") for p in row) for row in rows) > 300, "no threshold line on screen"
    blue = {x for row in rows for x, p in enumerate(row) if near(p, "#0b5cad", 70)}
    assert len(blue) > 600, "no sent-tokens series on screen"
    # Within 25 of the savings' green no grey of the text falls; 40 would take in antialiased black.
    assert sum(near(p, "#1c6b35", 25) for row in rows for p in row) > 500, "no savings on screen"
    assert Counting.requests == []


def test_a_big_workspace_is_cut_to_the_limits_and_the_page_says_what_was_left_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    build(ws, "http://127.0.0.1:9", turns=40)
    limits = Limits(compactions=1, messages=4, message_chars=50, total_chars=120, diff_lines=3, chart_points=10)
    view = read(LocalFolder(ws), name="ws", limits=limits)
    page = render(view, limits=limits)
    detailed = [c for c in view.compactions if c.detailed]
    assert len(detailed) == 1 and detailed[0].number == len(view.compactions)
    assert sum(len(m.text) for m in detailed[0].messages) <= 120 and all(
        len(m.text) <= 50 for m in detailed[0].messages
    )
    assert page.count('<details class="compaction"') == 1 and page.count('<tr class="message">') <= 4
    assert "Left out of this page" in page and "oldest compaction(s) shown by their record only" in page
    assert "archived message(s) not shown" in page and "line(s) of the summary diff not shown" in page
    assert "points, the largest of each bin" in page and len(view.steps) == 40
    # Nothing to fetch: no attribute points anywhere but inside the page (the SVG namespace is a name, not a load).
    external = re.findall(r'(?:src|href|action)="(?!#)[^"]*"', page)
    assert external == []


def test_show_prints_the_steps_and_compactions_and_one_compaction_in_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    build(ws, "http://127.0.0.1:9")
    assert main(["show", str(ws), "--compaction", "1"]) == 0
    out = capsys.readouterr().out
    compactions = [json.loads(x) for x in (ws / "compactions.jsonl").read_text().splitlines() if '"compaction"' in x]
    assert "steps       24 noted" in out and f"compactions {len(compactions)} (1 not applied)" in out
    marks = [line for line in out.splitlines() if "▲" in line][1]  # under the bars, one column a step here
    assert marks.count("▲") == len(compactions) and marks.count("✗") == 1
    first = compactions[0]["archive_lines"]
    assert f"archived: dialog/2026-12-03.jsonl lines {first['first']}-{first['last']}" in out
    assert f"{first['first']:>6} user: ask 0:" in out and "summary:" in out and "+## Goal" in out


def test_show_and_report_refuse_what_is_not_a_workspace_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing-here"
    assert main(["show", str(missing)]) == 2
    assert "not a ctxkeep workspace" in capsys.readouterr().err and not missing.exists()
    assert main(["report", str(missing), "-o", str(tmp_path / "r.html")]) == 2
    assert not missing.exists() and not (tmp_path / "r.html").exists()
    ws = tmp_path / "ws"
    build(ws, "http://127.0.0.1:9", turns=14)
    assert main(["report", str(ws), "-o", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["show", str(ws), "--compaction", "99"]) == 2
    assert "there is no compaction 99" in capsys.readouterr().err


def test_show_json_gives_the_steps_records_and_one_compaction_in_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    build(ws, "http://127.0.0.1:9")
    assert main(["show", str(ws), "--json", "--compaction", "1"]) == 0
    shown = json.loads(capsys.readouterr().out)
    records = [json.loads(x) for x in (ws / "compactions.jsonl").read_text().splitlines()]
    compactions = [r for r in records if r["kind"] == "compaction"]
    assert len(shown["steps"]) == 24 and all(isinstance(n, int) and n > 0 for n in shown["steps"])
    assert [c["record"] for c in shown["compactions"]] == compactions
    assert [c["number"] for c in shown["compactions"]] == list(range(1, len(compactions) + 1))
    first = shown["compactions"][0]
    assert first["archived"][0]["text"].startswith("ask 0:") and any(
        line.startswith("+## Goal") for line in first["diff"]
    )
    assert all("archived" not in c for c in shown["compactions"][1:])  # only the one asked for, in full
    assert len(shown["failures"]) == 1 and "## Goal" in shown["summary"]
    assert main(["show", str(ws), "--json", "--compaction", "99"]) == 2
    assert "there is no compaction 99" in capsys.readouterr().err


def test_show_gives_the_recorded_window_and_what_was_saved_at_the_price_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    build(ws, "http://127.0.0.1:9")
    records = [json.loads(x) for x in (ws / "compactions.jsonl").read_text().splitlines()]
    sent, whole = whole_history(records)
    assert main(["show", str(ws), "--json", "--price", "anthropic:claude-sonnet-4", "--input-price", "2"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["window"], shown["threshold"], shown["reserve"]) == (3_000, 2_100, 600)
    saved = shown["savings"]
    assert saved["sent"] == sum(sent) and saved["everything"] == sum(whole) > 2 * sum(sent)
    assert saved["at_threshold"] == sum(min(w, 2_100) for w in whole)
    assert saved["saved_vs_everything"] == sum(whole) - sum(sent)
    # --input-price over the model's; its output price stays (the summarizer's tokens are priced with it).
    assert saved["price"] == {"name": "$2 per million in", "input": 2.0, "output": 15.0}
    assert saved["dollars_saved_vs_everything"] == pytest.approx(saved["saved_vs_everything"] * 2 / 1e6)
    assert main(["show", str(ws), "--price", "openai:gpt-4o-mini"]) == 0
    out = capsys.readouterr().out
    assert "window      3,000 tokens, compaction at 2,100, 600 kept" in out
    assert f"saved       vs whole history: {sum(whole) - sum(sent):,} tokens" in out and "at openai:gpt-4o-mini" in out
    for wrong, error in (
        (["--price", "acme:big"], "no price known for 'acme:big'; give --input-price, or one of: openai:gpt-4o-mini"),
        (["--input-price", "-1"], "the input price must be US dollars per million tokens, 0 or more"),
        (["--output-price", "1"], "an output price needs an input price"),
    ):
        assert main(["show", str(ws), *wrong]) == 2 and error in capsys.readouterr().err
        assert main(["report", str(ws), "-o", str(tmp_path / "r.html"), *wrong]) == 2
        assert error in capsys.readouterr().err and not (tmp_path / "r.html").exists()


def test_a_workspace_that_did_not_record_its_window_gets_no_lines_and_says_so(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    build(ws, "http://127.0.0.1:9", turns=14)
    older = [json.loads(x) for x in (ws / "compactions.jsonl").read_text().splitlines()]
    for r in older:  # as a workspace written before the steps carried their settings
        for key in ("window", "threshold", "reserve", "settings"):
            r.pop(key, None)
    (ws / "compactions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in older))
    view = read(LocalFolder(ws), name="ws")
    assert (view.window, view.threshold) == (None, None) and view.savings().vs_threshold is None
    page = render(view)
    assert "window-line" not in page and "threshold-line" not in page
    assert "did not record its window" in page and "the workspace did not record its threshold" in page
    assert f"{view.savings().vs_everything:,} tokens" in page and view.savings().vs_everything > 0
