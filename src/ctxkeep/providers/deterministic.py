"""`DeterministicModel`: a `Model` that makes no calls, for tests (yours and ours).

It answers with the replies queued by `enqueue`, in order; a queued `ProviderError` is raised
instead, to test the failure paths. With nothing queued it answers `default(request)`; made without
one, it raises. Providers know no summaries: the model that answers with a fixed, valid summary is
made by `ctxkeep.summarize.testing.fixed_summary_model()`. Every request is kept in `requests`.

    model = DeterministicModel()
    model.enqueue("## Goal\\n- ship it\\n...", ProviderError("overloaded", provider="test", retryable=True))
    summarizer = ModelSummarizer(model)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ctxkeep.errors import ProviderError
from ctxkeep.providers import Completion, Reply


class DeterministicModel:
    """Queued replies in order, else `default` of the request; `name` is ``"deterministic"``."""

    def __init__(self, default: Callable[[Completion], str] | None = None) -> None:
        if default is not None and not callable(default):
            raise TypeError(f"default must be a function of the request, got {type(default).__name__}")
        self.requests: list[Completion] = []
        self._default = default
        self._queue: deque[str | ProviderError] = deque()

    def __repr__(self) -> str:
        return f"DeterministicModel(queued={len(self._queue)}, requests={len(self.requests)})"

    @property
    def name(self) -> str:
        """``"deterministic"``."""
        return "deterministic"

    def enqueue(self, *replies: str | ProviderError) -> None:
        """Answer the next requests with `replies`, in order; a `ProviderError` among them is raised."""
        for reply in replies:
            if not isinstance(reply, str | ProviderError):
                raise TypeError(f"enqueue takes reply texts or ProviderErrors; got {type(reply).__name__}")
        self._queue.extend(replies)

    def complete(self, request: Completion) -> Reply:
        """The next queued reply, or the default answer to `request` when none is queued."""
        self.requests.append(request)
        reply = self._queue.popleft() if self._queue else self._answer(request)
        if isinstance(reply, ProviderError):
            raise reply
        return Reply(text=reply, model="deterministic")

    def _answer(self, request: Completion) -> str:
        if self._default is None:
            raise ProviderError(
                "nothing is queued and there is no default answer: enqueue a reply, give"
                " DeterministicModel(default=...), or make the model with"
                " ctxkeep.summarize.testing.fixed_summary_model() for its fixed summary",
                provider="deterministic",
            )
        return self._default(request)
