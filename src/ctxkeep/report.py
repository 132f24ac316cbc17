"""What `ctxkeep inspect` reports about a transcript: tokens by role and by tool, the
largest tool results, pairing problems. A plain dict, so `--json` is just `json.dumps`.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import Any

from ctxkeep.formats import Transcript
from ctxkeep.messages import Message
from ctxkeep.pairing import validate
from ctxkeep.tokens import Counter

TOP_RESULTS = 10
MAX_CONVERSATIONS = 10  # rows of the conversation table in the text report
PROGRESS_CHUNK = 500  # messages counted between progress updates


def build_report(
    transcript: Transcript,
    counter: Counter,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Token and pairing figures for every conversation of `transcript`.

    `progress(done, total)` is called as messages are counted.
    """
    all_messages = transcript.messages
    total_messages = len(all_messages)
    by_role: Tally[str] = Tally()
    tool_calls: Tally[str] = Tally()
    tool_tokens: Tally[str] = Tally()
    results: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    conversations: list[dict[str, Any]] = []
    done = 0
    for conv in transcript.conversations:
        counts: list[int] = []
        for start in range(0, len(conv.messages), PROGRESS_CHUNK):
            counts += counter.count_each(conv.messages[start : start + PROGRESS_CHUNK])
            if progress is not None:
                progress(done + len(counts), total_messages)
        done += len(conv.messages)
        names = _tool_names(conv.messages)
        for i, (msg, tokens) in enumerate(zip(conv.messages, counts, strict=True)):
            by_role[msg.role] += tokens
            for call in msg.tool_calls:
                tool_calls[call.name] += 1
            result = msg.tool_result
            if result is not None:
                name = names.get(result.call_id, "?")
                tool_tokens[name] += tokens
                results.append(
                    {
                        "tool": name,
                        "call_id": result.call_id,
                        "tokens": tokens,
                        "bytes": len(result.text.encode("utf-8")),
                        "conversation": conv.id,
                        "conversation_title": conv.title,
                        "index": i,
                        "is_error": result.is_error,
                    }
                )
        problems.extend({"conversation": conv.id, **_problem(p)} for p in validate(conv.messages))
        conversations.append(
            {"id": conv.id, "title": conv.title, "messages": len(conv.messages), "tokens": sum(counts)}
        )
    results.sort(key=lambda r: (-r["tokens"], r["conversation"], r["index"]))
    tools = sorted(set(tool_calls) | set(tool_tokens), key=lambda t: (-tool_tokens[t], t))
    return {
        "file": transcript.path,
        "format": transcript.format,
        "encoding": counter.name,
        "conversations": len(transcript.conversations),
        "messages": total_messages,
        "tokens": sum(by_role.values()),
        "by_role": dict(sorted(by_role.items(), key=lambda kv: -kv[1])),
        "by_tool": [{"tool": t, "calls": tool_calls[t], "result_tokens": tool_tokens[t]} for t in tools],
        "largest_tool_results": results[:TOP_RESULTS],
        "pairing_problems": problems,
        "notes": list(transcript.notes),
        "left_out": dict(transcript.left_out),
        "per_conversation": conversations,
    }


def _tool_names(messages: Iterable[Message]) -> dict[str, str]:
    return {call.id: call.name for m in messages for call in m.tool_calls}


def _problem(p: Any) -> dict[str, Any]:
    return {"kind": p.kind, "index": p.index, "call_id": p.call_id, "detail": p.detail}


def render_text(report: dict[str, Any]) -> str:
    """The report as aligned plain text for a terminal."""
    lines = [
        f"{report['file']}",
        f"  format {report['format']}, {report['conversations']} conversation(s), "
        f"{report['messages']:,} messages, {report['tokens']:,} tokens ({report['encoding']})",
        "",
        "tokens by role",
    ]
    for role, tokens in report["by_role"].items():
        lines.append(f"  {role:<10} {tokens:>12,}  {_share(tokens, report['tokens'])}")
    if report["by_tool"]:
        lines += ["", "tools                                   calls  result tokens"]
        for row in report["by_tool"]:
            lines.append(f"  {row['tool'][:36]:<36} {row['calls']:>7,}  {row['result_tokens']:>13,}")
    if report["largest_tool_results"]:
        lines += ["", f"largest tool results (top {TOP_RESULTS})"]
        for r in report["largest_tool_results"]:
            where = f"#{r['index']}"
            if report["conversations"] > 1:
                where = f"{_short_name(r['conversation_title'] or r['conversation'])} {where}"
            error = "  error" if r["is_error"] else ""
            lines.append(f"  {r['tokens']:>9,} tok {r['bytes']:>10,} B  {r['tool'][:30]:<30} {where}{error}")
    convs = report["per_conversation"]
    if len(convs) > 1:
        lines += ["", "conversations                            messages        tokens"]
        for c in sorted(convs, key=lambda c: -c["tokens"])[:MAX_CONVERSATIONS]:
            lines.append(f"  {_short_name(c['title'] or c['id']):<36} {c['messages']:>9,}  {c['tokens']:>12,}")
        if len(convs) > MAX_CONVERSATIONS:
            lines.append(f"  ... {len(convs) - MAX_CONVERSATIONS} more (see --json)")
    problems = report["pairing_problems"]
    lines += ["", f"pairing problems: {len(problems) or 'none'}"]
    for p in problems[:20]:
        conv = f"{p['conversation']} " if report["conversations"] > 1 else ""
        call = f" (call {p['call_id']})" if p["call_id"] else ""
        lines.append(f"  {conv}message {p['index']}: {p['kind'].replace('_', ' ')}{call}")
    if len(problems) > 20:
        lines.append(f"  ... {len(problems) - 20} more (see --json)")
    left_out = report["left_out"]
    if left_out:
        lines += ["", f"records left out (no message made of them): {sum(left_out.values()):,}"]
        lines += [f"  {n:>7,}  {kind}" for kind, n in left_out.items()]
    for note in report["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _short_name(name: str, width: int = 36) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "     -"
