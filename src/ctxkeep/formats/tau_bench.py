"""tau-bench results: a JSON list of runs, one conversation per run.

Each run has ``task_id``, ``trial`` and ``traj``, the run's messages in OpenAI chat format
(system, user, assistant with ``tool_calls``, ``tool`` with ``tool_call_id`` and ``name``);
they are read with the OpenAI converter, so unmodelled fields (the tool ``name``) stay in
``Message.extra["openai"]``. A conversation's id is ``task-<task_id>-trial-<trial>`` and its
title ``task <task_id> trial <trial>``.

The models reuse tool-call ids within a run (gpt-4o does, dozens of times in the airline
results); a repeated id is renamed, with the result that follows it, and noted. Left out on
purpose: each run's ``reward`` and ``info`` (the task, the expected actions, the grading).
"""

from __future__ import annotations

from typing import Any

from ctxkeep.formats.openai import from_openai
from ctxkeep.formats.source import Conversation, Source
from ctxkeep.messages import renumber_duplicates

NAME = "tau_bench"

__all__ = ["parse", "sniff"]


def sniff(source: Source) -> bool:
    """A JSON list whose items carry ``task_id`` and a ``traj``."""
    head = source.head()
    return head.lstrip().startswith("[") and '"task_id"' in head and ('"traj"' in head or '"reward"' in head)


def parse(source: Source) -> list[Conversation]:
    """One conversation per run in the list."""
    runs = source.document()
    if not isinstance(runs, list):
        raise source.error("expected a JSON list of tau-bench runs")
    conversations: list[Conversation] = []
    seen: set[str] = set()
    renamed = 0
    for index, run in enumerate(runs):
        if not isinstance(run, dict) or not isinstance(run.get("traj"), list):
            source.skip(None, f"run {index} has no traj list")
            continue
        conv_id, title = _names(run, index, seen)
        try:
            messages = from_openai(run["traj"], conversation_id=f"{NAME}:{conv_id}")
        except ValueError as exc:
            source.skip(None, f"run {index} ({title}): {exc}")
            continue
        messages, changes = renumber_duplicates(messages)
        renamed += len(changes)
        conversations.append(Conversation(id=conv_id, messages=tuple(messages), title=title))
    if renamed:
        source.notes.append(f"gave {renamed} repeated tool-call id(s) a new one")
    return conversations


def _names(run: dict[str, Any], index: int, seen: set[str]) -> tuple[str, str]:
    """(id, title) of a run; the id is made unique when a task and trial repeat."""
    task, trial = run.get("task_id", index), run.get("trial")
    conv_id = f"task-{task}" + (f"-trial-{trial}" if trial is not None else "")
    title = f"task {task}" + (f" trial {trial}" if trial is not None else "")
    if conv_id in seen:
        conv_id = f"{conv_id}-run-{index}"
    seen.add(conv_id)
    return conv_id, title
