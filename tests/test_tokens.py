"""Token counting: exactness against tiktoken, message overhead, images, cache, anchor, errors."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import raw_params

import ctxkeep.tokens as tokens_pkg
from ctxkeep.errors import CtxkeepError, TokenizerError
from ctxkeep.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from ctxkeep.tokens import (
    UNKNOWN_IMAGE_TOKENS,
    Anchor,
    CacheInfo,
    CountSettings,
    TiktokenTokenizer,
    TokenCounter,
    anthropic_image_tokens,
    get_counter,
    image_tokens,
    openai_image_tokens,
)
from ctxkeep.tokens.encodings import load_tokenizer, read_bpe_ranks
from ctxkeep.tokens.images import image_size_from_base64, image_size_from_bytes

ENCODINGS = ("o200k_base", "cl100k_base")


# --- exactness against the reference ---------------------------------------------------


def _strings(obj: Any) -> Iterator[str]:
    """Every string value in a JSON document."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _raw_texts(path: Path) -> list[str]:
    """The distinct string values of a raw transcript (a JSON document or JSONL)."""
    text = path.read_text(encoding="utf-8")
    found: set[str] = set()
    try:
        found.update(_strings(json.loads(text)))
    except ValueError:
        for line in text.splitlines():
            try:
                found.update(_strings(json.loads(line)))
            except ValueError:
                continue
    return sorted(found)


@pytest.fixture(scope="module")
def reference() -> dict[str, TiktokenTokenizer]:
    """tiktoken built from bpe-openai's files: the counts every backend must match."""
    return {name: TiktokenTokenizer(name) for name in ENCODINGS}


@pytest.mark.parametrize("path", raw_params())
def test_counts_match_tiktoken_on_transcripts(path: Path, reference: dict[str, TiktokenTokenizer]) -> None:
    texts = _raw_texts(path)
    assert texts
    for name in ENCODINGS:
        expected = reference[name].count_texts(texts)
        got = get_counter(name).count_texts(texts)
        wrong = [(i, len(texts[i]), e, g) for i, (e, g) in enumerate(zip(expected, got, strict=True)) if e != g]
        assert wrong == [], f"{name}: (index, chars, tiktoken, ours) {wrong[:5]}"


@pytest.mark.parametrize("path", raw_params("tau_bench_results")[:1])
def test_message_counts_match_between_backends(path: Path) -> None:
    texts = _raw_texts(path)[:3000]
    msgs = [Message.of("user" if i % 2 else "assistant", t) for i, t in enumerate(texts)]
    for name in ENCODINGS:
        fast = get_counter(name).count_each(msgs)
        ref = get_counter(name, backend="tiktoken").count_each(msgs)
        assert fast == ref


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("backend", ["toktok", "tiktoken"])
def test_special_token_strings_are_ordinary_text(name: str, backend: Any, reference: dict[str, Any]) -> None:
    text = "a <|endoftext|> b <|endofprompt|> <|fim_prefix|>"
    expected = len(reference[name].encoding.encode_ordinary(text))
    assert expected > 5  # as text, not 1 token each
    assert get_counter(name, backend=backend).count_text(text) == expected


def test_known_counts() -> None:
    counter = get_counter()
    assert counter.count_text("hello world") == 2
    assert counter.count_text("") == 0
    assert counter.count_texts([]) == []
    assert get_counter("cl100k_base").count_texts(["tiktoken is great!"]) == [6]  # OpenAI cookbook


def test_constants_match_tiktoken_openai_public(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our restated pat_str, special tokens and file hashes equal tiktoken's own (no download)."""
    from tiktoken_ext import openai_public

    from ctxkeep.tokens import encodings

    seen: dict[str, str] = {}

    def fake_load(url: str, expected_hash: str) -> dict[bytes, int]:
        seen[url] = expected_hash
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    for name in ENCODINGS:
        spec = getattr(openai_public, name)()
        ours = encodings._TIKTOKEN_SPECS[name]
        assert spec["pat_str"] == ours["pat_str"]
        assert spec["special_tokens"] == ours["special_tokens"]
        assert seen.popitem()[1] == ours["sha256"]
        assert len(read_bpe_ranks(name)) > 100_000


class Recording:
    """Wraps a tokenizer and records every batch it is asked to count."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[list[str]] = []

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        self.calls.append(list(texts))
        counts: list[int] = self.inner.count_texts(texts)
        return counts


def _parts(msg: Message) -> tuple[list[str], int]:
    """The texts a message is documented to count, and its fixed overhead (no images in the transcripts)."""
    out: list[str] = []
    fixed = 3
    name = msg.extra.get("name") or msg.extra.get("openai", {}).get("name")
    if name:  # OpenAI's ``name`` (tau-bench's tool messages carry the function name)
        out.append(name)
        fixed += 1
    for block in msg.content:
        if isinstance(block, (TextBlock, ThinkingBlock)):
            out.append(block.text)
        elif isinstance(block, ToolCall):
            out += [block.name, block.arguments]
        elif isinstance(block, ToolResult):
            parts = [block.content] if isinstance(block.content, str) else block.content
            out += [p if isinstance(p, str) else p.text for p in parts if not isinstance(p, ImageBlock)]
    return out, fixed


@pytest.mark.parametrize("path", raw_params())
def test_imported_transcripts_count_as_documented(path: Path) -> None:
    from ctxkeep.formats import load

    msgs = list(load(path).messages)
    rec = Recording(load_tokenizer("o200k_base"))
    counter = TokenCounter(rec)
    each = counter.count_each(msgs)
    t = rec.inner.count_texts
    for msg, n in zip(msgs, each, strict=True):
        texts, fixed = _parts(msg)
        assert n == fixed + t([msg.role])[0] + sum(t(texts)), msg.id
    calls = len(rec.calls)
    assert counter.count_messages(msgs) == sum(each) + 3
    assert len(rec.calls) == calls  # the recount came from the cache


# --- what a message counts -------------------------------------------------------------

COOKBOOK_MESSAGES = [
    (
        "system",
        "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
        None,
    ),
    ("system", "New synergies will help drive top-line growth.", "example_user"),
    ("system", "Things working well together will increase revenue.", "example_assistant"),
    (
        "system",
        "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
        "example_user",
    ),
    ("system", "Let's talk later when we're less busy about how to do better.", "example_assistant"),
    ("user", "This late pivot means we don't have time to boil the ocean for the client deliverable.", None),
]

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {
                    "type": "string",
                    "description": "The unit of temperature to return",
                    "enum": ["celsius", "fahrenheit"],
                },
            },
            "required": ["location"],
        },
    },
}


@pytest.mark.parametrize(("name", "expected"), [("o200k_base", 124), ("cl100k_base", 129)])
def test_openai_cookbook_chat_example(name: str, expected: int) -> None:
    """The cookbook's example, whose count the OpenAI API confirmed (gpt-4o: 124, gpt-4: 129)."""
    msgs = [Message.of(role, text, extra={"name": n} if n else {}) for role, text, n in COOKBOOK_MESSAGES]  # type: ignore[arg-type]
    assert get_counter(name).count_messages(msgs) == expected


@pytest.mark.parametrize(("name", "expected"), [("o200k_base", 101), ("cl100k_base", 105)])
def test_openai_cookbook_tools_example(name: str, expected: int) -> None:
    """The cookbook's tool example, confirmed by the API (gpt-4o: 101, gpt-4: 105)."""
    counter = get_counter(name)
    msgs = [
        Message.of("system", "You are a helpful assistant that can answer to questions about the weather."),
        Message.of("user", "What's the weather like in San Francisco?"),
    ]
    assert counter.count_tools([WEATHER_TOOL]) + counter.count_messages(msgs) == expected
    anthropic_form = {
        "name": "get_current_weather",
        **{k: v for k, v in WEATHER_TOOL["function"].items() if k != "name"},
    }
    anthropic_form["input_schema"] = anthropic_form.pop("parameters")
    assert counter.count_tools([anthropic_form]) == counter.count_tools([WEATHER_TOOL])
    assert counter.count_tools([]) == 0


def test_message_parts_counted() -> None:
    c = get_counter()
    t = c.count_text
    call = ToolCall(id="c1", name="bash", arguments='{"command": "ls -la"}')
    assistant = Message(
        role="assistant",
        content=(ThinkingBlock(text="let me look"), TextBlock(text="Listing."), call),
    )
    assert c.count_message(assistant) == 3 + t("assistant") + t("let me look") + t("Listing.") + t("bash") + t(
        call.arguments
    )
    redacted = Message(role="assistant", content=(ThinkingBlock(text="", signature="opaque", redacted=True),))
    assert c.count_message(redacted) == 3 + 1
    result = Message(role="tool", content=(ToolResult(call_id="c1", content="total 0\n"),))
    assert c.count_message(result) == 3 + t("tool") + t("total 0\n")
    named = Message.of("user", "hi", extra={"openai": {"name": "bob"}})
    assert c.count_message(named) == 3 + 1 + 1 + t("bob") + t("hi")
    assert c.count_messages([]) == 3
    zero = get_counter(settings=CountSettings(tokens_per_message=0, reply_priming=0))
    assert zero.count_messages([Message.of("user", "hello world")]) == 1 + 2


def test_images_count_by_rule_not_base64() -> None:
    png = _b64(_png(1024, 1024)) + "A" * 400_000  # a long payload must not be counted as text
    msg = Message(role="user", content=(TextBlock(text="look"), ImageBlock(media_type="image/png", data=png)))
    openai = get_counter()
    assert openai.count_message(msg) == 3 + 1 + 1 + 765
    anthropic = get_counter(settings=CountSettings(provider="anthropic"))
    assert anthropic.count_message(msg) == 3 + 1 + 1 + anthropic_image_tokens(1024, 1024)
    low = get_counter(settings=CountSettings(image_detail="low"))
    assert low.count_message(msg) == 3 + 1 + 1 + 85
    in_result = Message(
        role="tool",
        content=(
            ToolResult(call_id="c", content=(TextBlock(text="shot"), ImageBlock(media_type="image/png", data=png))),
        ),
    )
    assert openai.count_message(in_result) == 3 + 1 + 1 + 765


# --- image rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "detail", "expected"),
    [
        ((1024, 1024), "high", 765),  # OpenAI's examples
        ((2048, 4096), "high", 1105),
        ((4096, 8192), "low", 85),
        ((512, 512), "auto", 255),
        ((100, 100), "high", 255),  # small images are not scaled up
        ((768, 2048), "high", 1445),  # the most an image can cost
        ((513, 200), "high", 425),
    ],
)
def test_openai_image_rule(size: tuple[int, int], detail: Any, expected: int) -> None:
    assert openai_image_tokens(*size, detail) == expected


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((200, 200), 54),  # Anthropic's examples
        ((1000, 1000), 1334),
        ((1092, 1092), 1590),
        ((3000, 200), 218),  # long edge scaled to 1568: 1568 x 104
    ],
)
def test_anthropic_image_rule(size: tuple[int, int], expected: int) -> None:
    assert anthropic_image_tokens(*size) == expected


def test_anthropic_large_images_are_capped() -> None:
    for size in [(4000, 3000), (8000, 8000), (1568, 1568), (951, 1268)]:
        assert 1500 < anthropic_image_tokens(*size) <= 1600


def test_image_size_fallbacks_and_detail_override() -> None:
    url_only = ImageBlock(media_type="image/png", url="https://example.com/a.png")
    assert image_tokens(url_only, "openai") == UNKNOWN_IMAGE_TOKENS["openai"] == 1445
    assert image_tokens(url_only, "anthropic") == UNKNOWN_IMAGE_TOKENS["anthropic"] == 1600
    assert image_tokens(ImageBlock(media_type="image/png", data="not an image"), "openai") == 1445
    sized = ImageBlock(media_type="image/png", width=1024, height=1024)
    assert image_tokens(sized, "openai") == 765
    assert image_tokens(ImageBlock(media_type="image/png", width=1024, height=1024, extra={"detail": "low"})) == 85
    imported = ImageBlock(media_type="image/png", width=1024, height=1024, extra={"openai": {"detail": "low"}})
    assert image_tokens(imported, "openai", "high") == 85
    data_url = ImageBlock(media_type="image/gif", url="data:image/gif;base64," + _b64(_gif(1024, 1024)))
    assert image_tokens(data_url, "openai") == 765


# --- image headers -----------------------------------------------------------------------


def _png(w: int, h: int) -> bytes:
    ihdr = struct.pack(">II", w, h) + bytes([8, 2, 0, 0, 0])
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk + b"\x00\x00\x00\x00IEND\xae\x42\x60\x82"


def _gif(w: int, h: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", w, h) + b"\x00\x00\x00;"


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def _jpeg(w: int, h: int, *, sof: int = 0xC0, padding: int = 0) -> bytes:
    app0 = _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    exif = _segment(0xE1, b"Exif\x00\x00" + b"\x00" * padding) if padding else b""
    dht = _segment(0xC4, b"\x00" * 20)  # C4 is in the SOF range but is not a frame header
    frame = _segment(sof, struct.pack(">BHHB", 8, h, w, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01")
    return b"\xff\xd8" + app0 + exif + dht + b"\xff\xff" + frame + _segment(0xDA, b"\x00" * 10) + b"\xff\xd9"


def _riff(chunk: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + chunk + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _webp_lossy(w: int, h: int) -> bytes:
    return _riff(b"VP8 ", b"\x50\x01\x00\x9d\x01\x2a" + struct.pack("<HH", w, h) + b"\x00" * 8)


def _webp_lossless(w: int, h: int) -> bytes:
    return _riff(b"VP8L", b"\x2f" + struct.pack("<I", (w - 1) | ((h - 1) << 14)) + b"\x00" * 4)


def _webp_extended(w: int, h: int) -> bytes:
    return _riff(b"VP8X", b"\x10\x00\x00\x00" + (w - 1).to_bytes(3, "little") + (h - 1).to_bytes(3, "little"))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (_png(1920, 1080), (1920, 1080)),
        (_gif(320, 240), (320, 240)),
        (_jpeg(800, 600), (800, 600)),
        (_jpeg(801, 601, sof=0xC2), (801, 601)),  # progressive
        (_webp_lossy(640, 480), (640, 480)),
        (_webp_lossless(16383, 7), (16383, 7)),
        (_webp_extended(5000, 3000), (5000, 3000)),
    ],
    ids=["png", "gif", "jpeg", "jpeg-progressive", "webp-lossy", "webp-lossless", "webp-extended"],
)
def test_image_headers(data: bytes, size: tuple[int, int]) -> None:
    assert image_size_from_bytes(data) == size
    assert image_size_from_base64(_b64(data)) == size
    mime = "\n".join(_b64(data)[i : i + 76] for i in range(0, len(_b64(data)), 76))  # MIME line breaks
    assert image_size_from_base64(mime) == size
    assert image_size_from_base64("data:image/x;base64," + _b64(data)) == size


def test_jpeg_size_after_large_metadata() -> None:
    data = _jpeg(1234, 567, padding=30_000)  # the frame header sits ~40,000 base64 characters in
    assert image_size_from_base64(_b64(data)) == (1234, 567)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x89PNG\r\n\x1a\n",
        b"GIF8",
        b"\xff\xd8\xff\xe0\x00",
        b"RIFF\x00\x00\x00\x00WEBPVP8Z",
        b"hello world",
        _png(0, 5),
    ],
    ids=["empty", "png-cut", "gif-cut", "jpeg-cut", "webp-unknown", "text", "png-zero"],
)
def test_unreadable_headers(data: bytes) -> None:
    assert image_size_from_bytes(data) is None
    assert image_size_from_base64(_b64(data)) is None


def test_not_base64() -> None:
    assert image_size_from_base64("!!!! not base64 at all ????") is None
    assert image_size_from_base64("data:image/png;base64,") is None


# --- cache -------------------------------------------------------------------------------


class WordTokenizer:
    """One token per whitespace-separated word; records what it was asked to count."""

    name = "words"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        self.calls.append(list(texts))
        return [len(t.split()) for t in texts]


_ROLE_WORDS = ["system", "user", "assistant", "tool"]


def _counted(tok: WordTokenizer) -> list[str]:
    """The texts counted, without the role words a counter counts once, on its first message."""
    return [t for call in tok.calls if call != _ROLE_WORDS for t in call]


def test_a_counter_counts_nothing_until_asked() -> None:
    # Loading a vocabulary takes a third of a second: a session reopened with saved counts never needs it.
    tok = WordTokenizer()
    counter = TokenCounter(tok)
    assert tok.calls == []
    assert counter.count_message(Message.of("user", "one two")) == 3 + 1 + 2
    assert tok.calls[0] == _ROLE_WORDS


def test_custom_tokenizer_plugs_in() -> None:
    counter = TokenCounter(WordTokenizer())
    assert isinstance(counter, tokens_pkg.Counter)
    assert isinstance(WordTokenizer(), tokens_pkg.TextTokenizer)
    assert counter.name == "words"
    assert counter.count_message(Message.of("user", "one two three")) == 3 + 1 + 3


def test_cache_hits_same_content_and_recounts_changed_content() -> None:
    tok = WordTokenizer()
    counter = TokenCounter(tok)
    tok.calls.clear()
    a = Message.of("user", "alpha beta", id="m1")
    assert counter.count_message(a) == 6
    assert counter.count_message(a) == 6  # same object
    assert counter.count_message(Message.of("user", "alpha beta", id="m1")) == 6  # equal copy
    assert _counted(tok) == ["alpha beta"]
    changed = Message.of("user", "alpha beta gamma", id="m1")  # same id, new content
    assert counter.count_message(changed) == 7
    assert _counted(tok) == ["alpha beta", "alpha beta gamma"]
    info = counter.cache_info()
    assert (info.hits, info.misses) == (2, 2)


def test_cache_batches_misses_and_keeps_order() -> None:
    tok = WordTokenizer()
    counter = TokenCounter(tok)
    msgs = [Message.of("user", "w " * i) for i in range(1, 6)]
    counter.count_message(msgs[2])
    tok.calls.clear()
    assert counter.count_each(msgs) == [4 + i for i in range(1, 6)]
    assert len(tok.calls) == 1 and len(tok.calls[0]) == 4  # one batch, the cached one left out
    assert counter.count_messages(msgs) == sum(4 + i for i in range(1, 6)) + 3
    assert len(tok.calls) == 1


def test_cache_is_bounded_lru() -> None:
    tok = WordTokenizer()
    counter = TokenCounter(tok, CountSettings(cache_size=2))
    a, b, c = (Message.of("user", t) for t in ("a", "b b", "c c c"))
    counter.count_each([a, b, c])  # a is the least recently used: out
    assert (counter.cache_info().size, counter.cache_info().content_size) == (2, 2)
    tok.calls.clear()
    counter.count_each([b, c])
    assert tok.calls == []
    counter.count_message(a)
    assert _counted(tok) == ["a"]
    counter.count_message(c)  # c used after b: b goes when d comes in
    counter.count_message(Message.of("user", "d"))
    tok.calls.clear()
    counter.count_each([c, a])  # a: counted again above; c: kept
    assert tok.calls == []
    counter.clear_cache()
    assert counter.cache_info() == CacheInfo(hits=0, misses=0, size=0, content_size=0)


def test_cache_disabled() -> None:
    tok = WordTokenizer()
    counter = TokenCounter(tok, CountSettings(cache_size=0))
    msg = Message.of("user", "x y")
    counter.count_message(msg)
    counter.count_message(msg)
    assert _counted(tok) == ["x y", "x y"]


# --- anchor ------------------------------------------------------------------------------


def test_anchor_counts_only_later_messages() -> None:
    counter = TokenCounter(WordTokenizer())
    msgs = [Message.of("user", "a b c"), Message.of("assistant", "d e"), Message.of("user", "f")]
    each = counter.count_each(msgs)
    assert counter.count_messages(msgs, anchor=Anchor(index=1, tokens=1000)) == 1000 + each[2] + 3
    assert counter.count_messages(msgs, anchor=Anchor(index=2, tokens=50)) == 50 + 3
    assert counter.count_messages(msgs, anchor=Anchor(index=0, tokens=0)) == sum(each[1:]) + 3
    with pytest.raises(ValueError, match="past the last message"):
        counter.count_messages(msgs, anchor=Anchor(index=3, tokens=10))
    with pytest.raises(ValueError, match="index"):
        Anchor(index=-1, tokens=10)
    with pytest.raises(ValueError, match="tokens"):
        Anchor(index=0, tokens=-5)


# --- Hugging Face tokenizer.json ---------------------------------------------------------

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def count_tokens(text: str) -> int:\n    return len(text.split())",
    "上下文窗口的预算管理 与 压缩摘要",
    '{"path": "/tmp/tool_result/1.txt", "lines": 42}',
]


def _train(tmp_path: Path, *, truncate: bool = False) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 5, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    if truncate:
        tok.enable_truncation(max_length=4)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_tokenizer_json_counts_equal_tokenizers_library(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = _train(tmp_path)
    reference = Tokenizer.from_file(str(path))
    texts = [*CORPUS, "unseen words: zebra, ζ, 🧠", "", "x" * 1000]
    expected = [len(reference.encode(t, add_special_tokens=False).ids) for t in texts]
    counter = get_counter(path)
    assert counter.count_texts(texts) == expected
    assert [counter.count_text(t) for t in texts] == expected
    assert get_counter(str(path)).count_texts(texts) == expected
    assert get_counter(tmp_path).count_texts(texts) == expected  # the model's folder


def test_tokenizer_json_in_a_folder_is_read_again_when_overwritten(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = _train(tmp_path)
    text = CORPUS[0]
    before = get_counter(tmp_path).count_text(text)
    folder_time = tmp_path.stat().st_mtime_ns
    whole_words = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    whole_words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path.write_text(whole_words.to_str())  # in place: the folder's own time does not change
    os.utime(path, ns=(folder_time + 10**9, folder_time + 10**9))
    os.utime(tmp_path, ns=(folder_time, folder_time))
    after = get_counter(tmp_path).count_text(text)
    assert after == len(text.split()) != before


def test_tokenizer_json_counts_special_strings_as_text_and_ignores_truncation(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = _train(tmp_path, truncate=True)
    text = "hello <|im_end|> world " * 5
    reference = Tokenizer.from_file(str(path))
    reference.no_truncation()
    as_special = len(reference.encode(text, add_special_tokens=False).ids)  # <|im_end|> as one token
    reference.encode_special_tokens = True
    expected = len(reference.encode(text, add_special_tokens=False).ids)
    assert get_counter(path).count_text(text) == expected > as_special + 5  # and not truncated to 4


# --- errors and settings -----------------------------------------------------------------


def test_unknown_encoding() -> None:
    with pytest.raises(TokenizerError, match=r"o200k_base.*cl100k_base.*tokenizer\.json"):
        get_counter("p50k_base")
    assert issubclass(TokenizerError, CtxkeepError)


def test_unreadable_tokenizer_files(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="does not exist"):
        get_counter(tmp_path / "missing" / "tokenizer.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match=r"Hugging Face tokenizer\.json"):
        get_counter(bad)
    other = tmp_path / "other.json"
    other.write_text('{"hello": "world"}')
    with pytest.raises(TokenizerError, match="cannot read"):
        get_counter(other)


def test_backend_errors(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="backend"):
        get_counter("o200k_base", backend="nope")  # type: ignore[arg-type]
    with pytest.raises(TokenizerError, match=r"not to a tokenizer\.json"):
        get_counter(_train(tmp_path), backend="tiktoken")


@pytest.mark.parametrize(
    "kwargs",
    [{"provider": "google"}, {"image_detail": "medium"}, {"tokens_per_message": -1}, {"cache_size": 1.5}],
)
def test_settings_are_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="CountSettings"):
        CountSettings(**kwargs)


def test_a_full_cache_never_loses_a_message_it_found_in_the_same_batch() -> None:
    # A message equal to a cached one is remembered by identity, which evicts the oldest entry; when that
    # entry is a later message of the same batch, found a moment before, it must still be counted (this
    # raised KeyError in a long replay with a shared counter).
    counter = get_counter("o200k_base", settings=CountSettings(cache_size=2))
    old, newer = Message.of("user", "first words"), Message.of("user", "second words")
    counter.count_each([old])
    counter.count_each([newer])
    equal = Message.of("user", "second words", id=newer.id)
    assert equal == newer and equal is not newer
    assert counter.count_each([equal, old]) == counter.count_each([newer, old])


# --- the first counts of a process, without toktok's vocabulary load ----------------------

_TRICKY = [
    "",
    " ",
    "   leading and trailing   ",
    "tabs\tand\r\nnewlines\n\n\n  indented",
    "don't you'LL we'VE they're I'm it's",
    "1234567890 3.14159 1e-9 0x1F 1,000,000",
    "中文文本，还有标点。日本語のテキスト、한국어 텍스트",
    "emoji 👍🏽 family 👨‍👩‍👧 flags 🇫🇷 and e\u0301 combining",
    "a <|endoftext|> b <|endofprompt|> <|fim_prefix|>",
    '{"key": [1, 2, {"nested": "value"}], "path": "/usr/local/bin/python3.11"}',
    "def f(x):\n    return x ** 2  # square\n\n\nclass A(B, metaclass=M):\n    pass\n",
    "\u00a0\u2003\u3000 odd spaces\u200b",
    "x" * 3000,
    "ab" * 1500 + " " + "🙂" * 200,
]


@pytest.fixture(scope="module")
def bucket_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A bucket file of each encoding, built from toktok's vocabulary (which checks its sha256)."""
    from ctxkeep.tokens.encodings import _TIKTOKEN_SPECS
    from ctxkeep.tokens.lazybpe import _ranks, write_buckets

    folder = tmp_path_factory.mktemp("buckets")
    files = {}
    for name in ENCODINGS:
        sha = _TIKTOKEN_SPECS[name]["sha256"]
        write_buckets(_ranks(name, sha), sha, folder / name)
        files[name] = folder / name
    return files


def _lazy(name: str, bucket_files: dict[str, Path]) -> Any:
    from ctxkeep.tokens.encodings import _TIKTOKEN_SPECS
    from ctxkeep.tokens.lazybpe import LazyBpe

    spec = _TIKTOKEN_SPECS[name]
    return LazyBpe(bucket_files[name], sha256=spec["sha256"], pat_str=spec["pat_str"])


@pytest.mark.parametrize("name", ENCODINGS)
def test_lazy_bpe_matches_tiktoken_on_tricky_text(
    name: str, bucket_files: dict[str, Path], reference: dict[str, TiktokenTokenizer]
) -> None:
    assert _lazy(name, bucket_files).count_texts(_TRICKY) == reference[name].count_texts(_TRICKY)


@pytest.mark.parametrize("path", raw_params())
def test_lazy_bpe_matches_tiktoken_on_transcripts(
    path: Path, bucket_files: dict[str, Path], reference: dict[str, TiktokenTokenizer]
) -> None:
    # Python BPE is slow: the first 150,000 characters of distinct strings of each file, every kind of content.
    texts, total = [], 0
    for text in _raw_texts(path):
        texts.append(text[:20_000])
        total += len(texts[-1])
        if total > 150_000:
            break
    for name in ENCODINGS:
        assert _lazy(name, bucket_files).count_texts(texts) == reference[name].count_texts(texts), name


def test_long_pieces_are_left_to_toktok(bucket_files: dict[str, Path], reference: dict[str, TiktokenTokenizer]) -> None:
    # A run of Chinese characters is one piece: merged in Python it would take seconds, so the first
    # counts of a process leave it to toktok, with the same result.
    han = "".join(chr(0x4E00 + (i * 37) % 20_000) for i in range(300))
    lazy = _lazy("o200k_base", bucket_files)
    assert lazy.count_short(["short words only", han]) is None
    assert lazy.count_short(["short words only"]) == lazy.count_texts(["short words only"])
    counter = get_counter("o200k_base")
    assert counter.count_texts([han, "a" * 200]) == reference["o200k_base"].count_texts([han, "a" * 200])


def test_a_bucket_file_of_another_vocabulary_or_cut_short_is_refused(
    bucket_files: dict[str, Path], tmp_path: Path
) -> None:
    from ctxkeep.tokens.encodings import _TIKTOKEN_SPECS
    from ctxkeep.tokens.lazybpe import LazyBpe

    o200k, cl100k = _TIKTOKEN_SPECS["o200k_base"], _TIKTOKEN_SPECS["cl100k_base"]
    with pytest.raises(ValueError, match="not a bucket file"):
        LazyBpe(bucket_files["cl100k_base"], sha256=o200k["sha256"], pat_str=o200k["pat_str"])
    short = tmp_path / "short"
    short.write_bytes(bucket_files["cl100k_base"].read_bytes()[:-10])
    with pytest.raises(ValueError, match="cut short"):
        LazyBpe(short, sha256=cl100k["sha256"], pat_str=cl100k["pat_str"])


_FIRST_COUNT = """
import sys, toktok
from ctxkeep.tokens import get_counter
counter = get_counter(sys.argv[1])
small = counter.count_texts([sys.argv[2]] * 3)
loaded_after_small = bool(toktok._CACHE)
large = counter.count_texts([sys.argv[2]] * 30)
print(small[0], loaded_after_small, large[0], bool(toktok._CACHE))
"""


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_small_count_needs_no_vocabulary_load_and_a_large_one_switches(
    name: str, tmp_path: Path, reference: dict[str, TiktokenTokenizer]
) -> None:
    # 10 KB of mixed text, three times under the budget; thirty times over it, so toktok takes over.
    text = "\n".join(_TRICKY[1:12]) * 8
    expected = reference[name].count_texts([text])[0]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    # The first run builds the bucket file out of toktok's vocabulary; the next ones only read it.
    for loaded in ("True", "False", "False"):
        out = subprocess.run(
            [sys.executable, "-c", _FIRST_COUNT, name, text], env=env, check=True, capture_output=True, text=True
        ).stdout.split()
        assert out == [str(expected), loaded, str(expected), "True"]
    assert [p.name.split("-")[0] for p in (tmp_path / "ctxkeep" / "bpe").iterdir()] == [name]


def test_without_a_writable_cache_toktok_counts(tmp_path: Path, reference: dict[str, TiktokenTokenizer]) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    text = _TRICKY[6]
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_COUNT, "o200k_base", text],
        env={**os.environ, "XDG_CACHE_HOME": str(blocked)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    expected = str(reference["o200k_base"].count_texts([text])[0])
    assert out == [expected, "True", expected, "True"]


def test_the_bucket_cache_is_private_to_its_user(
    tmp_path: Path, reference: dict[str, TiktokenTokenizer], monkeypatch: Any
) -> None:
    from ctxkeep.tokens.encodings import _TIKTOKEN_SPECS
    from ctxkeep.tokens.lazybpe import cache_folder, lazy_bpe

    # A cache root that does not exist yet: ctxkeep/ and ctxkeep/bpe/ are created 0700, the file 0600.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "new" / "cache"))
    spec = _TIKTOKEN_SPECS["cl100k_base"]
    small = lazy_bpe.__wrapped__("cl100k_base", spec["sha256"], spec["pat_str"])
    folder = cache_folder()
    assert small is not None
    assert small.count_texts(_TRICKY) == reference["cl100k_base"].count_texts(_TRICKY)
    assert folder == tmp_path / "new" / "cache" / "ctxkeep" / "bpe"
    assert (folder.stat().st_mode & 0o777, folder.parent.stat().st_mode & 0o777) == (0o700, 0o700)
    (file,) = folder.iterdir()
    assert file.stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="file owners and modes are POSIX")
def test_a_bucket_file_others_may_write_is_refused_and_rebuilt(
    bucket_files: dict[str, Path], tmp_path: Path, reference: dict[str, TiktokenTokenizer], monkeypatch: Any
) -> None:
    from ctxkeep.tokens.encodings import _TIKTOKEN_SPECS
    from ctxkeep.tokens.lazybpe import LazyBpe, cache_folder, lazy_bpe

    spec = _TIKTOKEN_SPECS["cl100k_base"]
    shared = tmp_path / "shared"
    shared.write_bytes(bucket_files["cl100k_base"].read_bytes())
    shared.chmod(0o666)  # anyone could have swapped in a file `marshal` would trust
    with pytest.raises(ValueError, match="not private"):
        LazyBpe(shared, sha256=spec["sha256"], pat_str=spec["pat_str"])
    # Where the cache holds such a file, a private one is written over it and counts go on.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cached = cache_folder() / f"cl100k_base-{spec['sha256'][:16]}.buckets"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(shared.read_bytes())
    cached.chmod(0o666)
    small = lazy_bpe.__wrapped__("cl100k_base", spec["sha256"], spec["pat_str"])
    assert small is not None and small.count_texts(_TRICKY) == reference["cl100k_base"].count_texts(_TRICKY)
    assert cached.stat().st_mode & 0o777 == 0o600


def test_a_cache_that_cannot_be_written_gives_no_lazy_bpe(tmp_path: Path, monkeypatch: Any) -> None:
    from ctxkeep.tokens.encodings import _TIKTOKEN_SPECS
    from ctxkeep.tokens.lazybpe import lazy_bpe

    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    spec = _TIKTOKEN_SPECS["o200k_base"]
    assert lazy_bpe.__wrapped__("o200k_base", spec["sha256"], spec["pat_str"]) is None
    assert blocked.read_text() == "a file where the cache folder would be"


# --- the split pattern in `re`, for the first counts ----------------------------------------


def _pretokenizer_samples() -> list[str]:
    """Every context the patterns tell apart, around a spread of assigned non-ASCII characters."""
    import unicodedata

    chars = [chr(c) for c in range(0x80, 0x110000, 53) if unicodedata.category(chr(c)) != "Cn"]
    chars += ["\u017f", "\u212a", "\u0130", "\u0131", "\u00aa", "\u0345", "\u2160", "\u00b2", "\u0663"]
    chars += ["\u00a0", "\u1680", "\u2007", "\u2028", "\u3000", "\x85", "\x1c"]
    chars += ["\ud800", "\udfff", "\ue000", "\U000f0000", "\x00", "\x7f", "\u01c5"]  # surrogates, private use
    shapes = ["{c}", "a{c}b", "'{c}", "x'{c}", "A{c}a", "{c}{c}", " {c}", "1{c}2", "{c} \n", "{c}'s", "{c}'LL"]
    shapes += ["a{c}'Ve", " {c}/\n", "\t{c}", "{c}   x", "{c}\r\n\r\n  ", "123{c}4567"]
    return _TRICKY + [shape.format(c=c) for c in chars for shape in shapes]


@pytest.mark.parametrize("name", ENCODINGS)
def test_the_re_pretokenizer_splits_as_regex_does(name: str) -> None:
    import regex

    from ctxkeep.tokens.encodings import _TIKTOKEN_SPECS
    from ctxkeep.tokens.pretokenize import Pretokenizer

    pattern = _TIKTOKEN_SPECS[name]["pat_str"]
    expected = regex.compile(pattern).findall
    samples = _pretokenizer_samples()
    pretokenizer = Pretokenizer(pattern)
    # ASCII first, then texts bringing new characters in batches: each batch widens the classes.
    for start in range(0, len(samples), 500):
        batch = samples[start : start + 500]
        split = pretokenizer.prepare(batch)
        assert [split(text) for text in batch] == [expected(text) for text in batch]
    assert not pretokenizer._regex


def test_a_character_newer_than_unicodedata_hands_over_to_regex() -> None:
    import regex

    from ctxkeep.tokens.encodings import _TIKTOKEN_SPECS
    from ctxkeep.tokens.pretokenize import Pretokenizer

    pattern = _TIKTOKEN_SPECS["o200k_base"]["pat_str"]
    pretokenizer = Pretokenizer(pattern)
    assert pretokenizer.prepare(["plain ascii"])("plain ascii") == ["plain", " ascii"]
    text = "abc\U000e0080def 12345"  # unassigned: its class is not this Python's to say
    split = pretokenizer.prepare([text])
    assert pretokenizer._regex
    assert split(text) == regex.compile(pattern).findall(text)


def test_toktok_counts_one_by_one_on_one_thread_and_reads_the_cores_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxkeep.tokens import encodings

    tokenizer = encodings.ToktokTokenizer("o200k_base")
    tokenizer.count_texts(["w" * (encodings.SMALL_BUDGET + 1)])  # past the small budget: toktok from here on
    asked: list[int] = []
    real = tokenizer._count

    def count(items: list[str], name: str, *, threads: int, with_special: bool) -> list[int]:
        asked.append(threads)
        return real(items, name, threads=threads, with_special=with_special)  # type: ignore[no-any-return]

    monkeypatch.setattr(tokenizer, "_count", count)
    big = "word " * 20_000  # 100,000 characters
    assert tokenizer.count_texts(["a short one", "and another"]) == [3, 2]
    tokenizer.count_texts([big])  # one text is one thread's work, however long
    tokenizer.count_texts([big, big, big])  # a step's big batch: a thread's start would cost more than it saves
    # One thread counts one text at a time: a batch call costs ~28 us before it counts anything.
    assert asked == []
    tokenizer.count_texts([big] * 30)  # 3 million characters: a million or more for each thread
    # Never 0: toktok would find the cores itself, reading the cgroup files again on every call.
    assert asked == ([min(encodings.cores(), 3)] if encodings.cores() > 1 else [])
    assert encodings.cores() >= 1 and encodings.cores.cache_info().hits >= 1


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_toktok_one_by_one_counts_what_its_batches_count(encoding: str) -> None:
    import toktok

    from ctxkeep.tokens import encodings

    tokenizer = encodings.ToktokTokenizer(encoding)
    tokenizer.count_texts(["w" * (encodings.SMALL_BUDGET + 1)])  # past the small budget: toktok from here on
    texts = [
        "",
        "hello world",
        "<|endoftext|> and <|endofprompt|>, <|fim_prefix|>: ordinary text, never control tokens",
        "请检查这个模块的测试结果并修复失败的用例，然后总结一下。",
        "  \n\n\t  trailing spaces   \r\n",
        "emoji 🧠🧠 and accents: naïve café",
        "def f(x):\n    return x ** 2  # 1234567890\n" * 300,
    ]
    assert tokenizer.count_texts(texts) == toktok.batch_count(texts, encoding, threads=1, with_special=False)
    with pytest.raises(UnicodeError):  # a lone surrogate: what the counter replaces and counts again
        tokenizer.count_texts(["a\ud800b"])
