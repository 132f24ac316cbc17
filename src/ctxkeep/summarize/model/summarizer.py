"""The model-written summary: calls to the compaction model, in stages when the history is long, and the
checks every reply must pass.

    SummaryRequest ─► render_messages ─► plan_chunks ─┬─ one part ─► summary_prompt ─┐
                                                      └─ n parts ─► summary_prompt × n ─► merge_prompt
                                                                                       │
        summary ◄─ augment ◄─ held to the log ◄─ best valid reply ◄─ audit, retried with its reasons ◄───┘

Each reply is unwrapped and must have every required section; the final one is audited and asked
again with the reasons. When no reply is valid, `SummaryError` carries the last request and the
raw reply; nothing is ever passed off as a summary. The stages in detail: docs/summarize.md.

    summarizer = ModelSummarizer(get_model("openai:gpt-4o-mini"), settings=ModelSummarySettings(window=128_000))
    summary = summarizer.summarize(SummaryRequest(messages=tuple(to_compact), previous=summary))
    summarizer.last_run.calls    # what it cost: calls, tokens, parts, audit failures left
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ctxkeep.errors import ProviderError, SummaryError
from ctxkeep.pairing import safe_cuts
from ctxkeep.providers import Completion, Model, Turn
from ctxkeep.settings import MIN_SUMMARY_CHARS, PROMPT_RESERVE, SAFETY_MARGIN, ModelSummarySettings
from ctxkeep.summarize.facts.collect import Facts, collect_facts
from ctxkeep.summarize.model.audit import audit
from ctxkeep.summarize.model.augment import Verbatim, augment, fit_text
from ctxkeep.summarize.model.chunks import chunk_limit, plan_chunks
from ctxkeep.summarize.model.evidence import backed_done, span_of, without_unarchived
from ctxkeep.summarize.model.prompts import (
    Prompt,
    cite_rendered,
    merge_prompt,
    render_messages,
    shorten,
    summary_prompt,
)
from ctxkeep.summarize.request import Language, SummaryRequest, resolve_language, source_of
from ctxkeep.summarize.sections import structured
from ctxkeep.summarize.sections.markdown import missing_sections
from ctxkeep.summarize.verbatim import (
    SECTIONS_FLOOR,
    SECTIONS_SKELETON,
    budgets,
    carried,
    carried_rules,
    earlier_summaries,
    recalled_rules,
    render_carried,
    restored,
)
from ctxkeep.tokens import Counter, get_counter

# Feedback from the audit goes into the prompt too: a few reasons, a few identifiers each.
_FEEDBACK_TOKENS = 400
# What the model's text keeps at the least in a squeezed cap, beside the verbatim parts (see `render_carried`).
_SQUEEZED_TEXT = 2 * SECTIONS_SKELETON

_THINK = re.compile(r"<(think|thinking)>.*?</\1>\s*", re.DOTALL | re.IGNORECASE)
# Any fence line, indented or not. A reply wrapped in a fence is not valid nested Markdown (the fences of the
# summary inside close the wrapper), so `unwrap` pairs fence lines up rather than parse them as the summary is.
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class SummaryRun:
    """What one `ModelSummarizer.summarize` spent and left: calls made, tokens sent and received (as the
    server reported them, else our count), parts, messages sent truncated, the parts that failed, the
    attempts at the final reply and the audit failures of the reply kept; the provider's own retries (after
    timeouts, 429, 5xx), and the identifiers the reply was checked for and those appended because it left
    them out (the compaction record, ctxkeep.workspace.records, shows them)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    parts: int = 1
    shortened: int = 0
    gaps: tuple[str, ...] = ()
    attempts: int = 0
    audit: tuple[str, ...] = ()
    retries: int = 0
    identifiers: int = 0
    restored: int = 0


class ModelSummarizer:
    """A `Summarizer` that asks a compaction `model` for the summary and checks the reply.

    `settings` say how (`ModelSummarySettings`: the model's window, the reply's size, retries, the
    audit, JSON replies, how much tool output a prompt shows, AGENTS.md); `counter` counts tokens
    (default o200k). `last_run` says what the latest `summarize` spent.
    """

    def __init__(
        self, model: Model, *, settings: ModelSummarySettings | None = None, counter: Counter | None = None
    ) -> None:
        if settings is not None and not isinstance(settings, ModelSummarySettings):
            raise TypeError(f"settings must be a ModelSummarySettings, got {type(settings).__name__}")
        self.model = model
        self.settings = settings if settings is not None else ModelSummarySettings()
        self.counter = counter if counter is not None else get_counter("o200k_base")
        self.last_run: SummaryRun | None = None
        self._json_tokens = self.counter.count_text(structured.instructions("zh")) + 2

    def __repr__(self) -> str:
        window, max_tokens = self.settings.window, self.settings.max_tokens
        return f"ModelSummarizer({self.model.name!r}, window={window}, max_tokens={max_tokens})"

    def summarize(self, request: SummaryRequest) -> str:
        """The model's summary of `request`, unwrapped, audited, augmented and at most ``request.max_chars``
        characters; `last_run` says what it cost.

        Raises `SummaryError` (with ``.request`` and ``.response``) when the model fails or no reply is
        a summary with every required section.
        """
        run = _Run()
        # The user's messages and the standing instructions are appended verbatim, after the model's text
        # and its augmentation, which share what is left of the cap; the model sees the previous summary
        # without them (or the host's own summary, the first time).
        # In a squeezed cap the model's text keeps more than the extractive skeleton: its augmentation's notes
        # count what it had no room for, and a model is not asked twice.
        parts = restored(carried(request.messages, request.previous), request.recalled)
        appendix = render_carried(parts, max_chars=request.max_chars, sections=_SQUEEZED_TEXT)
        # the previous summary, then the host's own when it compacted too (before us, or since our last summary)
        previous = "\n\n".join(earlier_summaries(request)) or None
        room = request.max_chars - len(appendix)
        inner = dataclasses.replace(request, previous=previous, max_chars=max(MIN_SUMMARY_CHARS, room))
        try:
            # the rules its verbatim texts carried, and those a squeezed summary dropped, back from the archive
            recovered = (*recalled_rules(request.recalled), *carried_rules(request.previous))
            # every rule the model's text lacks is stated, as the extractive summary lists them; in a squeezed
            # cap the newest within the user's budget (the extractive floor), the archive has the rest
            user_room, instruction_room = budgets(request.max_chars)
            squeezed = user_room + instruction_room > max(0, request.max_chars - SECTIONS_FLOOR)
            verbatim = Verbatim(text=appendix, recovered=recovered, rules_room=user_room if squeezed else None)
            text = self._summarize(inner, run, verbatim=verbatim, room=max(1, room))
            # a cap squeezed below the sections' minimum (the first user message keeps its floor anyway)
            return (
                text if len(text) <= room else fit_text(text, max_chars=room, language=resolve_language(inner))
            ) + appendix
        finally:
            self.last_run = run.frozen()

    def _summarize(self, request: SummaryRequest, run: _Run, *, verbatim: Verbatim, room: int) -> str:
        language = resolve_language(request)
        request = dataclasses.replace(request, language=language)  # every part in the same language
        run.language = language
        facts = collect_facts(request.messages, originals=request.originals)
        settings = self.settings
        # the model sees the previous summary within its share of the window (augment reads it whole)
        augmented, request = request, dataclasses.replace(request, previous=self._previous_within(request))
        texts = render_messages(
            request.messages, result_chars=settings.result_chars, arguments_chars=settings.arguments_chars
        )
        # each message with its lines in the archive and each result with its call id: what items cite
        texts = cite_rendered(texts, request.messages, lambda k: source_of(request, k, k))
        counts = self.counter.count_texts(texts)
        overhead = self._tokens(summary_prompt(request, conversation="")) + _FEEDBACK_TOKENS
        try:
            limit = chunk_limit(counts, window=settings.window, max_tokens=settings.max_tokens, overhead=overhead)
        except ValueError as exc:  # a previous summary too large for this model's window
            raise SummaryError(str(exc)) from exc
        cuts = safe_cuts(request.messages)
        chunks = plan_chunks(texts, counts, cuts, limit=limit, window=settings.window, count=self.counter.count_text)
        run.parts = len(chunks)
        run.shortened = sum(len(c.shortened) for c in chunks)
        if len(chunks) == 1:
            text = self._final(
                lambda fb: summary_prompt(request, conversation=chunks[0].text, feedback=fb), facts, language, run
            )
        else:
            part = dataclasses.replace(request, previous=None, focus=None)
            partials: list[str] = []
            for k, chunk in enumerate(chunks, 1):
                prompt = summary_prompt(part, conversation=chunk.text, part=(k, len(chunks)))
                reply, reason = self._attempt(prompt, run)
                if reason is None:
                    partials.append(reply)
                else:
                    run.gaps.append(_gap(chunk.start, chunk.end, k, len(chunks), reason, language))
            if not partials:
                raise self._failure(
                    f"none of the {len(chunks)} parts of the history could be summarized", run
                ) from run.error
            partials = self._reduce(partials, request, run)
            gaps = tuple(run.gaps)
            text = self._final(lambda fb: merge_prompt(partials, request, gaps=gaps, feedback=fb), facts, language, run)
        # held to the log: no line cited that is not archived, nothing done that no tool result shows
        text, _ = without_unarchived(text, span_of(augmented))
        text = backed_done(text, facts, request=augmented, language=language)
        try:
            fit = partial(
                augment, text, augmented, agents_md=settings.agents_md, notes=tuple(run.gaps), verbatim=verbatim
            )
            try:  # within the room the verbatim parts leave, so its notes count what it drops
                out = fit(max_chars=min(room, request.max_chars))
            except ValueError:  # its fixed parts need more: fitted to the request's size, then cut (summarize)
                out = fit()
        except ValueError as exc:
            raise SummaryError(str(exc), request=run.request, response=run.response) from exc
        run.identifiers = len(facts.identifiers)
        run.restored = sum(1 for i in facts.identifiers if i not in text and i in out)
        return out

    def _previous_within(self, request: SummaryRequest) -> str | None:
        """The previous summary as the prompts show it: whole when the prompt it makes up most of fits the
        prompt's room, else fitted to it (its sections cut the way the cap cuts them, then head and tail).

        The prompt's room is `PROMPT_RESERVE` tokens, or half of what the reply leaves of a larger window;
        ctxkeep's own fixed parts must never make a compaction fail for want of room in the model's window.
        """
        previous = request.previous
        if not previous:
            return previous
        window, max_tokens = self.settings.window, self.settings.max_tokens
        rest = self._tokens(summary_prompt(dataclasses.replace(request, previous=None), conversation=""))
        room = math.floor(max(PROMPT_RESERVE, (window - max_tokens) // 2) / SAFETY_MARGIN) - rest - _FEEDBACK_TOKENS
        tokens = self.counter.count_text(previous)
        if tokens <= room:
            return previous
        chars = max(0, len(previous) * room // max(1, tokens))
        for _ in range(4):
            fitted = fit_text(previous, max_chars=max(1, chars), language=resolve_language(request))
            if self.counter.count_text(fitted) <= room:
                return fitted
            chars = chars * 4 // 5
        return shorten(previous, max(0, chars))

    def _final(self, make: Callable[[Sequence[str]], Prompt], facts: Facts, language: Language, run: _Run) -> str:
        """The best valid reply to `make(feedback)`, asked again with the reasons while it fails."""
        best: tuple[list[str], str] | None = None
        feedback: list[str] = []
        for _ in range(1 + self.settings.retries):
            run.attempts += 1
            prompt = make(feedback)
            while feedback and not self._fits(prompt):  # long feedback gives way to the window
                feedback = feedback[:-1]
                prompt = make(feedback)
            text, reason = self._attempt(prompt, run)
            if reason is not None:
                if run.error is not None:
                    break  # the provider already retried; asking again would only wait longer
                feedback = [reason]
                continue
            reasons = audit(text, facts, language) if self.settings.audit else []
            if best is None or len(reasons) < len(best[0]):
                best = (reasons, text)
            if not reasons:
                break
            feedback = reasons
        if best is None:
            raise self._failure("no valid summary", run) from run.error
        run.audit = tuple(best[0])
        if best[0]:
            log.warning("the summary kept still fails %d audit checks: %s", len(best[0]), "; ".join(best[0]))
        return best[1]

    def _reduce(self, partials: list[str], request: SummaryRequest, run: _Run) -> list[str]:
        """`partials` merged in rounds until the final merge request (with the previous summary) fits the window."""
        while not self._fits(merge_prompt(partials, request, gaps=run.gaps)) and len(partials) > 1:
            groups: list[list[str]] = [[]]
            for text in partials:
                if groups[-1] and not self._fits(merge_prompt([*groups[-1], text], request, final=False)):
                    groups.append([])
                groups[-1].append(text)
            if all(len(g) == 1 for g in groups):  # two partials do not fit one request: halve them
                room = (self.settings.window - self.settings.max_tokens - PROMPT_RESERVE) // 2
                partials = [
                    shorten(p, max(1, len(p) * room // max(1, self.counter.count_text(p)) // 2)) for p in partials
                ]
                continue
            merged: list[str] = []
            for group in groups:
                if len(group) == 1:
                    merged.append(group[0])
                    continue
                text, reason = self._attempt(merge_prompt(group, request, final=False), run)
                if reason is not None:
                    raise self._failure("merging the partial summaries failed", run) from run.error
                merged.append(text)
            partials = merged
        return partials

    def _attempt(self, prompt: Prompt, run: _Run) -> tuple[str, str | None]:
        """One call: (the summary, None), or (what came back, why it is not a summary)."""
        text, run.reason = self._call(prompt, run)
        return text, run.reason

    def _call(self, prompt: Prompt, run: _Run) -> tuple[str, str | None]:
        if not self._fits(prompt):  # never sent: a server would cut it or refuse it
            window, max_tokens = self.settings.window, self.settings.max_tokens
            return "", (
                f"the request ({self._tokens(prompt):,} tokens × {SAFETY_MARGIN} + {max_tokens:,} for the reply)"
                f" would exceed the compaction model's window of {window:,} tokens; the previous summary"
                " leaves too little room: lower max_tokens or use a model with a larger window"
            )
        json_reply = self.settings.reply_format == "json"
        completion = Completion(
            system=prompt.system + (f"\n\n{structured.instructions(run.language)}" if json_reply else ""),
            turns=(Turn(role="user", text=prompt.user),),
            max_tokens=self.settings.max_tokens,
            schema=structured.SCHEMA if json_reply else None,
        )
        run.request = _as_json(completion, self.model.name)
        run.calls += 1
        run.error = None
        try:
            reply = self.model.complete(completion)
        except ProviderError as exc:
            run.retries += exc.attempts - 1
            run.response = str(exc)
            run.error = exc
            run.input_tokens += self._tokens(prompt)
            return "", f"the compaction model {self.model.name} failed: {exc}"
        run.retries += reply.attempts - 1
        run.response = reply.text
        run.input_tokens += reply.input_tokens if reply.input_tokens is not None else self._tokens(prompt)
        run.output_tokens += (
            reply.output_tokens if reply.output_tokens is not None else self.counter.count_text(reply.text)
        )
        if json_reply:
            try:
                return structured.to_markdown(reply.text, language=run.language), None
            except ValueError as exc:
                return reply.text, f"{exc}: reply with one JSON object of the schema"
        text = unwrap(reply.text)
        if not text:
            return reply.text, "the reply is empty or has no `## ` heading: write the summary in the format given"
        missing = missing_sections(text)
        if missing:
            return reply.text, f"the summary lacks the sections {', '.join(missing)}: write every section, in order"
        return text, None

    def _failure(self, what: str, run: _Run) -> SummaryError:
        hint = "" if run.error is not None else "; try a larger model, or raise max_tokens if replies were cut off"
        return SummaryError(
            f"{what} ({self.model.name}): {run.reason}{hint}", request=run.request, response=run.response
        )

    def _fits(self, prompt: Prompt) -> bool:
        return math.ceil(self._tokens(prompt) * SAFETY_MARGIN) + self.settings.max_tokens <= self.settings.window

    def _tokens(self, prompt: Prompt) -> int:
        extra = self._json_tokens if self.settings.reply_format == "json" else 0
        return self.counter.count_text(prompt.system) + self.counter.count_text(prompt.user) + extra


class _Run:
    """What a summarize call has spent so far, and its last request and response (for an error)."""

    def __init__(self) -> None:
        self.calls = self.input_tokens = self.output_tokens = self.shortened = self.attempts = 0
        self.retries = self.identifiers = self.restored = 0
        self.parts = 1
        self.gaps: list[str] = []
        self.audit: tuple[str, ...] = ()
        self.request: dict[str, Any] = {}
        self.language: Language = "en"
        self.response = ""
        self.error: ProviderError | None = None
        self.reason: str | None = None

    def frozen(self) -> SummaryRun:
        return SummaryRun(
            calls=self.calls,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            parts=self.parts,
            shortened=self.shortened,
            gaps=tuple(self.gaps),
            attempts=self.attempts,
            audit=self.audit,
            retries=self.retries,
            identifiers=self.identifiers,
            restored=self.restored,
        )


_GAP = {
    "en": "Messages {a}–{b} (part {k} of {n}) could not be summarized ({reason}); read them in the archive.",
    "zh": "第 {a}–{b} 条消息（第 {k} 部分，共 {n} 部分）未能摘要（{reason}）；请在归档中阅读原文。",
}


def _gap(start: int, end: int, k: int, n: int, reason: str, language: Language) -> str:
    return _GAP[language].format(a=start + 1, b=end, k=k, n=n, reason=reason.split(":")[0])


def unwrap(text: str) -> str:
    """The summary inside a reply: from its first ``## `` heading, without a think block or an enclosing fence.

    "" when there is no ``## `` heading at all.
    """
    text = _THINK.sub("", text)
    lines = text.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("## ")), None)
    if start is None:
        return ""
    fenced = any(_FENCE.match(line) for line in lines[:start])
    body = lines[start:]
    if fenced:
        fences = [i for i, line in enumerate(body) if _FENCE.match(line)]
        if len(fences) % 2 == 1:  # the fences inside the summary come in pairs; the odd one closes the wrapper
            body = body[: fences[-1]]
    return "\n".join(body).strip() + "\n"


def _as_json(completion: Completion, model: str) -> dict[str, Any]:
    """The request as the workspace saves it: the model's name and every field of the completion."""
    return {"model": model, **dataclasses.asdict(completion)}
