"""What `ctxkeep serve` runs with: the upstream, the sessions' folder and sizes, the limits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ctxkeep.settings import DURABILITIES, Durability


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeSettings:
    """The proxy's settings; validated on creation with a message that says what would be right."""

    # The upstream's base URL up to and including its version, e.g. https://api.openai.com/v1 or
    # https://api.anthropic.com/v1: a request for /v1/chat/completions goes to <upstream>/chat/completions.
    upstream: str
    # The folder that holds one workspace per conversation (created 0700 when missing).
    root: Path
    # A PostgreSQL URL (postgresql://…): the conversations' workspaces are kept in that database instead of
    # under `root`, and each is closed after its request, so any process serving the same database takes the next.
    store: str | None = None
    # The upstream model's context window, tokens: every session's sizes follow it.
    window: int = 128_000
    # The compaction model (`ctxkeep.get_model` spec); None: the built-in extractive summarizer.
    model: str | None = None
    # Seconds to wait for the upstream (to connect, and between two pieces of its answer) before a 504.
    timeout: float = 600.0
    # The token clients must send in `X-Ctxkeep-Token`; None: no check (only for a loopback address).
    auth_token: str | None = None
    # Sessions kept open in memory; the least recently used idle one is closed past this.
    max_open: int = 256
    # Seconds a request waits for another process holding the same workspace, before a 503.
    lock_timeout: float = 30.0
    # Write each conversation's next summary in the background from its soft threshold (`Session.open(...,
    # background=True)`): a request that reaches the threshold does not wait for the compaction model.
    background: bool = False
    # The largest request body taken, bytes (a 413 past it): a body is held whole in memory while it is read.
    max_body: int = 32 * 1024 * 1024
    # What each conversation's workspace makes durable against a power loss (`ctxkeep.DurabilitySettings`).
    durability: Durability = "step"

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "upstream must be an http(s) base URL such as https://api.openai.com/v1 or"
                " http://127.0.0.1:8080/v1 (the URL itself is not repeated here: it may hold a password)"
            )
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1024:
            raise ValueError(f"window must be the model's context window in tokens, 1024 or more; got {self.window!r}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be a number of seconds above 0; got {self.timeout!r}")
        if self.auth_token is not None and not (self.auth_token.isascii() and self.auth_token.isprintable()):
            # A header carries bytes: a client's other characters would never compare equal to these.
            raise ValueError("the auth token must be printable ASCII (a random one: `openssl rand -hex 16`)")
        if self.auth_token is not None and len(self.auth_token) < 16:
            raise ValueError("the auth token must be at least 16 characters (a random one: `openssl rand -hex 16`)")
        if self.store is not None and not self.store.startswith(("postgresql://", "postgres://")):
            raise ValueError("store must be a PostgreSQL URL, postgresql://user@host/db (for a folder, use root)")
        if self.max_open < 1:
            raise ValueError(f"max_open must be 1 or more; got {self.max_open!r}")
        if not isinstance(self.max_body, int) or isinstance(self.max_body, bool) or self.max_body < 1024:
            raise ValueError(f"max_body must be 1024 bytes or more (32 MiB by default); got {self.max_body!r}")
        if self.durability not in DURABILITIES:
            raise ValueError(f"durability must be one of {', '.join(DURABILITIES)}; got {self.durability!r}")
        if not self.lock_timeout >= 0:
            raise ValueError(f"lock_timeout must be 0 seconds or more; got {self.lock_timeout!r}")

    def upstream_url(self, path: str) -> str:
        """The upstream URL for the part of a proxy path after ``/v1`` (``/chat/completions``, ``/models``)."""
        return self.upstream.rstrip("/") + path
