"""Decisions: what the assistant chose, with its reason or the user's word, told apart from intents.

A decision is a choice that names its reason or the alternative it turned down, or an approach the
user confirmed ("yes", "go ahead"); one the user turned down is marked rejected, not a decision;
an announced next action ("Now I'll create the bridge", "Let me ..."), a question and a request to
the user never are. `collect_facts` finds the candidates; the rules: docs/summarize.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ctxkeep.summarize.sections.markdown import ITEM_CHARS, clip

# Decisions a summary lists (the extractive summary's Key Decisions caps them the same)
MAX_DECISIONS = 12
REJECTED = "(rejected: the user turned it down; not a decision)"
CONFIRMED = "(confirmed by the user)"
_REJECTS = re.compile(
    r"(?i)^(?:no\b|nope\b|don't\b|do not\b|stop\b|wait\b|not that\b|that's (?:wrong|not)|revert\b|undo\b"
    r"|i said\b|actually,? (?:no|don't)\b)|\b(?:don't do that|not what i (?:asked|want)|i don't want)\b"
    r"|^(?:不要|不是|别这样|撤销|回滚|不对)"
)
_DECISION_STRONG = re.compile(
    r"(?i)\b(?:decided|decision|instead|rather than|switch(?:ed|ing)? to|going with|chose|opt(?:ed)? (?:for|to)"
    r"|the (?:plan|approach|fix|solution) is|we(?:'ll| will) use)\b|决定|改为|改用|采用|选择了|方案是|不再"
)
_DECISION_WEAK = re.compile(r"(?i)\b(?:I'll|I will|let's|going to|we'll|we will)\b|我将|我会|我们将|我们会")
# A decision chooses: it names the alternative it turned down, or says why. "Decided to use X" alone is not
# told apart from an intent; "switch to X instead of Y" and "use X because Y" are.
_CHOICE = re.compile(
    r"(?i)\b(?:instead|rather than|switch(?:ed|ing)? (?:to|from)|over the|not the|because|since|so that"
    r"|so (?:we|it|the)|to (?:avoid|keep|prevent|reduce|save|make sure)|in order to|due to|given (?:that|the)"
    r"|otherwise|which (?:is|keeps|avoids|makes|means))\b|改为|改用|而不是|不再|因为|由于|为了|以便|以免|否则"
)
# The user's reply that confirms the approach the assistant just proposed
_CONFIRMS = re.compile(
    r"(?i)^(?:yes|yep|yeah|sure|ok(?:ay)?|sounds good|looks good|lgtm|go ahead|go for it|do it|agreed|agree"
    r"|perfect|great|correct|exactly|that works|approved|makes sense)\b|^(?:好|可以|行|同意|没问题|就这样|对)"
)
# A question, or a request to the user, proposes at most: the user's answer decides
_ASKS_USER = re.compile(
    r"(?i)^(?:please|would you|could you|do you|shall|should I|once|if|when|let me know)\b|[?？]\s*$"
    r"|请(?:确认|提供|告诉)"
)
_NEXT_ACTION = re.compile(
    r"(?i)^(?:(?:now|next|first|then),?\s+)+(?:I|we)\b|^(?:ok(?:ay)?,?\s+)?let(?: me|'s)\b"
    r"|^(?:现在|接下来|让我|我先|下面)"
)
# An announcement of the next action ("Now I'll create the bridge", "Let me add X") is an intent, never a decision
_INTENT_LEAD = re.compile(
    r"(?i)^(?:(?:now|next|first|then|ok(?:ay)?|great|good|perfect|alright|so),?\s+)*"
    r"(?:let me|let's|I'll|I will|I'm going to|I am going to|I need to|I'm now|I am now|we'll|we need to)\b"
    r"|^(?:现在|接下来|让我|我先|下面)"
)
# "Let me check X" says what happens next, not what was decided
_PROCEDURAL = re.compile(
    r"(?i)\b(?:I'll|I will|let's|let me|going to|we'll|we will)\s+(?:now\s+|first\s+|also\s+|then\s+)?"
    r"(?:read|look|check|run|start|examine|search|explore|verify|investigate|see|try|view|open|inspect|find|review"
    r"|test|analy[sz]e|get|fetch|need|begin|continue|commit|push|wait|summari[sz]e|help|assist)\b"
    r"|我[将会](?:先)?(?:查看|检查|读取|阅读|运行|看看|看一下|搜索|确认)"
)


def rejected(decision: str) -> str:
    return decision if decision.endswith(REJECTED) else f"{decision.removesuffix(CONFIRMED).rstrip()} {REJECTED}"


def confirmed(decision: str) -> str:
    return decision if decision.endswith((REJECTED, CONFIRMED)) else f"{decision} {CONFIRMED}"


def _clip_marked(decision: str) -> str:
    """`decision` clipped to `ITEM_CHARS`, its mark (confirmed, rejected) kept whole."""
    mark = next((m for m in (CONFIRMED, REJECTED) if decision.endswith(m)), "")
    body = decision.removesuffix(mark).rstrip()
    return f"{clip(body, ITEM_CHARS - len(mark) - 1)} {mark}" if mark else clip(body, ITEM_CHARS)


def is_decision(sentence: str) -> bool:
    """True when `sentence` states a decision: a choice with its reason or the alternative it turned down
    ("switch to Redis instead of the dict", "use SQLite because it ships with Python"), or an approach the
    user confirmed or turned down (marked so). An announced next action ("Now I'll create the bridge", "Let me
    check X"), a question or a request to the user ("Please confirm, and I'll proceed") and a lead-in ending
    in ":" are not decisions, even with a reason or the user's yes."""
    bare = sentence.removesuffix(CONFIRMED).removesuffix(REJECTED).rstrip()
    if bare.endswith((":", "：")) or _is_procedural(bare) or _ASKS_USER.search(bare):
        return False
    # "We'll store sessions in SQLite." proposes an approach the user's yes makes a decision; "Now I'll ..."
    # and "Let me ..." announce the next action whatever the user says
    if _NEXT_ACTION.search(bare) if bare != sentence else _INTENT_LEAD.search(bare):
        return False
    if not (_DECISION_STRONG.search(bare) or _DECISION_WEAK.search(bare)):
        return False
    return bare != sentence or bool(_CHOICE.search(bare))


def _is_procedural(sentence: str) -> bool:
    return bool(_PROCEDURAL.search(sentence)) and not _DECISION_STRONG.search(sentence)


def pick_decisions(sentences: list[str]) -> list[str]:
    """Newest first, at most `MAX_DECISIONS`, explicit ones ("decided", "instead") chosen before "I'll";
    only those `is_decision` accepts.
    """
    kept = [s for s in sentences if is_decision(s)]
    newest = _unique(_clip_marked(s) for s in reversed(kept))
    strong = [s for s in newest if _DECISION_STRONG.search(s)]
    weak = [s for s in newest if not _DECISION_STRONG.search(s)]
    chosen = set(strong[:MAX_DECISIONS] + weak[: max(0, MAX_DECISIONS - len(strong))])
    return [s for s in newest if s in chosen]


def proposes(sentence: str) -> bool:
    """True when `sentence` could state a decision ("decided", "instead", "I'll", "let's", 决定 ...): a candidate."""
    return bool(_DECISION_STRONG.search(sentence) or _DECISION_WEAK.search(sentence))


def rejects(text: str) -> bool:
    """True when the user's `text` turns down what the assistant just proposed ("No, keep it in memory")."""
    return bool(_REJECTS.search(text))


def confirms(text: str) -> bool:
    """True when the user's `text` confirms what the assistant just proposed ("Sounds good, go ahead")."""
    return bool(_CONFIRMS.search(text))


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
