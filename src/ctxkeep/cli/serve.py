"""``ctxkeep serve``: the OpenAI- and Anthropic-compatible proxy (`ctxkeep.serve`), in the foreground.

``ctxkeep serve ls`` is ``ctxkeep sessions`` (`ctxkeep.cli.sessions`).
"""

from __future__ import annotations

import argparse
import os

from ctxkeep.settings import DURABILITIES

__all__ = ["add_arguments", "byte_size", "run"]


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """The command's options."""
    serve.add_argument("--upstream", required=True, help="the API's base URL with its version, e.g. .../v1")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8787, help="the port to listen on (default 8787)")
    serve.add_argument("--window", type=int, default=128_000, help="the upstream model's context window in tokens")
    serve.add_argument("--root", help="the folder of the conversations' workspaces (default ~/.ctxkeep/serve)")
    serve.add_argument(
        "--store",
        metavar="URL",
        help="keep the workspaces in this PostgreSQL database (postgresql://…) instead of --root: any number of"
        " processes may serve it",
    )
    serve.add_argument("--model", help="summarize with this model: openai:<model>, anthropic:<model>")
    serve.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the upstream (504 after)")
    serve.add_argument(
        "--background", action="store_true", help="write summaries ahead, so no request waits for the compaction model"
    )
    serve.add_argument(
        "--durability",
        choices=DURABILITIES,
        default="step",
        help="step (default): every request durable before it is answered; batch: fdatasyncs grouped over"
        " 50 ms (a power loss loses at most that); off: none (a kill -9 loses nothing in any)",
    )
    serve.add_argument(
        "--max-body",
        type=byte_size,
        default=32 * 1024 * 1024,
        metavar="SIZE",
        help="the largest request body taken, e.g. 32M (the default), 500K or 1G; larger ones get a 413",
    )
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="one line per request on stderr, as text (default) or as one JSON object a line",
    )
    serve.add_argument(
        "--allow-remote", action="store_true", help="allow a --host other machines can reach (needs a token)"
    )
    serve.add_argument(
        "--auth-token", help="the token clients must send in X-Ctxkeep-Token (or set CTXKEEP_AUTH_TOKEN)"
    )


def run(args: argparse.Namespace) -> int:
    """Run the proxy until interrupted; the server's modules are imported only here, so --help stays fast."""
    from pathlib import Path

    from ctxkeep.errors import CtxkeepError
    from ctxkeep.serve import ServeSettings, is_loopback
    from ctxkeep.serve import run as serve

    from .sessions import default_root

    token = args.auth_token or os.environ.get("CTXKEEP_AUTH_TOKEN") or None
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise CtxkeepError(f"--host {args.host} can be reached from other machines: add --allow-remote to mean it")
        if token is None:
            raise CtxkeepError(f"--host {args.host} needs --auth-token (or CTXKEEP_AUTH_TOKEN): clients must send it")
    if args.root and args.store:
        raise CtxkeepError("give --root (a folder) or --store (a PostgreSQL URL), not both")
    root = Path(args.root) if args.root else default_root()
    try:
        settings = ServeSettings(
            upstream=args.upstream,
            root=root,
            store=args.store,
            window=args.window,
            model=args.model,
            timeout=args.timeout,
            auth_token=token,
            background=args.background,
            max_body=args.max_body,
            durability=args.durability,
        )
        serve(settings, host=args.host, port=args.port, log_format=args.log_format)
    except ValueError as exc:
        raise CtxkeepError(str(exc)) from None
    return 0


def byte_size(text: str) -> int:
    """A size in bytes from ``1048576``, ``500K``, ``32M`` or ``1G`` (powers of 1024)."""
    number, unit = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    if not number.isdigit() or unit not in ("", "K", "M", "G"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes, or a number with K, M or G (32M)")
    return int(number) << (10 * ("KMG".index(unit) + 1) if unit else 0)
