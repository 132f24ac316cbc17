"""`Scripted`: a compaction model for the tests that answers from a script, shared by the summarizer tests."""

from __future__ import annotations

from ctxkeep.providers import Completion, Reply


class Scripted:
    """A compaction model that answers from a script (texts, or exceptions to raise; the last one repeats)
    and records requests."""

    def __init__(self, *answers: str | BaseException) -> None:
        self.answers: list[str | BaseException] = list(answers)
        self.requests: list[Completion] = []

    @property
    def name(self) -> str:
        return "scripted:test"

    def complete(self, request: Completion) -> Reply:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return Reply(text=answer, model=self.name)
