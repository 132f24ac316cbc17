"""The one retry loop of the SDK providers (whose own retries are off, so this is the only loop).

    attempt 1 ─✗─► wait ─► attempt 2 ─✗─► wait ─► attempt 3 ─✗─► ProviderError(attempts=3)
                   │
                   └─ the server's Retry-After (capped at 30 s), else a random wait in
                      [0, min(5 s, 0.5 s * 2 ** (failures - 1))]: "full jitter"

Only a `ProviderError` with `retryable` set is tried again: timeouts, refused connections and
HTTP 408, 409, 429 and 5xx. A 400, 401, 403, 404 or 422 will not change by asking again.
KeyboardInterrupt and asyncio.CancelledError are not errors of the call and pass through at once.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random as _random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ctxkeep.errors import ProviderError

T = TypeVar("T")

log = logging.getLogger("ctxkeep")


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How often to call and how long to wait between calls; all times in seconds."""

    attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 5.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool) or self.attempts < 1:
            raise ValueError(f"attempts must be a whole number, at least 1; got {self.attempts!r}")
        for name in ("base_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds, 0 or more; got {value!r}")
        if self.max_delay < self.base_delay:
            raise ValueError(f"max_delay ({self.max_delay}) must be at least base_delay ({self.base_delay})")

    def delay(self, failures: int, *, retry_after: float | None, random: Callable[[], float]) -> float:
        """The wait after the `failures`-th failed attempt: Retry-After if the server sent one, else jittered."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.max_delay, self.base_delay * 2 ** (failures - 1))
        return float(ceiling * random())


def retryable_status(status: int) -> bool:
    """Whether asking again may help after HTTP `status`: 408, 409, 429 and 5xx."""
    return status in (408, 409, 429) or status >= 500


def parse_retry_after(headers: Mapping[str, str], *, now: float) -> float | None:
    """The seconds the server asked to wait, from ``retry-after-ms`` or ``Retry-After`` (seconds or an
    HTTP date, read against `now`, a Unix time); None when neither is there or readable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis)
        except ValueError:
            pass
        else:
            if math.isfinite(value) and value >= 0:
                return value / 1000
    text = headers.get("retry-after")
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT even when it fails to say so
            return None
        return max(when.timestamp() - now, 0.0)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def call_with_retry(
    call: Callable[[], T],
    *,
    policy: RetryPolicy = RetryPolicy(),
    sleep: Callable[[float], None] = time.sleep,
    random: Callable[[], float] = _random.random,
) -> tuple[T, int]:
    """The result of `call` and the number of calls it took, trying again as `policy` says.

    The last `ProviderError` is raised with its `attempts` set when no call succeeds.
    """
    for attempt in range(1, policy.attempts + 1):
        try:
            return call(), attempt
        except ProviderError as error:
            failure = error
        # raised here, outside the except clause, so no earlier exception rides along as its context
        if not failure.retryable or attempt == policy.attempts:
            raise failure.retried(attempt)
        wait = policy.delay(attempt, retry_after=failure.retry_after, random=random)
        log.debug("%s; trying again in %.2f s (attempt %d of %d)", failure, wait, attempt + 1, policy.attempts)
        sleep(wait)
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover
