"""The summary's Markdown form: its required sections, parsing, rendering and fitting it to a size.

    ## Goal
    ## Constraints & Preferences
    ## Progress
    ### Done
    ### In Progress
    ### Blocked
    ## Key Decisions
    ## Next Steps
    ## Critical Context

A parsed summary is a plain mapping, section title -> subsection title -> items::

    {"Progress": {"Done": ["Modified `a.py`"], "In Progress": ["..."], "Blocked": []}, ...}

Items directly under a section (before any ``###``) sit under the subsection ``""``; text before
the first ``##`` heading is the section ``""``. An item is one bullet. An item may carry a fenced
code block (a multi-line command): it is rendered at column 0, so its text stays verbatim, and a
``#`` line inside a fence is never taken for a heading. Headings are always English; the fixed
phrases inside sections come in the summary's language (`phrase`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = [
    "PHRASES",
    "PROGRESS_SUBSECTIONS",
    "SECTIONS",
    "Drop",
    "Sections",
    "canonical_title",
    "code_span",
    "fit_sections",
    "is_placeholder",
    "missing_sections",
    "omission_note",
    "omitted_count",
    "parse_sections",
    "phrase",
    "render_item",
    "render_sections",
    "unquote",
]

SECTIONS = ("Goal", "Constraints & Preferences", "Progress", "Key Decisions", "Next Steps", "Critical Context")
PROGRESS_SUBSECTIONS = ("Done", "In Progress", "Blocked")

Sections: TypeAlias = dict[str, dict[str, list[str]]]

# Fixed phrases, by language. Parsing accepts either language, so a summary that changes
# language between two compactions still merges.
PHRASES: Mapping[str, Mapping[str, str]] = {
    "none": {"en": "(none)", "zh": "（无）"},
    "focus": {"en": "Focus:", "zh": "重点："},
    "latest_ask": {"en": "Latest ask:", "zh": "最新请求："},
    "pending_ask": {"en": "Pending user ask:", "zh": "待回复的用户请求："},
    "files_read": {"en": "Files read", "zh": "已读取的文件"},
    "files_modified": {"en": "Files modified", "zh": "已修改的文件"},
    "commands_run": {"en": "Commands run", "zh": "已运行的命令"},
    "identifiers": {"en": "Exact identifiers", "zh": "精确标识符"},
    "omitted": {"en": "({n} older items omitted; see the archive)", "zh": "（已省略 {n} 条较早的条目；详见归档）"},
    "omitted_one": {"en": "(1 older item omitted; see the archive)", "zh": "（已省略 1 条较早的条目；详见归档）"},
    "truncated": {"en": "[{n} more characters; see the archive]", "zh": "[另有 {n} 个字符；详见归档]"},
    "modified": {"en": "Modified", "zh": "已修改"},
    "ran": {"en": "Ran", "zh": "已运行"},
    "called": {"en": "Called", "zh": "已调用"},
    "exit": {"en": "exit {code}", "zh": "退出码 {code}"},
    "ok": {"en": "ok", "zh": "成功"},
    "error": {"en": "error", "zh": "出错"},
    "no_result": {"en": "no result", "zh": "无结果"},
    "resolved": {"en": "(resolved later)", "zh": "（之后已解决）"},
}

_HEADING = re.compile(r"^(#{2,3})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_BULLET = re.compile(r"^(?:[-*+]|\d{1,3}[.)])(?:[ \t]+(?:\[[ xX]\][ \t]+)?(.*))?$")
_FENCE = re.compile(r"^(`{3,}|~{3,})")
_OMITTED = re.compile(r"^\((\d+) older items? omitted; see the archive\)$|^（已省略 (\d+) 条较早的条目；详见归档）$")


def phrase(key: str, language: str, **values: object) -> str:
    """The fixed phrase `key` in `language` ("en" or "zh"), with `values` filled in."""
    text = PHRASES[key]["zh" if language == "zh" else "en"]
    return text.format(**values) if values else text


def canonical_title(title: str) -> str | None:
    """The required section `title` names ("constraints and preferences" -> "Constraints & Preferences")."""
    key = _title_key(title)
    for name in SECTIONS:
        if _title_key(name) == key:
            return name
    return None


def _title_key(title: str) -> str:
    words = re.sub(r"[^a-z0-9]+", " ", title.lower().replace("&", " and ")).split()
    return " ".join(words)


def missing_sections(text: str) -> list[str]:
    """The required ``## `` sections `text` lacks, in order; ``[]`` means the summary is valid.

    A heading matches case-insensitively and with "and" for "&"; one inside a code fence does not count.
    """
    found = {canonical_title(title) for level, title in _headings(text) if level == 2}
    return [name for name in SECTIONS if name not in found]


def _headings(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for line in text.splitlines():
        fence, was_fence = _fence_state(fence, line)
        if was_fence:
            continue
        m = _HEADING.match(line)
        if m:
            out.append((len(m.group(1)), m.group(2)))
    return out


def _fence_state(fence: str | None, line: str) -> tuple[str | None, bool]:
    """The fence open after `line`, and whether `line` belongs to a fence (opening, inside or closing)."""
    if fence is not None:
        closing = line.rstrip()
        if closing.startswith(fence[0]) and set(closing) == {fence[0]} and len(closing) >= len(fence):
            return None, True
        return fence, True
    m = _FENCE.match(line)
    return (m.group(1), True) if m else (None, False)


def parse_sections(text: str) -> Sections:
    """`text` as section -> subsection -> items. Placeholders ("(none)") are left out."""
    result: Sections = {}
    section, sub = "", ""
    item: list[str] | None = None
    fence: str | None = None

    def flush() -> None:
        nonlocal item
        if item is not None:
            body = "\n".join(item).rstrip()
            if body.strip() and not is_placeholder(body):
                result.setdefault(section, {}).setdefault(sub, []).append(body)
        item = None

    for line in text.splitlines():
        if fence is not None:
            fence, _ = _fence_state(fence, line)
            assert item is not None  # a fence always belongs to an item
            item.append(line)
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            title = heading.group(2)
            if len(heading.group(1)) == 2:
                section, sub = canonical_title(title) or title, ""
                result.setdefault(section, {})
            else:
                sub = title
                result.setdefault(section, {}).setdefault(sub, [])
            continue
        opened, _ = _fence_state(None, line)
        if opened is not None:
            if item is None:
                item = [""]
            item.append(line)
            fence = opened
            continue
        bullet = _BULLET.match(line)
        if bullet:
            flush()
            item = [(bullet.group(1) or "").rstrip()]
        elif line.startswith(("  ", "\t")) and item is not None:
            item.append(line[2:] if line.startswith("  ") else line[1:])  # "  " alone: an empty line of the item
        elif not line.strip():
            flush()
        else:
            flush()
            item = [line.strip()]
    flush()
    return result


def is_placeholder(item: str) -> bool:
    """True for the "(none)" item of an empty section, in either language."""
    return item.strip() in {p for p in PHRASES["none"].values()} | {"None", "none", "N/A", "-"}


def omission_note(count: int, language: str) -> str:
    """The item that says `count` older items were dropped to fit the size."""
    return phrase("omitted_one", language) if count == 1 else phrase("omitted", language, n=count)


def omitted_count(item: str) -> int | None:
    """The count of an omission note (either language), or None when `item` is not one."""
    m = _OMITTED.match(item.strip())
    return int(m.group(1) or m.group(2)) if m else None


def code_span(text: str) -> str:
    """`text` as Markdown inline code, with enough backticks that its own backticks stay verbatim."""
    runs = re.findall(r"`+", text)
    ticks = "`" * (max(map(len, runs)) + 1 if runs else 1)
    # Markdown takes one space off each side when both have one; pad so that takes ours
    pad = " " if runs or (text.startswith(" ") and text.endswith(" ") and text.strip()) else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def unquote(item: str) -> str:
    """The text inside `item` when `item` is exactly one inline code span, else `item` unchanged."""
    m = re.fullmatch(r"(`+)(.*?)\1", item.strip(), re.DOTALL)
    if not m or "`" * len(m.group(1)) in m.group(2):
        return item.strip()
    inner = m.group(2)
    if len(inner) >= 2 and inner[0] == " " and inner[-1] == " " and inner.strip():
        inner = inner[1:-1]
    return inner


def render_item(item: str) -> str:
    """One item as its Markdown lines: a bullet, indented continuation lines, fences at column 0."""
    lines = item.split("\n")
    out = [f"- {lines[0]}".rstrip() if lines[0] else "-"]
    fence: str | None = None
    for line in lines[1:]:
        fence, in_fence = _fence_state(fence, line)
        out.append(line if in_fence else f"  {line}")
    if fence is not None:
        out.append(fence)  # an unclosed fence would swallow the next heading
    return "\n".join(out)


def render_sections(sections: Mapping[str, Mapping[str, Sequence[str]]], *, language: str = "en") -> str:
    """The Markdown text of `sections`: required sections first, in order, each present even if empty.

    Progress always has its three subsections; an empty list shows as "(none)" in `language`.
    """
    blocks: list[str] = []
    preamble = sections.get("", {})
    for items in preamble.values():
        blocks.extend(items)
    if blocks:
        blocks.append("")
    titles = list(SECTIONS) + [t for t in sections if t and t not in SECTIONS]
    for title in titles:
        blocks.extend(_render_section(title, sections.get(title, {}), language))
    return "\n".join(blocks).rstrip("\n") + "\n"


def _render_section(title: str, subs: Mapping[str, Sequence[str]], language: str) -> list[str]:
    lines = [f"## {title}"]
    children = [k for k in subs if k]
    if title == "Progress":
        children = list(PROGRESS_SUBSECTIONS) + [k for k in children if k not in PROGRESS_SUBSECTIONS]
    direct = subs.get("", ())
    if direct or not children:
        lines.extend(_render_items(direct, language))
    for child in children:
        lines.append(f"### {child}")
        lines.extend(_render_items(subs.get(child, ()), language))
    lines.append("")
    return lines


def _render_items(items: Sequence[str], language: str) -> list[str]:
    if not items:
        return [f"- {phrase('none', language)}"]
    return [render_item(item) for item in items]


# --- fitting to a size ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Drop:
    """One step of `fit_sections`: drop items of one list, from its `end`, while the text is too long.

    `only` limits the step to the items it accepts (the rest stay for a later step or for good).
    """

    section: str
    subsection: str = ""
    end: Literal["head", "tail"] = "tail"
    only: Callable[[str], bool] | None = None


def fit_sections(
    sections: Sections,
    *,
    max_chars: int,
    plan: Sequence[Drop],
    language: str = "en",
    protect: Callable[[str], bool] | None = None,
) -> Sections:
    """A copy of `sections` whose rendering has at most `max_chars` characters.

    Items are dropped step by step as `plan` says; within a step, items `protect` accepts go last.
    Each list that lost items gets one omission note (notes already in it are folded into that one),
    where the first items went for a "head" step, else at the end. When every step is spent and the
    text is still too long, the longest items are shortened. Raises ValueError when even that
    cannot fit `max_chars`.
    """
    work: Sections = {s: {k: list(v) for k, v in subs.items()} for s, subs in sections.items()}
    notes: dict[tuple[str, str], int] = {}
    where: dict[tuple[str, str], int | None] = {}  # index of the note among the kept items; None: last
    for s, subs in work.items():
        for k, items in subs.items():
            counts = [omitted_count(i) for i in items]
            if any(c is not None for c in counts):
                notes[(s, k)] = sum(c for c in counts if c is not None)
                first = next(j for j, c in enumerate(counts) if c is not None)
                where[(s, k)] = None if first == len(items) - 1 else first
                subs[k] = [i for i, c in zip(items, counts, strict=True) if c is None]

    def rendered() -> str:
        return render_sections(_with_notes(work, notes, where, language), language=language)

    total = len(rendered())
    for step in plan:
        if total <= max_chars:
            break
        current = work.get(step.section, {}).get(step.subsection)
        if not current:
            continue
        key = (step.section, step.subsection)
        order = list(range(len(current))) if step.end == "head" else list(range(len(current) - 1, -1, -1))
        order = [i for i in order if step.only is None or step.only(current[i])]
        if protect is not None:
            order = [i for i in order if not protect(current[i])] + [i for i in order if protect(current[i])]
        dropped: set[int] = set()
        for i in order:
            if total <= max_chars:
                break
            count = notes.get(key, 0)
            dropped.add(i)
            notes[key] = count + 1
            total += _note_cost(count + 1, language) - _note_cost(count, language) - _item_cost(current[i])
        if dropped and step.end == "head":
            earliest = min(dropped)
            at = where.get(key)
            where[key] = earliest if at is None else min(at, earliest)
        work[step.section][step.subsection] = [x for j, x in enumerate(current) if j not in dropped]
        total = len(rendered())  # the exact length, so rounding in the estimate never accumulates
    if total > max_chars:
        _shorten_longest(work, total - max_chars, language)
    text = rendered()
    if len(text) > max_chars:
        raise ValueError(
            f"the summary needs at least {len(text)} characters even with every optional item dropped;"
            f" raise max_chars (got {max_chars})"
        )
    return _with_notes(work, notes, where, language)


def _item_cost(item: str) -> int:
    return len(render_item(item)) + 1


def _note_cost(count: int, language: str) -> int:
    # A list always holds at least one item here, so the note never replaces a "(none)" line.
    return _item_cost(omission_note(count, language)) if count else 0


def _with_notes(
    work: Sections, notes: Mapping[tuple[str, str], int], where: Mapping[tuple[str, str], int | None], language: str
) -> Sections:
    out: Sections = {s: {k: list(v) for k, v in subs.items()} for s, subs in work.items()}
    for (s, k), count in notes.items():
        if count:
            items = out.setdefault(s, {}).setdefault(k, [])
            at = where.get((s, k))
            items.insert(len(items) if at is None else min(at, len(items)), omission_note(count, language))
    return out


def _shorten_longest(work: Sections, excess: int, language: str) -> None:
    """Cut the longest items (never below 120 characters) until about `excess` characters are gone."""
    cells = sorted(
        ((len(item), s, k, i) for s, subs in work.items() for k, items in subs.items() for i, item in enumerate(items)),
        key=lambda c: (-c[0], c[1], c[2], c[3]),
    )
    for length, s, k, i in cells:
        if excess <= 0 or length <= 160:
            break
        keep = max(120, length - excess - 60)
        cut = f"{work[s][k][i][:keep]}… {phrase('truncated', language, n=length - keep)}"
        excess -= length - len(cut)
        work[s][k][i] = cut
