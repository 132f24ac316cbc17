"""Exact o200k_base / cl100k_base counts for the first few texts of a process, with no vocabulary load.

toktok builds its whole vocabulary before its first count (0.3 s for o200k_base, more on a busy
machine): most of ``ctxkeep inspect`` on a small file. This counts the same tokens as tiktoken's
``encode_ordinary`` (the same split pattern, the same byte-pair merges) in Python, looking ranks up
in a vocabulary file cut into 65,536 buckets by a token's first two bytes: a count reads only the
buckets its text needs (~100 for 10 KB), and splits with the standard library's `re`
(`ctxkeep.tokens.pretokenize`, no `regex` import), so it starts in a few ms. It runs at ~0.5 M
chars/s, far slower than toktok, so `ToktokTokenizer` uses it only until a process has counted
`SMALL_BUDGET` characters.

The bucket file is built once per machine from toktok's vocabulary, checked against the sha256 of
the file tiktoken reads (~1 s), into the user's cache folder; where that cannot be written, the
caller counts with toktok instead.
"""

from __future__ import annotations

import contextlib
import functools
import marshal
import mmap
import os
import struct
from collections.abc import Sequence
from pathlib import Path

from ctxkeep.errors import TokenizerError
from ctxkeep.tokens.pretokenize import Pretokenizer

# Characters a process counts here before the tokenizer switches to toktok for good: ~0.1 s of
# Python BPE, less than toktok's load, so a small input never pays that load and a large one pays
# both only once.
SMALL_BUDGET = 50_000
# Longer pieces go to toktok: the pure-Python merge is quadratic in a piece's bytes.
LONG_PIECE = 64

_BUCKETS = 1 << 16
_MAGIC = b"ctxkeep-bpe-buckets-1\n"
# After the magic: the sha256 of the vocabulary (hex, 64 bytes), the bucket offsets, then the buckets.
_OFFSETS = struct.Struct(f"<{_BUCKETS + 1}I")
_HEADER = len(_MAGIC) + 64 + _OFFSETS.size
_PAIR = struct.Struct("<2I")
_LAST = struct.Struct("<I")


def _bucket(token: bytes) -> int:
    return (token[0] << 8) | (token[1] if len(token) > 1 else 0)


def cache_folder() -> Path:
    """Where the bucket files live: ``$XDG_CACHE_HOME/ctxkeep/bpe``, else ``~/.cache/ctxkeep/bpe``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "ctxkeep" / "bpe"


def write_buckets(ranks: dict[bytes, int], sha256: str, path: Path) -> None:
    """Write `ranks` as a bucket file at `path`, atomically: a concurrent reader sees none or all of it."""
    buckets: dict[int, dict[bytes, int]] = {}
    for token, rank in ranks.items():
        buckets.setdefault(_bucket(token), {})[token] = rank
    blobs = [marshal.dumps(buckets[k]) if k in buckets else b"" for k in range(_BUCKETS)]
    offsets = [0]
    for blob in blobs:
        offsets.append(offsets[-1] + len(blob))
    import tempfile  # only when building: it imports `random` and `hashlib`, which a count never needs

    # Private: ctxkeep/ and ctxkeep/bpe/ 0700 where this creates them, the file 0600 (mkstemp's mode).
    path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + sha256.encode("ascii") + _OFFSETS.pack(*offsets))
            f.writelines(blobs)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _check_private(stat: os.stat_result, path: Path) -> None:
    """Refuse a bucket file another user owns or may write: `marshal` must only ever read files this user wrote."""
    owner = getattr(os, "getuid", None)  # POSIX only
    if owner is not None and (stat.st_uid != owner() or stat.st_mode & 0o022):
        raise ValueError(f"{path} is not private to this user (owner {stat.st_uid}, mode {stat.st_mode & 0o777:o})")


class LazyBpe:
    """Counts of one encoding from a bucket file, loading each bucket on first use."""

    def __init__(self, path: Path, *, sha256: str, pat_str: str) -> None:
        with open(path, "rb") as f:
            _check_private(os.fstat(f.fileno()), path)
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self._map[: len(_MAGIC) + 64] != _MAGIC + sha256.encode("ascii"):
            raise ValueError(f"{path} is not a bucket file of this vocabulary")
        # the last offset is the buckets' total size (unpacking all 65,537 would take ~1.5 ms)
        if len(self._map) != _HEADER + _LAST.unpack_from(self._map, _HEADER - _LAST.size)[0]:
            raise ValueError(f"{path} is cut short")
        self._pretokenizer = Pretokenizer(pat_str)  # `re`, not `regex`: no 12 ms import
        self._buckets: dict[int, dict[bytes, int]] = {}
        # Texts repeat their words: each distinct piece is merged once.
        self._pieces: dict[str, int] = {}

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Token counts of `texts`, as tiktoken's ``encode_ordinary`` would give."""
        split = self._pretokenizer.prepare(texts)
        return [self._count(split(text)) for text in texts]

    def count_short(self, texts: Sequence[str]) -> list[int] | None:
        """`count_texts`, or None when a piece is longer than `LONG_PIECE` bytes (a run of Chinese characters,
        a long hash): its merge here is quadratic in its length (seconds for a few hundred characters),
        where toktok's takes microseconds."""
        split = self._pretokenizer.prepare(texts)
        pieces = [split(text) for text in texts]
        if any(len(piece) * 4 > LONG_PIECE and len(piece.encode("utf-8")) > LONG_PIECE for p in pieces for piece in p):
            return None
        return [self._count(p) for p in pieces]

    def _count(self, split: list[str]) -> int:
        pieces = self._pieces
        n = 0
        for piece in split:
            count = pieces.get(piece)
            if count is None:
                count = pieces[piece] = self._merge(piece.encode("utf-8"))
            n += count
        return n

    def _rank(self, token: bytes) -> int | None:
        key = _bucket(token)
        bucket = self._buckets.get(key)
        if bucket is None:
            start, end = _PAIR.unpack_from(self._map, len(_MAGIC) + 64 + 4 * key)
            bucket = marshal.loads(self._map[_HEADER + start : _HEADER + end]) if end > start else {}
            self._buckets[key] = bucket
        return bucket.get(token)

    def _merge(self, piece: bytes) -> int:
        """Tokens of one piece: tiktoken's byte-pair merge (lowest rank first, leftmost on a tie)."""
        rank = self._rank
        if rank(piece) is not None:
            return 1
        parts = [piece[i : i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best: int | None = None
            at = 0
            for i in range(len(parts) - 1):
                r = rank(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at : at + 2] = [parts[at] + parts[at + 1]]
        return len(parts)


@functools.cache
def lazy_bpe(encoding: str, spec_sha256: str, pat_str: str) -> LazyBpe | None:
    """The `LazyBpe` of `encoding`, building its bucket file first if needed; None where it cannot be had."""
    path = cache_folder() / f"{encoding}-{spec_sha256[:16]}.buckets"
    for attempt in range(2):
        try:
            return LazyBpe(path, sha256=spec_sha256, pat_str=pat_str)
        except (OSError, ValueError):
            if attempt:
                return None
        try:
            write_buckets(_ranks(encoding, spec_sha256), spec_sha256, path)
        except (OSError, TokenizerError):  # e.g. a read-only home: toktok counts instead
            return None
    return None


def _ranks(encoding: str, sha256: str) -> dict[bytes, int]:
    """The mergeable ranks of `encoding`, read out of toktok and checked against the official file's sha256."""
    import base64
    import hashlib

    try:
        import toktok
    except ImportError as exc:
        raise TokenizerError("the toktok-rs package is missing: pip install toktok-rs") from exc
    tokenizer = toktok._encoding(encoding)
    special = {rank for _, rank in tokenizer.special_tokens()}
    ranks: dict[bytes, int] = {}
    for rank in range(tokenizer.max_token_value + 1):
        if rank in special:
            continue
        try:
            ranks[tokenizer.decode_single_token_bytes(rank)] = rank
        except KeyError:  # o200k_base has unused ids between its ranks and its special tokens
            continue
    # The file tiktoken reads is these lines in rank order: equal hashes, equal vocabularies.
    listing = b"".join(base64.b64encode(token) + b" %d\n" % rank for token, rank in ranks.items())
    if hashlib.sha256(listing).hexdigest() != sha256:
        raise TokenizerError(f"toktok's {encoding} is not the vocabulary tiktoken uses (sha256 differs)")
    return ranks
