"""A workspace read back for people: the tokens of every step, each compaction with what it archived,
offloaded and changed in the summary. `ctxkeep show` prints it; `ctxkeep report` renders it as HTML.

    read(store) ─► View ─┬─ render_text(view)          ctxkeep show WORKSPACE
                         └─ html_report.render(view)   ctxkeep report WORKSPACE -o report.html

Reading takes no lock and writes nothing, so it can look at a workspace an agent is using: it reads
the committed state (through `state.read`, the one reader of state.json), `compactions.jsonl`
(`records`) and the archive up to its committed size.
Big workspaces stay readable: `Limits` caps what is kept of messages, diffs and compactions, and
`View.cuts` says what was left out.

What ctxkeep saved (`View.savings`) is derived from the records alone. A compaction at step k takes
`tokens_before - tokens_after` out of what is sent, and these sum, telescoping over the summaries each
replaced, to the archived messages' tokens less the current summary's; so the whole history at step i is
what was sent then plus what the compactions up to i took out. Offloaded results count at their cut size
there, so "sending everything" is a lower bound. "Cutting at the threshold" is a client that drops the
oldest messages just enough to stay under the threshold: it sends min(whole history, threshold).

With a prompt cache, a token costs less when it is the unchanged start of the previous request. The steps
record the tokens a cache held (`View.cached`), and the cache's prices (`ctxkeep.costs.billed`); sending
everything only grows, so its cache holds the previous step's whole history; cutting at the threshold drops
the oldest messages, so at each step over it nothing is held.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import orjson

from ctxkeep.codec import message_from_dict
from ctxkeep.costs import billed
from ctxkeep.errors import WorkspaceError
from ctxkeep.messages import Message
from ctxkeep.settings import CacheSettings
from ctxkeep.store import Store

from . import livelog, records
from . import state as state_file
from .savings import CacheCosts, Price, Savings

_BARS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """How much of a big workspace a view keeps; the rest is counted in `View.cuts`, never silently dropped."""

    compactions: int = 50  # the newest compactions shown in full (all of them stay in the chart and the table)
    messages: int = 200  # archived messages shown per compaction: the first and last halves
    message_chars: int = 2_000  # characters of each message's text
    total_chars: int = 3_000_000  # characters of message text in all, the newest compactions served first
    diff_lines: int = 400  # lines of each summary diff
    chart_points: int = 2_000  # steps drawn; more are binned, each bin drawn at its largest

    def __post_init__(self) -> None:
        for name in ("compactions", "messages", "message_chars", "total_chars", "diff_lines", "chart_points"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Limits.{name} must be a whole number, 1 or more; got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Archived:
    """One archived message as shown: its line in the dialog file, who wrote it, and its text (cut to the limit)."""

    line: int
    id: str
    role: str
    label: str  # the tool called or answered, when any
    text: str
    cut: int = 0  # characters of the text left out


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactionView:
    """One compaction: its record, the step it happened at, what it archived, and its summary's diff."""

    number: int  # 1 for the first compaction of the workspace
    record: Mapping[str, Any]
    step: int | None  # index in `View.steps` (None when the workspace noted no steps before it)
    messages: tuple[Archived, ...] = ()
    messages_left_out: int = 0  # archived but not shown (over `Limits.messages`)
    diff: tuple[str, ...] = ()  # the summary's unified diff against the previous compaction's
    diff_left_out: int = 0
    detailed: bool = True  # False past `Limits.compactions`: the record only


@dataclass(frozen=True, kw_only=True, slots=True)
class View:
    """What `ctxkeep show` and `ctxkeep report` show of a workspace."""

    name: str  # the workspace, as the user named it
    generation: int
    archived_messages: int
    summary: str | None
    steps: tuple[int, ...]  # tokens sent at each step, oldest first
    compactions: tuple[CompactionView, ...]
    failures: tuple[Mapping[str, Any], ...]
    failure_steps: tuple[int | None, ...]  # the step each failure happened at, as for compactions
    originals: int  # files in tool_result/ (offloaded originals)
    cuts: tuple[str, ...] = field(default_factory=tuple)  # what the view left out, in words
    # The model's window, the compaction threshold and the kept tail, as the newest "steps" record gives
    # them; None for a workspace written before they were recorded.
    window: int | None = None
    threshold: int | None = None
    reserve: int | None = None
    live_messages: int = 0  # in the live context now (the committed generation's live log)
    # Of `steps`, the tokens a prompt cache held (None: a step noted before they were recorded), the aging
    # decisions with the step they were made at (`ctxkeep.costs.Decision` as a dict), and the cache's prices.
    # A step the model's API counted (`Session.note_usage`) takes the cache's share from that count.
    cached: tuple[int | None, ...] = ()
    billed: int = 0  # of `steps`, those whose cached tokens are the model's API's count
    aging: tuple[Mapping[str, Any], ...] = ()
    cache: CacheSettings = field(default_factory=CacheSettings)

    def whole(self) -> tuple[int, ...]:
        """The tokens of the whole history at each step: what sending everything would have sent (offloaded
        results at their cut size, so a lower bound)."""
        taken = [0] * (len(self.steps) + 1)  # what the compactions took out, by the step they ran at
        for c in self.compactions:
            out = max(0, _int(c.record.get("tokens_before")) - _int(c.record.get("tokens_after")))
            taken[0 if c.step is None else c.step] += out
        whole, running = [], 0
        for i, sent in enumerate(self.steps):
            running += taken[i]
            whole.append(sent + running)
        return tuple(whole)

    def savings(self, price: Price | None = None) -> Savings:
        """What was sent against sending everything and against cutting at the threshold, and what the
        summarizer spent; with `price`, in US dollars too."""
        whole = self.whole()
        at_threshold = None if self.threshold is None else sum(min(w, self.threshold) for w in whole)
        totals = self.totals()
        return Savings(
            sent=sum(self.steps),
            everything=sum(whole),
            at_threshold=at_threshold,
            summarizer_in=totals["input_tokens"],
            summarizer_out=totals["output_tokens"],
            price=price,
            cache=self._cache_costs(whole),
        )

    def _cache_costs(self, whole: Sequence[int]) -> CacheCosts | None:
        """The three ways priced with a prompt cache; None when some step did not record what the cache held."""
        if len(self.cached) != len(self.steps) or any(c is None for c in self.cached):
            return None
        cached = [c or 0 for c in self.cached]
        held_whole = [0, *(min(a, b) for a, b in pairwise(whole))]
        threshold = None
        if self.threshold is not None:
            cut = [min(w, self.threshold) for w in whole]
            held = [
                0,
                *(0 if w > self.threshold else min(a, b) for a, b, w in zip(cut, cut[1:], whole[1:], strict=False)),
            ]
            threshold = billed(cut, held[: len(cut)], self.cache)
        return CacheCosts(
            billed=self.billed,
            cached=sum(cached),
            sent=billed(self.steps, cached, self.cache),
            everything=billed(whole, held_whole[: len(whole)], self.cache),
            at_threshold=threshold,
            expected=sum(float(d.get("saving") or 0) for d in self.aging if d.get("kind") != "wait"),
            cache=self.cache,
        )

    def totals(self) -> dict[str, int]:
        """Sums over every compaction: model calls, tokens in and out, retries, results offloaded."""
        out = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "retries": 0, "offloaded": 0}
        for c in self.compactions:
            usage = c.record.get("usage") or {}
            for key in ("calls", "input_tokens", "output_tokens", "retries"):
                out[key] += _int(usage.get(key))
            out["offloaded"] += _int((c.record.get("offloaded") or {}).get("results"))
        return out


def read(store: Store, *, name: str, limits: Limits | None = None) -> View:
    """The view of the workspace in `store`, called `name`. Raises `WorkspaceError` when it holds no workspace."""
    limits = limits or Limits()
    state = state_file.read(store)
    raw_records, bad = records.read(store.read_records())
    cuts: list[str] = []
    if bad:
        cuts.append(f"{bad} unreadable line(s) of compactions.jsonl skipped")
    steps: list[int] = []
    cached: list[int | None] = []
    billed: set[int] = set()  # the steps the model's API counted
    aging: list[dict[str, Any]] = []
    cache = CacheSettings()
    found: list[tuple[dict[str, Any], int | None]] = []
    failures: list[dict[str, Any]] = []
    failure_steps: list[int | None] = []
    ran_under: dict[str, int | None] = {"window": None, "threshold": None, "reserve": None}
    for rec in raw_records:
        kind = rec["kind"]
        if kind == "steps":
            tokens = [_int(n) for n in rec.get("tokens") or ()]
            held = rec.get("cached")
            held = held if isinstance(held, list) and len(held) == len(tokens) else [None] * len(tokens)
            aging.extend(
                {**d, "step": len(steps) + _int(d.get("step"))} for d in rec.get("aging") or () if isinstance(d, dict)
            )
            counted = rec.get("billed")
            counted = counted if isinstance(counted, list) and len(counted) == len(tokens) else [None] * len(tokens)
            shares = [_billed_share(t, b) for t, b in zip(tokens, counted, strict=True)]
            billed.update(len(steps) + i for i, s in enumerate(shares) if s is not None)
            steps.extend(tokens)
            cached.extend(
                s if s is not None else None if n is None else _int(n) for s, n in zip(shares, held, strict=True)
            )
            cache = _cache_of(rec.get("cache"), cache)
            if _int(rec.get("window")):  # the newest that says wins: settings may change between sessions
                ran_under = {key: _int(rec.get(key)) or None for key in ran_under}
        elif kind == "usage" and steps and (share := _billed_share(steps[-1], rec)) is not None:
            billed.add(len(steps) - 1)
            cached[-1] = share
        elif kind == "compaction":
            found.append((rec, len(steps) - 1 if steps else None))
        elif kind == "failed":
            failures.append(rec)
            # Its step is noted later, in the next "steps" record: `step` says where (1 for its first).
            at = len(steps) - 1 + _int(rec.get("step")) if rec.get("step") else len(steps) - 1
            failure_steps.append(at if at >= 0 else None)
    committed = {name: f.bytes for name, f in state.archive.files.items()}
    detailer = _Detailer(store, committed, limits)
    compactions: list[CompactionView] = []
    first_detailed = max(0, len(found) - limits.compactions)
    if first_detailed:
        cuts.append(
            f"the {first_detailed} oldest compaction(s) shown by their record only (limit {limits.compactions})"
        )
    summaries = [""] + [_text(rec.get("summary")) for rec, _ in found]
    for number in range(len(found), 0, -1):
        rec, step = found[number - 1]
        if number - 1 < first_detailed:
            compactions.append(CompactionView(number=number, record=rec, step=step, detailed=False))
        else:
            compactions.append(detailer.detail(number, rec, step, summaries[number - 1]))
    compactions.reverse()
    cuts.extend(detailer.problems)
    for c in compactions:
        if c.messages_left_out:
            cuts.append(f"compaction {c.number}: {c.messages_left_out} archived message(s) not shown")
        if c.diff_left_out:
            cuts.append(f"compaction {c.number}: {c.diff_left_out} line(s) of the summary diff not shown")
    return View(
        name=name,
        generation=state.generation,
        archived_messages=state.archive.lines,
        summary=state.summary,
        steps=tuple(steps),
        compactions=tuple(compactions),
        failures=tuple(failures),
        failure_steps=tuple(failure_steps),
        originals=len(store.originals()),
        live_messages=livelog.count(store.read_live(state.generation)),
        cuts=tuple(cuts),
        cached=tuple(cached),
        billed=len(billed),
        aging=tuple(aging),
        cache=cache,
        **ran_under,
    )


class _Detailer:
    """Details compactions from the committed archive (each file read once) within the limits and the budget of
    characters, and notes what could not be read."""

    def __init__(self, store: Store, committed: Mapping[str, int], limits: Limits) -> None:
        self._store = store
        self._committed = committed
        self._limits = limits
        self._lines: dict[str, list[bytes]] = {}
        self.budget = limits.total_chars  # message characters still to give; newest compactions ask first
        self.problems: list[str] = []

    def _read(self, name: str, first: int, last: int) -> list[bytes]:
        if name not in self._lines:
            if name not in self._committed:
                self.problems.append(f"{name} is not in the committed archive; its messages are not shown")
                self._lines[name] = []
            else:
                self._lines[name] = self._store.read_archive(name)[: self._committed[name]].splitlines()
        return self._lines[name][first - 1 : last]

    def detail(self, number: int, rec: Mapping[str, Any], step: int | None, previous: str) -> CompactionView:
        """The compaction `number` with its archived messages and its summary's diff against `previous`."""
        limits = self._limits
        lines = rec.get("archive_lines")
        if not isinstance(lines, dict):
            lines = {}
        name, first, last = str(lines.get("file", "")), _int(lines.get("first")), _int(lines.get("last"))
        shown: list[Archived] = []
        left_out = 0
        if name and 1 <= first <= last:
            numbers = range(first, last + 1)
            keep = _ends(numbers, limits.messages)
            for n, line in zip(numbers, self._read(name, first, last), strict=False):
                if n in keep and self.budget > 0:
                    item = _archived(n, line, min(limits.message_chars, self.budget))
                    self.budget -= len(item.text)
                    shown.append(item)
            left_out = len(numbers) - len(shown)
        diff = list(
            difflib.unified_diff(previous.splitlines(), _text(rec.get("summary")).splitlines(), lineterm="", n=1)
        )
        diff = diff[2:]  # without the ---/+++ header
        return CompactionView(
            number=number,
            record=rec,
            step=step,
            messages=tuple(shown),
            messages_left_out=left_out,
            diff=tuple(diff[: limits.diff_lines]),
            diff_left_out=max(0, len(diff) - limits.diff_lines),
        )


def _ends(numbers: range, limit: int) -> set[int]:
    """The first and last halves of `numbers` when there are more than `limit`."""
    if len(numbers) <= limit:
        return set(numbers)
    head = (limit + 1) // 2
    return set(numbers[:head]) | set(numbers[len(numbers) - (limit - head) :])


def _archived(line: int, raw: bytes, chars: int) -> Archived:
    try:
        msg = message_from_dict(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValueError, TypeError, KeyError, AttributeError) as exc:
        return Archived(line=line, id="", role="?", label="", text=f"(unreadable line: {exc})")
    label, text = _describe(msg)
    return Archived(line=line, id=msg.id, role=msg.role, label=label, text=text[:chars], cut=max(0, len(text) - chars))


def _describe(msg: Message) -> tuple[str, str]:
    """The tool a message calls or answers, and its text as a person reads it."""
    result = msg.tool_result
    if result is not None:
        status = " (error)" if result.is_error else ""
        return result.call_id + status, result.text
    calls = msg.tool_calls
    text = msg.text
    if calls:
        named = "\n".join(f"→ {c.name}({c.arguments})" for c in calls)
        return ", ".join(c.name for c in calls), f"{text}\n{named}".strip()
    return "", text


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _cache_of(value: object, default: CacheSettings) -> CacheSettings:
    """The cache prices a "steps" record noted, or `default` when it noted none it could read."""
    if not isinstance(value, dict):
        return default
    try:
        return CacheSettings(**{k: value[k] for k in ("write", "read", "horizon") if k in value})
    except (TypeError, ValueError):
        return default


def _billed_share(sent: int, billed: object) -> int | None:
    """Of `sent` tokens (ctxkeep's count), those the cache served by the model's API's count (`Billed` as a
    dict): its share, since the two tokenizers may differ; None when it did not count."""
    if not isinstance(billed, Mapping):
        return None
    total, cached = _int(billed.get("input")), billed.get("cached")
    if not total or not isinstance(cached, int) or isinstance(cached, bool) or cached < 0:
        return None
    return min(sent, round(sent * min(cached, total) / total))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


# --- the terminal ------------------------------------------------------------------------


def render_text(view: View, *, width: int = 72, price: Price | None = None) -> str:
    """The view for a terminal: what was saved (in dollars too, with `price`), totals, a bar chart of the tokens
    per step with compactions marked, the table of compactions and failures."""
    totals = view.totals()
    out = [
        f"workspace   {view.name}",
        "window      not recorded"
        if view.window is None
        else f"window      {view.window:,} tokens, compaction at {view.threshold or 0:,}, {view.reserve or 0:,} kept",
        *_saved_lines(view.savings(price)),
        f"steps       {len(view.steps):,} noted; last context {view.steps[-1]:,} tokens"
        if view.steps
        else "steps       none noted",
        f"archived    {view.archived_messages:,} messages in dialog/",
        f"compactions {len(view.compactions):,} ({len(view.failures):,} not applied)",
        f"model       {totals['calls']:,} calls, {totals['input_tokens']:,} tokens in, "
        f"{totals['output_tokens']:,} out, {totals['retries']:,} retries",
        f"offloaded   {totals['offloaded']:,} archived results; {view.originals:,} originals in tool_result/",
    ]
    if view.steps:
        out += ["", "tokens per step (▲ compaction, ✗ not applied)", *_sparkline(view, width)]
    if view.compactions:
        out += ["", _row("#", "when", "why", "before", "after", "secs", "calls", "in/out", "retries", "archived")]
        for c in view.compactions:
            out.append(_compaction_row(c))
    for rec in view.failures:
        out.append(f"not applied {rec.get('at', '')[:19]}: {rec.get('reason', '')}")
    for cut in view.cuts:
        out.append(f"note: {cut}")
    return "\n".join(out)


def _saved_lines(saved: Savings) -> list[str]:
    """Input tokens (and dollars) saved against sending everything and against cutting at the threshold."""
    if not saved.sent:
        return []
    out = []
    for label, tokens, other in (
        ("whole history", saved.vs_everything, saved.everything),
        ("threshold cut", saved.vs_threshold, saved.at_threshold),
    ):
        if tokens is None or not other:
            out.append(f"saved       vs {label}: unknown (no threshold recorded)")
            continue
        dollars = saved.dollars(tokens)
        money = "" if dollars is None else f", ${dollars:,.4f} net at {saved.price.name if saved.price else ''}"
        out.append(f"saved       vs {label}: {tokens:,} tokens (sent {saved.sent:,} of {other:,}){money}")
    return out + _cache_lines(saved)


def _billed_note(steps: int) -> str:
    return f"; {steps:,} step(s) as the model's API counted them" if steps else ""


def _cache_lines(saved: Savings) -> list[str]:
    """The same with a prompt cache: the tokens it held, and each way billed at its prices (and in dollars)."""
    c = saved.cache
    if c is None:
        return []

    def bill(units: float | None) -> str:
        if units is None:
            return "unknown"
        money = "" if saved.price is None else f" (${saved.price.of(round(units)):,.4f})"
        return f"{round(units):,}{money}"

    return [
        f"cached      {c.cached:,} of {saved.sent:,} tokens sent were the cache's (write {c.cache.write:g}x, read"
        f" {c.cache.read:g}x the input price){_billed_note(c.billed)}",
        f"billed      ctxkeep {bill(c.sent)}, whole history {bill(c.everything)}, threshold cut {bill(c.at_threshold)}"
        " input-price tokens",
        f"aging       the cuts made were expected to save {round(c.expected):,} input-price tokens",
    ]


def _sparkline(view: View, width: int) -> list[str]:
    steps = view.steps
    bins = _bins(len(steps), width)
    peak = max(steps) or 1
    bars = "".join(_BARS[min(7, max(steps[a:b]) * 8 // (peak + 1))] for a, b in bins)
    marks = [" "] * len(bins)
    for c in view.compactions:
        if c.step is not None:
            marks[_bin_of(c.step, bins)] = "▲"
    for s in view.failure_steps:
        if s is not None:
            marks[_bin_of(s, bins)] = "✗"
    return [
        f"{peak:>9,} {bars}",
        f"{'':9} {''.join(marks)}",
        f"{'':9} steps 1-{len(steps):,}"
        + (f", the largest of {len(steps) / len(bins):.1f} per column" if len(steps) > len(bins) else ""),
    ]


def _bins(n: int, width: int) -> list[tuple[int, int]]:
    """`n` items cut into at most `width` consecutive bins, as (start, end) pairs."""
    count = min(n, width)
    return [(i * n // count, (i + 1) * n // count) for i in range(count)]


def _bin_of(index: int, bins: Sequence[tuple[int, int]]) -> int:
    return next((k for k, (a, b) in enumerate(bins) if a <= index < b), len(bins) - 1)


def _row(*cells: str) -> str:
    widths = (3, 19, 9, 9, 9, 6, 6, 15, 8, 0)
    return " ".join(f"{c:<{w}}" if w else c for c, w in zip(cells, widths, strict=True)).rstrip()


def _compaction_row(c: CompactionView) -> str:
    rec, usage = c.record, c.record.get("usage") or {}
    lines = rec.get("archive_lines") or {}
    archived = f"{lines.get('file', rec.get('archive_file', ''))}:{lines.get('first', '?')}-{lines.get('last', '?')}"
    calls = "-" if usage.get("calls") is None else str(usage["calls"])
    tokens = (
        "-" if usage.get("input_tokens") is None else f"{usage['input_tokens']:,}/{usage.get('output_tokens', 0):,}"
    )
    retries = "-" if usage.get("retries") is None else str(usage["retries"])
    return _row(
        str(c.number),
        str(rec.get("at", ""))[:19],
        str(rec.get("reason", "")),
        f"{_int(rec.get('tokens_before')):,}",
        f"{_int(rec.get('tokens_after')):,}",
        f"{float(rec.get('seconds') or 0):.2f}",
        calls,
        tokens,
        retries,
        archived,
    )


def chart_points(steps: Sequence[int], limit: int) -> Iterator[tuple[int, int]]:
    """(step index, tokens) to draw: every step, or when more than `limit`, the largest of each bin."""
    for a, b in _bins(len(steps), limit):
        peak = max(range(a, b), key=lambda i: steps[i])
        yield peak, steps[peak]


def render_compaction(view: View, number: int, *, chars: int = 300) -> str:
    """One compaction for a terminal: its record, the messages it archived (each cut to `chars`), its diff.

    Raises `WorkspaceError` when the workspace has no compaction `number`."""
    if not 1 <= number <= len(view.compactions):
        raise WorkspaceError(
            f"the workspace has compactions 1 to {len(view.compactions)}; there is no compaction {number}"
        )
    c = view.compactions[number - 1]
    rec = c.record
    out = [f"compaction {number}"]
    for key in ("at", "reason", "focus", "tokens_before", "tokens_after", "compacted", "kept", "seconds", "background"):
        if rec.get(key) is not None:
            out.append(f"  {key:<14}{rec[key]}")
    usage = rec.get("usage") or {}
    for key, value in usage.items():
        if value not in (None, [], ()):
            out.append(f"  {'summarizing' if key == 'seconds' else key:<14}{value}")
    if not c.detailed:
        out.append(f"  (only the newest compactions are read in full; this is number {number})")
        return "\n".join(out)
    lines = rec.get("archive_lines") or {}
    out.append(f"archived: {lines.get('file', '')} lines {lines.get('first', '?')}-{lines.get('last', '?')}")
    for m in c.messages:
        text = " ".join(m.text.split())
        text = text if len(text) <= chars else text[: chars - 1] + "…"
        label = f" [{m.label}]" if m.label else ""
        out.append(f"  {m.line:>6} {m.role}{label}: {text}")
    if c.messages_left_out:
        out.append(f"  ... {c.messages_left_out} more not shown")
    out.append("summary diff:" if number > 1 else "summary:")
    out += [f"  {line}" for line in c.diff] or ["  (no change)"]
    if c.diff_left_out:
        out.append(f"  ... {c.diff_left_out} more lines")
    return "\n".join(out)
