"""``ctxkeep memory ...``: search, write, index, consolidate and schedule from the command line.

    ctxkeep memory search QUERY --workspace DIR [-k N] [--dialog | --all] [--mode hybrid|fts|vector]
                                [--min-relevance N] [--json] [--no-resident]
                                [--no-vectors | --embeddings-url URL --embeddings-model NAME --embeddings-dim N]
    ctxkeep memory write TEXT --workspace DIR [--section TITLE]
    ctxkeep memory index --workspace DIR [--rebuild]
    ctxkeep memory consolidate --workspace DIR [--model SPEC [--base-url URL]]
    ctxkeep memory schedule --workspace DIR [--at HH:MM] [--cron]

A workspace kept in PostgreSQL is ``--store URL --session ID`` instead of ``--workspace DIR`` (`docs/fleet.md`).

Only argparse is imported here: the handlers import what they need, so ``ctxkeep --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxkeep.store import Store

    from .embed import Embedder
    from .search import Hit


def add_parser(sub: Any) -> None:
    """Add ``memory`` and its commands to the `ctxkeep` subparsers `sub`."""
    memory = sub.add_parser("memory", help="long-term memory: search, write, index, consolidate, schedule")
    commands = memory.add_subparsers(dest="memory_command", required=True)

    search = commands.add_parser(
        "search",
        help="search MEMORY.md and the day logs (or the archived dialog)",
        description="Search MEMORY.md and the day logs (or the archived dialog) by words and by meaning.",
        epilog=SCORE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    search.add_argument("query")
    _workspace(search)
    search.add_argument("-k", type=int, default=5, help="how many results (default 5)")
    where = search.add_mutually_exclusive_group()
    where.add_argument("--dialog", action="store_true", help="search the archived dialog (dialog/*.jsonl)")
    where.add_argument("--all", action="store_true", help="search memory and the archived dialog")
    search.add_argument("--mode", choices=("hybrid", "fts", "vector"), default="hybrid")
    search.add_argument(
        "--min-relevance",
        type=float,
        default=None,
        metavar="N",
        help="leave out results scoring under N, 0-100 (default 30; 0 shows every candidate)",
    )
    search.add_argument("--json", action="store_true", help="one JSON object per result")
    _embedder_options(search)
    search.add_argument(
        "--no-resident",
        action="store_true",
        help="load MiniLM in this process and start no background process (see below)",
    )

    write = commands.add_parser("write", help="append an entry to today's log, or to a section of MEMORY.md")
    write.add_argument("text")
    _workspace(write)
    write.add_argument("--section", help="add to this section of MEMORY.md instead of today's log")

    index = commands.add_parser("index", help="bring the search index up to date (or --rebuild it)")
    _workspace(index)
    index.add_argument("--rebuild", action="store_true")
    _embedder_options(index)

    consolidate = commands.add_parser("consolidate", help="merge the day logs written since last time into MEMORY.md")
    _workspace(consolidate)
    consolidate.add_argument("--model", help="a model that also merges and supersedes entries (openai:<name>, ...)")
    consolidate.add_argument("--base-url", help="the model's OpenAI- or Anthropic-compatible server")

    schedule = commands.add_parser("schedule", help="consolidate every day at --at (runs until stopped), or --cron")
    _workspace(schedule)
    schedule.add_argument("--at", default="00:00", help="local time of day, HH:MM (default 00:00)")
    schedule.add_argument("--cron", action="store_true", help="print the crontab line instead of running")


SCORE_HELP = """\
Each result is the file and line to look at, its relevance and the lines that hold the most of the
query's words (marked >), with a line of context:

  memory/2026-03-14.md:4  relevance 82 (words 67, meaning 45)
    > 4  - 09:00 [lesson] pytest failed with ModuleNotFoundError; `pip install -e .` fixed it

relevance (0-100) = 100 x (1 - (1 - words) x (1 - meaning)), on a fixed scale in any workspace:
  words    the share of the query's words the result holds ("the", "how" and such aside; stemmed)
  meaning  the cosine of the query's and the result's vectors: 0.2 or less (unrelated) is 0, 0.6 or more 100
Either half alone can make a result; both make a better one. Results under --min-relevance (30) are left
out, so a query nothing matches well prints "no results". With no vectors, relevance is words alone.
The whole chunk is in --json ("text"); the file is there to open at the line shown.

Speed: loading MiniLM takes a new process about a second, so the first search starts it in the background
(python -m ctxkeep.memory.resident: one per user, private socket, gone after 10 idle minutes) and the next
searches ask it for the query's vector. --no-resident loads it in the search's own process instead.
"""


def _workspace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", "-w", help="the workspace folder (or --store and --session)")
    parser.add_argument("--store", metavar="URL", help="a PostgreSQL database that keeps workspaces: postgresql://…")
    parser.add_argument("--session", metavar="ID", help="the workspace's name in --store (`ctxkeep store ls URL`)")


def _embedder_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-vectors", action="store_true", help="full text only (no embedding model)")
    parser.add_argument("--embeddings-url", help="an OpenAI-compatible embeddings endpoint instead of local MiniLM")
    parser.add_argument("--embeddings-model", help="the endpoint's model name")
    parser.add_argument("--embeddings-dim", type=int, help="the endpoint's vector size")


def run(args: argparse.Namespace) -> int:
    """Run a ``ctxkeep memory`` command; the exit code."""
    from ctxkeep.folder import LocalFolder

    handlers = {
        "search": _search,
        "write": _write,
        "index": _index,
        "consolidate": _consolidate,
        "schedule": _schedule,
    }
    try:
        if args.store is not None:
            return _in_database(handlers[args.memory_command], args)
        if args.workspace is None or args.session is not None:
            raise ValueError("give --workspace DIR, or --store URL with --session ID")
        if args.memory_command != "write":  # the one command that may start a workspace's memory
            _check_workspace(args.workspace)
        return handlers[args.memory_command](LocalFolder(args.workspace), args)
    except ValueError as exc:  # a bad argument: the same one-line error as the rest of the CLI
        print(f"ctxkeep: error: {exc}", file=sys.stderr)
        return 2


def _in_database(handler: Callable[[Store, argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run `handler` on the workspace `--session` names in the database `--store` names."""
    from ctxkeep.postgres import is_url

    if args.workspace is not None or args.session is None or not is_url(args.store):
        raise ValueError("with --store postgresql://…, name the workspace by --session ID (and give no --workspace)")
    if args.memory_command == "schedule" and args.cron:
        raise ValueError("--cron writes a folder's path: for a workspace in a database, run `memory schedule` itself")
    from ctxkeep.postgres.store import PostgresStore

    args.workspace = args.session  # what the messages name it by
    # Only `write` may start a workspace's memory, as with a folder: another command on a typo is refused.
    with PostgresStore(args.store, args.session, create=args.memory_command == "write") as store:
        return handler(store, args)


def _check_workspace(path: str) -> None:
    """Refuse a path that holds no workspace (a typo would otherwise become a new, empty one); one that
    `memory write` alone made counts."""
    from pathlib import Path

    from ctxkeep.store import MEMORY_DIR, MEMORY_FILE, STATE

    folder = Path(path)
    if not folder.is_dir():
        why = "not a folder" if folder.exists() else "no such folder"
        raise ValueError(f"{path} is not a workspace ({why}); give the folder a session or `ctxkeep memory write` made")
    if not any((folder / name).exists() for name in (STATE, MEMORY_FILE, MEMORY_DIR)):
        raise ValueError(
            f"{path} is not a workspace (no {STATE}, {MEMORY_FILE} or {MEMORY_DIR}/ in it); give the folder a session"
            " or `ctxkeep memory write` made"
        )


def _embedder(args: argparse.Namespace, *, resident: bool = False) -> Embedder | None:
    """The embedder the options name; with `resident`, MiniLM is the resident process's (`memory.resident`)."""
    from .embed import OpenAIEmbedder, default_embedder

    if args.no_vectors:
        return None
    if args.embeddings_url or args.embeddings_model:
        if not (args.embeddings_url and args.embeddings_model and args.embeddings_dim):
            raise ValueError("--embeddings-url needs --embeddings-model and --embeddings-dim too")
        return OpenAIEmbedder(args.embeddings_model, dim=args.embeddings_dim, base_url=args.embeddings_url)
    if resident:
        from .resident import resident_embedder

        return resident_embedder()
    return default_embedder()


def _search(folder: Store, args: argparse.Namespace) -> int:
    from .search import open_index, search

    if args.k < 1:
        raise ValueError(f"-k must be 1 or more; got {args.k}")
    source = "dialog" if args.dialog else None if args.all else "memory"
    limit = {} if args.min_relevance is None else {"min_relevance": args.min_relevance}
    if args.min_relevance is not None and not 0 <= args.min_relevance <= 100:
        raise ValueError(f"--min-relevance must be a number from 0 to 100; got {args.min_relevance:g}")
    with open_index(folder, embedder=_embedder(args, resident=not args.no_resident)) as index:
        index.update()
        hits = search(index, args.query, k=args.k, source=source, mode=args.mode, **limit)
    for hit in hits:
        print(json.dumps(hit.to_dict(), ensure_ascii=False) if args.json else show(hit))
    if not hits and not args.json:
        print("no results", file=sys.stderr)
    return 0


def show(hit: Hit) -> str:
    """A result for a person: ``file:line``, its relevance and halves, then its lines (``>`` where words match)."""
    halves = (("words", hit.words), ("meaning", hit.meaning))
    known = [f"{name} {round(100 * value)}" for name, value in halves if value is not None]
    head = f"{hit.path}:{hit.line}  relevance {round(hit.score)}" + (f" ({', '.join(known)})" if known else "")
    one_line = hit.start_line == hit.end_line  # an archived message: every text line is the same file line
    width = len(str(max((x.number for x in hit.lines), default=0)))
    body = [
        f"  {'>' if x.match else ' '} {x.text}"
        if one_line
        else f"  {'>' if x.match else ' '} {x.number:>{width}}  {x.text}"
        for x in hit.lines
        if x.text.strip() or x.match
    ]
    return "\n".join([head, *body])


def _write(folder: Store, args: argparse.Namespace) -> int:
    from .files import append_daily, append_to_section

    if args.section:
        name = append_to_section(folder, args.text, section=args.section)
    else:
        name = append_daily(folder, args.text, at=datetime.now().astimezone())
    print(f"saved to {name}")
    return 0


def _index(folder: Store, args: argparse.Namespace) -> int:
    from .search import open_index

    with open_index(folder, embedder=_embedder(args)) as index:
        started = time.perf_counter()
        done = index.rebuild() if args.rebuild else index.update()
        stats = index.stats()
    print(
        f"{done.files} files indexed, {done.removed} removed, {done.chunks} chunks, {done.embedded} embedded"
        f" in {time.perf_counter() - started:.1f} s; the index holds {stats['files']} files, {stats['chunks']}"
        f" chunks, {stats['vectors']} vectors"
    )
    return 0


def _consolidate(folder: Store, args: argparse.Namespace) -> int:
    from ctxkeep.summarize.testing import host_model

    from .consolidate import consolidate

    model = host_model(args.model, base_url=args.base_url) if args.model else None
    done = consolidate(folder, now=datetime.now().astimezone(), model=model)
    if not done.logs:
        print("nothing to consolidate: no day log changed since the last time")
        return 0
    print(
        f"merged {len(done.logs)} logs ({', '.join(done.logs)}) into MEMORY.md by {done.by}: {done.added} added,"
        f" {done.repeated} already there, {done.superseded} superseded; the old MEMORY.md is in {done.backup}"
    )
    return 0


def _schedule(folder: Store, args: argparse.Namespace) -> int:
    from .consolidate import cron_line, next_run

    next_run(datetime.now(), args.at)  # checks --at
    if args.cron:
        # Absolute: cron starts in the home folder with a bare PATH. The interpreter running now has ctxkeep.
        program = (sys.executable, "-m", "ctxkeep.cli")
        print(cron_line(os.path.abspath(args.workspace), args.at, program=program))
        return 0
    print(f"consolidating {args.workspace} every day at {args.at} (local time); Ctrl-C stops", file=sys.stderr)
    schedule(folder, args.at, clock=lambda: datetime.now().astimezone(), sleep=time.sleep)
    return 0


def schedule(
    folder: Store,
    at: str,
    *,
    clock: Callable[[], datetime],
    sleep: Callable[[float], object],
    runs: int | None = None,
) -> int:
    """Consolidate now if a day log is pending (a missed midnight), then every day at `at`; `runs` stops it.

    Sleeps at most a minute at a time and reads the clock again, so a suspended machine or a clock change
    is caught up at once. Returns how many consolidations ran.
    """
    from .consolidate import consolidate, next_run, pending_logs

    done = 0
    if pending_logs(folder):
        consolidate(folder, now=clock())
        done += 1
    while runs is None or done < runs:
        due = next_run(clock(), at)
        while (now := clock()) < due:
            sleep(min(60.0, (due - now).total_seconds()))
        result = consolidate(folder, now=clock())
        print(f"{clock().isoformat(timespec='seconds')}: merged {len(result.logs)} logs", file=sys.stderr)
        done += 1
    return done
