"""The sections of a workspace's AGENTS.md that hold standing rules, read verbatim by name.

Its own home: memory puts them back after a compaction (`ctxkeep.memory.rules`) and the model summarizer
keeps them in its summary (`ctxkeep.summarize.model.augment`), and neither should reach into the other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxkeep.summarize.sections.markdown import headings

# The sections read by default (`MemorySettings.rules_sections` names others).
RULE_SECTIONS = ("Session Startup", "Red Lines")
# A Markdown heading of any level (the summary's own format uses ``##`` and ``###`` only).
_MD_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")


def agents_rules(agents_md: str, sections: Sequence[str] = RULE_SECTIONS) -> dict[str, str]:
    """The bodies of the `sections` (default `RULE_SECTIONS`) of an AGENTS.md text, verbatim, by section name.

    A heading matches case-insensitively at any ``#`` level; its body runs to the next heading of
    the same or a higher level (``#`` lines inside code fences are not headings).
    """
    lines = agents_md.splitlines()
    found = [(j, level, title.lower()) for j, level, title in headings(lines, _MD_HEADING)]
    out: dict[str, str] = {}
    for name in sections:
        for k, (at, level, title) in enumerate(found):
            if title == name.lower():
                end = next((j for j, lv, _ in found[k + 1 :] if lv <= level), len(lines))
                body = "\n".join(lines[at + 1 : end]).strip("\n")
                if body.strip():
                    out[name] = body
                break
    return out
