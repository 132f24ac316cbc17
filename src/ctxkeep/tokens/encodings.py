"""Text tokenizers: exact BPE token counts for plain strings, loaded with no network.

    TextTokenizer            the protocol: ``name`` and ``count_texts(texts) -> list[int]``
    ├── ToktokTokenizer      o200k_base / cl100k_base from ``toktok`` (fast, bundled, releases the GIL)
    ├── TiktokenTokenizer    the same encodings in ``tiktoken``, built from ``bpe-openai``'s files (reference)
    └── HuggingFaceTokenizer any Hugging Face ``tokenizer.json`` (Qwen, Llama, ...)

Every backend counts *ordinary text*: a special-token string such as ``<|endoftext|>`` inside a
message is counted as the characters it is (tiktoken's ``encode_ordinary``), never as one control
token, because that is what a provider does with user-supplied text.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from ctxkeep.errors import TokenizerError
from ctxkeep.tokens.lazybpe import SMALL_BUDGET, lazy_bpe

Backend: TypeAlias = Literal["toktok", "tiktoken"]

ENCODINGS: tuple[str, ...] = ("o200k_base", "cl100k_base")
ACCEPTED = "'o200k_base' (default), 'cl100k_base', or the path of a Hugging Face tokenizer.json"

# Characters each of toktok's threads gets at least: a smaller batch is counted on one thread (and a batch of
# one text is one thread's work whatever its size). A thread costs its start, and on a machine whose other cores
# are busy it waits for one: a step's batch of 72,000 characters took 1.8 ms on 2 threads, 0.5 ms on one (2
# cores, load 1); batches of 0.4-5 MB were still 10-70% slower on 2 threads there (docs/engine.md, "What a
# step costs"). From a million characters a thread has a few ms of work, which its start no longer outweighs.
_CHARS_PER_THREAD = 1_000_000


@functools.cache
def cores() -> int:
    """The cores this process may run on (its CPU affinity, capped by a cgroup v2 CPU quota), read once.

    Given to toktok as its thread count: left to find it itself (``threads=0``), it reads the cgroup
    files again on every call, which costs a step more than counting its new messages on one thread.
    """
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota to honour
    return max(1, n)


@runtime_checkable
class TextTokenizer(Protocol):
    """Counts the tokens of plain strings. Implement it to plug in another tokenizer."""

    name: str

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """The number of tokens of each text, in order."""
        ...


class ToktokTokenizer:
    """o200k_base or cl100k_base through ``toktok`` (vocabularies compiled in, counts without ids)."""

    def __init__(self, encoding: str) -> None:
        try:
            import toktok
        except ImportError as exc:  # a dependency, but say what to do if it is missing
            raise TokenizerError("the 'toktok' backend needs the toktok-rs package: pip install toktok-rs") from exc
        if encoding not in ENCODINGS:
            raise TokenizerError(f"unknown encoding {encoding!r}; use {ACCEPTED}")
        self.name = encoding
        # The vocabulary loads on the first count (about 0.3 s for o200k_base), not here: a session reopened
        # with its saved counts, or a command that counts nothing, never pays for it. The first
        # SMALL_BUDGET characters are counted without it (`ctxkeep.tokens.lazybpe`), so a small input never does.
        self._count = toktok.batch_count
        self._small_left = SMALL_BUDGET
        # The tokenizer's own count of one text (None: toktok has none), read with the first count: `_one_by_one`.
        self._count_one: Callable[[str], int] | None = None
        self._count_one_read = False

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Token counts of `texts`; batches of millions of characters run on several cores."""
        items = texts if isinstance(texts, list) else list(texts)
        chars = sum(map(len, items))
        if chars <= self._small_left:
            spec = _TIKTOKEN_SPECS[self.name]
            small = lazy_bpe(self.name, spec["sha256"], spec["pat_str"])
            counted = small.count_short(items) if small is not None else None
            if counted is not None:
                self._small_left -= chars
                return counted
        self._small_left = 0  # toktok's vocabulary is loaded from here on, and it is the faster
        threads = max(1, min(cores(), len(items), chars // _CHARS_PER_THREAD))
        one = self._one_by_one() if threads == 1 else None
        if one is not None:
            return [one(text) for text in items]
        counts: list[int] = self._count(items, self.name, threads=threads, with_special=False)
        return counts

    def _one_by_one(self) -> Callable[[str], int] | None:
        """toktok's count of one text (ordinary text, as `batch_count` with `with_special=False`), or None.

        A `batch_count` call costs ~28 us before it counts anything (0.6 us for 100 characters one by one, 30 us in
        a batch; 4 us and 32 us for 1,000): a step counts a few texts, so that was most of its counting. One by
        one is faster at every size on one thread (280 us against 340 us for 80,000 characters). It is toktok's
        `Tokenizer.count`, outside its documented API (`batch_count`): where a version has none, batches it is.
        """
        if not self._count_one_read:
            try:
                import toktok

                count = toktok._encoding(self.name).count
            except (AttributeError, KeyError):
                count = None
            self._count_one = count if callable(count) else None
            self._count_one_read = True
        return self._count_one


# Constants of tiktoken_ext/openai_public.py (tiktoken 0.14). That module's functions download
# the vocabularies, so the constants are restated here; a test checks they still match.
_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"
_TIKTOKEN_SPECS: dict[str, dict[str, Any]] = {
    "cl100k_base": {
        "sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "pat_str": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
        "special_tokens": {
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
    },
    "o200k_base": {
        "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "pat_str": "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        "special_tokens": {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    },
}


def read_bpe_ranks(encoding: str) -> dict[bytes, int]:
    """The mergeable ranks of `encoding` from bpe-openai's bundled ``.tiktoken.gz``, checked by sha256."""
    spec = _TIKTOKEN_SPECS.get(encoding)
    if spec is None:
        raise TokenizerError(f"unknown encoding {encoding!r}; use {ACCEPTED}")
    import base64  # here, with gzip and hashlib: counting never needs them
    import gzip
    import hashlib

    try:
        raw = gzip.decompress(_bpe_openai_file(f"{encoding}.tiktoken.gz").read_bytes())
    except (ImportError, OSError) as exc:
        raise TokenizerError(
            f"cannot read {encoding}.tiktoken.gz from the bpe-openai package ({exc}); pip install bpe-openai"
        ) from exc
    if hashlib.sha256(raw).hexdigest() != spec["sha256"]:
        raise TokenizerError(f"bpe-openai's {encoding} file is not the one tiktoken expects (sha256 differs)")
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _bpe_openai_file(name: str) -> Path:
    """A data file of the bpe-openai package, found without importing it (its import loads every vocabulary)."""
    import importlib.util

    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the bpe-openai package is not installed: pip install bpe-openai")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / name


class TiktokenTokenizer:
    """o200k_base or cl100k_base in ``tiktoken``, built offline from bpe-openai's files.

    ``tiktoken.get_encoding`` downloads its vocabulary; this builds the same ``tiktoken.Encoding``
    from files already installed. Slower than toktok; the reference the tests compare against.
    """

    def __init__(self, encoding: str) -> None:
        self.name = encoding
        self.encoding = _tiktoken_encoding(encoding)

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Token counts of `texts`, special-token strings counted as ordinary text."""
        if len(texts) == 1:
            return [len(self.encoding.encode_ordinary(texts[0]))]
        batch = self.encoding.encode_ordinary_batch(list(texts), num_threads=os.cpu_count() or 1)
        return [len(ids) for ids in batch]


@functools.cache
def _tiktoken_encoding(encoding: str) -> Any:
    """A ``tiktoken.Encoding``, loaded once per process (parsing the vocabulary takes ~0.3 s)."""
    try:
        import tiktoken
    except ImportError as exc:
        raise TokenizerError("the 'tiktoken' backend needs the tiktoken package: pip install tiktoken") from exc
    ranks = read_bpe_ranks(encoding)
    spec = _TIKTOKEN_SPECS[encoding]
    return tiktoken.Encoding(
        encoding, pat_str=spec["pat_str"], mergeable_ranks=ranks, special_tokens=spec["special_tokens"]
    )


def _tokenizer_file(path: str | os.PathLike[str]) -> Path:
    """The tokenizer.json a path names: the file itself, or the one inside a folder."""
    file = Path(path)
    return file / "tokenizer.json" if file.is_dir() else file


class HuggingFaceTokenizer:
    """A Hugging Face ``tokenizer.json`` (e.g. Qwen's), through the ``tokenizers`` library.

    Counts the text alone: no BOS/EOS or template tokens (the per-message overhead is counted
    separately), no truncation or padding even if the file configures them, and added special
    tokens written in the text are split as ordinary text.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        file = _tokenizer_file(path)
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise TokenizerError(
                "reading a tokenizer.json needs the tokenizers package: pip install tokenizers"
            ) from exc
        if not file.is_file():
            raise TokenizerError(f"tokenizer file {str(file)!r} does not exist; use {ACCEPTED}")
        try:
            tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # tokenizers raises plain Exception for every parse error
            raise TokenizerError(
                f"cannot read {str(file)!r} as a Hugging Face tokenizer.json ({exc}); use {ACCEPTED}"
            ) from exc
        tokenizer.no_truncation()
        tokenizer.no_padding()
        tokenizer.encode_special_tokens = True
        self.name = str(file)
        self._tokenizer = tokenizer
        self._encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Token counts of `texts`, without the special tokens a template would add."""
        if len(texts) == 1:
            return [len(self._tokenizer.encode(texts[0], add_special_tokens=False).ids)]
        return [len(enc.ids) for enc in self._encode_batch(list(texts), add_special_tokens=False)]


def is_path(spec: str | os.PathLike[str]) -> bool:
    """True when `spec` names a file rather than an encoding."""
    if isinstance(spec, os.PathLike):
        return True
    return spec.endswith(".json") or "/" in spec or os.sep in spec


def load_tokenizer(spec: str | os.PathLike[str] = "o200k_base", *, backend: Backend | None = None) -> TextTokenizer:
    """The tokenizer for an encoding name or a tokenizer.json path; raises `TokenizerError`.

    `backend` picks the library for o200k_base/cl100k_base: ``"toktok"`` (default, fast) or
    ``"tiktoken"`` (the reference). It does not apply to a tokenizer.json.
    """
    if is_path(spec):
        if backend is not None:
            raise TokenizerError(f"backend={backend!r} applies to {' and '.join(ENCODINGS)}, not to a tokenizer.json")
        path = str(spec)
        try:
            # the file's own mtime: a folder's does not change when its tokenizer.json is overwritten in place
            stamp = os.stat(_tokenizer_file(path)).st_mtime_ns
        except OSError:
            stamp = 0  # HuggingFaceTokenizer reports the missing file
        return _load_hf(path, stamp)
    name = str(spec)
    if name not in ENCODINGS:
        raise TokenizerError(f"unknown encoding {name!r}; use {ACCEPTED}")
    if backend in (None, "toktok"):
        try:
            return _load_toktok(name)
        except TokenizerError:
            if backend == "toktok":
                raise
            return TiktokenTokenizer(name)  # toktok missing: fall back to the reference
    if backend == "tiktoken":
        return TiktokenTokenizer(name)
    raise TokenizerError(f"unknown backend {backend!r}; use 'toktok' or 'tiktoken'")


@functools.cache
def _load_toktok(name: str) -> ToktokTokenizer:
    return ToktokTokenizer(name)


@functools.lru_cache(maxsize=8)
def _load_hf(path: str, stamp: int) -> HuggingFaceTokenizer:
    """Loaded once per file version (`stamp` is its mtime, so an edited file is read again)."""
    return HuggingFaceTokenizer(path)
