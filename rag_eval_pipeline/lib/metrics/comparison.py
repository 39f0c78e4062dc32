"""Paired comparisons between two evaluation runs on the same golden items.

Runs are compared item by item (the same golden question in both runs):
- binary outcomes (hit at k, answer correct, false refusal, confident wrong on answerable items;
  correct refusal on the no-answer items) with the exact McNemar
  test: under the null the discordant pairs split 50/50, p = min(1, 2 * P(X <= min(b, c))) with
  X ~ Binomial(b + c, 1/2) (statsmodels ``mcnemar(exact=True)``);
- citation validity (every cited id in the context sent) on the answerable items answered in
  both runs, also with the exact McNemar test;
- means (RR@k, nDCG@k, recall, token F1, and faithfulness on the answerable items judged in
  both runs) with a paired percentile bootstrap of the mean difference, seeded; its two-sided
  p-value is twice the smaller tail share of resampled means on either side of 0 (at least
  1 / resamples). Faithfulness is compared only between runs judged by the same judge
  configuration (``judge_based``): another judge measures it otherwise.
Every delta is candidate minus baseline. The same paired bootstrap gives the interval of a
binary metric's delta, beside its McNemar p-value.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from rag_eval_pipeline.lib.metrics.statistics import resampled_means

MCNEMAR = "mcnemar_exact"
PAIRED_BOOTSTRAP = "paired_bootstrap"


@dataclass(frozen=True)
class MetricSpec:
    """One compared metric, the test that applies, and which direction is better."""

    metric: str
    test: str
    higher_is_better: bool = True
    # A judge's verdicts decide it: compared only between runs with the same judge.
    judge_based: bool = False


COMPARED_METRICS = (
    MetricSpec("Success@5", MCNEMAR),
    MetricSpec("Success@10", MCNEMAR),
    MetricSpec("R@5", PAIRED_BOOTSTRAP),
    MetricSpec("RR@5", PAIRED_BOOTSTRAP),
    MetricSpec("nDCG@10", PAIRED_BOOTSTRAP),
    MetricSpec("AP", PAIRED_BOOTSTRAP),
    # Over answerable items, except correct_refusal: over the no-answer items
    # (sql/comparison_item_values.sql).
    MetricSpec("answer_correct", MCNEMAR),
    MetricSpec("false_refusal", MCNEMAR, higher_is_better=False),
    MetricSpec("confident_wrong", MCNEMAR, higher_is_better=False),
    MetricSpec("token_f1", PAIRED_BOOTSTRAP),
    MetricSpec("correct_refusal", MCNEMAR),
    MetricSpec("citation_validity", MCNEMAR),
    MetricSpec("faithfulness", PAIRED_BOOTSTRAP, judge_based=True),
)


WORSE = "worse"
BETTER = "better"


def verdict(
    metric: str,
    delta: float | None,
    p_value: float | None,
    alpha: float,
    specs: Sequence[MetricSpec] = COMPARED_METRICS,
) -> str | None:
    """``WORSE`` or ``BETTER`` for a change significant at ``alpha`` (``p_value < alpha``, the
    rule of ``significant_regressions``), in the metric's direction (``higher_is_better``);
    None for a change that is not significant, or not measured."""
    if delta is None or p_value is None or not p_value < alpha:
        return None
    if delta == 0 or math.isnan(delta):  # a NaN delta is neither (nor a regression)
        return None
    lower_is_better = any(s.metric == metric and not s.higher_is_better for s in specs)
    return WORSE if (delta > 0) == lower_is_better else BETTER


def row_verdict(row: Mapping, alpha: float | None) -> str | None:
    """``verdict`` of a comparison row (``metric``, ``delta``, ``p_value``) at ``alpha``; None
    when there is no level to judge it at (the gates file could not be read)."""
    return None if alpha is None else verdict(row["metric"], row["delta"], row["p_value"], alpha)


def significant_regressions(
    comparison: pl.DataFrame, specs: Sequence[MetricSpec] = COMPARED_METRICS, alpha: float = 0.05
) -> pl.DataFrame:
    """Rows whose change is significant at ``alpha`` and in the worse direction."""
    worse_if_positive = [s.metric for s in specs if not s.higher_is_better]
    return comparison.filter(
        (pl.col("p_value") < alpha)
        & pl.when(pl.col("metric").is_in(worse_if_positive))
        .then(pl.col("delta") > 0)
        .otherwise(pl.col("delta") < 0)
    )


def binomial_cdf(k: int, n: int, p: float = 0.5) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed exactly."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def mcnemar_exact(candidate: Sequence[bool], baseline: Sequence[bool]) -> tuple[float, int, int]:
    """Exact McNemar p-value for paired binary outcomes; also returns the discordant counts
    ``b`` (baseline true, candidate false) and ``c`` (candidate true, baseline false)."""
    b = sum(1 for new, old in zip(candidate, baseline, strict=True) if old and not new)
    c = sum(1 for new, old in zip(candidate, baseline, strict=True) if new and not old)
    if b + c == 0:
        return 1.0, b, c
    return min(1.0, 2 * binomial_cdf(min(b, c), b + c)), b, c


def paired_bootstrap(
    candidate: np.ndarray,
    baseline: np.ndarray,
    *,
    seed: int = 20261001,
    resamples: int = 2000,
    level: float = 0.95,
) -> tuple[float, float, float, float]:
    """``(delta, ci_low, ci_high, p_value)`` of the mean paired difference candidate - baseline,
    resampling items with replacement."""
    differences = np.asarray(candidate, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    n = differences.size
    if n == 0:
        return math.nan, math.nan, math.nan, math.nan
    means = resampled_means(differences, seed=seed, resamples=resamples)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    if np.all(differences == 0):
        p_value = 1.0
    else:
        tail = min(np.mean(means <= 0), np.mean(means >= 0))
        p_value = min(1.0, max(2 * tail, 1 / resamples))
    return float(differences.mean()), float(low), float(high), float(p_value)


def compare_items(
    candidate: pl.DataFrame,
    baseline: pl.DataFrame,
    specs: Sequence[MetricSpec],
    *,
    seed: int = 20261001,
    resamples: int = 2000,
) -> pl.DataFrame:
    """Compare per-item values of two runs: both frames have ``item_id, metric, value``.

    Items present in both runs for a metric are paired; the rest are ignored (n says how many
    were paired). Returns one row per metric: candidate and baseline means over the paired
    items, delta, interval, p-value, test and n.
    """
    joined = candidate.join(baseline, on=["item_id", "metric"], suffix="_baseline").drop_nulls()
    rows = []
    for spec in specs:
        pairs = joined.filter(pl.col("metric") == spec.metric).sort("item_id")
        new = pairs["value"].to_numpy()
        old = pairs["value_baseline"].to_numpy()
        if not new.size:
            continue
        delta, low, high, p_value = paired_bootstrap(new, old, seed=seed, resamples=resamples)
        if spec.test == MCNEMAR:
            p_value, _, _ = mcnemar_exact((new > 0.5).tolist(), (old > 0.5).tolist())
        rows.append(
            {
                "metric": spec.metric,
                "candidate_value": float(new.mean()),
                "baseline_value": float(old.mean()),
                "delta": delta,
                "ci_low": low,
                "ci_high": high,
                "p_value": p_value,
                "test": spec.test,
                "n": int(new.size),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "metric": pl.String,
            "candidate_value": pl.Float64,
            "baseline_value": pl.Float64,
            "delta": pl.Float64,
            "ci_low": pl.Float64,
            "ci_high": pl.Float64,
            "p_value": pl.Float64,
            "test": pl.String,
            "n": pl.Int64,
        },
    )
