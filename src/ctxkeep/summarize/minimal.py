"""The smallest summary: what a compaction sends when the room left is below what a summarizer needs.

    room >= MIN_SUMMARY_CHARS ─► the summarizer's summary is sent (its six sections and the verbatim parts)
    room <  MIN_SUMMARY_CHARS ─► it is kept; sent, if it would take the context over the window:
                                 minimal_summary, a note, the user's first and newest words, the rules if they fit

A big system prompt and tool schemas (60% of a 2,048-token window, say) and the newest messages may leave a
compaction a few hundred characters for its summary. The summarizer still writes its summary (of its floor):
that one is the workspace's, the one the next compaction builds on (`Live.summary_body`). When the context
with it would be over the window, this summary is sent in its place (`ctxkeep.engine.apply`); it fits any room
(down to its one-line note), the archive guide that opens every summary points to the whole conversation,
and the next compaction with more room sends the summary built on the full one again.
"""

from __future__ import annotations

from ctxkeep.summarize.request import SummaryRequest, resolve_language
from ctxkeep.summarize.verbatim import LEFT_OUT_NOTES, carried, render_within, restored


def minimal_summary(request: SummaryRequest, max_chars: int) -> str:
    """The summary of `request` within `max_chars` characters (beyond its one-line note, which it always holds):
    the note that the lists were left out, the user's first and newest words (head and tail when over) and the
    standing instructions when they fit, all carried over from the previous summary and `request.messages`."""
    note = LEFT_OUT_NOTES[resolve_language(request)]
    parts = restored(carried(request.messages, request.previous), request.recalled)
    words = render_within(parts, max_chars - len(note) - 1)
    return f"{note}\n{words}".rstrip("\n") + "\n"
