"""Memory in the pass: the two hooks of a compaction, which receive the compaction's own plan.

    plan ─► summary written ─► before_compaction: flush what the plan cuts to the day's log
                            ─► apply ─► after_compaction: the first context carries the AGENTS.md rules

The engine calls them (`ctxkeep.engine.PassHooks`); memory never plans a cut of its own, so what it notes
is exactly what the compaction archives.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxkeep.context import Context
from ctxkeep.live import Live
from ctxkeep.plan import Plan
from ctxkeep.providers import Model
from ctxkeep.settings import MemorySettings
from ctxkeep.store import Store
from ctxkeep.tokens import Counter

from . import flush, rules


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryHooks:
    """The memory flush before a compaction and the workspace rules after one, over the workspace's `store`."""

    store: Store
    settings: MemorySettings
    counter: Counter  # counts the summary once the rules are added to it
    model: Model | None = None  # writes the flush's notes; None: by rule

    def before_compaction(self, plan: Plan, live: Live) -> None:
        """Note what `plan` archives, once per cycle (the archive's size before it names the cycle)."""
        flush.before_compaction(
            self.store,
            plan.cut.to_compact,
            cycle=live.archive.lines,
            now=plan.at,
            settings=self.settings,
            model=self.model,
        )

    def after_compaction(self, plan: Plan, context: Context) -> Context:
        """`context`, the first after the compaction, with the AGENTS.md rules at the end of its summary."""
        return rules.after_compaction(context, self.store, self.settings, plan.at.date(), self.counter)
