"""Content as blocks: image URLs, V1 text and image parts, and the content of a tool result."""

from __future__ import annotations

from typing import Any

from ctxkeep.formats.openhands.records import _str
from ctxkeep.messages import ImageBlock, TextBlock


def _images(urls: Any) -> list[ImageBlock]:
    return [ImageBlock.from_url(url) for url in (urls if isinstance(urls, list) else ()) if _str(url).strip()]


def _content_text(value: Any) -> str:
    """The text of a V1 ``TextContent`` (``{"type": "text", "text": ...}``) or a plain string."""
    return _str(value.get("text")) if isinstance(value, dict) else _str(value)


def _content_blocks(content: Any) -> list[TextBlock | ImageBlock]:
    """V1 message content: a string, or a list of text and image parts."""
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    blocks: list[TextBlock | ImageBlock] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            raise TypeError(f"a content part must be an object, got {type(part).__name__}")
        if part.get("type") == "image" or "image_urls" in part:
            blocks.extend(_images(part.get("image_urls")))
        elif _str(part.get("text")):
            blocks.append(TextBlock(text=part["text"]))
    return blocks
