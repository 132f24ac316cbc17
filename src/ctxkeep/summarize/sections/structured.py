"""The summary as JSON held to a schema, for servers with structured output (llama.cpp, vLLM, Ollama, OpenAI,
Anthropic), so that even a very small model returns every section.

    SCHEMA ─► Completion(schema=...) ─► '{"goal": [...], ...}' ─► to_markdown ─► the six sections

Each field is a bounded list of short items and stands for one section or subsection (`FIELDS`);
`to_markdown` renders them as the Markdown form, so the rest of the pipeline sees the same text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxkeep.summarize.sections.markdown import ITEM_CHARS, render_sections

# field -> (section, subsection); "" is the section's own items
FIELDS: Mapping[str, tuple[str, str]] = {
    "goal": ("Goal", ""),
    "constraints": ("Constraints & Preferences", ""),
    "done": ("Progress", "Done"),
    "in_progress": ("Progress", "In Progress"),
    "blocked": ("Progress", "Blocked"),
    "decisions": ("Key Decisions", ""),
    "next_steps": ("Next Steps", ""),
    "pending_user_asks": ("Next Steps", "Pending user asks"),
    "critical_context": ("Critical Context", ""),
    "exact_identifiers": ("Critical Context", "Exact identifiers"),
}
MAX_ITEMS = 8  # per field: 10 fields of short items stay within a 4,096-token reply

SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        name: {"type": "array", "items": {"type": "string", "maxLength": ITEM_CHARS}, "maxItems": MAX_ITEMS}
        for name in FIELDS
    },
    "required": list(FIELDS),
    "additionalProperties": False,
}

_INSTRUCTIONS = {
    "en": "Reply with one JSON object instead of Markdown. Its fields hold the items of the sections above,"
    " each a list of short strings: {fields}.",
    "zh": "请用一个 JSON 对象代替 Markdown 作答。它的字段对应上面各章节的条目，每个字段是一组简短的字符串：{fields}。",
}


def instructions(language: str) -> str:
    """What the system prompt adds when the reply must be JSON: which field holds which section."""
    fields = ", ".join(f"{name} = {title}{' / ' + sub if sub else ''}" for name, (title, sub) in FIELDS.items())
    return _INSTRUCTIONS["zh" if language == "zh" else "en"].format(fields=fields)


def to_markdown(text: str, *, language: str = "en") -> str:
    """The Markdown summary of a JSON reply held to `SCHEMA`; ValueError says what is wrong with it."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("the reply is JSON nested deeper than the summary's schema allows") from None
    except ValueError as exc:
        raise ValueError(f"the reply is not JSON ({exc.args[0] if exc.args else exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"the reply is JSON but not an object (a {type(value).__name__})")
    missing = [name for name in FIELDS if name not in value]
    if missing:
        raise ValueError(f"the reply lacks the fields {', '.join(missing)}")
    sections: dict[str, dict[str, list[str]]] = {}
    for name, (title, sub) in FIELDS.items():
        items = value[name]
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"the field {name} must be a list of strings")
        subs = sections.setdefault(title, {})
        subs.setdefault("", [])
        # a small model held to the schema repeats itself; an item said twice says nothing more
        subs[sub] = list(dict.fromkeys(" ".join(i.split()) for i in items if i.strip()))
    return render_sections(sections, language=language)
