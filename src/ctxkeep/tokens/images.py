"""Image tokens by the providers' published rules, never by the length of the base64 text.

OpenAI (GPT-4o-class models; "Calculating costs" in OpenAI's vision guide):
    ``detail: low``   85 tokens, whatever the size.
    ``detail: high``  scale to fit in 2048 x 2048, then scale so the shortest side is 768 px
                      (only ever down), count the 512 px tiles: 170 per tile + 85.
                      1024 x 1024 -> 765; 2048 x 4096 -> 1105.
Anthropic ("Calculate image costs" in Anthropic's vision guide):
    ``ceil(width * height / 750)`` after the image is scaled down (keeping its aspect ratio) to a
    long edge of at most 1568 px and at most 1,600 tokens (1.2 megapixels).
    200 x 200 -> 54; 1000 x 1000 -> 1334; 1092 x 1092 -> 1590.

The pixel size comes from `ImageBlock.width`/`height` or, when missing, from the header of the
base64 data (PNG, JPEG, GIF, WebP; only the first bytes are decoded). An image whose size is
unknown (a URL, an unreadable header) costs the most an image can cost under the provider's rule,
`UNKNOWN_IMAGE_TOKENS`, so budgets err on the safe side. EXIF rotation is ignored (a rotated photo
swaps width and height, which changes an OpenAI count by at most a few tiles).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Mapping
from typing import Literal, TypeAlias

from ctxkeep.messages import ImageBlock

Provider: TypeAlias = Literal["openai", "anthropic"]
Detail: TypeAlias = Literal["auto", "high", "low"]

# OpenAI
_LOW_DETAIL = 85
_TILE = 512
_TILE_TOKENS = 170
_BASE_TOKENS = 85
_FIT = 2048
_SHORT_SIDE = 768
# Anthropic
_PIXELS_PER_TOKEN = 750
_MAX_EDGE = 1568
_MAX_TOKENS = 1600

UNKNOWN_IMAGE_TOKENS: dict[str, int] = {
    # 768 x 2048 after scaling: 2 x 4 tiles, the most any high-detail image costs
    "openai": _TILE_TOKENS * 8 + _BASE_TOKENS,
    "anthropic": _MAX_TOKENS,
}

_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/]")


def openai_image_tokens(width: int, height: int, detail: Detail = "auto") -> int:
    """Tokens OpenAI counts for a `width` x `height` image (``auto`` is counted as ``high``)."""
    if detail == "low":
        return _LOW_DETAIL
    w, h = float(width), float(height)
    if max(w, h) > _FIT:
        scale = _FIT / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > _SHORT_SIDE:
        scale = _SHORT_SIDE / min(w, h)
        w, h = w * scale, h * scale
    # resized images have whole pixels; flooring also keeps 1024.0000001 from becoming a third tile
    tiles = math.ceil(max(1, math.floor(w)) / _TILE) * math.ceil(max(1, math.floor(h)) / _TILE)
    return _TILE_TOKENS * tiles + _BASE_TOKENS


def anthropic_image_tokens(width: int, height: int) -> int:
    """Tokens Anthropic counts for a `width` x `height` image, after its automatic downscaling."""
    w, h = float(width), float(height)
    scale = min(1.0, _MAX_EDGE / max(w, h), math.sqrt(_MAX_TOKENS * _PIXELS_PER_TOKEN / (w * h)))
    if scale < 1.0:
        w, h = max(1, math.floor(w * scale)), max(1, math.floor(h * scale))
    return math.ceil(w * h / _PIXELS_PER_TOKEN)


def image_tokens(block: ImageBlock, provider: Provider = "openai", detail: Detail = "auto") -> int:
    """Tokens of an image block under `provider`'s rule.

    For OpenAI, a ``detail`` recorded in the block's ``extra`` (``extra["detail"]`` or
    ``extra["openai"]["detail"]``, from ``image_url.detail``) overrides `detail`.
    """
    size = image_size(block)
    if provider == "anthropic":
        return anthropic_image_tokens(*size) if size else UNKNOWN_IMAGE_TOKENS["anthropic"]
    own = block.extra.get("detail")
    if own is None and isinstance(block.extra.get("openai"), Mapping):
        own = block.extra["openai"].get("detail")  # where the OpenAI importer keeps image_url fields
    if own in ("low", "high", "auto"):
        detail = own
    if detail == "low":
        return _LOW_DETAIL
    return openai_image_tokens(*size, detail) if size else UNKNOWN_IMAGE_TOKENS["openai"]


def image_size(block: ImageBlock) -> tuple[int, int] | None:
    """(width, height) of an image: from the block, else from its data's header; None if unknown."""
    if block.width and block.height and block.width > 0 and block.height > 0:
        return block.width, block.height
    if block.data:
        return image_size_from_base64(block.data)
    if block.url and block.url.startswith("data:"):
        return image_size_from_base64(block.url)
    return None


def image_size_from_base64(data: str) -> tuple[int, int] | None:
    """(width, height) from base64 image data (a ``data:`` URL is accepted); decodes the head only.

    A JPEG's size can sit after large metadata segments (EXIF, embedded thumbnails), so when the
    head is not enough, longer prefixes are tried, up to the whole image.
    """
    if data.startswith("data:"):
        data = data.partition(",")[2]
    for chars in _PREFIXES:
        size = image_size_from_bytes(_b64_prefix(data, chars))
        if size is not None or chars >= len(data):
            return size
    return image_size_from_bytes(_b64_prefix(data, len(data)))


_PREFIXES = (4096, 96 * 1024)  # 3 KB holds the size of all but JPEG; 72 KB covers a full EXIF segment
_URLSAFE = str.maketrans("-_", "+/")


def _b64_prefix(data: str, chars: int) -> bytes:
    """The bytes encoded by (about) the first `chars` characters of `data`."""
    # drop line breaks (MIME base64), padding and stray characters, then whole 4-character groups
    head = _NOT_BASE64.sub("", data[:chars].translate(_URLSAFE))
    head = head[: len(head) - len(head) % 4]
    try:
        return base64.b64decode(head)
    except (binascii.Error, ValueError):
        return b""


def image_size_from_bytes(head: bytes) -> tuple[int, int] | None:
    """(width, height) from the first bytes of a PNG, JPEG, GIF or WebP file; None if not found."""
    try:
        if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
            return _positive(*struct.unpack(">II", head[16:24]))
        if head[:6] in (b"GIF87a", b"GIF89a"):
            return _positive(*struct.unpack("<HH", head[6:10]))
        if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            return _webp_size(head)
        if head[:2] == b"\xff\xd8":
            return _jpeg_size(head)
    except struct.error:  # header cut short
        return None
    return None


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X":  # extended: 24-bit canvas size minus one
        w = int.from_bytes(head[24:27], "little") + 1
        h = int.from_bytes(head[27:30], "little") + 1
        return _positive(w, h) if len(head) >= 30 else None
    if chunk == b"VP8L" and head[20:21] == b"\x2f":  # lossless: 14-bit sizes minus one, packed
        bits = int.from_bytes(head[21:25], "little")
        return _positive((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1) if len(head) >= 25 else None
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":  # lossy: keyframe start code, 14-bit sizes
        w, h = struct.unpack("<HH", head[26:30])
        return _positive(w & 0x3FFF, h & 0x3FFF)
    return None


# Start-of-frame markers carry the size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RSTn stand alone


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    i = 2
    n = len(head)
    while i + 4 <= n:
        if head[i] != 0xFF:
            return None  # not at a marker: corrupt
        marker = head[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _NO_LENGTH:
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or scan data reached without a frame header
            return None
        (length,) = struct.unpack(">H", head[i + 2 : i + 4])
        if marker in _SOF:
            if i + 9 > n:
                return None
            h, w = struct.unpack(">HH", head[i + 5 : i + 9])
            return _positive(w, h)
        i += 2 + length
    return None
