"""Model providers: one small protocol, `Model`, that turns a `Completion` into a `Reply`, and `get_model`
to choose one by name ("openai:gpt-4o-mini"). The settings, the errors and the retries: docs/providers.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ctxkeep.providers.config import ProviderConfig

__all__ = ["PROVIDERS", "Completion", "Model", "Reply", "Turn", "get_model"]

PROVIDERS = ("anthropic", "deterministic", "openai")


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """One chat turn of a request: who spoke and what they said."""

    role: Literal["user", "assistant"]
    text: str

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise ValueError(
                f"a turn's role is 'user' or 'assistant' (the system text goes in Completion.system); got {self.role!r}"
            )
        if not isinstance(self.text, str):
            raise TypeError(f"a turn's text must be a str; got {type(self.text).__name__}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Completion:
    """What to ask a model: the system text, the turns, and the limits of one call.

    `timeout` is the seconds one attempt may take; a provider made with its own timeout uses that instead.
    `schema` is a JSON schema the reply must follow (structured output), None for free text.
    """

    system: str
    turns: tuple[Turn, ...]
    max_tokens: int = 2048
    temperature: float = 0.0
    timeout: float = 120.0
    schema: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.system, str):
            raise TypeError(f"system must be a str; got {type(self.system).__name__}")
        if not isinstance(self.turns, tuple) or not all(isinstance(t, Turn) for t in self.turns):
            raise TypeError("turns must be a tuple of Turn")
        if not self.turns:
            raise ValueError("a completion needs at least one turn; both APIs reject a request without messages")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a whole number, at least 1; got {self.max_tokens!r}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be between 0 and 2; got {self.temperature!r}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds; got {self.timeout!r}")
        if self.schema is not None and not isinstance(self.schema, Mapping):
            raise TypeError(f"schema must be a JSON schema (a mapping) or None; got {type(self.schema).__name__}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """A model's answer: its text, the model that wrote it, the tokens it cost, the calls it took."""

    text: str
    model: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    attempts: int = 1


@runtime_checkable
class Model(Protocol):
    """Anything that can complete a `Completion`; `name` is how `get_model` would name it."""

    @property
    def name(self) -> str:
        """The model's full name, provider first: ``"openai:gpt-4o-mini"``."""
        ...

    def complete(self, request: Completion) -> Reply:
        """The model's reply to `request`; raises `ctxkeep.errors.ProviderError` when the call fails."""
        ...


def get_model(
    spec: str | None = None,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    timeout: float | None = None,
    config: ProviderConfig | None = None,
) -> Model:
    """The model `spec` names: ``"openai:<model>"``, ``"anthropic:<model>"`` or ``"deterministic"``.

    `spec` None takes ``CTXKEEP_MODEL``, then `model` in the config file. `base_url`, `api_key_env`
    (the variable holding the key) and `timeout` (seconds per attempt) default to ``CTXKEEP_BASE_URL``
    and the file's keys of those names. `config` replaces what the environment and the file say.
    """
    from ctxkeep.providers.config import load_config

    settings = load_config() if config is None else config
    chosen = spec if spec is not None else settings.model
    if chosen is None:
        raise ValueError(
            "no model chosen: pass one (get_model('openai:gpt-4o-mini')), set CTXKEEP_MODEL, "
            "or set `model` in ctxkeep.toml"
        )
    provider, colon, name = chosen.strip().partition(":")
    name = name.strip()
    if provider not in PROVIDERS or (provider == "deterministic") == bool(colon and name) or (colon and not name):
        raise ValueError(
            f"cannot tell the model from {chosen!r}: write 'openai:<model>', 'anthropic:<model>' or 'deterministic'"
        )
    if provider == "deterministic":
        if base_url is not None or api_key_env is not None or timeout is not None:
            raise ValueError("the deterministic model makes no calls: it takes no base_url, api_key_env or timeout")
        from ctxkeep.providers.deterministic import DeterministicModel

        # Scripted: it answers what is queued. The hosts' `--model deterministic` answers with a fixed
        # summary besides (ctxkeep.summarize.testing.host_model): providers know no summaries.
        return DeterministicModel()
    from ctxkeep.providers.sdk import Connection

    env = api_key_env if api_key_env is not None else settings.api_key_env
    connection = Connection(
        base_url=base_url if base_url is not None else settings.base_url,
        api_key_env=env or None,  # None, and a blank name too, is the provider's usual variable
        timeout=timeout if timeout is not None else settings.timeout,
    )
    if provider == "openai":
        from ctxkeep.providers.openai import OpenAIModel

        return OpenAIModel(name, connection)
    from ctxkeep.providers.anthropic import AnthropicModel

    return AnthropicModel(name, connection)
