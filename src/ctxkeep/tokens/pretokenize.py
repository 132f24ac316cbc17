"""tiktoken's split pattern (``\\p{L}`` classes and all) in the standard library's `re`, for the first counts.

The pattern needs Unicode property classes, which only the `regex` package has; importing it costs
~12 ms (more on a busy machine), a tenth of ``ctxkeep inspect`` on a small file. `re` (already loaded
by every command) has everything else the two patterns use: possessive quantifiers, scoped ``(?i:)``,
lookahead. So each property class is written out as the characters of it the texts hold: all of
ASCII, plus every non-ASCII character seen so far, classified by `unicodedata`. A text bringing new
characters compiles the pattern again (~1 ms); one bringing a character `unicodedata` does not know
(unassigned in its Unicode version, which may be older than `regex`'s) hands over to `regex`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# The General Categories of each property the patterns use; ``s`` is \s: the White_Space property.
_CATEGORIES: dict[str, frozenset[str]] = {
    "L": frozenset({"Lu", "Ll", "Lt", "Lm", "Lo"}),
    "Lu": frozenset({"Lu"}),
    "Ll": frozenset({"Ll"}),
    "Lt": frozenset({"Lt"}),
    "Lm": frozenset({"Lm"}),
    "Lo": frozenset({"Lo"}),
    "M": frozenset({"Mn", "Mc", "Me"}),
    "N": frozenset({"Nd", "Nl", "No"}),
}
_ASCII: dict[str, str] = {"L": "A-Za-z", "Lu": "A-Z", "Ll": "a-z", "N": "0-9", "s": r"\t\n\x0b\x0c\r "}
# White_Space beyond ASCII (a Unicode stability guarantee keeps this list fixed).
_SPACES = frozenset("\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B))))
# \p{X}, \s, \S, any other escape, a class opening, a class closing, one character.
_TOKEN = re.compile(r"\\p\{(\w+)\}|\\([sS])|\\.|\[\^?|\]|.", re.DOTALL)


class Pretokenizer:
    """The pieces a tiktoken pattern splits texts into, as ``regex.compile(pattern).findall`` gives them."""

    def __init__(self, pattern: str) -> None:
        self._pattern = pattern
        self._members: dict[str, list[str]] = {name: [] for name in (*_CATEGORIES, "s")}
        self._known: set[str] = set()
        self._findall: Callable[[str], list[str]] | None = None  # compiled on first use
        self._regex = False

    def prepare(self, texts: Sequence[str]) -> Callable[[str], list[str]]:
        """The `findall` that splits each of `texts`, learning the characters they bring first."""
        if not self._regex:
            new = {c for c in set("".join(texts)) if c > "\x7f"} - self._known
            if new:
                self._learn(new)
        if self._findall is None:
            self._findall = self._compile()
        return self._findall

    def _learn(self, chars: set[str]) -> None:
        import unicodedata

        for char in sorted(chars):
            category = unicodedata.category(char)
            if category == "Cn":  # newer than this Python's Unicode: only `regex` knows its class
                import regex  # tiktoken's own dependency

                self._findall = regex.compile(self._pattern).findall
                self._regex = True
                return
            for name, categories in _CATEGORIES.items():
                if category in categories:
                    self._members[name].append(char)
            if char in _SPACES:
                self._members["s"].append(char)
        self._known |= chars
        self._findall = None

    def _compile(self) -> Callable[[str], list[str]]:
        """The pattern with every property class written out as its ASCII part and the characters seen."""

        def members(name: str) -> str:
            return _ASCII.get(name, "") + "".join(f"\\U{ord(c):08x}" for c in self._members[name])

        out: list[str] = []
        inside = False
        for token in _TOKEN.finditer(self._pattern):
            text, prop, space = token.group(0), token.group(1), token.group(2)
            if prop or space:
                if space == "S" and inside:
                    raise ValueError(f"\\S inside a class is not supported: {self._pattern!r}")
                body = members(prop or "s")
                out.append(body if inside else f"[^{body}]" if space == "S" else f"[{body}]")
            elif text.startswith("[") and not inside:
                inside = True
                out.append(text)
            elif text == "]" and inside:
                inside = False
                out.append(text)
            else:
                out.append(text)
        return re.compile("".join(out)).findall
