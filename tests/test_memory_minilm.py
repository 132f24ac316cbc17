"""How MiniLM runs: windows in runs of similar length under a budget of word pieces, runs side by side on the
cores this process may use, the model loaded once per process, and the same vectors whatever the settings;
and an index update that embeds the new texts of all changed files in one call."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from ctxkeep.folder import MemoryFolder
from ctxkeep.memory import embed
from ctxkeep.memory.embed import MiniLMEmbedder, default_embedder, usable_cores
from ctxkeep.memory.files import append_daily
from ctxkeep.memory.index import MemoryIndex
from ctxkeep.memory.search import search

NOW = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)


def test_runs_are_sorted_by_length_and_stay_within_the_budget() -> None:
    lengths = [256, 3, 40, 256, 17, 120, 9, 256, 64, 30]
    windows = [[0] * n for n in lengths]
    runs = embed._batches(windows, 300)
    assert sorted(w for run in runs for w in run) == list(range(len(lengths)))
    flat = [lengths[w] for run in runs for w in run]
    assert flat == sorted(lengths)
    for run in runs:
        padded = len(run) * max(lengths[w] for w in run)
        assert padded <= 300 or len(run) == 1
    # Short windows share a run; a window as long as the budget allows runs with no other.
    assert len(runs[0]) > 1
    assert [len(run) for run in runs if lengths[run[0]] == 256] == [1, 1, 1]


def test_a_window_longer_than_the_budget_runs_alone() -> None:
    assert embed._batches([[0] * 10, [0] * 500], 64) == [[0], [1]]


def test_usable_cores_follow_the_affinity_and_the_cgroup_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = len(os.sched_getaffinity(0))
    monkeypatch.setattr(embed, "_cgroup_quota", lambda: None)
    assert usable_cores() == allowed
    monkeypatch.setattr(embed, "_cgroup_quota", lambda: 0.5)
    assert usable_cores() == 1  # a quota under one core still runs on one
    monkeypatch.setattr(embed, "_cgroup_quota", lambda: 1.5)
    assert usable_cores() == 1
    monkeypatch.setattr(embed, "_cgroup_quota", lambda: 64.0)
    assert usable_cores() == allowed


def test_the_cgroup_quota_of_this_machine_is_a_positive_number_or_none() -> None:
    quota = embed._cgroup_quota()
    assert quota is None or quota > 0


@pytest.mark.extra("memory")
def test_bad_settings_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="threads must be 1 or more"):
        MiniLMEmbedder(threads=0)
    with pytest.raises(ValueError, match="batch_pieces must hold one window, 256 or more"):
        MiniLMEmbedder(batch_pieces=100)


@pytest.mark.extra("memory")
def test_the_model_is_loaded_once_per_process() -> None:
    first = default_embedder()
    assert isinstance(first, MiniLMEmbedder)
    assert default_embedder() is first
    assert first.threads == usable_cores()


@pytest.mark.extra("memory")
def test_the_vectors_do_not_depend_on_runs_or_threads() -> None:
    long = " ".join(f"line {i}: the deploy job retries the upload to the artifact registry" for i in range(60))
    texts = ["", "Ana reviews billing PRs", "用户喜欢深色主题", long, "pytest failed with ModuleNotFoundError"]
    texts.append(long[:900])
    one = MiniLMEmbedder(threads=1, batch_pieces=32 * 256).embed(texts)
    two = MiniLMEmbedder(threads=2, batch_pieces=256).embed(texts)
    assert len(one) == len(two) == len(texts)
    for a, b in zip(one, two, strict=True):
        assert len(a) == MiniLMEmbedder.dim
        assert sum(x * y for x, y in zip(a, b, strict=True)) >= 0.9999
    # The long text is several windows and still one unit vector.
    assert abs(sum(x * x for x in one[3]) - 1.0) < 1e-5
    # What it says, not how it ran: a paraphrase is nearer than an unrelated note.
    near, far = MiniLMEmbedder(threads=2).embed(["the test suite could not import a module", "Ana likes green tea"])
    base = two[4]
    assert sum(x * y for x, y in zip(base, near, strict=True)) > sum(x * y for x, y in zip(base, far, strict=True))


class _Counting:
    """Counts the texts of each call; one vector for every text."""

    name = "counting"
    dim = 2

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return [[0.6, 0.8] for _ in texts]


@pytest.mark.extra("memory")
def test_an_update_embeds_the_new_texts_of_all_changed_files_in_one_call() -> None:
    folder = MemoryFolder()
    for day in range(1, 6):
        append_daily(folder, f"note {day}: the release train leaves on day {day}", at=NOW.replace(day=day))
    counting = _Counting()
    with MemoryIndex(folder, embedder=counting) as index:
        done = index.update()
        assert counting.calls == [5]  # one call for five files, not one per file
        assert done.files == 5 and done.chunks == 5 and done.embedded == 5
        assert index.stats()["vectors"] == index.stats()["chunks"] == 5
        assert index.update().files == 0 and counting.calls == [5]  # nothing changed, nothing embedded
        append_daily(folder, "a later note about the train", at=NOW.replace(day=5, hour=11))
        assert index.update().embedded == 1 and counting.calls == [5, 1]
        assert index.rebuild().embedded == 0 and counting.calls == [5, 1]  # every text cached
        assert index.stats()["vectors"] == index.stats()["chunks"]
        assert search(index, "anything", k=1, mode="vector")  # the vectors are in the index
