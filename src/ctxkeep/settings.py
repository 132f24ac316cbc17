"""Settings of the pre-reasoning pass, one frozen dataclass per concern, with the seed defaults.

    CompactSettings   when to compact and how much recent history to keep (tokens)
    OffloadSettings   how big tool results are cut and saved to files (bytes)
    CacheSettings     what a provider's prompt cache charges: the prices the cost of a context edit is weighed at
    ToolPolicy        which tools get the browser or file-read treatment (name patterns)
    EngineSettings    all of the pass: the two above, retry after a failure, language, summary size, memory
    MemorySettings    the memory flush before compaction, and the AGENTS.md rules put back after one
    ModelSummarySettings  how the model summarizer asks its compaction model (window, reply size, retries)

Every value is checked on construction; the error says what is wrong and what would be right.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, TypeAlias

# The languages of a summary; "auto" detects it from the messages (ctxkeep.summarize.resolve_language).
LANGUAGES = ("en", "zh", "auto")
# The smallest summary cap, in characters: the six headings, their "(none)" lines and the capped goal lines.
MIN_SUMMARY_CHARS = 2_000
# Room the archive guide takes at the head of a summary, beyond the sections.
GUIDE_CHARS = 500
# The default cap on the texts of one message, in characters (`OffloadSettings.max_message_chars`).
MAX_MESSAGE_CHARS = 32_000_000

# How `EngineSettings.for_window` sizes things, as shares of the compaction threshold: the summary may
# take a quarter, a recent tool result a quarter, an older one 2% (a threshold of 89,600 tokens, the
# seed's, gives its 16,000 characters, 50,000 and 3,000 bytes). Text is counted at 3 characters a
# token, the low end for code, logs and JSON, so a share is never under-counted.
CHARS_PER_TOKEN = 3
# The window every size derives from when none is given: the seed's (`EngineSettings()` is `for_window` of it).
DEFAULT_WINDOW = 128_000
_SUMMARY_SHARE = 0.25
_RECENT_SHARE = 0.25
_OLD_SHARE = 0.02
# Recent results are cut so that this many more than `recent_n` fit beside the summary under the threshold
# (measured in bench/bench_adapters.py --engine: at a 16,000-token window, one compaction every 2.9 requests with
# a quarter of the threshold each, every 4.3 with this). At 128,000 the 50,000-byte cap binds first.
_STEPS_AHEAD = 2
# A step seldom adds more than this many bytes of results: 2% of the results of the real agent sessions in
# ../shared/data/transcripts pass it (a long file read, a build log). A window whose threshold holds
# `_STEPS_BETWEEN` steps of them beside what a compaction leaves (the summary cap and the kept tail) cuts its
# recent results by the rule above; a smaller one cuts them to a `_STEPS_BETWEEN`th of that room, so that even
# steps whose results all pass the cut leave that many requests between compactions (a 16,000-token window
# with 30 KB outputs compacted every 4.3 requests by the rule above, every 6 with this).
_BIG_STEP_BYTES = 16_000
_STEPS_BETWEEN = 5
# Results past `recent_n` age (get the older cut) together once that would free half the threshold.
_AGE_SHARE = 0.5
# A result past `recent_n` ages at once when at most a thirtieth of the threshold was sent from it on
# (measured in bench/bench_cache.py: 2,000 and 6,000 tokens at 128,000 both keep less of the prompts).
_TAIL_SHARE = 1 / 30
_MIN_OLD_BYTES = 256

PolicyKind: TypeAlias = Literal["browser", "file_read", "default"]
# How the summary is laid out across compactions: "single", one living summary rewritten at each
# compaction; "frozen", the earlier parts sent unchanged and the newest appended (docs/engine.md).
SummaryLayout: TypeAlias = Literal["single", "frozen"]
SUMMARY_LAYOUTS: tuple[SummaryLayout, ...] = ("single", "frozen")


def _positive(value: object, name: str, *, zero: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero else 1):
        least = "0 or more" if zero else "1 or more"
        raise ValueError(f"{name} must be a whole number, {least}; got {value!r}")


def _ratio(value: object, name: str) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1]; got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactSettings:
    """When to compact (`compact_threshold`) and how many recent tokens to keep (`reserve`).

    Defaults are the seed's: a 128,000-token window, compaction at 0.7 of it (89,600 tokens),
    and a kept tail of 0.1 of it capped at 12,800 tokens.

    With `background` (``Session.open(path, background=True)``) a session writes each summary ahead: it
    starts one once the context passes `soft_threshold` (`soft_ratio` of the threshold), applies it at the
    threshold, and lets the context grow up to `wait_threshold` before it waits for a summary still being
    written.
    """

    max_input_length: int = 128_000
    compact_ratio: float = 0.7
    reserve_ratio: float = 0.1
    reserve_cap: int = 12_800
    soft_ratio: float = 0.85
    background: bool = False

    def __post_init__(self) -> None:
        _positive(self.max_input_length, "max_input_length")
        _ratio(self.compact_ratio, "compact_ratio")
        _ratio(self.reserve_ratio, "reserve_ratio")
        _positive(self.reserve_cap, "reserve_cap")
        _ratio(self.soft_ratio, "soft_ratio")
        if self.reserve_ratio >= self.compact_ratio:
            raise ValueError(
                f"reserve_ratio ({self.reserve_ratio}) must be below compact_ratio ({self.compact_ratio}),"
                " or a compaction could never free room"
            )

    @property
    def compact_threshold(self) -> int:
        """Tokens (system prompt + summary + live messages) above which a compaction runs."""
        return int(self.max_input_length * self.compact_ratio)

    @property
    def reserve(self) -> int:
        """The most tokens of recent messages a compaction keeps verbatim."""
        return min(int(self.max_input_length * self.reserve_ratio), self.reserve_cap)

    @property
    def soft_threshold(self) -> int:
        """Tokens above which a background summary of the next compaction starts (with `background`)."""
        return int(self.compact_threshold * self.soft_ratio)

    @property
    def wait_threshold(self) -> int:
        """Tokens up to which a due compaction whose background summary is not written yet is put off: halfway
        from the threshold to the window, so the request still fits while the summary is finished."""
        return self.compact_threshold + (self.max_input_length - self.compact_threshold) // 2


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolPolicy:
    """Tools whose name matches one of `patterns` (shell-style, case-insensitive) get `kind`."""

    kind: PolicyKind
    patterns: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.kind not in ("browser", "file_read", "default"):
            raise ValueError(f"ToolPolicy.kind must be 'browser', 'file_read' or 'default'; got {self.kind!r}")
        if isinstance(self.patterns, str):
            raise TypeError("ToolPolicy.patterns must be a tuple of patterns, not one string")
        object.__setattr__(self, "patterns", tuple(self.patterns))
        for p in self.patterns:
            if not isinstance(p, str) or not p:
                raise ValueError(f"ToolPolicy.patterns must be non-empty strings; got {p!r}")

    def matches(self, tool_name: str) -> bool:
        """True when `tool_name` matches one of the patterns."""
        name = tool_name.lower()
        return any(fnmatch.fnmatchcase(name, p.lower()) for p in self.patterns)


DEFAULT_POLICIES: tuple[ToolPolicy, ...] = (
    ToolPolicy(kind="browser", patterns=("*browser*", "*playwright*", "*puppeteer*", "*chrome*")),
    ToolPolicy(
        kind="file_read",
        patterns=("read", "read_file", "*_read_file", "file_read", "view_file", "open_file", "readfile", "cat"),
    ),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheSettings:
    """What a provider's prompt cache charges, as multiples of its uncached input price, and how many steps a
    rewrite of the context must pay back within (`ctxkeep.costs`). The defaults are Anthropic's, the dearest
    cache break; `CacheSettings.of("openai")` and the other names of `CACHE_PRICES` give another provider's.
    """

    write: float = 1.25  # a token sent past the cached prefix (written to the cache, where that costs more)
    read: float = 0.1  # a token of the cached prefix, served again
    horizon: int = 10  # the next steps whose cache reads a rewrite's saving is counted over

    def __post_init__(self) -> None:
        for name in ("write", "read"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 10:
                raise ValueError(f"CacheSettings.{name} must be a multiple of the input price, 0 to 10; got {value!r}")
        if self.read > self.write:
            raise ValueError(
                f"CacheSettings.read ({self.read}) must not exceed write ({self.write}): a cached token costs at most"
                " what sending it anew does"
            )
        _positive(self.horizon, "horizon")

    @classmethod
    def of(cls, provider: str) -> CacheSettings:
        """The cache prices of `provider`, a name of `CACHE_PRICES`; raises `ValueError` naming them otherwise."""
        try:
            return CACHE_PRICES[provider]
        except KeyError:
            raise ValueError(f"no cache prices known for {provider!r}; use one of {', '.join(CACHE_PRICES)}") from None


# Prompt-cache prices as multiples of the uncached input price, from the providers' pricing pages (December 2026):
# Anthropic writes at 1.25x (5-minute cache) and reads at 0.1x; OpenAI caches on its own, with no write premium, and
# bills a cached token at 0.5x (gpt-4o), 0.25x (gpt-4.1) or 0.1x (gpt-5); Gemini's implicit cache reads at 0.25x;
# DeepSeek's at 0.1x; "none", a server without a prompt cache (a local model): every token is sent anew.
CACHE_PRICES: dict[str, CacheSettings] = {
    "anthropic": CacheSettings(write=1.25, read=0.1),
    "openai": CacheSettings(write=1.0, read=0.25),
    "openai:gpt-4o": CacheSettings(write=1.0, read=0.5),
    "openai:gpt-5": CacheSettings(write=1.0, read=0.1),
    "gemini": CacheSettings(write=1.0, read=0.25),
    "deepseek": CacheSettings(write=1.0, read=0.1),
    "none": CacheSettings(write=1.0, read=1.0),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class OffloadSettings:
    """How tool results are cut (bytes of UTF-8) and how long their saved files live.

    The `recent_n` newest results are cut to `recent_max_bytes`, older ones to `old_max_bytes`. A
    rewritten message costs a prompt cache everything after it, so older ones get that second cut only
    where it is cheap (docs/offload.md): at once when at most `age_tail_tokens` tokens were sent after
    them in the previous request (0: never so), together once that frees `age_batch_bytes` (0: each
    one as soon as it passes `recent_n`), and at every compaction. Over the compaction threshold they
    age instead of a compaction when that buys room under it more cheaply at the `cache` prices
    (`ctxkeep.costs.room_cost`), always with `age_over_threshold` (it spares compactions but rewrites the
    context from the first of them, step after step near the threshold). After a pause longer than
    `cache_lifetime` seconds the cache is cold and everything waiting is cut. The first
    policy whose pattern matches a tool's name applies; no match means the default policy.

    `max_message_chars` caps the texts of one message as it comes in (`Session.add` and `sync`): past it
    the middle is dropped, with a note saying how much. A result is cut and its original saved before its
    message is held, so memory and disk take an output about once, up to this cap.
    """

    recent_n: int = 3
    recent_max_bytes: int = 50_000
    old_max_bytes: int = 3_000
    # Half the seed's threshold in bytes (89,600 tokens at 3 bytes each), as `for_window` derives it.
    age_batch_bytes: int = 134_400
    # A thirtieth of the seed's threshold, as `for_window` derives it.
    age_tail_tokens: int = 2_986
    age_over_threshold: bool = False  # True: over the threshold, always age before compacting
    # Seconds a provider keeps a prompt cache unused (Anthropic's and OpenAI's default: 5 minutes); after a
    # longer pause it is gone anyway, and every waiting cut is made at once. 0: never assume so.
    cache_lifetime: float = 300.0
    # The prices the cost of a rewrite is weighed at (`ctxkeep.costs`): Anthropic's by default.
    cache: CacheSettings = field(default_factory=CacheSettings)
    retention_days: int = 30
    policies: tuple[ToolPolicy, ...] = field(default=DEFAULT_POLICIES)
    max_message_chars: int = MAX_MESSAGE_CHARS

    def __post_init__(self) -> None:
        _positive(self.recent_n, "recent_n", zero=True)
        _positive(self.max_message_chars, "max_message_chars")
        _positive(self.recent_max_bytes, "recent_max_bytes")
        _positive(self.old_max_bytes, "old_max_bytes")
        _positive(self.age_batch_bytes, "age_batch_bytes", zero=True)
        _positive(self.age_tail_tokens, "age_tail_tokens", zero=True)
        if not isinstance(self.age_over_threshold, bool):
            raise TypeError(f"age_over_threshold must be True or False; got {self.age_over_threshold!r}")
        if not isinstance(self.cache_lifetime, int | float) or isinstance(self.cache_lifetime, bool):
            raise TypeError(f"cache_lifetime must be a number of seconds (0: never cold); got {self.cache_lifetime!r}")
        if not 0 <= self.cache_lifetime < float("inf"):
            raise ValueError(f"cache_lifetime must be 0 or more seconds (0: never cold); got {self.cache_lifetime!r}")
        if not isinstance(self.cache, CacheSettings):
            raise TypeError(
                f"OffloadSettings.cache must be a CacheSettings (as CacheSettings.of('openai')); got {self.cache!r}"
            )
        _positive(self.retention_days, "retention_days")
        if self.old_max_bytes > self.recent_max_bytes:
            raise ValueError(
                f"old_max_bytes ({self.old_max_bytes}) must not exceed recent_max_bytes ({self.recent_max_bytes}):"
                " older results are cut further, never less"
            )
        object.__setattr__(self, "policies", tuple(self.policies))
        for p in self.policies:
            if not isinstance(p, ToolPolicy):
                raise TypeError(f"OffloadSettings.policies must hold ToolPolicy values; got {p!r}")

    def policy_for(self, tool_name: str | None) -> PolicyKind:
        """The policy kind for a tool name (``"default"`` when nothing matches or the name is unknown)."""
        if tool_name:
            for p in self.policies:
                if p.matches(tool_name):
                    return p.kind
        return "default"


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSettings:
    """Everything the pass needs to decide: compaction, offloading, retry after a failure, language."""

    compact: CompactSettings = field(default_factory=CompactSettings)
    offload: OffloadSettings = field(default_factory=OffloadSettings)
    retry_growth: float = 0.05
    language: str = "auto"
    summary_max_chars: int = 16_000
    memory: MemorySettings = field(default_factory=lambda: MemorySettings())
    # "frozen": a compaction appends a part summarizing only what it archived, the earlier parts sent
    # unchanged (a prompt cache keeps them), consolidated into one when the next would pass the cap.
    summary_layout: SummaryLayout = "single"

    @classmethod
    def for_window(cls, window: int, **overrides: Any) -> EngineSettings:
        """The settings for a model whose window is `window` tokens: every size follows the window, unless given.

        At the seed's 128,000 tokens this gives the seed's numbers; below, the summary and the
        offloaded results shrink with the compaction threshold, so that the summary alone can never
        fill it and a compaction can always free room (the rule is in docs/engine.md). As httpx's
        ``Timeout(5.0, connect=10.0)``, a keyword overrides one part: a field of `EngineSettings`
        (`language`, `summary_max_chars`, a whole `compact`...), of `CompactSettings` (`compact_ratio`,
        `background`...: the sizes then follow the threshold it makes) or of `OffloadSettings`
        (`recent_n`, `old_max_bytes`...). Raises `TypeError` for a name that is none of these.
        """
        parts = _overrides(overrides)
        compact = parts[0].pop("compact", None) or CompactSettings(max_input_length=window, **parts[1])
        room = compact.compact_threshold * CHARS_PER_TOKEN  # the threshold, in characters (or bytes) of text
        summary_max_chars = max(MIN_SUMMARY_CHARS + GUIDE_CHARS, min(16_000, int(room * _SUMMARY_SHARE)))
        # Room for several steps: what the threshold leaves beside a summary at its cap holds the recent results
        # and `_STEPS_AHEAD` more, or every step or two of a small window would compact.
        steps = OffloadSettings().recent_n + _STEPS_AHEAD
        recent = min(int(room * _RECENT_SHARE), (room - summary_max_chars) // steps)
        # At a small window a step's results pass any cut this leaves: each step then adds a whole recent result,
        # and the room a compaction leaves is shared by the steps that should fit before the next one.
        left = room - summary_max_chars - compact.reserve * CHARS_PER_TOKEN
        if left < _STEPS_BETWEEN * _BIG_STEP_BYTES:
            recent = min(recent, left // _STEPS_BETWEEN)
        derived = OffloadSettings(
            recent_max_bytes=max(_MIN_OLD_BYTES, min(50_000, recent)),
            old_max_bytes=max(_MIN_OLD_BYTES, min(3_000, int(room * _OLD_SHARE))),
            age_batch_bytes=int(room * _AGE_SHARE),
            age_tail_tokens=int(compact.compact_threshold * _TAIL_SHARE),
        )
        offload = parts[0].pop("offload", None) or replace(derived, **parts[2])
        sizes: dict[str, Any] = {"compact": compact, "offload": offload, "summary_max_chars": summary_max_chars}
        return cls(**{**sizes, **parts[0]})

    def __post_init__(self) -> None:
        if not isinstance(self.compact, CompactSettings):
            raise TypeError(f"EngineSettings.compact must be a CompactSettings; got {self.compact!r}")
        if not isinstance(self.offload, OffloadSettings):
            raise TypeError(f"EngineSettings.offload must be an OffloadSettings; got {self.offload!r}")
        if not isinstance(self.retry_growth, int | float) or not 0 <= self.retry_growth < 1:
            raise ValueError(
                "retry_growth (share of the window the context must grow by before a failed compaction is"
                f" tried again) must be in [0, 1); got {self.retry_growth!r}"
            )
        least = MIN_SUMMARY_CHARS + GUIDE_CHARS
        if not isinstance(self.summary_max_chars, int) or self.summary_max_chars < least:
            raise ValueError(
                f"summary_max_chars must be a whole number of at least {least:,} (room for the six sections and the"
                f" archive guide); got {self.summary_max_chars!r}"
            )
        if self.language not in LANGUAGES:
            raise ValueError(f"language must be one of {', '.join(map(repr, LANGUAGES))}; got {self.language!r}")
        if not isinstance(self.memory, MemorySettings):
            raise TypeError(f"EngineSettings.memory must be a MemorySettings; got {self.memory!r}")
        if self.summary_layout not in SUMMARY_LAYOUTS:
            raise ValueError(
                f"summary_layout must be one of {', '.join(map(repr, SUMMARY_LAYOUTS))}; got {self.summary_layout!r}"
            )


def _overrides(given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """`EngineSettings.for_window`'s keywords sorted by the part they override: the engine's own fields, the
    compaction's, the offload's. Raises `TypeError` for a name of none, or a part given whole and in pieces."""
    names = [{f.name for f in fields(c)} for c in (EngineSettings, CompactSettings, OffloadSettings)]
    parts: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] = ({}, {}, {})
    for name, value in given.items():
        where = next((k for k, known in enumerate(names) if name in known), None)
        if where is None or name == "max_input_length":
            known = ", ".join(sorted((names[0] | names[1] | names[2]) - {"max_input_length"}))
            raise TypeError(
                f"{name!r} is no setting to override (the window is given as `window`); expected one of {known}"
            )
        parts[where][name] = value
    for whole, pieces in (("compact", parts[1]), ("offload", parts[2])):
        if whole in parts[0] and pieces:
            raise TypeError(f"give {whole}= whole or its fields ({', '.join(sorted(pieces))}), not both")
    return parts


@dataclass(frozen=True, kw_only=True, slots=True)
class MemorySettings:
    """Long-term memory in the pass: the flush before a compaction, and the workspace rules after one."""

    flush: bool = False  # before each compaction, write preferences and lessons of what it cuts to memory/YYYY-MM-DD.md
    flush_steps: int = 3  # at most this many model calls per flush (with a model)
    rules_sections: tuple[str, ...] = ("Session Startup", "Red Lines")  # of the workspace's AGENTS.md
    rules_max_chars: int = 3_000  # of those sections, in the first context after a compaction

    def __post_init__(self) -> None:
        if not isinstance(self.flush, bool):
            raise TypeError(f"flush must be True or False; got {self.flush!r}")
        _positive(self.flush_steps, "flush_steps")
        if isinstance(self.rules_sections, str) or not all(
            isinstance(t, str) and t.strip() for t in self.rules_sections
        ):
            raise ValueError(f"rules_sections must be a tuple of AGENTS.md section titles; got {self.rules_sections!r}")
        _positive(self.rules_max_chars, "rules_max_chars", zero=True)


# The budget of one request to the compaction model (ctxkeep.summarize.model.chunks). Our counter is not the
# model's tokenizer, so every count is multiplied by SAFETY_MARGIN; the prompt (system text, task, previous
# summary) gets at least PROMPT_RESERVE tokens; a part of fewer than MIN_CHUNK_TOKENS is too little to summarize.
SAFETY_MARGIN = 1.2
PROMPT_RESERVE = 4_096
MIN_CHUNK_TOKENS = 256

ReplyFormat: TypeAlias = Literal["markdown", "json"]
REPLY_FORMATS: tuple[ReplyFormat, ...] = ("markdown", "json")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSummarySettings:
    """How `ctxkeep.summarize.ModelSummarizer` asks its compaction model for a summary and checks the reply."""

    window: int = 128_000  # the compaction model's context window, tokens: no request exceeds it
    max_tokens: int = 4_096  # per reply: a 16,000-character summary is ~4,000 tokens of English (Chinese fails)
    retries: int = 3  # how many times an invalid or failing final reply is asked again
    audit: bool = True  # the quality audit of the final reply (False: only the sections are checked)
    reply_format: ReplyFormat = "markdown"  # "json": held to a schema, for servers with structured output
    result_chars: int = 2_000  # of each tool result in the prompt: enough for the outcome and the error
    arguments_chars: int = 500  # of each string argument of a tool call: paths and most commands fit whole
    agents_md: str | None = None  # AGENTS.md; its Session Startup and Red Lines sections go into every summary

    def __post_init__(self) -> None:
        for name, least in (
            ("window", 1),
            ("max_tokens", 1),
            ("retries", 0),
            ("result_chars", 1),
            ("arguments_chars", 1),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} must be a whole number, at least {least}; got {value!r}")
        need = self.max_tokens + PROMPT_RESERVE + math.ceil(MIN_CHUNK_TOKENS * SAFETY_MARGIN)
        if self.window < need:
            raise ValueError(
                f"window ({self.window:,} tokens) leaves no room: max_tokens ({self.max_tokens:,}) + the prompt"
                f" ({PROMPT_RESERVE:,}) + some conversation need {need:,};"
                " give the model's real window or lower max_tokens"
            )
        if not isinstance(self.audit, bool):
            raise TypeError(f"audit must be True or False; got {self.audit!r}")
        if self.reply_format not in REPLY_FORMATS:
            raise ValueError(f"reply_format must be one of {', '.join(REPLY_FORMATS)}; got {self.reply_format!r}")
        if self.agents_md is not None and not isinstance(self.agents_md, str):
            raise TypeError(f"agents_md must be the text of AGENTS.md or None, got {type(self.agents_md).__name__}")


# What a workspace on disk makes durable, and when (`DurabilitySettings`); SQLite's `synchronous` in spirit.
Durability: TypeAlias = Literal["step", "batch", "off"]
DURABILITIES: tuple[Durability, ...] = ("step", "batch", "off")


@dataclass(frozen=True, kw_only=True, slots=True)
class DurabilitySettings:
    """What a `LocalFolder` makes durable against a power loss, and when (docs/offload.md, "Durability").

    ``"step"`` (the default): every step is durable when it returns (one fdatasync). ``"batch"``: the steps'
    appends are made durable together by a thread, at most `window` seconds after each; a power loss loses
    at most the steps of that window, a compaction is durable when it returns. ``"off"``: nothing is synced,
    for tests and benchmarks; a power loss may lose or damage anything not yet written back by the system.
    In every mode a killed process (``kill -9``) loses nothing acknowledged: its writes are in the system's
    cache, which outlives it.
    """

    mode: Durability = "step"
    window: float = 0.05  # seconds: in "batch", the longest an acknowledged step waits to be made durable

    def __post_init__(self) -> None:
        if self.mode not in DURABILITIES:
            raise ValueError(f"durability must be one of {', '.join(DURABILITIES)}; got {self.mode!r}")
        if not isinstance(self.window, int | float) or isinstance(self.window, bool) or not 0 < self.window <= 60:
            raise ValueError(
                f"window must be the seconds a batch may wait, more than 0 and at most 60; got {self.window!r}"
            )

    @classmethod
    def of(cls, given: DurabilitySettings | str) -> DurabilitySettings:
        """`given` as settings: a mode's name (``"batch"``) gets the default window."""
        return given if isinstance(given, DurabilitySettings) else cls(mode=given)  # type: ignore[arg-type]
