"""The quality audit of a model-written summary: what it must carry beyond the six sections.

    audit(text, facts, language) -> ["Pending user asks is missing", "the top exact identifiers ...", ...]

Decisions, open TODOs, the user's rules, the pending asks, the top exact identifiers, the
evidence of Done items and the latest ask, each checked against the facts of the compacted
messages (`collect_facts`); a check with nothing to look for passes. Each reason is written to be
sent back to the model as feedback. The checks in full: docs/summarize.md.
"""

from __future__ import annotations

import re

from ctxkeep.summarize.facts.collect import Facts
from ctxkeep.summarize.facts.identifiers import find_identifiers
from ctxkeep.summarize.model.evidence import unbacked
from ctxkeep.summarize.request import Language
from ctxkeep.summarize.sections.markdown import PHRASES, Sections, is_placeholder, omitted_count, parse_sections

AUDIT_ITEMS = ("Decisions", "Open TODOs", "Constraints/Rules", "Pending user asks", "Exact identifiers")
# The identifiers a summary must name itself; the rest (and these, when it fails) are appended by augment.
AUDIT_IDENTIFIERS = 10
# The share of the latest ask's words a summary must contain to reflect it (when it names none of its identifiers).
ASK_OVERLAP = 1 / 3

_PENDING = ("Pending user asks", "待回复的用户请求")
_PENDING_KEYS = frozenset(name.lower() for name in _PENDING)
_IDENTIFIERS = tuple(PHRASES["identifiers"].values())
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'-]{3,}")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")
_MIN_WORDS = 2  # an ask of fewer words ("ok", "go on") cannot be checked
_MAX_WORDS = 30
_STOPWORDS = frozenset(
    """this that with from have what when where which would could should there their them then than they your
    about into also just like make sure please want need will only some more most other such been were being
    does done doing here very much many each these those while after before again can't don't it's i'm""".split()  # noqa: SIM905 (a word list reads best as words)
)
_SAY_ITEMS = 3  # how many of the facts a reason quotes


def audit(text: str, facts: Facts, language: Language = "en") -> list[str]:
    """What `text` (a summary with the six sections) lacks, as reasons for the model; [] when it passes.

    `facts` are the compacted messages' (`collect_facts`), `language` the summary's.
    """
    sections = parse_sections(text)
    reasons: list[str] = []
    for title, found, item in (
        ("Key Decisions", facts.decisions, "the assistant's decisions"),
        ("Next Steps", (*facts.plans, *(t for s, t in facts.todos if s != "completed")), "the open TODOs"),
        ("Constraints & Preferences", facts.constraints, "the rules the user stated"),
    ):
        if found and not _items(sections, title):
            quoted = "; ".join(f"«{f}»" for f in found[:_SAY_ITEMS])
            reasons.append(f"`## {title}` is empty but should hold {item}, such as {quoted}")
    unshown = unbacked(text, facts)
    if unshown:
        quoted = "; ".join(f"«{i}»" for i in unshown[:_SAY_ITEMS])
        reasons.append(
            f"{len(unshown)} Done items show no evidence, such as {quoted}: end each with the call id of the tool"
            " result that shows it done and its lines, or move it to In Progress"
        )
    reasons.extend(_pending_reasons(sections, facts))
    reasons.extend(_identifier_reasons(text, sections, facts))
    if facts.asks and not reflects(text, facts.asks[-1]):
        reasons.append(f"the summary does not reflect the latest user request: «{facts.asks[-1]}»")
    return reasons


def reflects(text: str, ask: str) -> bool:
    """True when `text` names one of the identifiers of `ask` or contains `ASK_OVERLAP` of its words."""
    if any(found.text in text for found in find_identifiers(ask)):
        return True
    words = _words(ask)
    if len(words) < _MIN_WORDS:
        return True
    lowered = text.lower()
    return sum(w in lowered for w in words) >= ASK_OVERLAP * len(words)


def _words(text: str) -> list[str]:
    """The words of `text` that carry meaning: Latin words of 4+ letters not in a stop list, CJK pairs."""
    words = [w.lower() for w in _WORD.findall(text) if w.lower() not in _STOPWORDS]
    for run in _CJK_RUN.findall(text):
        words.extend(run[i : i + 2] for i in range(len(run) - 1))
    return list(dict.fromkeys(words))[:_MAX_WORDS]


def _items(sections: Sections, title: str, sub: str | None = None) -> list[str]:
    """The real items of a section or of one subsection: no placeholders or notes. A section's own items
    leave out its Pending user asks, which are not TODOs."""
    subs = sections.get(title, {})
    if sub is not None:
        lists = [subs.get(sub, [])]
    else:
        lists = [items for name, items in subs.items() if name.strip().lower() not in _PENDING_KEYS]
    return [i for items in lists for i in items if not is_placeholder(i) and omitted_count(i) is None]


def _find_sub(sections: Sections, names: tuple[str, ...]) -> tuple[str, str] | None:
    """(section, subsection) of the first subsection named one of `names` (any case), anywhere."""
    wanted = {name.lower() for name in names}
    for title, subs in sections.items():
        for sub in subs:
            if sub.strip().lower() in wanted:
                return title, sub
    return None


def _pending_reasons(sections: Sections, facts: Facts) -> list[str]:
    where = _find_sub(sections, _PENDING)
    if where is None:
        return ["the `### Pending user asks` subsection under `## Next Steps` is missing (write `- (none)` if none)"]
    if facts.asks and not facts.answered and not _items(sections, *where):
        return [f"`### Pending user asks` is empty but the latest user request is still open: «{facts.asks[-1]}»"]
    return []


def _identifier_reasons(text: str, sections: Sections, facts: Facts) -> list[str]:
    if not facts.identifiers:
        return []
    reasons = []
    if _find_sub(sections, _IDENTIFIERS) is None:
        reasons.append("the `### Exact identifiers` subsection under `## Critical Context` is missing")
    missing = [i for i in facts.identifiers[:AUDIT_IDENTIFIERS] if i not in text]
    if missing:
        listed = ", ".join(f"`{i}`" for i in missing)
        reasons.append(f"these exact identifiers are missing; copy them verbatim under Exact identifiers: {listed}")
    return reasons
