"""What ``ctxkeep compact`` does: replay a transcript through the engine into a new workspace, or build
one beside the old and swap them (``--replace``).

Imported only when the command runs (`ctxkeep.cli.compact` has its options): the other commands, and
``--help``, do not import the engine, the session and the summarizer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import stat
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxkeep.errors import CtxkeepError, FormatError, StorageError, WorkspaceLockedError
from ctxkeep.folder import LocalFolder
from ctxkeep.formats.anthropic import to_anthropic
from ctxkeep.formats.openai import to_openai
from ctxkeep.formats.source import read_file
from ctxkeep.messages import Message
from ctxkeep.offload import OFFLOAD_KEY
from ctxkeep.replay import Replay, replay, split_system
from ctxkeep.session import Session
from ctxkeep.settings import EngineSettings, ModelSummarySettings
from ctxkeep.store import STATE, TOOL_RESULT_DIR
from ctxkeep.summarize import ModelSummarizer
from ctxkeep.summarize.testing import host_model
from ctxkeep.swap import Journal, recover
from ctxkeep.tokens import TokenCounter, get_counter
from ctxkeep.workspace import state as state_file

from .output import check_output
from .progress import Progress
from .transcripts import read_transcript

__all__ = ["build"]

# How long `--replace` waits for a process that holds the old workspace, in seconds.
REPLACE_LOCK_WAIT = 2.0


def build(args: argparse.Namespace) -> int:
    """Replay FILE into the workspace -o names and print what it did; returns the exit code."""
    out = Path(args.output)
    # Everything that can be wrong with the arguments or the input is found before any folder is touched.
    settings = _engine_settings(args.window)
    summarizer = _summarizer(args)
    counter = get_counter(args.encoding)
    _recover(out)  # a replace a kill interrupted: finished or rolled back before `out` is looked at
    replacing = _check_output(out, replace=args.replace)
    transcript = read_transcript(args)
    if not 0 <= args.conversation < len(transcript.conversations):
        raise CtxkeepError(
            f"{transcript.path} holds {len(transcript.conversations)} conversation(s); --conversation must be in"
            f" 0..{len(transcript.conversations) - 1}"
        )
    system, messages = split_system(transcript.conversations[args.conversation].messages)
    _check_offload_files(messages, transcript.path)
    run = _Run(args=args, settings=settings, counter=counter, summarizer=summarizer, system=system, messages=messages)
    if replacing:
        result, offloaded = _replace(out, run)
    else:
        result, offloaded = run.build(LocalFolder(out, durability=args.durability))
    report = _compact_report(args, result, offloaded, len(transcript.conversations))
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(_render_compact(report))
    return 0


def _engine_settings(window: int) -> EngineSettings:
    if window < 1:
        raise CtxkeepError(
            f"--window must be the model's context window, a whole number of tokens, 1 or more; got {window}"
        )
    try:
        return EngineSettings.for_window(window)  # every size follows the window: docs/engine.md
    except ValueError as exc:
        raise CtxkeepError(f"--window {window}: {exc}") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Run:
    """One replay of a conversation into a workspace, with everything it needs already checked."""

    args: argparse.Namespace
    settings: EngineSettings
    counter: TokenCounter
    summarizer: ModelSummarizer | None
    system: str | None
    messages: list[Message]

    def build(self, folder: LocalFolder) -> tuple[Replay, int]:
        """Replay into `folder`, write context.json there; the figures and the number of offloaded results."""
        show = self.args.progress if self.args.progress is not None else sys.stderr.isatty()
        bar = Progress(sys.stderr, "replaying", "messages") if show else None
        with Session(folder, settings=self.settings, counter=self.counter, summarizer=self.summarizer) as session:
            result = replay(session, self.messages, system=self.system, progress=bar.update if bar else None)
            if bar:
                bar.close()
            context = session.prepare(self.system).context
            payload: Any
            if self.args.as_ == "anthropic":
                system_out, body = to_anthropic(context.as_messages())
                payload = {"system": system_out, "messages": body}
            else:
                payload = {"messages": to_openai(context.as_messages())}
            folder.write("context.json", (json.dumps(payload, ensure_ascii=False, indent=2) + "\n").encode())
            offloaded = len(session.store.originals())
        return result, offloaded


class _Staged(LocalFolder):
    """A workspace built in a temporary folder that becomes `final`: it names its files by their final paths.

    An offloaded result's notice tells the agent where its original is; that must be where it will be.
    """

    def __init__(self, root: str | os.PathLike[str], final: Path, *, durability: str) -> None:
        super().__init__(root, durability=durability)
        self.final = final.resolve()

    def location(self, name: str) -> str:
        return str(self.final / Path(super().location(name)).relative_to(self.root))


def _check_output(out: Path, *, replace: bool) -> bool:
    """Whether `out` is a workspace `--replace` will replace; False when it is new or an empty folder."""
    # Never through a link, with --replace or without: the workspace is the folder named, not what a link names.
    if not check_output(out, "-o", folder=True):
        return False
    if not any(out.iterdir()):
        return False
    if not replace:
        raise CtxkeepError(
            f"{out} already exists and is not an empty folder; choose a new workspace folder, or pass --replace"
        )
    why = _not_a_workspace(out)
    if why is not None:
        raise CtxkeepError(
            f"{out} is not a ctxkeep workspace ({why}); --replace only replaces a ctxkeep workspace,"
            " so nothing was touched: choose a new workspace folder"
        )
    return True


def _not_a_workspace(folder: Path) -> str | None:
    """Why `folder` is no ctxkeep workspace, or None when its state.json is a readable ctxkeep state."""
    if not stat.S_ISDIR(folder.lstat().st_mode):
        return "not a folder"
    state = folder / STATE
    try:
        mode = state.lstat().st_mode
    except FileNotFoundError:
        return f"no {STATE}"
    except OSError as exc:
        return f"cannot read {STATE}: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return f"{STATE} is not a regular file"
    try:
        state_file.parse(read_file(state), STATE)  # the one reader, with the session's strictness
    except CtxkeepError as exc:
        return str(exc)
    return None


def _recover(out: Path) -> None:
    try:
        done = recover(Path(os.path.abspath(out)))  # `.` named: its own name; a link is not followed
    except WorkspaceLockedError as exc:
        raise CtxkeepError(f"{exc}; nothing was touched") from None
    if done is not None:
        print(f"ctxkeep: {done}", file=sys.stderr)


def _replace(out: Path, run: _Run) -> tuple[Replay, int]:
    """Build the new workspace beside `out` while holding its lock, then swap: a failure leaves `out` as it
    was, and so does a kill (`ctxkeep.swap`: the next run or open finishes or undoes the swap)."""
    target = out.resolve()  # not a link (checked): this only spells `.` and `..` out, for the renames
    journal = Journal(target)
    with _held(out):
        why = _not_a_workspace(target)  # again, now that nobody else can change it
        if why is not None:
            raise CtxkeepError(f"{out} is no longer a ctxkeep workspace ({why}); nothing was touched")
        staging = _sibling(target, "new")
        left = False  # a copy of the old workspace left aside: the journal stays, the next run deletes it
        try:
            journal.write(staging)
            try:
                built = run.build(_Staged(staging, final=target, durability=run.args.durability))
            except CtxkeepError as exc:
                raise CtxkeepError(f"{exc} (the workspace {out} is as it was)") from exc
            left = _swap(staging, target, journal)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already after a swap
            if not left and os.path.lexists(target):  # else the old one is stranded aside: `recover` moves it back
                journal.remove()
    return built


@contextlib.contextmanager
def _held(out: Path) -> Iterator[None]:
    """The lock a `Session` on `out` takes: no process works in the old workspace while it is replaced."""
    try:
        with LocalFolder(out).lock(REPLACE_LOCK_WAIT):
            yield
    except WorkspaceLockedError:
        raise CtxkeepError(
            f"{out} is in use by another process (it holds {out / '.lock'}); nothing was touched:"
            " run --replace again when that process has finished"
        ) from None


def _sibling(out: Path, kind: str) -> Path:
    """A new, empty, private folder beside `out` (same file system, so a rename moves it)."""
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=f".{kind}", dir=out.parent))
    except OSError as exc:
        raise StorageError(
            f"cannot create a folder beside {out}: {exc.strerror or exc}; make its parent folder writable",
            path=str(out.parent),
            errno=exc.errno,
        ) from None


def _swap(new: Path, out: Path, journal: Journal) -> bool:
    """Put the complete workspace `new` where `out` is: old aside, new in, then the old deleted; whether
    a copy is left behind."""
    aside = _sibling(out, "old")
    journal.write(new, aside)  # before the first move: from it on, `recover` finishes the swap
    try:
        os.rename(out, aside)  # onto the empty folder just made: a rename may replace an empty folder
    except OSError as exc:
        aside.rmdir()
        raise StorageError(
            f"cannot move {out} aside: {exc.strerror or exc}; it is as it was", path=str(out), errno=exc.errno
        ) from None
    try:
        os.rename(new, out)
    except OSError as exc:
        try:
            os.rename(aside, out)
        except OSError:
            raise StorageError(
                f"cannot move the new workspace to {out}: {exc.strerror or exc}; the old workspace is in {aside}:"
                " the next ctxkeep compact --replace, or the next open of the workspace, moves it back",
                path=str(aside),
                errno=exc.errno,
            ) from None
        raise StorageError(
            f"cannot move the new workspace to {out}: {exc.strerror or exc}; the old workspace is back in place",
            path=str(out),
            errno=exc.errno,
        ) from None
    try:
        shutil.rmtree(aside)
    except OSError as exc:
        print(f"ctxkeep: warning: the old workspace is left in {aside}: {exc.strerror or exc}", file=sys.stderr)
        return True
    return False


def _check_offload_files(messages: Sequence[Message], path: str) -> None:
    """Refuse a tool result whose offload record names a file outside ``tool_result/``.

    ctxkeep's own transcripts carry the records; the workspace would follow the name.
    """
    for message in messages:
        result = message.tool_result
        record = result.extra.get(OFFLOAD_KEY) if result is not None else None
        file = record.get("file") if isinstance(record, dict) else None
        if not isinstance(file, str):
            continue  # no record, or one the engine leaves as it is with a warning
        folder, _, name = file.partition("/")
        if folder != TOOL_RESULT_DIR or name in ("", ".", "..") or "/" in name:
            raise CtxkeepError(
                f"{path}: message {message.id}: its offload record names {file!r}, which is not a file in"
                f" {TOOL_RESULT_DIR}/; fix or remove the record"
            )


def _summarizer(args: argparse.Namespace) -> ModelSummarizer | None:
    """The model summarizer `--model` asks for; None for the built-in one."""
    if args.model is None:
        for flag in ("base_url", "agents_md"):
            if getattr(args, flag) is not None:
                raise CtxkeepError(f"--{flag.replace('_', '-')} needs --model")
        return None
    agents_md = None
    if args.agents_md is not None:
        try:
            agents_md = read_file(args.agents_md).decode("utf-8", errors="replace")
        except FormatError as exc:
            raise CtxkeepError(f"cannot read --agents-md {args.agents_md}: {exc.reason}") from None
    try:
        model = host_model(args.model, base_url=args.base_url)
        settings = ModelSummarySettings(window=args.model_window, reply_format=args.reply_format, agents_md=agents_md)
        return ModelSummarizer(model, settings=settings)
    except ValueError as exc:
        raise CtxkeepError(str(exc)) from None


def _compact_report(args: argparse.Namespace, r: Replay, offloaded: int, conversations: int) -> dict[str, Any]:
    steps_ms = [s * 1000 for s in r.step_seconds]
    return {
        "file": args.file,
        "workspace": args.output,
        "conversation": f"{args.conversation + 1} of {conversations}",
        "messages": r.messages,
        "steps": r.steps,
        "window": args.window,
        "tokens_full_history": r.tokens_full,
        "tokens_final_context": r.tokens_final,
        "peak_context_tokens": r.peak_tokens,
        "summarizer": args.model or "extractive",
        "compactions": len(r.compactions),
        "failed_compactions": len(r.failures),
        "archived_messages": sum(c.compacted for c in r.compactions),
        "tool_results_offloaded": offloaded,
        "pairing_repairs": r.repairs,
        "step_ms_median": round(statistics.median(steps_ms), 3) if steps_ms else 0.0,
        "seconds": round(r.seconds, 2),
        "context_file": str(Path(args.output) / "context.json"),
        "warnings": r.warnings[:5],
    }


def _render_compact(rep: dict[str, Any]) -> str:
    lines = [
        f"{rep['file']} (conversation {rep['conversation']}) -> {rep['workspace']}",
        f"  messages        {rep['messages']:,} in {rep['steps']:,} steps, window {rep['window']:,} tokens",
        f"  tokens          {rep['tokens_full_history']:,} in the full history -> {rep['tokens_final_context']:,}"
        f" in the final context (peak {rep['peak_context_tokens']:,})",
        f"  compactions     {rep['compactions']} ({rep['archived_messages']:,} messages archived in dialog/)"
        + (f", {rep['failed_compactions']} not applied (see failed/)" if rep["failed_compactions"] else "")
        + f", summaries by {rep['summarizer']}",
        f"  offloaded       {rep['tool_results_offloaded']} tool results in tool_result/",
        f"  time            {rep['seconds']} s, {rep['step_ms_median']} ms per step (median)",
        f"  context         {rep['context_file']}, {Path(rep['workspace']) / 'summary.md'}",
    ]
    lines += [f"  warning: {w}" for w in rep["warnings"]]
    return "\n".join(lines)
