"""Rules said again with another value: which earlier rule or quoted statement a later one replaces
(`mark_superseded`, `restates`, `superseded_by`), so the older stays, marked, and the change is not lost."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxkeep.summarize.facts.identifiers import find_identifiers
from ctxkeep.summarize.facts.sentences import is_constraint as _is_constraint
from ctxkeep.summarize.facts.sentences import split_sentences as _sentences

SUPERSEDED = "(superseded by a later rule)"


def mark_superseded(rules: Sequence[str]) -> list[str]:
    """`rules` (oldest first), each that a later one restates with another value marked `SUPERSEDED`.

    Two rules are statements of one rule when their words (values left out) mostly agree and their
    values (numbers, code spans, identifiers) differ: "Budget cap is $500" and then "Budget cap is
    $800". The newest value wins; the older stays, marked, so the change is not lost.
    """
    keys = [_rule_key(r) for r in rules]
    out = []
    for j, rule in enumerate(rules):
        words, values = keys[j]
        later = any(
            values
            and other_values
            and values != other_values
            and _overlap(words, other_words) >= 0.6
            and _replaces(values, other_values, rules[k])
            for k, (other_words, other_values) in enumerate(keys[j + 1 :], j + 1)
        )
        out.append(f"{rule} {SUPERSEDED}" if later and not rule.endswith(SUPERSEDED) else rule)
    return out


def restates(older: str, newer: str) -> bool:
    """True when `newer` states the rule `older` states with another value (see `mark_superseded`)."""
    (words, values), (other_words, other_values) = _rule_key(older), _rule_key(newer)
    return bool(
        values
        and other_values
        and values != other_values
        and _overlap(words, other_words) >= 0.6
        and _replaces(values, other_values, newer)
    )


def superseded_by(texts: Sequence[str]) -> list[str | None]:
    """For each of `texts` (the user's messages, oldest first), the first statement of a later one that changes a
    value one of its statements names ("use port 8080", then "actually use 9090"), else None.

    A statement is a sentence that names a value; a later one changes it when it reads as a change (`_corrects`:
    it says so, or both are rules) and restates it with another value
    (`restates`, with two words or more in common), or when all its words are the older one's and its new values
    have the shape of an old one (digits for digits: a port for a port, a version for a version), as a short
    correction does.
    """
    said = [[(_rule_key(s), s) for s in _sentences(t) if _rule_key(s)[1]] for t in texts]
    out: list[str | None] = []
    for j, statements in enumerate(said):
        found = None
        for (words, values), old in statements:
            for later in said[j + 1 :]:
                found = next(
                    (s for key, s in later if _corrects(old, s, values, key[1]) and _changes(words, values, key)), None
                )
                if found is not None:
                    break
            if found is not None:
                break
        out.append(found)
    return out


def _corrects(older: str, newer: str, values: frozenset[str], new_values: frozenset[str]) -> bool:
    """True when `newer` reads as a change of `older`: it says so ("actually", "instead", "now", "change it to"),
    or both are rules that give a setting another amount (`_replaces`); a sequence ("report 9", "report 10") is
    not."""
    if _CORRECTION.search(newer):
        return True
    return _is_constraint(older) and _is_constraint(newer) and _replaces(values, new_values, newer)


# An amount: a number with at most a currency sign before it and a unit or a percent after ("8080", "$500",
# "3.11", "20%", "30s", "16GB"). A name with digits in it ("module_19.py", "v2-api") is not one.
_AMOUNT = re.compile(r"[$€£¥]?\d[\d,.]*(?:%|[A-Za-z]{1,3})?")


def _replaces(values: frozenset[str], new_values: frozenset[str], newer: str) -> bool:
    """True when a rule with `new_values` replaces one with `values` rather than adding to it: the newer says it
    changes something, or every value that differs is an amount. Two rules that name different things ("never
    touch module_19.py", then "never touch module_20.py") both stand; a limit said again with another amount
    ("budget cap is $500", then "$800") replaces the old one."""
    if _CORRECTION.search(newer):
        return True
    differing = _outermost(values ^ new_values)
    # A labelled value ("port 8080") is an amount when its value is.
    return bool(differing) and all(_AMOUNT.fullmatch(v.split()[-1].rstrip(".,")) for v in differing if v.split())


def _outermost(values: frozenset[str]) -> set[str]:
    """`values` without those inside a longer one (the digits a name holds)."""
    return {v for v in values if not any(v != w and v in w for w in values)}


def _changes(words: frozenset[str], values: frozenset[str], newer: tuple[frozenset[str], frozenset[str]]) -> bool:
    """True when the statement `newer` (its words and values) gives another value to the one of `words`, `values`."""
    new_words, new_values = newer
    if not new_values or new_values == values or new_values <= values:
        return False
    if len(words & new_words) >= 2 and _overlap(words, new_words) >= 0.6:
        return True
    shapes = {_shape(v) for v in values}
    return bool(new_words) and new_words <= words and all(_shape(v) in shapes for v in new_values - values)


def _shape(value: str) -> str:
    """A value's shape: its digits as 9 and its letters as a ("8080" and "9090" alike, "3.11" not)."""
    return re.sub(r"[A-Za-z]", "a", re.sub(r"\d", "9", value))


def _rule_key(rule: str) -> tuple[frozenset[str], frozenset[str]]:
    values = frozenset(i.text for i in find_identifiers(rule)) | frozenset(re.findall(r"\d[\d,.]*", rule))
    bare = rule.removesuffix(SUPERSEDED)
    for value in values:
        bare = bare.replace(value, " ")
    words = frozenset(w for w in re.findall(r"[a-z]{3,}|[\u4e00-\u9fff]", bare.lower()) if w not in _RULE_STOPWORDS)
    return words, values


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


# Words that say a statement changes an earlier one.
_CORRECTION = re.compile(
    r"(?i)\b(?:actually|instead|rather|now|change[ds]?|switch(?:ed)?|update[ds]?|correction|make it)\b"
    r"|\bnot\b.{1,40}\bbut\b|^no\b|改为|改成|换成|其实|不是.{1,20}而是"
)
_RULE_STOPWORDS = frozenset({"the", "and", "for", "with", "than", "that", "this", "are", "is", "now", "actually"})
