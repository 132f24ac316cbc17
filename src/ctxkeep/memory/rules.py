"""Rules after compaction: the first context after a compaction carries the workspace's standing rules again.

The sections of the workspace's ``AGENTS.md`` named in `MemorySettings.rules_sections` (``Session Startup``
and ``Red Lines`` by default) are re-read from disk at every compaction, ``YYYY-MM-DD`` replaced by the
day, cut to `rules_max_chars`, and added to the summary message of that one context, so the agent does
not lose its red lines with the messages that stated them. Later contexts do not repeat them (the prefix
stays the same between compactions, for the prompt cache). Standing instructions found in the messages
themselves are the summarizer's; these come from the file.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import date

from ctxkeep.context import Context, summary_tokens_of
from ctxkeep.errors import CtxkeepError
from ctxkeep.settings import MemorySettings
from ctxkeep.store import AGENTS_FILE, Store
from ctxkeep.summarize.agents_md import agents_rules
from ctxkeep.tokens import Counter

log = logging.getLogger("ctxkeep")

RULES_TAG = "workspace-rules"
_CUT = "\n[… the rest is in AGENTS.md]"


def rules_text(agents_md: str, settings: MemorySettings, day: date) -> str | None:
    """The rule sections of `agents_md` as they are put back, or None when it has none of them."""
    found = agents_rules(agents_md, settings.rules_sections)
    if not found or settings.rules_max_chars == 0:
        return None
    body = "\n\n".join(f"## {name}\n\n{text}" for name, text in found.items()).replace("YYYY-MM-DD", day.isoformat())
    if len(body) > settings.rules_max_chars:
        room = settings.rules_max_chars - len(_CUT)
        cut = body.rfind("\n", 0, room)
        body = body[: cut if cut > room // 2 else max(0, room)] + _CUT
    return f"<{RULES_TAG} source={AGENTS_FILE}>\n{body}\n</{RULES_TAG}>"


def without_rules(summary: str) -> str:
    """`summary` without the AGENTS.md rules `after_compaction` put at its end, if it has them."""
    at = summary.rfind(f"\n\n<{RULES_TAG}")
    return summary[:at] if at >= 0 and summary.endswith(f"</{RULES_TAG}>") else summary


def read_agents_md(store: Store) -> str | None:
    """The workspace's AGENTS.md, read now through the store's memory part; None when it has none."""
    try:
        raw = store.read_memory(AGENTS_FILE)
    except CtxkeepError as exc:
        # A link (AGENTS.md is often linked from a repository) or an unreadable file must not fail the
        # compaction that is being applied: the rules are left out, and the log says why.
        log.warning("the rules of %s are left out of this context: %s", AGENTS_FILE, exc)
        return None
    return None if raw is None else raw.decode("utf-8", errors="replace")


def after_compaction(context: Context, store: Store, settings: MemorySettings, day: date, counter: Counter) -> Context:
    """`context` (the first after a compaction) with the AGENTS.md rules added to its summary message."""
    agents_md = read_agents_md(store)
    rules = None if agents_md is None else rules_text(agents_md, settings, day)
    if rules is None or context.summary is None:
        return context
    summary = f"{context.summary}\n\n{rules}"
    tokens = context.tokens - summary_tokens_of(context.summary, counter) + summary_tokens_of(summary, counter)
    return replace(context, summary=summary, tokens=tokens)
