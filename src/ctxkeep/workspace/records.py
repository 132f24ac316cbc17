"""The workspace's own account of what happened: one record per compaction, per refused summary, per run of steps.

    compactions.jsonl   {"kind": "compaction", ...}   when, why, tokens before/after, duration, what the
                                                      summarizer spent (`Usage`), the archived line range,
                                                      the results offloaded, the summary it wrote
                        {"kind": "failed", ...}       a compaction not applied, why, what it spent
                        {"kind": "steps", ...}        the tokens sent at each step since the previous one (and
                                                      of those, the ones a prompt cache held), what each step
                                                      decided about aging with its expected saving, the
                                                      window, compaction settings and cache prices
                        {"kind": "repaired", ...}     a torn live-log line dropped at open

`compaction_record`, `failure_record` and `steps_record` build them (pure: the `Journal` writes them); `read` parses the
file back, skipping what it cannot read, for `ctxkeep show` and `ctxkeep report`. Field by field:
docs/report.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import orjson

from ctxkeep.costs import Decision
from ctxkeep.messages import Message
from ctxkeep.originals import record_in
from ctxkeep.settings import CacheSettings, CompactSettings
from ctxkeep.step import Billed, Failure, Step

# A compaction record lists at most this many offloaded results (and says how many more): the record is
# also kept in state.json until it is appended, and must stay small whatever a compaction moves.
MAX_OFFLOADED_LISTED = 200


def offloaded(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The tool results (and user-side command outputs) among `messages` whose full text was saved to
    ``tool_result/``: which, where, how big. A command's output has no call id nor tool name ("")."""
    out: list[dict[str, Any]] = []
    tools: dict[str, str] = {}
    for msg in messages:
        for call in msg.tool_calls:
            tools[call.id] = call.name
        try:
            rec = record_in(msg)
        except ValueError:  # a damaged record in an imported message: nothing ctxkeep saved
            continue
        if rec is None:
            continue
        call_id = msg.tool_result.call_id if msg.tool_result is not None else ""
        out.append(
            {
                "id": msg.id,
                "call_id": call_id,
                "tool": tools.get(call_id, ""),
                "file": rec.file,
                "stage": rec.stage,
                "original_bytes": rec.original_bytes,
                "kept_bytes": rec.kept_bytes,
            }
        )
    return out


def compaction_record(step: Step, *, generation: int) -> dict[str, Any]:
    """The record of the compaction `step` made, which opens `generation` (JSON-ready)."""
    compaction = step.compaction
    if compaction is None:
        raise ValueError("the step made no compaction")
    results = offloaded(step.archived)
    fields = asdict(compaction)
    fields["at"] = compaction.at.isoformat()
    first, last = compaction.archive_lines
    return {
        "kind": "compaction",
        "generation": generation,
        **fields,
        "archive_lines": {"file": compaction.archive_file, "first": first, "last": last},
        "offloaded": {
            "results": len(results),
            "original_bytes": sum(r["original_bytes"] for r in results),
            "kept_bytes": sum(r["kept_bytes"] for r in results),
            "listed": results[:MAX_OFFLOADED_LISTED],
        },
        "summary": step.live.summary_body,
    }


def failure_record(failure: Failure, *, saved: str, step: int) -> dict[str, Any]:
    """The record of a compaction not applied: why, its size, what it spent, where its request and answer were
    `saved`, and `step`, its place among the steps not yet noted (the next "steps" record), for the report."""
    usage = asdict(failure.usage) if failure.usage is not None else None
    return {
        "kind": "failed",
        "at": failure.at.isoformat(),
        "reason": failure.reason,
        "tokens": failure.tokens,
        "saved": saved,
        "usage": usage,
        "step": step,
    }


def failure_detail(failure: Failure) -> bytes:
    """What the summarizer was asked and answered, for ``failed/<time>.json``."""
    detail = {
        "at": failure.at.isoformat(),
        "reason": failure.reason,
        "tokens": failure.tokens,
        "request": failure.request,
        "response": failure.response,
    }
    return orjson.dumps(detail, option=orjson.OPT_INDENT_2)


@dataclass(frozen=True, slots=True)
class StepNote:
    """What the records keep of one step: the tokens sent, those a prompt cache held, and what it decided about
    aging (steps with a compaction: nothing, the compaction's record says what it did)."""

    tokens: int
    cached: int
    aging: Decision | None
    billed: Billed | None = None  # the request as the model's API counted it, when the host said (`note_usage`)

    @classmethod
    def of(cls, step: Step) -> StepNote:
        """The note of `step`."""
        aging = step.live.aging if step.compaction is None else None
        return cls(step.context.tokens, step.cached, aging)


def usage_record(billed: Billed) -> dict[str, Any]:
    """The record of how the model's API counted the request of the newest step noted before it (its "steps"
    record went with its compaction's, before the answer came)."""
    return {"kind": "usage", **billed.to_dict()}


def steps_record(
    steps: Sequence[StepNote], *, first: datetime, last: datetime, compact: CompactSettings, cache: CacheSettings
) -> dict[str, Any]:
    """The record of a run of `steps`: the tokens of the context sent at each, oldest first, and of those the ones
    a prompt cache held (`Step.cached`), and how the model's API counted them where the host said (``billed``, a
    list beside them, null for a step it did not); what each decided about the results waiting for their older cut
    (`ctxkeep.costs.Decision`, with the step's place in the run); the window, threshold and kept tail they ran
    under (`compact`) and the cache prices (`cache`), so a report draws and prices them without being told."""
    decisions = [{"step": i, **s.aging.to_dict()} for i, s in enumerate(steps) if s.aging is not None]
    billed = {"billed": [None if s.billed is None else s.billed.to_dict() for s in steps]}
    return {
        "kind": "steps",
        "first": first.isoformat(),
        "last": last.isoformat(),
        "tokens": [s.tokens for s in steps],
        "cached": [s.cached for s in steps],
        "aging": decisions,
        "window": compact.max_input_length,
        "threshold": compact.compact_threshold,
        "reserve": compact.reserve,
        "settings": asdict(compact),
        "cache": asdict(cache),
        **(billed if any(s.billed is not None for s in steps) else {}),
    }


def to_line(record: dict[str, Any]) -> bytes:
    """One line of ``compactions.jsonl``."""
    return orjson.dumps(record) + b"\n"


def last_compaction_generation(raw: bytes) -> int | None:
    """The generation of the newest compaction record in the bytes of a ``compactions.jsonl``, or None."""
    for line in reversed(raw.splitlines()):
        with contextlib.suppress(orjson.JSONDecodeError):
            rec = orjson.loads(line)
            if isinstance(rec, dict) and rec.get("kind") == "compaction":
                return int(rec["generation"])
    return None


def read(raw: bytes) -> tuple[list[dict[str, Any]], int]:
    """The records in the bytes of a ``compactions.jsonl`` and how many lines could not be read (skipped)."""
    out: list[dict[str, Any]] = []
    bad = 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if isinstance(rec, dict) and isinstance(rec.get("kind"), str):
            out.append(rec)
        else:
            bad += 1
    return out, bad
