"""`ctxkeep report`: a workspace's `View` as one self-contained HTML page.

    header     what was saved: input tokens (and dollars, given a price) against sending the whole history
               and against cutting at the threshold (`View.savings`); then the totals
    chart      the tokens sent at each step (inline SVG) under the model's window and the compaction
               threshold; each compaction a mark at its count before, joined to what was sent after and
               linking to its section; each refused summary a cross
    sections   per compaction, collapsed but the newest: its record, the messages it archived (with their
               dialog lines), the results it offloaded, the summary's diff against the previous one
    footer     refused summaries, the current summary, what the page left out

Nothing is fetched: the styles, the SVG and the one script (a filter over the archived messages; opening
the compaction a link points to), allowed by its hash in the page's Content-Security-Policy, which forbids
every other script and every load, are inline. Every text from the workspace goes through `html.escape`:
transcripts hold HTML.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Mapping, Sequence
from typing import Any

from .workspace.savings import Price, Savings
from .workspace.view import CompactionView, Limits, View, chart_points

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:16px 24px;color:#1d232b;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-top:1px solid #d7dde4;padding-top:14px}
small,.muted{color:#5f6b78}table{border-collapse:collapse;margin:6px 0}td,th{padding:2px 10px 2px 0;text-align:left;
vertical-align:top}th{font-weight:600;color:#3b4652}.num{text-align:right;font-variant-numeric:tabular-nums}
.totals td{padding-right:24px}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:12px/1.4 ui-monospace,monospace}
.messages td{border-bottom:1px solid #eef1f4}.messages .line{color:#5f6b78;font-variant-numeric:tabular-nums}
.role-user{color:#0b5cad}.role-assistant{color:#6a3fb5}.role-tool{color:#2f6f3e}.role-system{color:#8a5a00}
.diff .add{background:#e6f6ea;display:block}.diff .del{background:#fbe9e9;display:block}
.diff .ctx{display:block;color:#5f6b78}
.cut{color:#8a5a00}.chart{width:100%;height:auto;border:1px solid #e3e7ec;border-radius:4px}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.savings{display:flex;gap:28px;flex-wrap:wrap;margin:10px 0 4px;padding:10px 14px;background:#f3f7fb;border-radius:6px}
.savings .big{font-size:24px;font-weight:700;color:#1c6b35}.savings .neg{color:#b3261e}
details.compaction>summary h2{display:inline;border:0;padding:0}details.compaction{border-top:1px solid #d7dde4;
margin-top:14px;padding-top:8px}.legend span{margin-right:16px}#filter{margin:8px 0;padding:4px 6px;width:320px}
.hidden{display:none}
"""

# Opens the compaction a link points to, and hides the archived messages that do not contain the text typed;
# the box is made by the script, so a page whose script cannot run shows no dead control.
_SCRIPT = """
(function () {
  // A compaction's marker links to its section, collapsed unless it is the newest: open it on the way.
  function reveal() {
    var target = document.getElementById(location.hash.slice(1));
    if (target && target.tagName === "DETAILS") target.open = true;
  }
  window.addEventListener("hashchange", reveal);
  reveal();
})();
(function () {
  var rows = document.querySelectorAll("tr.message");
  if (!rows.length) return;
  var box = document.createElement("input");
  box.id = "filter";
  box.type = "search";
  box.placeholder = "filter archived messages";
  box.addEventListener("input", function () {
    var q = box.value.toLowerCase();
    rows.forEach(function (row) {
      row.classList.toggle("hidden", q !== "" && row.textContent.toLowerCase().indexOf(q) < 0);
    });
    if (q) document.querySelectorAll("details.archived").forEach(function (d) { d.open = true; });
  });
  var anchor = document.getElementById("compactions");
  anchor.parentNode.insertBefore(box, anchor.nextSibling);
})();
"""

_W, _H, _LEFT, _TOP, _BOTTOM = 1000, 260, 64, 14, 28


def render(view: View, *, limits: Limits | None = None, price: Price | None = None) -> str:
    """The page for `view`: one HTML document with nothing to fetch. With `price`, the savings in dollars too."""
    limits = limits or Limits()
    newest = max((c.number for c in view.compactions if c.detailed), default=0)
    digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    policy = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>ctxkeep report: {_e(view.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>ctxkeep report <small>{_e(view.name)}</small></h1>",
        _savings(view, view.savings(price)),
        _totals(view),
        '<h2 id="chart">Tokens sent per step</h2>',
        _chart(view, limits.chart_points),
        f'<h2 id="compactions">Compactions ({len(view.compactions):,})</h2>',
        _table(view.compactions),
        *(_section(c, open_=c.number == newest) for c in view.compactions if c.detailed),
        _failures(view),
        _current(view),
        _cuts(view),
        f"<script>{_SCRIPT}</script></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _n(value: object) -> str:
    """A count as shown: with thousands separators, or a dash when not known."""
    if isinstance(value, bool) or value is None:
        return "–"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return _e(value)


def _savings(view: View, saved: Savings) -> str:
    """The header: input tokens saved against the two other ways, a share of what they send, and dollars."""
    if not view.steps:
        return ""

    def cell(kind: str, label: str, tokens: int | None, other: int | None) -> str:
        if tokens is None or not other:
            return (
                f'<div id="saved-{kind}"><div class="big muted">–</div>{label}<br>'
                "<small>the workspace did not record its threshold</small></div>"
            )
        dollars = saved.dollars(tokens)
        money = "" if dollars is None else f'<div class="dollars">{_money(dollars)} saved</div>'
        sign = " neg" if tokens < 0 else ""
        return (
            f'<div id="saved-{kind}"><div class="big{sign}">{tokens:,} tokens</div>{money}{label}<br>'
            f"<small>{saved.sent:,} sent of {other:,} ({tokens / other:.0%} fewer)</small></div>"
        )

    if saved.price is None:
        priced = (
            "<small>Give <code>--price openai:gpt-4o-mini</code> (or <code>--input-price</code>) for dollars.</small>"
        )
    else:
        p = saved.price
        priced = (
            f"<small>At {_e(p.name)}: ${p.input:g} per million tokens in, ${p.output:g} out; net of what the"
            f" summarizer spent ({saved.summarizer_in:,} in, {saved.summarizer_out:,} out).</small>"
        )
    return (
        '<div class="savings" id="savings">'
        + cell("everything", "saved against sending the whole history", saved.vs_everything, saved.everything)
        + cell("threshold", "saved against cutting the oldest at the threshold", saved.vs_threshold, saved.at_threshold)
        + _cached(saved)
        + f"<div>{priced}<br><small>Input tokens over {len(view.steps):,} steps; offloaded results count at"
        " their cut size, so the whole history is a lower bound.</small></div></div>"
    )


def _cached(saved: Savings) -> str:
    """The three ways billed with a prompt cache (tokens at the input price; dollars with a price)."""
    c = saved.cache
    if c is None:
        return ""

    def bill(units: float | None) -> str:
        if units is None:
            return "–"
        money = "" if saved.price is None else f" ({_money(saved.price.of(round(units)))})"
        return f"{round(units):,}{money}"

    share = c.cached / saved.sent if saved.sent else 0.0
    return (
        f'<div id="cache"><div class="big">{share:.0%} cached</div>{c.cached:,} of {saved.sent:,} tokens sent<br>'
        f"<small>billed at write {c.cache.write:g}x, read {c.cache.read:g}x the input price: ctxkeep"
        f" {bill(c.sent)}, whole history {bill(c.everything)}, threshold cut {bill(c.at_threshold)};"
        f" the cuts made expected to save {round(c.expected):,}</small></div>"
    )


def _money(dollars: float) -> str:
    sign = "-" if dollars < 0 else ""
    return f"{sign}${abs(dollars):,.2f}" if abs(dollars) >= 1 else f"{sign}${abs(dollars):,.4f}"


def _totals(view: View) -> str:
    t = view.totals()
    window = "not recorded" if view.window is None else f"{view.window:,} tokens, compaction at {_n(view.threshold)}"
    rows = [
        ("window", window),
        ("steps noted", _n(len(view.steps))),
        ("compactions", f"{_n(len(view.compactions))} applied, {_n(len(view.failures))} not applied"),
        ("archived messages", _n(view.archived_messages)),
        ("model calls", f"{_n(t['calls'])} ({_n(t['retries'])} retries)"),
        ("model tokens", f"{_n(t['input_tokens'])} in, {_n(t['output_tokens'])} out"),
        ("offloaded results archived", f"{_n(t['offloaded'])}; {_n(view.originals)} originals in tool_result/"),
    ]
    cells = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="totals">{cells}</table>'


def _chart(view: View, limit: int) -> str:
    steps = view.steps
    if not steps:
        return (
            '<p class="muted">No steps noted yet: they are written with each compaction and when a session closes.</p>'
        )
    points = list(chart_points(steps, limit))
    befores = [_int(c.record.get("tokens_before")) for c in view.compactions if c.step is not None]
    peak = max([*steps, *befores, view.window or 0, 1])
    width, height = _W - _LEFT - 12, _H - _TOP - _BOTTOM
    last = max(1, len(steps) - 1)

    def x(i: int) -> float:
        return _LEFT + width * i / last

    def y(tokens: int) -> float:
        return _TOP + height * (1 - tokens / peak)

    line = " ".join(f"{x(i):.1f},{y(t):.1f}" for i, t in points)
    out = [
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" aria-label="tokens sent per step"'
        f' xmlns="http://www.w3.org/2000/svg" font-size="11" font-family="sans-serif">',
    ]
    for frac in (0, 0.5, 1):
        ty = y(round(peak * frac))
        out.append(f'<line x1="{_LEFT}" x2="{_W - 12}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#e3e7ec"/>')
        out.append(
            f'<text x="{_LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end" fill="#5f6b78">{round(peak * frac):,}</text>'
        )
    out.append(f'<text x="{_LEFT}" y="{_H - 8}" fill="#5f6b78">step 1</text>')
    out.append(f'<text x="{_W - 12}" y="{_H - 8}" text-anchor="end" fill="#5f6b78">step {len(steps):,}</text>')
    # The two limits the steps ran under, dashed across the whole chart, each labelled with its count.
    for kind, tokens, colour in (("window", view.window, "#b3261e"), ("threshold", view.threshold, "#8a5a00")):
        if tokens is None:
            continue
        ly = y(tokens)
        out.append(
            f'<g class="{kind}-line"><title>{kind}: {tokens:,} tokens</title>'
            f'<line x1="{_LEFT}" x2="{_W - 12}" y1="{ly:.1f}" y2="{ly:.1f}" stroke="{colour}"'
            ' stroke-width="2" stroke-dasharray="6 4"/>'
            f'<text x="{_W - 14}" y="{ly - 4:.1f}" text-anchor="end" fill="{colour}">{kind} {tokens:,}</text></g>'
        )
    out.append(f'<polyline id="sent" class="tokens" points="{line}" fill="none" stroke="#0b5cad" stroke-width="1.5"/>')
    for c in view.compactions:
        if c.step is None:
            continue
        cx, before, after = x(c.step), _int(c.record.get("tokens_before")), _int(c.record.get("tokens_after"))
        reason = c.record.get("reason", "")
        tip = f"compaction {c.number} at step {c.step + 1:,} ({reason}): {before:,} before, {after:,} sent"
        out.append(
            f'<a href="#c{c.number}" class="marker"><title>{_e(tip)}</title>'
            f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(before):.1f}" y2="{y(after):.1f}"'
            ' stroke="#d9730d" stroke-width="1" stroke-dasharray="2 2"/>'
            f'<circle class="before" cx="{cx:.1f}" cy="{y(before):.1f}" r="4" fill="#d9730d"/></a>'
        )
    for rec, s in zip(view.failures, view.failure_steps, strict=True):
        if s is None:
            continue
        fx, fy = x(s), y(min(peak, _int(rec.get("tokens"))))
        tip = f"not applied at step {s + 1:,}: {rec.get('reason', '')}"
        out.append(
            f'<g class="failure"><title>{_e(tip)}</title><path d="M{fx - 4:.1f},{fy - 4:.1f}l8,8m0,-8l-8,8"'
            ' stroke="#c62828" stroke-width="2"/></g>'
        )
    out.append("</svg>")
    out.append(
        '<p class="legend muted"><span style="color:#0b5cad">━ tokens sent</span>'
        '<span style="color:#d9730d">● count before a compaction</span>'
        '<span style="color:#b3261e">┅ window</span><span style="color:#8a5a00">┅ threshold</span>'
        '<span style="color:#c62828">✗ summary refused</span></p>'
    )
    if view.window is None:
        out.append('<p class="muted">The workspace did not record its window: no window or threshold line.</p>')
    if len(points) < len(steps):
        out.append(f'<p class="cut">{len(steps):,} steps drawn as {len(points):,} points, the largest of each bin.</p>')
    return "".join(out)


def _table(compactions: Sequence[CompactionView]) -> str:
    if not compactions:
        return '<p class="muted">No compaction yet.</p>'
    head = (
        "<tr><th>#</th><th>when</th><th>why</th><th>tokens before → after</th><th>seconds</th><th>model calls</th></tr>"
    )
    rows = []
    for c in compactions:
        rec, usage = c.record, _dict(c.record.get("usage"))
        number = f'<a href="#c{c.number}">{c.number}</a>' if c.detailed else str(c.number)
        rows.append(
            f"<tr><td>{number}</td><td>{_e(str(rec.get('at', ''))[:19])}</td><td>{_e(rec.get('reason', ''))}</td>"
            f'<td class="num">{_n(rec.get("tokens_before"))} → {_n(rec.get("tokens_after"))}</td>'
            f'<td class="num">{_n(rec.get("seconds"))}</td><td class="num">{_n(usage.get("calls"))}</td></tr>'
        )
    return f'<table class="compaction-table">{head}{"".join(rows)}</table>'


def _section(c: CompactionView, *, open_: bool) -> str:
    rec, usage = c.record, _dict(c.record.get("usage"))
    lines = _dict(rec.get("archive_lines"))
    focus = f", focus: {_e(rec['focus'])}" if rec.get("focus") else ""
    fields = [
        ("when", _e(rec.get("at", ""))),
        ("why", _e(rec.get("reason", "")) + focus),
        ("tokens", f"{_n(rec.get('tokens_before'))} → {_n(rec.get('tokens_after'))}"),
        (
            "messages",
            f"{_n(rec.get('compacted'))} archived, {_n(rec.get('kept'))} kept, {_n(rec.get('pinned'))} pinned",
        ),
        (
            "seconds",
            f"{_n(rec.get('seconds'))} in all, {_n(usage.get('seconds'))} summarizing"
            + (" (in the background, before the threshold)" if rec.get("background") else ""),
        ),
        ("summarizer", _e(usage.get("summarizer", "")) + (f" ({_e(usage['model'])})" if usage.get("model") else "")),
        (
            "model calls",
            f"{_n(usage.get('calls'))} ({_n(usage.get('retries'))} retries, {_n(usage.get('attempts'))} attempts)",
        ),
        ("model tokens", f"{_n(usage.get('input_tokens'))} in, {_n(usage.get('output_tokens'))} out"),
        ("audit", _audit(usage)),
        (
            "identifiers",
            f"{_n(usage.get('identifiers_checked'))} checked, {_n(usage.get('identifiers_restored'))} restored",
        ),
        (
            "archive",
            f"{_e(lines.get('file', rec.get('archive_file', '')))}"
            f" lines {_n(lines.get('first'))}–{_n(lines.get('last'))}",
        ),
        ("summary", f"{_n(rec.get('summary_chars'))} characters"),
    ]
    table = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in fields)
    # Collapsed but the newest: thirty near-identical sections read as one list. A marker's link to a closed
    # one still lands, the browser opens the <details> its fragment points into.
    return (
        f'<details class="compaction" id="c{c.number}"{" open" if open_ else ""}><summary><h2>Compaction {c.number}'
        f" <small>{_e(str(rec.get('at', ''))[:19])} · {_e(rec.get('reason', ''))} ·"
        f" {_n(rec.get('tokens_before'))} → {_n(rec.get('tokens_after'))} tokens</small></h2></summary>"
        f'<table class="record">{table}</table>{_messages(c)}{_offloaded(rec)}{_diff(c)}</details>'
    )


def _audit(usage: Mapping[str, Any]) -> str:
    failed = usage.get("audit") or []
    if usage.get("calls") in (None, 0):
        return '<span class="muted">not audited (no model)</span>'
    if not failed:
        return "passed"
    return "still failing: " + "; ".join(_e(a) for a in failed)


def _messages(c: CompactionView) -> str:
    rows = []
    for m in c.messages:
        cut = f'<div class="cut">… {m.cut:,} more characters in the archive</div>' if m.cut else ""
        rows.append(
            f'<tr class="message"><td class="line">{m.line:,}</td><td class="role-{_e(m.role)}">{_e(m.role)}'
            f'<div class="muted">{_e(m.label)}</div></td><td><pre>{_e(m.text)}</pre>{cut}</td></tr>'
        )
    more = (
        f'<p class="cut">{c.messages_left_out:,} more archived message(s) not shown.</p>' if c.messages_left_out else ""
    )
    count = len(c.messages) + c.messages_left_out
    return (
        f'<details class="archived"><summary>Archived messages ({count:,})</summary>'
        f'<table class="messages">{"".join(rows)}</table>{more}</details>'
    )


def _offloaded(rec: Mapping[str, Any]) -> str:
    off = _dict(rec.get("offloaded"))
    listed = [r for r in off.get("listed") or [] if isinstance(r, dict)]
    rows = "".join(
        f"<tr><td>{_e(r.get('tool', ''))}</td><td>{_e(r.get('file', ''))}</td><td>{_e(r.get('stage', ''))}</td>"
        f'<td class="num">{_n(r.get("original_bytes"))}</td><td class="num">{_n(r.get("kept_bytes"))}</td></tr>'
        for r in listed
    )
    more = _int(off.get("results")) - len(listed)
    note = f'<p class="cut">{more:,} more not listed in the record.</p>' if more > 0 else ""
    head = "<tr><th>tool</th><th>original</th><th>cut</th><th>bytes</th><th>kept</th></tr>"
    return (
        f"<details><summary>Offloaded results ({_n(off.get('results'))}: {_n(off.get('original_bytes'))} bytes,"
        f" {_n(off.get('kept_bytes'))} kept)</summary><table>{head}{rows}</table>{note}</details>"
    )


def _diff(c: CompactionView) -> str:
    spans = []
    for line in c.diff:
        kind = "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx"
        spans.append(f'<span class="{kind}">{_e(line)}</span>')
    more = f'<p class="cut">{c.diff_left_out:,} more line(s) of the diff not shown.</p>' if c.diff_left_out else ""
    body = "".join(spans) if spans else '<span class="ctx">(no change)</span>'
    title = "Summary" if c.number == 1 else "Summary: diff against the previous one"
    return f'<details open><summary>{title}</summary><pre class="diff">{body}</pre>{more}</details>'


def _failures(view: View) -> str:
    if not view.failures:
        return ""
    rows = "".join(
        f"<tr><td>{_e(str(r.get('at', ''))[:19])}</td><td class='num'>{_n(r.get('tokens'))}</td>"
        f"<td>{_e(r.get('reason', ''))}</td><td>{_e(r.get('saved', ''))}</td></tr>"
        for r in view.failures
    )
    head = "<tr><th>when</th><th>tokens</th><th>why</th><th>saved</th></tr>"
    return f'<h2 id="failures">Not applied ({len(view.failures):,})</h2><table>{head}{rows}</table>'


def _current(view: View) -> str:
    if view.summary is None:
        return ""
    size = f"{len(view.summary):,} characters"
    body = f"<details><summary>{size}</summary><pre>{_e(view.summary)}</pre></details>"
    return f'<h2 id="summary">Current summary</h2>{body}'


def _cuts(view: View) -> str:
    if not view.cuts:
        return ""
    items = "".join(f"<li>{_e(c)}</li>" for c in view.cuts)
    return f'<h2 id="left-out">Left out of this page</h2><ul class="cut">{items}</ul>'


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
