"""`TokenCounter`: exact token counts of messages, with per-message overhead and a content cache."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import is_, itemgetter
from typing import Any, Protocol, runtime_checkable

from ctxkeep.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.tokens.encodings import ENCODINGS, Backend, TextTokenizer, load_tokenizer
from ctxkeep.tokens.images import Detail, Provider, image_tokens

_PROVIDERS = ("openai", "anthropic")
_DETAILS = ("auto", "high", "low")
_ROLES = ("system", "user", "assistant", "tool")


@runtime_checkable
class Counter(Protocol):
    """What the pipeline needs from a token counter; `TokenCounter` is the implementation."""

    @property
    def name(self) -> str:
        """The tokenizer's name."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of one string."""
        ...

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each string."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message, overhead included."""
        ...

    def count_each(self, messages: Iterable[Message]) -> list[int]:
        """Tokens of each message."""
        ...

    def count_messages(self, messages: Sequence[Message], *, anchor: Anchor | None = None) -> int:
        """Tokens of a request holding `messages`."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class CountSettings:
    """How messages are counted, beyond the tokenizer.

    `provider` picks the image rule (``"openai"`` tiles or ``"anthropic"`` pixels / 750);
    `image_detail` is OpenAI's ``detail`` for images that do not record their own.
    The overheads default to OpenAI's chat format (OpenAI cookbook, "How to count tokens with
    tiktoken"): `tokens_per_message` for ``<|start|>{role}\\n ... <|end|>\\n`` around each message,
    `tokens_per_name` when a message has a ``name``, `reply_priming` once per request for
    ``<|start|>assistant<|message|>``. `cache_size` bounds each of the per-message cache's two
    maps (by object and by content; 0 turns the cache off), so it holds at most 2 × `cache_size`
    messages; they stay in memory until evicted.
    """

    provider: Provider = "openai"
    image_detail: Detail = "auto"
    tokens_per_message: int = 3
    tokens_per_name: int = 1
    reply_priming: int = 3
    cache_size: int = 10_000

    def __post_init__(self) -> None:
        if self.provider not in _PROVIDERS:
            raise ValueError(f"CountSettings.provider must be one of {_PROVIDERS}, got {self.provider!r}")
        if self.image_detail not in _DETAILS:
            raise ValueError(f"CountSettings.image_detail must be one of {_DETAILS}, got {self.image_detail!r}")
        for name in ("tokens_per_message", "tokens_per_name", "reply_priming", "cache_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"CountSettings.{name} must be an int >= 0, got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Anchor:
    """A count the provider reported: `tokens` covers messages[0 .. index], both ends included.

    Typically the response that produced message `index` reported ``usage``; then
    ``tokens = usage.prompt_tokens + usage.completion_tokens`` (for Anthropic, ``input_tokens +
    cache_read_input_tokens + cache_creation_input_tokens + output_tokens``). That figure also covers
    the system prompt and tool definitions sent with that request: do not add them again.
    """

    index: int
    tokens: int

    def __post_init__(self) -> None:
        if not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"Anchor.index must be a message index >= 0, got {self.index!r}")
        if not isinstance(self.tokens, int) or self.tokens < 0:
            raise ValueError(f"Anchor.tokens must be an int >= 0, got {self.tokens!r}")


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """Per-message cache statistics: lookups answered from the cache, lookups counted afresh, entries held.

    `size` is the entries of the by-object map, `content_size` those of the by-content map; each is at
    most ``CountSettings.cache_size``. A message may be in both, so the cache holds between
    max(size, content_size) and size + content_size messages.
    """

    hits: int
    misses: int
    size: int
    content_size: int


_MISS: tuple[None, int] = (None, 0)
_message_of = itemgetter(0)
_count_of = itemgetter(1)


class _MessageCache:
    """Token counts of messages, bounded, least recently used evicted first.

    Two levels, because hashing a `Message` walks all its content (~1.6 µs each, too slow for
    2,000 messages in 1 ms): the same *object* is found by ``id()`` (the entry holds the object,
    so its id cannot be reused while cached); an equal message in another object is found by
    content (``Message`` equality covers every field, so a changed message never matches).
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.by_object: OrderedDict[int, tuple[Message, int]] = OrderedDict()
        self.by_content: OrderedDict[Message, int] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def lookup(self, messages: list[Message]) -> tuple[list[int], list[int]]:
        """Cached counts (0 where unknown) and the indexes of the messages not in the cache."""
        ids = list(map(id, messages))
        by_object = self.by_object
        with self.lock:
            entries = list(map(by_object.get, ids, repeat(_MISS)))
            # the common case, an unchanged history: every message found by identity, all in C loops
            if all(map(is_, map(_message_of, entries), messages)):
                deque(map(by_object.move_to_end, ids), maxlen=0)
                self.hits += len(messages)
                return list(map(_count_of, entries)), []
            counts: list[int] = []
            missing: list[int] = []
            for i, (msg, key, entry) in enumerate(zip(messages, ids, entries, strict=True)):
                if entry[0] is msg:
                    # Re-inserted, not moved: remembering an earlier message of this batch may have evicted it.
                    by_object[key] = by_object.pop(key, entry)
                    counts.append(entry[1])
                    continue
                count = self._by_content(msg)
                if count is None:
                    missing.append(i)
                    counts.append(0)
                else:
                    self._remember_object(msg, count)
                    counts.append(count)
            self.hits += len(messages) - len(missing)
            self.misses += len(missing)
            return counts, missing

    def store(self, messages: Iterable[Message], counts: Iterable[int]) -> None:
        """Remember fresh counts."""
        if self.maxsize == 0:
            return
        with self.lock:
            for msg, count in zip(messages, counts, strict=True):
                self._remember_object(msg, count)
                try:
                    self.by_content[msg] = count
                except TypeError:  # a block holding something unhashable: identity level only
                    continue
                self.by_content.move_to_end(msg)
                if len(self.by_content) > self.maxsize:
                    self.by_content.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.by_object.clear()
            self.by_content.clear()
            self.hits = self.misses = 0

    def _by_content(self, msg: Message) -> int | None:
        try:
            count = self.by_content.get(msg)
        except TypeError:
            return None
        if count is not None:
            self.by_content.move_to_end(msg)
        return count

    def _remember_object(self, msg: Message, count: int) -> None:
        if self.maxsize == 0:
            return
        key = id(msg)
        self.by_object[key] = (msg, count)
        self.by_object.move_to_end(key)
        if len(self.by_object) > self.maxsize:
            self.by_object.popitem(last=False)


class TokenCounter:
    """Counts tokens of texts and messages with one tokenizer and one set of `CountSettings`.

    A message counts ``tokens_per_message`` + its role word + its rendered text + its images
    (docs/tokens.md says exactly what is rendered). Message counts are cached by
    content, so recounting an unchanged history is nearly free. Safe to share between threads.

    The cache relies on messages being immutable. `Message.extra` is frozen one level deep only: a
    dict or list nested inside it can still be changed in place, and the cache does not see that
    (the same object keeps its old count). Change a message with `dataclasses.replace`, never in place.
    """

    def __init__(self, tokenizer: TextTokenizer, settings: CountSettings | None = None) -> None:
        self.tokenizer = tokenizer
        self.settings = settings or CountSettings()
        self._cache = _MessageCache(self.settings.cache_size)
        # Counted on first use: a session reopened with saved counts may never need the tokenizer.
        self._role_tokens: dict[str, int] | None = None

    @property
    def name(self) -> str:
        """The tokenizer's name: an encoding name or a tokenizer.json path."""
        return self.tokenizer.name

    def __repr__(self) -> str:
        return f"TokenCounter({self.name!r}, provider={self.settings.provider!r})"

    # --- text ------------------------------------------------------------------------

    def count_text(self, text: str) -> int:
        """Tokens of one string, counted as ordinary text."""
        return self.tokenizer.count_texts([text])[0] if text else 0

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each string, in one batch."""
        return self.tokenizer.count_texts(texts) if texts else []

    # --- messages --------------------------------------------------------------------

    def count_message(self, message: Message) -> int:
        """Tokens of one message, overhead included, reply priming not."""
        return self.count_each([message])[0]

    def count_each(self, messages: Iterable[Message]) -> list[int]:
        """Tokens of each message (as `count_message`), uncached ones counted in one batch."""
        msgs = messages if isinstance(messages, list) else list(messages)
        counts, missing = self._cache.lookup(msgs)
        if missing:
            fresh_msgs = [msgs[i] for i in missing]
            fresh = self._count_fresh(fresh_msgs)
            for i, count in zip(missing, fresh, strict=True):
                counts[i] = count
            self._cache.store(fresh_msgs, fresh)
        return counts

    def count_messages(self, messages: Sequence[Message], *, anchor: Anchor | None = None) -> int:
        """Tokens of a request holding `messages`: each message plus ``reply_priming``.

        With an `anchor`, messages[0 .. anchor.index] count as ``anchor.tokens`` and only the
        messages after it are counted. Raises ValueError if the anchor is past the end.
        """
        start, base = 0, 0
        if anchor is not None:
            if anchor.index >= len(messages):
                raise ValueError(f"Anchor.index {anchor.index} is past the last message (index {len(messages) - 1})")
            start, base = anchor.index + 1, anchor.tokens
        tail = messages[start:] if start else messages
        return base + sum(self.count_each(tail)) + self.settings.reply_priming

    def cache_info(self) -> CacheInfo:
        """Hits, misses and the entries of each map of the per-message cache."""
        cache = self._cache
        return CacheInfo(
            hits=cache.hits, misses=cache.misses, size=len(cache.by_object), content_size=len(cache.by_content)
        )

    def clear_cache(self) -> None:
        """Forget every cached message count."""
        self._cache.clear()

    # --- tool definitions ------------------------------------------------------------

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens that tool definitions add to a request, by the OpenAI cookbook's rule.

        Accepts OpenAI (``{"type": "function", "function": {...}}``, or the function alone) and
        Anthropic (``input_schema``) definitions. Per tool: 7 tokens (10 for cl100k_base models)
        + ``name:description``; per top-level property: 3 + ``name:type:description``, enums
        3 per item - 3; 3 when there are properties; 12 at the end. Nested object schemas are
        not in the cookbook's rule and are not counted; Anthropic also adds a tool-use system
        prompt of a few hundred tokens, not counted here.
        """
        if not tools:
            return 0
        func_init = 10 if self.name == "cl100k_base" else 7
        texts: list[str] = []
        fixed = 12  # func_end
        for tool in tools:
            fn = tool.get("function", tool)
            fixed += func_init
            texts.append(f"{fn.get('name', '')}:{_strip_period(fn.get('description') or '')}")
            schema = fn.get("parameters") or fn.get("input_schema") or {}
            props = schema.get("properties") or {}
            if props:
                fixed += 3
            for key, prop in props.items():
                fixed += 3
                prop = prop if isinstance(prop, Mapping) else {}
                enum = prop.get("enum")
                if isinstance(enum, list):
                    fixed += -3 + 3 * len(enum)
                    texts.extend(str(item) for item in enum)
                texts.append(f"{key}:{prop.get('type', '')}:{_strip_period(prop.get('description') or '')}")
        return fixed + sum(self.count_texts(texts))

    # --- rendering -------------------------------------------------------------------

    def _count_fresh(self, messages: list[Message]) -> list[int]:
        """Count messages not in the cache: all their texts in one tokenizer batch."""
        texts: list[str] = []
        spans: list[tuple[int, int, int]] = []  # (first text, end, fixed tokens) per message
        for msg in messages:
            start = len(texts)
            fixed = self._render(msg, texts)
            spans.append((start, len(texts), fixed))
        counts = self.tokenizer.count_texts(texts) if texts else []
        return [fixed + sum(counts[start:end]) for start, end, fixed in spans]

    def _render(self, msg: Message, texts: list[str]) -> int:
        """Append the texts of `msg` to `texts`; return its tokens that are not text."""
        s = self.settings
        roles = self._role_tokens
        if roles is None:
            roles = self._role_tokens = dict(zip(_ROLES, self.tokenizer.count_texts(list(_ROLES)), strict=True))
        fixed = s.tokens_per_message + roles[msg.role]
        name = _message_name(msg)
        if name:
            texts.append(name)
            fixed += s.tokens_per_name
        for block in msg.content:
            if isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, ThinkingBlock):
                if not block.redacted:
                    texts.append(block.text)
            elif isinstance(block, ToolCall):
                texts.append(block.name)
                texts.append(block.arguments)
            elif isinstance(block, ToolResult):
                if isinstance(block.content, str):
                    texts.append(block.content)
                    continue
                for part in block.content:
                    if isinstance(part, TextBlock):
                        texts.append(part.text)
                    else:
                        fixed += image_tokens(part, s.provider, s.image_detail)
            elif isinstance(block, ImageBlock):
                fixed += image_tokens(block, s.provider, s.image_detail)
        return fixed


def _message_name(msg: Message) -> str | None:
    """The OpenAI ``name`` of a message: ``extra["name"]``, or where the OpenAI importer keeps it."""
    name = msg.extra.get("name")
    if name is None:
        kept = msg.extra.get("openai")
        name = kept.get("name") if isinstance(kept, Mapping) else None
    return name if isinstance(name, str) and name else None


def _strip_period(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


def count_key(counter: Counter) -> str | None:
    """What names the counts `counter` gives, so that counts saved on disk are reused only by a counter giving
    the same ones: a named encoding (whatever the backend) and the per-message rules. None, never reuse, for any
    other counter: a tokenizer.json may be edited in place, a custom counter may change under the same name."""
    if not isinstance(counter, TokenCounter) or counter.name not in ENCODINGS:
        return None
    s = counter.settings
    return f"{counter.name}/{s.provider}/{s.image_detail}/{s.tokens_per_message}/{s.tokens_per_name}"


def get_counter(
    tokenizer: str | os.PathLike[str] = "o200k_base",
    *,
    settings: CountSettings | None = None,
    backend: Backend | None = None,
) -> TokenCounter:
    """A `TokenCounter` for ``"o200k_base"``, ``"cl100k_base"`` or the path of a tokenizer.json.

    Nothing is downloaded. `backend` (``"toktok"``, default, or ``"tiktoken"``) applies to the two
    named encodings. Raises `TokenizerError` for an unknown name or an unreadable file.
    """
    return TokenCounter(load_tokenizer(tokenizer, backend=backend), settings)
