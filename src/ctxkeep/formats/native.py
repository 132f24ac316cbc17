"""ctxkeep's own JSONL format as a transcript to load: one message per line, every field kept.

The lines are the persistence codec's (`ctxkeep.codec`), so an archive file loads like any transcript.
"""

from __future__ import annotations

from ctxkeep.codec import MARK, message_from_dict
from ctxkeep.formats.source import RECORD_ERRORS, Conversation, Source, describe
from ctxkeep.messages import Message

NAME = "ctxkeep"


def sniff(source: Source) -> bool:
    """True when the file starts with a ctxkeep message line."""
    return source.head(200).lstrip().startswith('{"v":"' + MARK + '"')


def parse(source: Source) -> list[Conversation]:
    """One conversation of every message line."""
    messages: list[Message] = []
    for lineno, record in source.records():
        try:
            messages.append(message_from_dict(record))
        except RECORD_ERRORS as exc:
            source.skip(lineno, f"not a ctxkeep message ({describe(exc)})")
    return [Conversation(id=source.path, messages=tuple(messages))]
