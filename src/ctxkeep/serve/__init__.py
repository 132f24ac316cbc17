"""`ctxkeep serve`: an OpenAI- and Anthropic-compatible proxy that keeps any agent's context inside its window.

The client keeps sending its whole history to the proxy's base URL; the upstream model sees the compacted
context. Design and choices: docs/serve.md. Modules: `settings` (what it runs with), `app` (the ASGI
application and the request's path), `known` (a body read by its new messages alone), `access` (a log line
per request), `sessions` (a workspace per conversation, one request at a time in each), `forward` (the
upstream), `http11` (the HTTP/1.1 client under it), `chat` and `messages_api` (the two wire formats), `sse`
(events read back)."""

from __future__ import annotations

import ipaddress
import logging
import logging.config
from collections.abc import Callable

import uvicorn  # here, not in `run`: a missing `serve` extra is named before anything is printed or made

from ctxkeep.summarize import ModelSummarizer, Summarizer
from ctxkeep.summarize.testing import host_model

from .access import logging_config
from .app import create_app
from .settings import ServeSettings

__all__ = ["ServeSettings", "create_app", "is_loopback", "run", "summarizers"]


def is_loopback(host: str) -> bool:
    """Whether `host` is an address only this machine can reach (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(settings: ServeSettings, *, host: str, port: int, log_format: str = "text") -> None:
    """Serve until interrupted, one log line per request on standard error (`log_format`: ``text`` or
    ``json``, uvicorn's own lines alike). A host other than a loopback address needs `settings.auth_token`."""
    if not is_loopback(host) and settings.auth_token is None:
        raise ValueError(f"binding {host} lets other machines in: give an auth token that clients must send")
    app = create_app(settings, summarizer=summarizers(settings.model))
    # Configured here rather than by uvicorn (`log_config=None`), so that the first line is in the same form.
    logging.config.dictConfig(logging_config(log_format))
    if settings.store is not None:
        from ctxkeep.postgres.store import shown_url

        where = shown_url(settings.store)
    else:
        where = str(settings.root)
    logging.getLogger("ctxkeep").info("serving http://%s:%d/v1 -> the upstream; workspaces in %s", host, port, where)
    uvicorn.run(app, host=host, port=port, log_config=None, log_level="warning", access_log=False, server_header=False)


def summarizers(spec: str | None) -> Callable[[], Summarizer | None]:
    """What makes each workspace's summarizer: the model `spec` names (checked now), or the extractive one."""
    if spec is None:
        return lambda: None
    model = host_model(spec)  # raises ValueError for a bad spec, before the server starts
    return lambda: ModelSummarizer(model)
