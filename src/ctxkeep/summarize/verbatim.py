"""What a summary carries word for word: the user's own messages and the instructions the agent must obey.

    previous summary's parts ─┐
    compacted messages ───────┴─► carried ─► Carried ─► render_carried(budgets) ─► appended after the sections

Both summarizers append the same two parts after their sections, the way identifiers are appended
after a model's text, so a model cannot paraphrase them away and the extractive summary does not
clip them: "User messages (verbatim)" (the first real ask, always, and the newest messages within a
budget) and "Standing instructions (verbatim)" (system and developer messages after the system
prompt, AGENTS.md and CLAUDE.md blocks, slash-command bodies, hook output and reminders that state
rules, each kind once, its newest version); who said what is read by `voices`. Each part has its own
budget, a share of the summary's cap, so it follows the window, and the budget order holds when the
cap is squeezed: the user's words, then the standing instructions, then the sections. A text over
its room keeps its head and tail around a note pointing to the archive. The rules: docs/summarize.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ctxkeep.messages import Message
from ctxkeep.origin import HOST_SUMMARY_STARTS, origins, provider_summary
from ctxkeep.settings import MIN_SUMMARY_CHARS
from ctxkeep.summarize.facts.collect import rules_in
from ctxkeep.summarize.facts.human import human_text
from ctxkeep.summarize.facts.superseded import superseded_by
from ctxkeep.summarize.request import SummaryRequest
from ctxkeep.summarize.sections.markdown import RULES_TITLE, fence_state, headings, omitted_count, parse_sections
from ctxkeep.summarize.voices import voices

# Shares of the summary's cap: the user's messages, then the standing instructions. The summary's
# own sections get the rest, and never less than `SECTIONS_FLOOR` characters.
USER_SHARE = 0.2
INSTRUCTIONS_SHARE = 0.2
SECTIONS_FLOOR = MIN_SUMMARY_CHARS
# When the engine squeezes the cap below the sections' floor plus the two shares, the parts keep these
# (each at most a share of the cap, `SQUEEZED_SHARE`) and the sections are cut below their floor instead:
# without them every later summary would lose the task, the user's latest word and the rules for good.
USER_FLOOR = 500  # the first message's head and tail, and the newest message's
INSTRUCTIONS_FLOOR = 400  # the head and tail of an instruction block or two
SQUEEZED_SHARE = 0.25
# The most the standing instructions take of the cap to stay whole, from the sections' part above their floor.
INSTRUCTIONS_MAX_SHARE = 0.4
# What the sections keep at the least when the cap is squeezed: their headings, "(none)" lines and a line or two.
SECTIONS_SKELETON = 700
USER_TITLE = "User messages (verbatim)"
INSTRUCTIONS_TITLE = "Standing instructions (verbatim)"
_FIRST = "First"
_NEWEST = "Newest"
_USER_NOTE = "What the user typed: the first message (the task), then the newest, oldest first."
_INSTRUCTIONS_NOTE = "Injected instructions that still apply; the newest version of each."
_INSTRUCTIONS_HEAD = f"\n## {INSTRUCTIONS_TITLE}\n{_INSTRUCTIONS_NOTE}\n\n"
_CUT = "\n[… {n:,} characters omitted here; the whole text is in the archive …]\n"
# After a quoted message whose value a later message changed ("use port 8080", then "actually use 9090").
_SUPERSEDED = "(superseded by a later message: «{said}»)\n"
_SUPERSEDED_LINE = re.compile(r"\(superseded by a later message: «(.*)»\)")
_MIN_PIECE = 240  # a cut text keeps at least this much of its head (two thirds) and tail together
_CUT_NOTE = re.compile(r"\n\[… ([\d,]+) characters omitted here; the whole text is in the archive …\]\n")
_TITLES = frozenset({USER_TITLE, INSTRUCTIONS_TITLE})
# The first line of a summary with no room for its lists (`ctxkeep.summarize.minimal`), by language: the next
# summary with more room reads the user's words back from the archive (`with_recalled`).
LEFT_OUT_NOTES = {
    "en": "(No room for the summary's lists at this window: the archive holds the work so far.)",
    "zh": "（此窗口放不下摘要的各个列表：之前的工作都保存在存档中。）",
}
_HOST_HEADER = re.compile(r"^\[Summary of [^\]\n]*\]\s*")
_LIST_MARK = re.compile(r"^(?:[-*+•]|\d+[.)])\s+")


@dataclass(frozen=True, kw_only=True, slots=True)
class Carried:
    """The texts a summary carries verbatim, before they are fitted to their budgets."""

    first: str | None = None  # the first message the user typed in the session
    newest: tuple[str, ...] = ()  # user-typed messages after it, oldest first
    instructions: tuple[str, ...] = ()  # standing instruction blocks, oldest first, each kind once
    # (text, the later statement that changed its value): read back from a previous summary's notes, so the mark
    # outlives the later message's leaving the verbatim part
    superseded: tuple[tuple[str, str], ...] = ()


def typed_text(msg: Message) -> str | None:
    """The text the user typed in `msg` (harness tags left out; a slash command as "/name args"), else None."""
    text, _ = human_text(msg.text)
    return text


def host_summary(messages: Sequence[Message], *, max_chars: int | None = None) -> str | None:
    """The newest compaction summary a host wrote into `messages` (Claude Code, pi, Codex, a provider's
    compaction block), without the header our importers put in front of it; None when there is none.

    With `max_chars`, a longer one keeps its head and tail within half of it, around a note pointing to
    the archive: it stands for a previous summary, which the cap holds too, and leaves room for the rest.
    """
    kinds = origins(messages)
    for msg, kind in zip(reversed(messages), reversed(kinds), strict=True):
        if (provided := provider_summary(msg)) is not None:
            text = provided.strip()
        elif kind == "host_summary":
            text = msg.text.strip()
            text = _HOST_HEADER.sub("", text, count=1) if text.startswith(HOST_SUMMARY_STARTS[1:]) else text
        else:
            continue
        return text if max_chars is None else _head_and_tail(text, max_chars // 2)
    return None


def earlier_summaries(request: SummaryRequest) -> list[str]:
    """The summaries a new one builds on, oldest first: the previous summary without its verbatim parts, then
    the host's own summary among the messages (`host_summary`, within the cap), when the host compacted its
    context too, before ctxkeep's first summary or since the last one: merged, never ignored."""
    out = [split_carried(request.previous)[0]] if request.previous else []
    host = host_summary(request.messages, max_chars=request.max_chars)
    return [text for text in (*out, host) if text is not None and text.strip()]


def carried(messages: Sequence[Message], previous: str | None) -> Carried:
    """The verbatim texts of the previous summary's parts and of `messages` (oldest first), merged.

    The previous summary's first message stays the first; the user's messages follow in order,
    each once; an instruction block replaces an older one of the same kind (its first line). Who
    said what is read by `voices`: the first message is the first real ask, never a bare slash
    command or a harness note (a command is carried among the newest); the system prompt is a
    layer of its own, never compacted: a system message among `messages` came after it (a
    developer message, a harness's reminder) and is one of the instructions, and so are hook
    output and reminders that state rules.
    """
    old = read_carried(previous) if previous else Carried()
    first = old.first
    newest = list(old.newest)
    blocks = list(old.instructions)
    for said in (s for parts in voices(messages) for s in parts):
        text = said.text
        if said.voice == "standing":
            blocks = [b for b in blocks if _kind_of(b) != _kind_of(text) and b != text] + [text]
        elif said.voice == "ask" and first is None:
            first = text
        elif text != first:
            newest = [t for t in newest if t != text] + [text]
    return Carried(first=first, newest=tuple(newest), instructions=tuple(blocks), superseded=old.superseded)


def budgets(max_chars: int) -> tuple[int, int]:
    """The characters the user's messages and the standing instructions may take of a `max_chars` summary.

    Their shares (`USER_SHARE`, `INSTRUCTIONS_SHARE`) of the cap, as long as the sections keep
    `SECTIONS_FLOOR`. Below that each part keeps its floor (`USER_FLOOR`, `INSTRUCTIONS_FLOOR`, at most
    `SQUEEZED_SHARE` of the cap each), taken from the sections: a squeezed cap costs the summary's
    lists, which the archive holds, not the task, the user's latest word or the rules.
    """
    user = int(max_chars * USER_SHARE)
    instructions = int(max_chars * INSTRUCTIONS_SHARE)
    spare = max(0, max_chars - SECTIONS_FLOOR)
    if user + instructions > spare:
        squeezed = int(max_chars * SQUEEZED_SHARE)
        user = max(spare // 2, min(USER_FLOOR, squeezed))
        instructions = max(spare - spare // 2, min(INSTRUCTIONS_FLOOR, squeezed))
    return user, instructions


def render_carried(parts: Carried, *, max_chars: int, sections: int = SECTIONS_SKELETON) -> str:
    """The two parts as Markdown to append after a summary of at most `max_chars` characters; "" when empty.

    Each part stays within its budget (`budgets`): the first user message always (head and tail
    when it alone is over, leaving the newest message room for its own head and tail), then the
    newest messages, newest first, each whole while it fits, else its head and tail, one with no
    room at all passed over (never the shorter older ones); instruction blocks share their room
    fairly, the small ones whole, and none is ever left out: a block with less room than its head
    and tail need (`_MIN_PIECE`) gets that much anyway. When the cap is squeezed, the budget order
    holds: the user's words take what they need of all but `SECTIONS_SKELETON`, then the standing
    instructions what is left of it, and the summary's own sections (the state of the work, which
    the archive holds) the rest, at least `sections` characters (a summarizer whose sections need more
    asks again with more).
    """
    user_room, instruction_room = budgets(max_chars)
    if user_room + instruction_room > max(0, max_chars - SECTIONS_FLOOR):  # squeezed
        room = max(0, max_chars - sections)
        reserve = min(instruction_room, max(_least(b) for b in parts.instructions)) if parts.instructions else 0
        user = _user_part(parts, max(user_room, room - reserve))
        return user + _instructions_part(parts.instructions, max(instruction_room, room - len(user)))
    # The task whole before the sections' lists: a first message over the user's share takes up to a quarter
    # of the cap, from the sections' part above their floor, so it is not cut while the summary has room.
    spare = max_chars - SECTIONS_FLOOR - instruction_room
    user = _user_part(parts, max(user_room, min(_first_need(parts), max_chars // 4, spare)))
    # Standing instructions whole before the state of the work, up to `INSTRUCTIONS_MAX_SHARE` of the cap.
    need = len(_INSTRUCTIONS_HEAD) + sum(len(_fenced(b)) for b in parts.instructions)
    spare = max_chars - SECTIONS_FLOOR - len(user)
    room = max(instruction_room, min(need, spare, int(max_chars * INSTRUCTIONS_MAX_SHARE)))
    return user + _instructions_part(parts.instructions, room)


def _first_need(parts: Carried) -> int:
    """The room the user part needs to show the first message whole, beside the newest one's head and tail."""
    if parts.first is None:
        return 0
    later = [t for t in parts.newest if t != parts.first]
    newest = min(len(_fenced(later[-1])), _least(later[-1])) + 20 if later else 0
    return len(_fenced(parts.first)) + len(USER_TITLE) + len(_USER_NOTE) + 40 + newest


def listed_lines(appendix: str) -> frozenset[str]:
    """The list items the user wrote that `appendix` (the verbatim parts) shows, without their marks: a rule
    among them is said there already, and a summary's own list need not say it again."""
    return frozenset(
        _LIST_MARK.sub("", line.strip(), count=1) for line in appendix.splitlines() if _LIST_MARK.match(line.strip())
    )


def carried_rules(previous: str | None) -> list[str]:
    """The rules stated in the user's messages a previous summary carried verbatim, oldest first.

    A summary's own lists leave out a rule its verbatim part shows (`listed_lines`); once its message
    leaves the verbatim part, the next summary takes the rule from here, so none is ever lost.
    """
    if not previous:
        return []
    old = read_carried(previous)
    return [rule for text in (old.first, *old.newest) if text for rule in rules_in(text)]


def split_carried(summary: str) -> tuple[str, str]:
    """`summary` without its verbatim parts, and those parts (as `render_carried` wrote them)."""
    lines = summary.splitlines(keepends=True)
    heads = [(j, title) for j, level, title in headings([line.rstrip("\n") for line in lines]) if level == 2]
    keep: list[str] = []
    parts: list[str] = []
    for k, (at, title) in enumerate(heads):
        end = heads[k + 1][0] if k + 1 < len(heads) else len(lines)
        (parts if title in _TITLES else keep).append("".join(lines[at:end]))
    if not parts:
        return summary, ""
    before = "".join(lines[: heads[0][0]])
    return (before + "".join(keep)).rstrip("\n") + "\n", "".join(parts)


def read_carried(summary: str) -> Carried:
    """The verbatim texts of a summary's parts (the cut ones as they stand, with their notes)."""
    _, text = split_carried(summary)
    lines = text.splitlines()
    section = sub = ""
    first: str | None = None
    newest: list[str] = []
    blocks: list[str] = []
    fence: str | None = None
    body: list[str] = []
    superseded: list[tuple[str, str]] = []
    last: str | None = None  # the user's text the block just closed held
    for line in lines:
        note = _SUPERSEDED_LINE.fullmatch(line)
        if note and fence is None and last is not None and section == USER_TITLE:
            superseded.append((last, note.group(1)))
            continue
        if fence is not None:
            fence, _ = fence_state(fence, line)
            if fence is None:
                block = "\n".join(body)
                last = block if section == USER_TITLE else None
                if section == USER_TITLE and sub == _FIRST and first is None:
                    first = block
                elif section == USER_TITLE:
                    newest.append(block)
                elif section == INSTRUCTIONS_TITLE:
                    blocks.append(block)
            else:
                body.append(line)
            continue
        if line.startswith("## "):
            section, sub = line[3:].strip(), ""
        elif line.startswith("### "):
            sub = line[4:].strip()
        else:
            fence, _ = fence_state(None, line)
            body = []
    return Carried(first=first, newest=tuple(newest), instructions=tuple(blocks), superseded=tuple(superseded))


def _user_part(parts: Carried, room: int) -> str:
    later = [t for t in parts.newest if t != parts.first]
    if parts.first is None and not later:
        return ""
    head = f"\n## {USER_TITLE}\n{_USER_NOTE}\n\n"
    sub = f"\n### {_NEWEST}\n"
    out = head
    texts = [*([parts.first] if parts.first is not None else []), *later]
    changed = dict(parts.superseded) | {t: n for t, n in zip(texts, superseded_by(texts), strict=True) if n}
    notes = {t: _SUPERSEDED.format(said=_head_and_tail(n, 120)) for t, n in changed.items()}
    if parts.first is not None:
        # a long first message leaves the newest one room for its head and tail: the user's latest word counts too
        reserve = min(len(_fenced(later[-1])), _least(later[-1])) + len(sub) if later else 0
        title = f"### {_FIRST}\n"
        note = notes.get(parts.first, "")
        first = _block(parts.first, room - len(head) - len(title) - reserve - len(note))
        first = first or _block(parts.first, room - len(head) - len(title) - len(note))
        if first is None:  # no room even for a cut first message: the sections' floor needs it all
            return ""
        out += title + first + note
    chosen = _newest_blocks(later, room - len(out) - len(sub), notes)
    if not chosen:
        return out if parts.first is not None else ""
    return out + sub + "".join(chosen)


def _newest_blocks(texts: Sequence[str], room: int, notes: Mapping[str, str]) -> list[str]:
    """`texts` (oldest first) fenced within `room`, in order: newest first each whole while it fits, else its
    head and tail; one that has no room even for that is passed over, never the older ones after it: a
    long message does not push the short asks before it («delete the file») out of the summary. A text
    whose value a later one changed is followed by its note (`notes`)."""
    chosen: list[str] = []
    left = room
    for text in reversed(texts):
        note = notes.get(text, "")
        whole = _fenced(text)
        if len(whole) + len(note) <= left:
            piece: str | None = whole
        else:
            # what a cut message may keep: the room left, less the least each shorter older one needs
            older = [t for t in texts[: texts.index(text)] if len(_fenced(t)) <= left]
            piece = _block(text, left - len(note) - sum(min(len(_fenced(t)), _least(t)) for t in older[-3:]))
            piece = piece or _block(text, left - len(note))
        if piece is not None:
            chosen.append(piece + note)
            left -= len(piece) + len(note)
    return list(reversed(chosen))


def _instructions_part(blocks: Sequence[str], room: int) -> str:
    if not blocks:
        return ""
    head = _INSTRUCTIONS_HEAD
    left = room - len(head)
    shown: dict[int, str] = {}
    order = sorted(range(len(blocks)), key=lambda j: len(_fenced(blocks[j])))
    least = max(_least(b) for b in blocks)
    for n, j in enumerate(order):
        share = max(least, left // (len(order) - n))  # never left out: its head and tail at least
        piece = _block(blocks[j], share)
        if piece is None:  # cannot happen with `least`; kept whole-or-cut rather than silently dropped
            piece = _fenced(_head_and_tail(blocks[j], _MIN_PIECE + len(_CUT.format(n=len(blocks[j])))))
        shown[j] = piece
        left -= len(piece)
    return head + "".join(shown[j] for j in sorted(shown))


def _least(text: str) -> int:
    """The room `_block` needs to show `text` at all: its fence, the cut note and `_MIN_PIECE` of it."""
    return len(_fenced(text)) - len(text) + len(_CUT.format(n=len(text))) + _MIN_PIECE


def _head_and_tail(text: str, room: int) -> str:
    """`text` when it fits `room`, else its head (two thirds) and tail around the cut note, within `room`."""
    if len(text) <= room:
        return text
    keep = max(0, room - len(_CUT.format(n=len(text))))
    head = keep * 2 // 3
    tail = len(text) - (keep - head)
    # a text cut before (read back from a previous summary) counts what its own note said was left out
    before = sum(int(m.group(1).replace(",", "")) - len(m.group(0)) for m in _CUT_NOTE.finditer(text, head, tail))
    return text[:head] + _CUT.format(n=len(text) - keep + max(0, before)) + text[tail:]


def _block(text: str, room: int) -> str | None:
    """`text` fenced within `room` characters: whole, else its head and tail around a note; None if no room."""
    whole = _fenced(text)
    if len(whole) <= room:
        return whole
    # the fence is the text's own (longer than any run of backticks in it), not the shortest
    overhead = len(whole) - len(text) + len(_CUT.format(n=len(text)))
    keep = room - overhead
    if keep < _MIN_PIECE:
        return None
    block = _fenced(_head_and_tail(text, keep + len(_CUT.format(n=len(text)))))
    return block if len(block) <= room else None


def _fenced(text: str) -> str:
    """`text` in a code fence longer than any run of backticks in it, so it stays verbatim."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}\n"


def _kind_of(block: str) -> str:
    """What makes two instruction blocks versions of one another: their first line."""
    return block.strip().split("\n", 1)[0].strip()


def render_within(parts: Carried, max_chars: int) -> str:
    """The two parts within `max_chars` at most, for a summary that is nothing else (`ctxkeep.summarize.minimal`):
    the user's words (the first message and the newest, head and tail when over), then the standing instructions
    when they fit beside them (all, else the newest alone); "" when not even the user's part fits."""
    user = _user_part(parts, max_chars)
    if len(user) > max_chars:
        user = ""
    for blocks in (parts.instructions, parts.instructions[-1:]):
        rules = _instructions_part(blocks, max_chars - len(user))
        if len(user) + len(rules) <= max_chars:
            return user + rules
    return user


def words_left_out(summary: str) -> bool:
    """True when `summary` left some of the user's words out: a rule dropped from Constraints (its omission note),
    a message of the verbatim part cut to its head and tail, or no room for the summary's lists at all
    (`LEFT_OUT_NOTES`)."""
    if _CUT_NOTE.search(split_carried(summary)[1]) or any(note in summary for note in LEFT_OUT_NOTES.values()):
        return True
    rules = parse_sections(summary).get(RULES_TITLE, {})
    return any(omitted_count(item) is not None for items in rules.values() for item in items)


def with_recalled(request: SummaryRequest, archived: Callable[[], Iterable[Message]]) -> SummaryRequest:
    """`request` with the user's archived messages (`archived` gives the archive's messages, oldest first) when
    its previous summary left some of the user's words out (`words_left_out`), else `request` itself.

    A squeezed compaction (a huge newest message leaves the summary little room) may drop rules and cut the
    user's messages; the next compaction puts them back from the archive, which has every word, as far as
    its cap allows. The engine calls it with its store's reader; the summarizers themselves never read a file.
    """
    if request.recalled or not request.previous or not words_left_out(request.previous):
        return request
    recalled = tuple(m for m in archived() if m.role == "user" and m.tool_result is None)
    return replace(request, recalled=recalled) if recalled else request


def restored(parts: Carried, recalled: Sequence[Message]) -> Carried:
    """`parts` with each text a squeezed summary cut to its head and tail whole again, from the user's archived
    messages `recalled` (oldest first); `render_carried` fits them to the room there is now."""
    if not recalled:
        return parts
    whole = [s.text for said in voices(recalled) for s in said if s.voice != "standing"]

    def back(text: str | None) -> str | None:
        if text is None or not (cut := _CUT_NOTE.search(text)):
            return text
        head, tail = text[: cut.start()], text[cut.end() :]
        return next((w for w in whole if w.startswith(head) and w.endswith(tail)), text)

    first = back(parts.first)
    return replace(parts, first=first, newest=tuple(t for t in map(back, parts.newest) if t))


def recalled_rules(recalled: Sequence[Message]) -> list[str]:
    """The rules the user stated in the archived messages `recalled` (oldest first), each once."""
    return list(
        dict.fromkeys(r for said in voices(recalled) for s in said if s.voice == "ask" for r in rules_in(s.text))
    )


def newest_within(rules: Sequence[str], room: int) -> list[str]:
    """The newest of `rules` (oldest first) whose list items fit `room` characters together, oldest first: what a
    squeezed summary keeps of the user's rules at the least (its user budget, `budgets`); the archive has the rest."""
    kept: list[str] = []
    for rule in reversed(rules):
        room -= len(rule) + 3  # "- " and the newline
        if room < 0:
            break
        kept.append(rule)
    return kept[::-1]
