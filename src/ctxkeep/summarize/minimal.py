"""The smallest summary: what a compaction writes when the room left is below what a summarizer needs.

    room >= MIN_SUMMARY_CHARS ─► the summarizer (its six sections and the verbatim parts)
    room <  MIN_SUMMARY_CHARS ─► minimal_summary: a note, the user's first and newest words, the rules if they fit

A big system prompt and tool schemas (60% of a 2,048-token window, say) and the newest messages may leave a
compaction a few hundred characters for its summary. Asking a summarizer for less than its sections' floor
fails, and a compaction that fails sends everything: the context would go over the window. Rather, the
compaction writes this summary, which fits any room (down to its one-line note): the archive guide that opens
every summary points to the whole conversation, and the next compaction with more room reads the user's
words back from the archive (`ctxkeep.summarize.verbatim.with_recalled`, which the note triggers).
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
