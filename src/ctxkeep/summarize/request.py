"""What a summarizer is asked (`SummaryRequest`) and what it is (`Summarizer`), and the summary's language."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, TypeAlias

from ctxkeep.messages import Message
from ctxkeep.settings import LANGUAGES, MIN_SUMMARY_CHARS
from ctxkeep.store import OFFLOAD_KEY
from ctxkeep.summarize.facts.identifiers import find_identifiers
from ctxkeep.summarize.sections.markdown import PHRASES

Language: TypeAlias = Literal["en", "zh"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")
_SAMPLE_CHARS = 2_000  # of each text: enough to tell the language, cheap on pasted logs
_SOURCE = re.compile(r"(?P<file>dialog/\d{4}-\d{2}-\d{2}\.jsonl):(?P<first>[1-9]\d*)-(?P<last>[1-9]\d*)")
# Of an offloaded result's saved original, the end a summarizer reads: where a failure says what went wrong.
ORIGINAL_TAIL_CHARS = 4_000


@dataclass(frozen=True, kw_only=True, slots=True)
class SummaryRequest:
    """What a summarizer needs: the messages to compact (oldest first) and how to summarize them.

    `previous` is the previous summary's text (None on the first compaction); `focus` is the
    user's instruction for a manual ``/compact``; `language` is "en", "zh" or "auto" (detected from
    the messages); the summary has at most `max_chars` characters. `originals` maps the saved file of
    an offloaded result among `messages` (``tool_result/<uuid>.txt``, as its offload record names it)
    to the end of its full text (`with_originals` fills it): the kept head of a failed command's
    output rarely says what went wrong, its end does. `recalled` holds the user's messages read back
    from the archive (`verbatim.with_recalled` fills it) when the previous summary left some of their words out
    (a squeezed cap): they are put back when room returns. `source` is where `messages` go in the archive,
    ``dialog/YYYY-MM-DD.jsonl:FROM-TO`` (the engine's plan fills it): each item then names the lines it
    comes from, in the form `ctxkeep recall` accepts.
    """

    messages: tuple[Message, ...]
    previous: str | None = None
    focus: str | None = None
    language: str = "auto"
    max_chars: int = 16_000
    originals: Mapping[str, str] = field(default_factory=dict)
    recalled: tuple[Message, ...] = ()
    source: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.messages, tuple):
            if isinstance(self.messages, str | bytes) or not isinstance(self.messages, Iterable):
                raise TypeError(f"messages must be a sequence of Message, got {type(self.messages).__name__}")
            object.__setattr__(self, "messages", tuple(self.messages))
        for i, msg in enumerate(self.messages):
            if not isinstance(msg, Message):
                raise TypeError(f"messages[{i}] must be a Message, got {type(msg).__name__}")
        if self.source is not None and (not isinstance(self.source, str) or not _SOURCE.fullmatch(self.source)):
            raise ValueError(
                f"source must be dialog/YYYY-MM-DD.jsonl:FROM-TO, where the messages are archived; got {self.source!r}"
            )
        if not isinstance(self.recalled, tuple) or not all(isinstance(m, Message) for m in self.recalled):
            raise TypeError("recalled must be a tuple of Message")
        for name in ("previous", "focus"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be text or None, got {type(value).__name__}")
        if self.language not in LANGUAGES:
            raise ValueError(f"language must be one of {', '.join(LANGUAGES)}; got {self.language!r}")
        if not isinstance(self.max_chars, int) or isinstance(self.max_chars, bool):
            raise TypeError(f"max_chars must be a whole number, got {type(self.max_chars).__name__}")
        if not isinstance(self.originals, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.originals.items()
        ):
            raise TypeError("originals must map file names to text")
        if self.max_chars < MIN_SUMMARY_CHARS:
            raise ValueError(
                f"max_chars must be at least {MIN_SUMMARY_CHARS} (room for the required sections); got {self.max_chars}"
            )


class Summarizer(Protocol):
    """Anything that writes the summary for a request; the text must pass `missing_sections`."""

    def summarize(self, request: SummaryRequest) -> str:
        """The summary text for `request`, at most ``request.max_chars`` characters."""
        ...


def offloaded_files(messages: Iterable[Message]) -> list[str]:
    """The saved files of the offloaded outputs among `messages` (tool results and command outputs), in order."""
    names: list[str] = []
    for msg in messages:
        result = msg.tool_result
        record = (result.extra if result is not None else msg.extra).get(OFFLOAD_KEY)
        name = record.get("file") if isinstance(record, Mapping) else None
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names


def with_originals(request: SummaryRequest, read: Callable[[str], bytes | None]) -> SummaryRequest:
    """`request` with the end of each offloaded output's saved original (`read` gives a file's bytes, or None).

    The engine calls it before the summarizer, with its store's reader; the summarizers themselves
    never read a file. A file `read` does not find (removed by retention) is left out: the output's
    kept head is all there is then. Each text is its last `ORIGINAL_TAIL_CHARS` characters.
    """
    found: dict[str, str] = dict(request.originals)
    for name in offloaded_files(request.messages):
        if name in found:
            continue
        data = read(name)
        if data is not None:
            found[name] = data[-4 * ORIGINAL_TAIL_CHARS :].decode("utf-8", "replace")[-ORIGINAL_TAIL_CHARS:]
    return replace(request, originals=found) if found != request.originals else request


def detect_language(texts: Iterable[str]) -> Language:
    """ "zh" when CJK characters make up at least 40% of the words of `texts`, else "en".

    A CJK character counts as one word, a run of Latin letters as one; identifiers (paths, URLs,
    hashes) are left out first, so a Chinese request naming English file paths stays Chinese.
    """
    cjk, latin = _word_counts(texts)
    return "zh" if cjk and cjk >= 0.4 * (cjk + latin) else "en"


def resolve_language(request: SummaryRequest) -> Language:
    """The request's language; when "auto", detected from the user and assistant text.

    Messages with no words at all leave the language of the previous summary (its text without
    the headings), so an update never flips the language for want of evidence.
    """
    if request.language in ("en", "zh"):
        return "zh" if request.language == "zh" else "en"
    texts = [m.text for m in request.messages if m.role in ("user", "assistant")]
    if request.focus:
        texts.append(request.focus)
    if not any(_word_counts(texts)) and request.previous:
        return _language_of_summary(request.previous)
    return detect_language(texts)


def _language_of_summary(text: str) -> Language:
    """The language of a summary's fixed lines ("- (none)", "### Files read", ...), else of its words."""
    votes = {"en": 0, "zh": 0}
    for line in text.splitlines():
        for language in votes:
            if line == f"- {PHRASES['none'][language]}" or line.startswith(_FIXED_STARTS[language]):
                votes[language] += 1
    if votes["en"] != votes["zh"]:
        return "zh" if votes["zh"] > votes["en"] else "en"
    return detect_language(line for line in text.splitlines() if not line.startswith("#"))


_FIXED_STARTS = {
    language: tuple(
        f"### {PHRASES[k][language]}" for k in ("files_read", "files_modified", "commands_run", "identifiers")
    )
    + tuple(f"- {PHRASES[k][language]}" for k in ("focus", "latest_ask", "pending_ask"))
    for language in ("en", "zh")
}


def _word_counts(texts: Iterable[str]) -> tuple[int, int]:
    cjk = latin = 0
    for text in texts:
        text = text[:_SAMPLE_CHARS]
        for ident in reversed(find_identifiers(text)):
            text = text[: ident.start] + " " + text[ident.start + len(ident.text) :]
        cjk += len(_CJK.findall(text))
        latin += len(_LATIN_WORD.findall(text))
    return cjk, latin


def source_of(request: SummaryRequest, first: int, last: int) -> str | None:
    """Where ``request.messages[first:last + 1]`` are in the archive (``dialog/…jsonl:FROM-TO``), or None when the
    request does not say where its messages go."""
    found = _SOURCE.fullmatch(request.source) if request.source else None
    if found is None:
        return None
    start = int(found["first"])
    return f"{found['file']}:{start + first}" + (f"-{start + last}" if last > first else "")
