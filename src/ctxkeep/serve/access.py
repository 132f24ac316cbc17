"""One log line per request, on the ``ctxkeep`` logger: what a proxy's operator watches.

    POST /v1/chat/completions 200 fix-the-login-bug-3f2a9c01d4/0: 48,210 -> 12,904 tokens in (compacted),
    312 out, +38.2 ms

The line names the conversation, the tokens sent upstream (and the client's count before a compaction),
the upstream's output tokens when its usage said, and the milliseconds the proxy added before the
upstream call. No message content: only counts and names. With ``--log-format json`` the same fields
are one JSON object a line (`JsonFormatter`); `logging_config` gives uvicorn's own lines the same form.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

__all__ = ["Exchange", "JsonFormatter", "logging_config"]

log = logging.getLogger("ctxkeep")

# The attribute of a `LogRecord` that carries a request's fields (`logging`'s `extra=`).
FIELDS = "ctxkeep_request"


@dataclass(kw_only=True, slots=True)
class Exchange:
    """What one request did, filled in as it goes; `done` writes its log line once."""

    method: str
    path: str
    started: float  # time.monotonic() when the request arrived
    status: int | None = None
    conversation: str | None = None  # "<name>/<branch>" once the request has its workspace
    tokens_in: int | None = None  # the context sent upstream, by ctxkeep's count
    tokens_before: int | None = None  # the client's history before this request's compaction
    tokens_out: int | None = None  # the reply, by the upstream's usage
    compacted: bool = False
    added_ms: float | None = None  # the proxy's time before the upstream call
    stream: bool = False
    error: str | None = None  # what went wrong after the status was sent (a cut stream, the client gone)
    logged: bool = False

    def forwarded(self) -> None:
        """The upstream call is about to be made: what came before it is what the proxy added."""
        self.added_ms = round((time.monotonic() - self.started) * 1000, 1)

    def done(self, status: int | None = None) -> None:
        """Write the request's line (once: the first call wins)."""
        if self.logged:
            return
        self.logged = True
        if status is not None:
            self.status = status
        if not log.isEnabledFor(logging.INFO):
            return  # nobody reads it: the line is not even made
        # The fields are scalars: read as they are (`dataclasses.asdict` copies deeply, a request's cost).
        values = {f.name: getattr(self, f.name) for f in _LOGGED}
        values["ms"] = round((time.monotonic() - self.started) * 1000, 1)
        log.info("%s", self.text(), extra={FIELDS: values})

    def text(self) -> str:
        """The line as text."""
        head = f"{self.method} {self.path} {self.status if self.status is not None else '-'}"
        tail = f" ({self.error})" if self.error else ""
        if self.conversation is None:
            return head + (f", +{self.added_ms} ms" if self.added_ms is not None else "") + tail
        sent = f"{self.tokens_in:,}" if self.tokens_in is not None else "?"
        if self.compacted and self.tokens_before is not None:
            sent = f"{self.tokens_before:,} -> {sent} tokens in (compacted)"
        else:
            sent += " tokens in"
        out = f"{self.tokens_out:,} out" if self.tokens_out is not None else "? out"
        added = f", +{self.added_ms} ms" if self.added_ms is not None else ""
        return f"{head} {self.conversation}: {sent}, {out}{added}{tail}"


_LOGGED = tuple(f for f in fields(Exchange) if f.name not in ("started", "logged"))


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and a request's fields when the line has them."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(line, ensure_ascii=False)


def logging_config(form: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` for the proxy (uvicorn's ``log_config``): ctxkeep's lines at INFO,
    uvicorn's at WARNING, all on standard error, as text or as JSON (`form`: ``text`` or ``json``)."""
    if form not in ("text", "json"):
        raise ValueError(f"the log format must be text or json; got {form!r}")
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"}
        if form == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    handler = {"class": "logging.StreamHandler", "formatter": "line", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": formatter},
        "handlers": {"line": handler},
        "loggers": {
            "ctxkeep": {"handlers": ["line"], "level": "INFO", "propagate": False},
            "uvicorn": {"handlers": ["line"], "level": "WARNING", "propagate": False},
            "uvicorn.error": {"level": "WARNING"},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
        },
    }
