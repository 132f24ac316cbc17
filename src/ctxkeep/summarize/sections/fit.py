"""Fitting a summary to a size: the sections share the room fairly, each list cut by a plan of steps.

    demand   Goal ▏ Progress ██████████ Decisions ▏ Critical Context ████████████████
    fitted   Goal ▏ Progress ██████     Decisions ▏ Critical Context ██████

A section that fits its share stays whole; none crowds out the others (at most `MAX_SHARE` of the
size while another section is cut too). The steps: `Shorten` long items, `Drop` items.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal, TypeAlias

from ctxkeep.summarize.sections.markdown import (
    Sections,
    evidence_tail,
    head_of,
    omission_note,
    omitted_count,
    phrase,
    render_item,
    render_section,
    render_sections,
)

# No section takes more than this share of the cap while another section is being cut.
MAX_SHARE = 0.4


@dataclass(frozen=True, kw_only=True, slots=True)
class Drop:
    """One step of `fit_sections`: drop items of one list, from its `end`, while the text is too long.

    `only` limits the step to the items it accepts (the rest stay for a later step or for good).
    A `final` step drops what the summary keeps if it possibly can (file paths, failing commands):
    it runs only when the sections, each cut down to what its other steps leave, still do not fit.
    """

    section: str
    subsection: str = ""
    end: Literal["head", "tail"] = "tail"
    only: Callable[[str], bool] | None = None
    final: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Shorten:
    """One step of `fit_sections`: put items of one list in their short `form`, longest first, while too long.

    `form` returns the item's bounded form, keeping what must stay verbatim, or the item itself when
    it is short already; it must give its own result back unchanged.
    """

    section: str
    subsection: str = ""
    form: Callable[[str], str]


Step: TypeAlias = Drop | Shorten


def fit_sections(
    sections: Sections,
    *,
    max_chars: int,
    plan: Sequence[Step],
    language: str = "en",
    protect: Callable[[str], bool] | None = None,
    max_share: float = MAX_SHARE,
) -> Sections:
    """A copy of `sections` whose rendering has at most `max_chars` characters.

    The sections share the room first: each keeps all it has if it can; those that cannot share
    what is left evenly, but no section gets less than its floor (what its non-final steps cannot
    remove) and, while another section is cut too, none gets more than `max_share` of `max_chars`.
    The lists of one section share its room the same way (without the `max_share` limit). A list
    over its share is cut by its steps of `plan`, in order; within a step, items `protect` accepts
    go last. Only when the floors alone do not fit does every step of `plan` (final ones included)
    run in order over the whole summary, and then the longest items are cut.

    Each list that lost items gets one omission note (notes already in it are folded into that
    one), where the first items went for a "head" step, else at the end. Raises ValueError when
    even that cannot fit `max_chars`.
    """
    if not 0 < max_share <= 1:
        raise ValueError(f"max_share must be a fraction in (0, 1]; got {max_share}")
    fit = _Fitting.of(sections, language, protect)
    if fit.total() > max_chars:
        _balance(fit, plan, max_chars, max_share)
    if fit.total() > max_chars:  # the floors alone are too big: every step, final ones too, in plan order
        fit.trim(plan, fit.total, max_chars)
    total = fit.total()
    if total > max_chars:
        _shorten_longest(fit.work, total - max_chars, language)
    text = render_sections(fit.sections(), language=language)
    if len(text) > max_chars:
        raise ValueError(
            f"the summary needs at least {len(text)} characters even with every optional item dropped;"
            f" raise max_chars (got {max_chars})"
        )
    return fit.sections()


def _balance(fit: _Fitting, plan: Sequence[Step], max_chars: int, max_share: float) -> None:
    """Cut each section over its fair share of `max_chars` down to that share (see `fit_sections`)."""
    titles = [t for t in fit.work if t]
    steps = {t: [s for s in plan if s.section == t and not (isinstance(s, Drop) and s.final)] for t in titles}
    demand = [fit.section_len(t) for t in titles]
    floors = [fit.floor(steps[t], partial(_Fitting.section_len, title=t)) for t in titles]
    room = max_chars - (fit.total() - sum(demand))
    shares = _shares(demand, floors, room, cap=int(max_share * max_chars))
    for title, need, share in zip(titles, demand, shares, strict=True):
        if need > share:
            _fit_section(fit, title, share, steps[title])


def _fit_section(fit: _Fitting, title: str, budget: int, steps: Sequence[Step]) -> None:
    keys = list(fit.work[title])
    own = {k: [s for s in steps if s.subsection == k] for k in keys}
    demand = [fit.list_len(title, k) for k in keys]
    floors = [fit.floor(own[k], partial(_Fitting.list_len, title=title, sub=k)) for k in keys]
    room = budget - (fit.section_len(title) - sum(demand))
    for k, need, share in zip(keys, demand, _shares(demand, floors, room), strict=True):
        if need > share:
            fit.trim(own[k], partial(fit.list_len, title, k), share)
    fit.trim(steps, partial(fit.section_len, title), budget)  # what estimates left over


def _shares(demand: Sequence[int], floors: Sequence[int], room: int, cap: int | None = None) -> list[int]:
    """How much of `room` each part gets: max-min fair, between its floor and its demand.

    Parts that fit whole keep all they need; the others get one level (the highest that fits), but
    never less than their floor; with `cap`, no part gets more than `cap` while another is cut too.
    """
    floors = [min(f, d) for f, d in zip(floors, demand, strict=True)]
    if sum(demand) <= room:
        return list(demand)
    if sum(floors) >= room:
        return floors

    def given(level: int) -> list[int]:
        return [max(f, min(d, level)) for f, d in zip(floors, demand, strict=True)]

    low, high = 0, max(demand)
    while low < high:  # the highest level whose shares fit the room
        mid = (low + high + 1) // 2
        low, high = (mid, high) if sum(given(mid)) <= room else (low, mid - 1)
    shares = given(low)
    cut = [j for j, (s, d) in enumerate(zip(shares, demand, strict=True)) if s < d]
    if cap is not None and len(cut) > 1:
        for j in cut:
            shares[j] = max(floors[j], min(shares[j], cap))
    return shares


@dataclass(kw_only=True, slots=True)
class _Fitting:
    """The lists being fitted and the omission notes they will carry; the steps change them in place."""

    work: Sections
    notes: dict[tuple[str, str], int]
    where: dict[tuple[str, str], int | None]  # index of the note among the kept items; None: last
    language: str
    protect: Callable[[str], bool] | None

    @classmethod
    def of(cls, sections: Sections, language: str, protect: Callable[[str], bool] | None) -> _Fitting:
        fit = cls(work={}, notes={}, where={}, language=language, protect=protect)
        for s, subs in sections.items():
            for k, items in subs.items():
                counts = [omitted_count(i) for i in items]
                if any(c is not None for c in counts):
                    fit.notes[(s, k)] = sum(c for c in counts if c is not None)
                    first = next(j for j, c in enumerate(counts) if c is not None)
                    fit.where[(s, k)] = None if first == len(items) - 1 else first
                fit.work.setdefault(s, {})[k] = [i for i, c in zip(items, counts, strict=True) if c is None]
        return fit

    def copy(self) -> _Fitting:
        work = {s: {k: list(v) for k, v in subs.items()} for s, subs in self.work.items()}
        return _Fitting(
            work=work, notes=dict(self.notes), where=dict(self.where), language=self.language, protect=self.protect
        )

    def sections(self) -> Sections:
        return _with_notes(self.work, self.notes, self.where, self.language)

    def total(self) -> int:
        return len(render_sections(self.sections(), language=self.language))

    def section_len(self, title: str) -> int:
        """Characters of the section as rendered, with the newline that separates it from the next."""
        notes = {key: n for key, n in self.notes.items() if key[0] == title}
        subs = _with_notes({title: self.work.get(title, {})}, notes, self.where, self.language)[title]
        return len("\n".join(render_section(title, subs, self.language))) + 1

    def list_len(self, title: str, sub: str) -> int:
        """Characters of the list's items and note; its heading and "(none)" line never change here."""
        items = self.work.get(title, {}).get(sub, [])
        return sum(map(_item_cost, items)) + _note_cost(self.notes.get((title, sub), 0), self.language)

    def floor(self, steps: Sequence[Step], measure: Callable[[_Fitting], int]) -> int:
        """What `measure` gives once `steps` have removed all they can (on a copy)."""
        trial = self.copy()
        trial.trim(steps, lambda: measure(trial), 0)
        return measure(trial)

    def trim(self, steps: Sequence[Step], measure: Callable[[], int], limit: int) -> None:
        """Run `steps` in order, each while `measure()` is over `limit` and the step still has work."""
        for step in steps:
            while (excess := measure() - limit) > 0 and self.apply(step, excess):
                pass

    def apply(self, step: Step, excess: int) -> bool:
        """Run `step` until about `excess` characters are gone; False when it found nothing to do."""
        current = self.work.get(step.section, {}).get(step.subsection)
        if not current:
            return False
        order = list(range(len(current)))
        if isinstance(step, Shorten):
            order.sort(key=lambda j: -len(current[j]))  # stable: equally long items keep their order
        elif step.end == "tail":
            order.reverse()
        if isinstance(step, Drop) and step.only is not None:
            order = [j for j in order if step.only(current[j])]
        if self.protect is not None:
            keep = self.protect
            order = [j for j in order if not keep(current[j])] + [j for j in order if keep(current[j])]
        if isinstance(step, Shorten):
            return self._shorten(current, order, step.form, excess)
        return self._drop(step, current, order, excess)

    def _shorten(self, current: list[str], order: list[int], form: Callable[[str], str], excess: int) -> bool:
        changed = False
        for j in order:
            if excess <= 0:
                break
            short = form(current[j])
            saved = _item_cost(current[j]) - _item_cost(short)
            if saved > 0:
                current[j] = short
                excess -= saved
                changed = True
        return changed

    def _drop(self, step: Drop, current: list[str], order: list[int], excess: int) -> bool:
        key = (step.section, step.subsection)
        dropped: set[int] = set()
        for j in order:
            if excess <= 0:
                break
            count = self.notes.get(key, 0)
            dropped.add(j)
            self.notes[key] = count + 1
            note_growth = _note_cost(count + 1, self.language) - _note_cost(count, self.language)
            excess -= _item_cost(current[j]) - note_growth
        if not dropped:
            return False
        if step.end == "head":
            at = self.where.get(key)
            self.where[key] = min(dropped) if at is None else min(at, min(dropped))
        self.work[step.section][step.subsection] = [x for j, x in enumerate(current) if j not in dropped]
        return True


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
        item = work[s][k][i]
        tail = evidence_tail(item)  # what backs a Done item stays
        keep = max(120 - len(tail), length - excess - 60 - len(tail), 40)
        body = item.removesuffix(tail)
        head = head_of(body, keep)
        cut = f"{head}… {phrase('truncated', language, n=len(body) - len(head))}{tail}"
        excess -= length - len(cut)
        work[s][k][i] = cut
