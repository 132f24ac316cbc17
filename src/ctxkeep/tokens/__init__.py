"""Exact token counts of texts and messages, with a per-message cache. Nothing is downloaded.

    counter = get_counter()                       # o200k_base; "cl100k_base" or a tokenizer.json path
    counter.count_messages(history)               # the whole request, by OpenAI's chat-format rule

Counts are exact (real BPE tokenizers), so compaction triggers where the provider would count. What
each part of a message counts, the image rules, the cache and anchoring on reported usage:
docs/tokens.md.
"""

from __future__ import annotations

from ctxkeep.tokens.counter import Anchor, CacheInfo, Counter, CountSettings, TokenCounter, count_key, get_counter
from ctxkeep.tokens.encodings import (
    ENCODINGS,
    HuggingFaceTokenizer,
    TextTokenizer,
    TiktokenTokenizer,
    ToktokTokenizer,
    load_tokenizer,
)
from ctxkeep.tokens.images import (
    UNKNOWN_IMAGE_TOKENS,
    anthropic_image_tokens,
    image_size,
    image_tokens,
    openai_image_tokens,
)

__all__ = [
    "ENCODINGS",
    "UNKNOWN_IMAGE_TOKENS",
    "Anchor",
    "CacheInfo",
    "CountSettings",
    "Counter",
    "HuggingFaceTokenizer",
    "TextTokenizer",
    "TiktokenTokenizer",
    "TokenCounter",
    "ToktokTokenizer",
    "anthropic_image_tokens",
    "count_key",
    "get_counter",
    "image_size",
    "image_tokens",
    "load_tokenizer",
    "openai_image_tokens",
]
