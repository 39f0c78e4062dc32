"""What a model judge spends, and the budget that stops it before it spends too much.

Tokens of a request are what the endpoint reports (``usage.total_tokens``) or, when it reports
none (or 0, which no real call costs), the estimate made before sending it
(``judges.llm.estimated_tokens``: prompt text and payload characters / 4, plus an allowance for
the reply). Cost = tokens / 1000 x ``price_per_1k_tokens`` (one price for prompt and reply tokens:
an approximation, stated where the cost is shown).

The budget (``max_tokens``, ``max_cost``; either, both or neither) is checked *before* each
request: a request whose estimate would take what is spent, plus what requests still in flight
reserved, past the budget is not sent, and from then on no request is sent (the budget is
exhausted: judging stops rather than picking smaller calls that still fit). Requests that are not
sent fail as ``JUDGE_ERROR`` with the reason ``budget exhausted: ...``; everything judged before
is kept. Several steps of one run share one budget: a later step starts from what the earlier
ones spent (``spent_before``).
"""

import math
import threading
from dataclasses import dataclass, field

import polars as pl

from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.judges.protocol import Judge, PaidJudge

BUDGET_EXHAUSTED = "budget exhausted"


@dataclass(frozen=True)
class JudgeBudget:
    """Limits on a run's judge spending; ``None`` means no limit (or no price)."""

    max_tokens: int | None = None
    max_cost: float | None = None
    price_per_1k_tokens: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_cost", "price_per_1k_tokens"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ConfigError(f"judge {name} must be a number from 0, got {value}")
        if self.max_cost is not None and self.price_per_1k_tokens is None:
            raise ConfigError(
                "judge budget_cost needs a price: set price_per_1k_tokens on the judge resource"
            )

    def cost(self, tokens: float) -> float | None:
        """The cost of ``tokens`` at the configured price, ``None`` without a price."""
        if self.price_per_1k_tokens is None:
            return None
        return tokens / 1000 * self.price_per_1k_tokens

    @property
    def limited(self) -> bool:
        return self.max_tokens is not None or self.max_cost is not None


@dataclass
class JudgeSpend:
    """A judge's running account (thread-safe): requests sent, tokens, and the budget's state."""

    budget: JudgeBudget = field(default_factory=JudgeBudget)
    spent_before: float = 0.0
    requests: int = 0
    replayed: int = 0
    estimated_tokens: int = 0
    reported_tokens: int = 0
    tokens: float = 0.0
    refused: int = 0
    exhausted: str | None = None
    _reserved: float = field(default=0.0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self, estimate: int) -> str | None:
        """Reserve ``estimate`` tokens for a request about to be sent; ``None`` when it may go,
        else why not (``budget exhausted: ...``), and the budget is exhausted from then on."""
        with self._lock:
            if self.exhausted is None:
                would = self.spent_before + self.tokens + self._reserved + estimate
                over = []
                if self.budget.max_tokens is not None and would > self.budget.max_tokens:
                    over.append(f"{self.budget.max_tokens:,} tokens")
                cost = self.budget.cost(would)
                if (
                    self.budget.max_cost is not None
                    and cost is not None
                    and cost > self.budget.max_cost
                ):
                    over.append(f"cost {self.budget.max_cost:g}")
                if over:
                    spent = self.spent_before + self.tokens
                    self.exhausted = (
                        f"{BUDGET_EXHAUSTED}: {spent:,.0f} tokens spent, the next call needs about "
                        f"{estimate:,}, the budget is {' and '.join(over)}"
                    )
            if self.exhausted is not None:
                self.refused += 1
                return self.exhausted
            self._reserved += estimate
            return None

    def settle(self, estimate: int, reported: int | None) -> None:
        """A request that was sent came back (or failed): release its reservation and charge
        the tokens it reported, else its estimate."""
        with self._lock:
            self._reserved -= estimate
            self.requests += 1
            self.estimated_tokens += estimate
            if reported is not None and reported > 0:
                self.reported_tokens += reported
                self.tokens += reported
            else:
                self.tokens += estimate

    def replay(self) -> None:
        """A result served from the cache: no request, no tokens."""
        with self._lock:
            self.replayed += 1

    def usage(self) -> dict:
        """The account as a ``judge_usage`` row (without ``eval_run_id``, ``step``, ``judge_id``)."""
        with self._lock:
            return {
                "requests": self.requests,
                "replayed": self.replayed,
                "estimated_tokens": self.estimated_tokens,
                "reported_tokens": self.reported_tokens,
                "tokens": round(self.tokens),
                "cost": self.budget.cost(self.tokens),
                "budget_tokens": self.budget.max_tokens,
                "budget_cost": self.budget.max_cost,
                "budget_exhausted": self.exhausted is not None,
                "not_sent": self.refused,
                "reason": self.exhausted,
            }


def usage_row(judge: Judge, step: str) -> dict:
    """A ``judge_usage`` row (without ``eval_run_id``) for what ``judge`` spent in ``step``; a
    judge that makes no model calls (the deterministic judge) spent nothing."""
    usage = judge.usage() if isinstance(judge, PaidJudge) else JudgeSpend().usage()
    return {"step": step, "judge_id": judge.judge_id, **usage}


def earlier_tokens(usage: pl.DataFrame, before_step: str) -> int:
    """Tokens the run's judging steps other than ``before_step`` spent (``judge_usage`` rows)."""
    rows = usage.filter(pl.col("step") != before_step)
    return int(rows["tokens"].sum()) if rows.height else 0
