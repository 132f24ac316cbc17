"""What a user's prose is made of, for the facts: its sentences (`split_sentences`), and which of them state a
rule (`is_constraint`). Shared by the facts (`collect`) and the rules said again with another value
(`superseded`)."""

from __future__ import annotations

import re

# Words that make a sentence a rule: what the agent must, must not, should always or would rather do.
CONSTRAINT = re.compile(
    r"(?i)\b(?:must|mustn't|never|don't|do not|always|prefer|preferably|should|shouldn't|please use"
    r"|make sure|ensure|avoid|not allowed|forbidden|required)\b"
    # "only" and "no" as the start of a rule ("only touch X", "no new dependencies"), and "X, not Y"
    r"|(?:^|[,;:(]\s*|\b(?:please|use|run|touch|change|edit|modify|read|write|commit)\s+)only\s+(?=[\w`])"
    r"|(?:^|[;:(]\s*)no\s+(?=[\w`])"
    r"|,\s*not\s+(?!sure|yet|really|quite|just|only|even|that|so|too|very)\w"
    r"|\b(?:want|would like|would rather|important (?:not )?to)\b"
    # "instead of" rules when it says what to do ("use ruff instead of flake8"), not in a bug report
    r"|\b(?:use|prefer|choose|pick|go with|keep|call|write|run)\b[^.;\n]{0,80}\binstead of\b"
    r"|必须|不要|不能|不得|禁止|务必|只(?!是)|仅|一定要|请(?:使用|用|勿|务必|保持|确保|不要|只|一定|别)|应该|尽量|避免|优先|别(?!的|人)"
    r"|希望|想要|最好|重要的是|而不是|宁可"
)
# a rule introducing what follows ("Body, always:") says nothing alone unless it has this many words
LEAD_IN_WORDS = 5
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")
LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)]|#{1,6}|>)\s+")


def is_constraint(candidate: str) -> bool:
    """True when `candidate` states a rule itself; a short lead-in to what follows ("Body, always:") does not."""
    if not CONSTRAINT.search(candidate):
        return False
    return not (candidate.endswith((":", "：")) and len(candidate.split()) < LEAD_IN_WORDS)


def split_sentences(text: str) -> list[str]:
    """Sentences of prose in `text`: code blocks left out, list marks and emphasis taken off."""
    out: list[str] = []
    fenced = False
    for line in text.replace("’", "'").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") or line.lstrip().startswith("|"):
            continue
        line = LIST_MARK.sub("", line).replace("**", "").strip()
        for part in SENTENCE_END.split(line):
            part = " ".join(part.split())
            if len(part) >= 4:
                out.append(part)
    return out
