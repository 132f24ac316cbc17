"""Where the providers' settings come from, read here only: the environment (CTXKEEP_MODEL,
CTXKEEP_BASE_URL, CTXKEEP_CONFIG) over the config file (ctxkeep.toml; its keys in docs/providers.md).

API keys are read from the environment by `api_key`, and only when a provider is made.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ctxkeep.providers.failures import redact

ENV_MODEL = "CTXKEEP_MODEL"
ENV_BASE_URL = "CTXKEEP_BASE_URL"
ENV_CONFIG = "CTXKEEP_CONFIG"
CONFIG_FILE = "ctxkeep.toml"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYS = ("model", "base_url", "api_key_env", "timeout")


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderConfig:
    """The provider settings not given in code; None where nothing says."""

    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        for name in ("model", "base_url", "api_key_env"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string")
        # the value is left out of the message: a key pasted here by mistake must not be printed
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ValueError(
                "api_key_env must be the name of the environment variable that holds the key "
                "(letters, digits and _, like OPENAI_API_KEY), not the key itself"
            )
        if self.timeout is not None and (
            not isinstance(self.timeout, int | float) or isinstance(self.timeout, bool) or not self.timeout > 0
        ):
            raise ValueError(f"timeout must be a positive number of seconds; got {self.timeout!r}")

    def __repr__(self) -> str:  # the base URL without the password it may carry
        base_url = None if self.base_url is None else redact(self.base_url)
        return (
            f"ProviderConfig(model={self.model!r}, base_url={base_url!r}, api_key_env={self.api_key_env!r},"
            f" timeout={self.timeout!r})"
        )


def read_config(path: Path) -> ProviderConfig:
    """The provider settings in the TOML file at `path`; a clear ValueError when it is not valid."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"{path}: cannot read the config file: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid TOML: {error}") from None
    unknown = sorted(k for k, v in data.items() if k not in _KEYS and not isinstance(v, dict))
    if unknown:
        raise ValueError(f"{path}: unknown setting {', '.join(unknown)}; the settings are {', '.join(_KEYS)}")
    for key in ("model", "base_url", "api_key_env"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{path}: {key} must be a string")
    try:
        return ProviderConfig(**{k: data[k] for k in _KEYS if k in data})
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def load_config(*, environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> ProviderConfig:
    """The settings of the environment (`environ`, default the process's) over those of the config file.

    The file is ``$CTXKEEP_CONFIG`` (an error if it is missing) or ``ctxkeep.toml`` in `cwd`
    (default the working folder), skipped if there is none.
    """
    env = os.environ if environ is None else environ
    folder = Path.cwd() if cwd is None else cwd
    named = env.get(ENV_CONFIG, "").strip()
    if named:
        path = folder / Path(named).expanduser()
        if not path.is_file():
            raise ValueError(f"{ENV_CONFIG} names {path}, which is not a file: fix or unset {ENV_CONFIG}")
        file = read_config(path)
    elif (folder / CONFIG_FILE).is_file():
        file = read_config(folder / CONFIG_FILE)
    else:
        file = ProviderConfig()
    return ProviderConfig(
        model=env.get(ENV_MODEL, "").strip() or file.model,
        base_url=env.get(ENV_BASE_URL, "").strip() or file.base_url,
        api_key_env=file.api_key_env,
        timeout=file.timeout,
    )


def api_key(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key in the environment variable `name`, or None when it is unset or blank."""
    env = os.environ if environ is None else environ
    return env.get(name, "").strip() or None
