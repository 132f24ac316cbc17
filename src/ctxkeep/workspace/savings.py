"""What a workspace saved, priced: the tokens sent against two other ways (`Savings`), the same at a prompt
cache's prices (`CacheCosts`), and what a model charges (`Price`, the list prices in `PRICES`, `price` for
the command line's options). `ctxkeep.workspace.view.View.savings` derives them from the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxkeep.settings import CacheSettings


@dataclass(frozen=True, kw_only=True, slots=True)
class Price:
    """What a model charges, in US dollars per million tokens: input (uncached) and output."""

    name: str
    input: float
    output: float = 0.0

    def __post_init__(self) -> None:
        for part in ("input", "output"):
            value = getattr(self, part)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 10_000:
                raise ValueError(f"the {part} price must be US dollars per million tokens, 0 or more; got {value!r}")

    def of(self, input_tokens: int, output_tokens: int = 0) -> float:
        """The dollars `input_tokens` in and `output_tokens` out cost."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


# List prices (US dollars per million tokens, uncached input and output) when this was written: defaults for
# `--price`, which a user's own `--input-price` overrides. Prices change; the page says which one it used.
PRICES = {
    p.name: p
    for p in (
        Price(name="openai:gpt-4o-mini", input=0.15, output=0.60),
        Price(name="openai:gpt-4o", input=2.50, output=10.00),
        Price(name="openai:gpt-4.1", input=2.00, output=8.00),
        Price(name="openai:gpt-4.1-mini", input=0.40, output=1.60),
        Price(name="openai:gpt-4.1-nano", input=0.10, output=0.40),
        Price(name="openai:gpt-5", input=1.25, output=10.00),
        Price(name="openai:gpt-5-mini", input=0.25, output=2.00),
        Price(name="openai:gpt-5-nano", input=0.05, output=0.40),
        Price(name="anthropic:claude-opus-4", input=15.00, output=75.00),
        Price(name="anthropic:claude-sonnet-4", input=3.00, output=15.00),
        Price(name="anthropic:claude-haiku-4-5", input=1.00, output=5.00),
        Price(name="google:gemini-2.5-pro", input=1.25, output=10.00),
        Price(name="google:gemini-2.5-flash", input=0.30, output=2.50),
    )
}


def price(
    name: str | None = None, *, input_price: float | None = None, output_price: float | None = None
) -> Price | None:
    """The price of the model `name` (a key of `PRICES`), with `input_price` and `output_price` (dollars per
    million) over it; None when neither is given. Raises `ValueError` naming the known models for an unknown one."""
    if name is None and input_price is None:
        if output_price is not None:
            raise ValueError("an output price needs an input price (--input-price) or a model (--price)")
        return None
    base = Price(name="your price", input=0.0)
    if name is not None:
        if name not in PRICES:
            known = ", ".join(PRICES)
            raise ValueError(f"no price known for {name!r}; give --input-price, or one of: {known}")
        base = PRICES[name]
    return Price(
        name=base.name if input_price is None else f"${input_price:g} per million in",
        input=base.input if input_price is None else input_price,
        output=base.output if output_price is None else output_price,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheCosts:
    """The input of every step priced with a prompt cache, in tokens at the uncached input price
    (`ctxkeep.costs.billed`): what ctxkeep sent, sending everything, cutting at the threshold."""

    cached: int  # of the tokens ctxkeep sent, those the cache held
    sent: float
    everything: float
    at_threshold: float | None
    expected: float  # the savings the aging decisions expected (`ctxkeep.costs.Decision.saving`), summed
    cache: CacheSettings
    billed: int = 0  # the steps whose cached tokens are the model's API's count, not the prefix kept

    def to_dict(self) -> dict[str, Any]:
        """As plain data, for ``ctxkeep show --json``."""
        return {
            "cached_tokens": self.cached,
            "cached_steps_billed": self.billed,
            "billed_sent": round(self.sent),
            "billed_everything": round(self.everything),
            "billed_at_threshold": None if self.at_threshold is None else round(self.at_threshold),
            "aging_expected_saving": round(self.expected),
            "write": self.cache.write,
            "read": self.cache.read,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Savings:
    """Tokens sent over every step, against what two other ways would have sent, and what summarizing cost."""

    sent: int  # what ctxkeep sent, summed over the steps
    everything: int  # what sending the whole history each step would have (a lower bound: see the module)
    at_threshold: int | None  # what cutting the oldest at the threshold would have; None: threshold unknown
    summarizer_in: int  # the summarizer's tokens, in and out (0 for the extractive one)
    summarizer_out: int
    price: Price | None = None
    # The same with a prompt cache's prices; None for a workspace whose steps did not record what it held.
    cache: CacheCosts | None = None

    @property
    def vs_everything(self) -> int:
        """Input tokens saved against sending everything."""
        return self.everything - self.sent

    @property
    def vs_threshold(self) -> int | None:
        """Input tokens saved against cutting at the threshold (negative when ctxkeep sent more)."""
        return None if self.at_threshold is None else self.at_threshold - self.sent

    def dollars(self, tokens: int) -> float | None:
        """The dollars `tokens` input tokens saved are worth, less what the summarizer spent; None without a price."""
        if self.price is None:
            return None
        return self.price.of(tokens) - self.price.of(self.summarizer_in, self.summarizer_out)

    def to_dict(self) -> dict[str, Any]:
        """As plain data, for ``ctxkeep show --json``."""
        out: dict[str, Any] = {
            "sent": self.sent,
            "everything": self.everything,
            "at_threshold": self.at_threshold,
            "saved_vs_everything": self.vs_everything,
            "saved_vs_threshold": self.vs_threshold,
            "summarizer_input_tokens": self.summarizer_in,
            "summarizer_output_tokens": self.summarizer_out,
        }
        if self.price is not None:
            vs_threshold = self.vs_threshold
            out["price"] = {"name": self.price.name, "input": self.price.input, "output": self.price.output}
            out["dollars_saved_vs_everything"] = self.dollars(self.vs_everything)
            out["dollars_saved_vs_threshold"] = None if vs_threshold is None else self.dollars(vs_threshold)
        if self.cache is not None:
            out["with_cache"] = self.cache.to_dict()
            if self.price is not None:
                c = self.cache
                out["with_cache"]["dollars_sent"] = self.price.of(round(c.sent))
                out["with_cache"]["dollars_everything"] = self.price.of(round(c.everything))
                out["with_cache"]["dollars_at_threshold"] = (
                    None if c.at_threshold is None else self.price.of(round(c.at_threshold))
                )
        return out
