"""Persistence: a live context kept in a workspace folder, so one process can stop and another go on.

    state.json                 the commit point: generation, summary, archive index, pins (replaced atomically)
    live/<generation>.jsonl    live messages: one line per `add` (a message or a batch) with token counts,
                               plus "replace" lines for results offloaded since (`livelog`)
    summary.md                 a copy of the summary, for people
    compactions.jsonl          one record per compaction or failed attempt (`records`)
    failed/<time>.json         what the summarizer was asked and answered when its summary was refused
    dialog/YYYY-MM-DD.jsonl    the archive of compacted messages (`ctxkeep.archive`)
    tool_result/<uuid>.txt     full texts of offloaded tool results and command outputs

A step makes one durable write: `add` appends its line (one write and one fdatasync, on the live log
the folder keeps open; grouped or none at `durability="batch"` or `"off"`, docs/engine.md) after the
offloads of the steps before it (a crash loses only offloads, which the next `prepare` redoes the same
way). An original in tool_result/ is fsynced at the next compaction: until then the live log holds its
full text, and reopening rewrites an original a power loss cut short. A compaction appends to the
archive, writes the next generation's live file, makes both durable with the originals (one commit),
then replaces state.json; only that rename makes it real. Killed at any point before, the workspace
reopens with the old generation and the archive cut back to its committed size; after it, with the new
one. Either way every message is live or archived exactly once, and the summary is the old or the new.

    state.py     the state file and its one reader (`parse`, `read`)
    livelog.py   the live log's lines, written and read back
    records.py   compactions.jsonl: the records, built and read back
    recovery.py  opening a workspace: what a crash left, put right
    journal.py   what a session writes, in the order above (`Journal`)
    view.py      the workspace read back for people, without a lock (`ctxkeep show`, `ctxkeep report`)
    savings.py   what it saved, priced: `Savings`, `CacheCosts`, `Price` and the list prices
    recall.py    archived messages word for word, saved originals put back (`ctxkeep recall`, the recall tool)

`ctxkeep.session.Session` composes the pass with a `Journal`; proven by `tests/test_crash.py` with a real SIGKILL.
"""
