"""Exact token counts of texts and messages, with a per-message cache. Nothing is downloaded.

    counter = get_counter()                       # a `Counter`; o200k_base (GPT-4o, GPT-4.1, o-series, GPT-5)
    counter = get_counter("cl100k_base")          # GPT-4, GPT-3.5
    counter = get_counter("models/qwen/tokenizer.json")      # a Hugging Face tokenizer file
    counter = get_counter(settings=CountSettings(provider="anthropic"))   # Anthropic's image rule
    counter.count_text("hello")                   # 1
    counter.count_messages(history)               # the whole request
    counter.count_messages(history, anchor=Anchor(index=k, tokens=usage_total))

Tokenizers (`encodings`): o200k_base and cl100k_base through ``toktok`` (default) or ``tiktoken``
built from ``bpe-openai``'s files (``backend="tiktoken"``, the reference the tests compare to);
any Hugging Face ``tokenizer.json`` through ``tokenizers``. Special-token strings such as
``<|endoftext|>`` written inside a message count as the ordinary text they are.

What a message counts (`TokenCounter.count_message`), following OpenAI's chat format as in the
OpenAI cookbook "How to count tokens with tiktoken":

    tokens_per_message (3)                      <|start|>{role}\\n ... <|end|>\\n
    + tokens of the role word ("user": 1)
    + tokens_per_name (1) + tokens of the name  when the message has an OpenAI ``name``
    + tokens of every text block
    + tokens of every thinking block's text     redacted thinking counts 0 (opaque data)
    + tokens of each tool call's name and of its arguments (the JSON text as the model wrote it)
    + tokens of a tool result's text            ``tool_call_id`` is not counted
    + image tokens by the provider's rule       (`images`; never the base64 text)

`TokenCounter.count_messages` adds ``reply_priming`` (3, ``<|start|>assistant<|message|>``) once
per request. The cookbook's rule is OpenAI's; Anthropic publishes no per-message overhead, so the
same defaults are used for it (set them to 0 in `CountSettings` to count content only). OpenAI
does not publish how tool calls inside messages are rendered: their name and arguments are
counted, without further overhead. Tool definitions are counted separately by
`TokenCounter.count_tools`, by the cookbook's rule.

Caching: counts are cached per message (bounded, least recently used first out). A message is
found again when it is the same object or an equal one; same id with changed content is counted
afresh. Recounting an unchanged 2,000-message history takes well under 1 ms.

Anchoring: a count the provider reported (``usage``) stands for the messages it covered;
`Anchor` says up to which index, and only the messages after it are counted.
"""

from __future__ import annotations

from ctxkeep.tokens.counter import Anchor, CacheInfo, Counter, CountSettings, TokenCounter, get_counter
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
    "get_counter",
    "image_size",
    "image_tokens",
    "load_tokenizer",
    "openai_image_tokens",
]
