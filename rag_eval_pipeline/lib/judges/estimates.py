"""Judge-based rates estimated two ways: the judge alone, and prediction-powered with human labels.

For every judge-based rate of a run this module gives two rows of ``judge_rate_estimates``:

- ``judge_only``: the rate the judge assigns over every judged unit, with its interval
  (``ppi.judge_only``: Wilson for claim shares; for ``faithfulness``, a mean over items, the
  seeded percentile bootstrap of ``generation_metrics``). It is an interval for *the judge's*
  rate: it ignores the judge's own errors, and more judged claims never shrink that bias.
- ``ppi++``: the prediction-powered estimate of the *human* rate (``ppi.ppi_mean`` with PPI++
  power tuning; formula, variance and assumptions in ``lib.judges.ppi``), combining the judge's
  verdict on every judged unit with the human labels on the labelled ones:
  ``θ̂ = λ·mean_U(f) − (λ·mean_L(f) − mean_L(y))``, 95% normal interval, ``λ`` tuned in [0, 1].

Rates and their units (``f`` the judge's value, ``y`` the person's, on the same unit):

- ``faithfulness`` (unit: item, as in ``generation_metrics``): per answered item with at least
  one judged claim, ENTAILED claims / judged claims (Ragas' definition); the rate is the mean over
  items. An item is *labelled* when every one of its judged claims carries a human label; its
  ``y`` is the share of them the person marked ENTAILED. The judge-only row equals the
  ``faithfulness`` row of ``generation_metrics`` for the same scope.
- ``faithful_claim_rate`` (unit: claim): judged claims ENTAILED / judged claims, pooled over
  items. It weighs every claim alike, where ``faithfulness`` weighs every item alike, so an
  answer with four claims counts four times here and once there; the two agree when every item
  has the same number of claims.
- ``contradicted_claim_rate``, ``unsupported_claim_rate`` (unit: claim): CONTRADICTED /
  UNSUPPORTED claims over judged claims, kept apart (as in ``generation_metrics``).
- ``citation_support`` (unit: claim that cites a passage): the cited passages entail the claim.
  ``f`` is the judge's ``citation_supported``; ``y`` the label's (null labels do not count).

``JUDGE_ERROR`` is not a verdict: a claim the judge failed on is in no rate here (as in
``generation_metrics``, where the judge error rate is shown beside them). A labelled unit is a
judged unit whose human label matched on ``(source, item_id, claim)`` (``judges.calibration``).

Scopes (``scope``, ``scope_value``): ``overall``/``answerable`` -- tonight's golden answers to
answerable items, the population of the headline and of the judge gates; ``source``/``golden``
-- every golden answer judged; ``source``/``production`` -- the production traces judged.

Assumptions, inherited from PPI (``lib.judges.ppi``): the labelled units are a random sample of
the judged ones, independent of the verdicts, and the judge was not tuned on them. Labels are
often taken item by item (every claim of a sampled answer), a cluster sample: claims of one
answer are then not independent, which the claim-level intervals (like the Wilson intervals of
``generation_metrics``) ignore; ``faithfulness`` is computed over items and does not. When every
judged unit is labelled, PPI++ weighs the judge 0 and the estimate is the human labels' own mean
with its normal interval: the judge adds nothing that the labels do not already say.
"""

from dataclasses import dataclass

import numpy as np
import polars as pl

from rag_eval_pipeline.lib.judges import ppi
from rag_eval_pipeline.lib.judges.calibration import matched_labels
from rag_eval_pipeline.lib.judges.protocol import CONTRADICTED, ENTAILED, UNSUPPORTED, VERDICTS
from rag_eval_pipeline.lib.judges.stability import stability_rows
from rag_eval_pipeline.lib.metrics.statistics import bootstrap_mean_interval, mean_interval_method
from rag_eval_pipeline.lib.store.tables import row_schema

JUDGE_ONLY = "judge_only"
PPI = "ppi++"
ITEM = "item"
CLAIM = "claim"
CLAIM_RATES = {
    "faithful_claim_rate": ENTAILED,
    "contradicted_claim_rate": CONTRADICTED,
    "unsupported_claim_rate": UNSUPPORTED,
}
RATES = ("faithfulness", *CLAIM_RATES, "citation_support")
"""The judge-based rates, in report order (the module docstring defines each)."""

ESTIMATE_SCHEMA = row_schema("judge_rate_estimates")


@dataclass(frozen=True)
class Units:
    """One rate's units in one scope: the judge's values on all of them, and the judge's and
    the person's values on the labelled ones (aligned)."""

    judge_all: np.ndarray
    judge_labelled: np.ndarray
    human_labelled: np.ndarray


def _claim_units(claims: pl.DataFrame, judge: pl.Expr, human: pl.Expr) -> Units:
    """Units from claim rows: ``judge`` on every row, ``human`` where a label matched."""
    values = claims.select(
        judge.cast(pl.Float64).alias("f"),
        human.cast(pl.Float64).alias("y"),
    )
    labelled = values.filter(pl.col("y").is_not_null())
    return Units(values["f"].to_numpy(), labelled["f"].to_numpy(), labelled["y"].to_numpy())


def _item_units(claims: pl.DataFrame) -> Units:
    """Faithfulness units: per item, the judge's and (for fully labelled items) the person's
    share of ENTAILED claims; items in ``item_id`` order so the bootstrap is reproducible."""
    per_item = (
        claims.group_by("item_id")
        .agg(
            (pl.col("verdict") == ENTAILED).mean().alias("f"),
            (pl.col("human_verdict") == ENTAILED).mean().alias("y"),
            pl.col("human_verdict").is_null().any().alias("partly_unlabelled"),
        )
        .sort("item_id")
    )
    labelled = per_item.filter(~pl.col("partly_unlabelled"))
    return Units(per_item["f"].to_numpy(), labelled["f"].to_numpy(), labelled["y"].to_numpy())


def _units(claims: pl.DataFrame, metric: str) -> Units:
    if metric == "faithfulness":
        return _item_units(claims)
    if metric == "citation_support":
        cited = claims.filter(pl.col("citation_supported").is_not_null())
        return _claim_units(cited, pl.col("citation_supported"), pl.col("human_citation_supported"))
    verdict = CLAIM_RATES[metric]
    human = (
        pl.when(pl.col("human_verdict").is_null())
        .then(None)
        .otherwise(pl.col("human_verdict") == verdict)
    )
    return _claim_units(claims, pl.col("verdict") == verdict, human)


def _ppi_reason(estimate: ppi.Estimate, units: Units) -> str | None:
    """Why the PPI row says what it says when that is not the general case."""
    if estimate.reason:
        return estimate.reason
    notes = []
    if estimate.lambda_ == 0.0:
        if units.judge_all.size == units.human_labelled.size:
            notes.append(
                "every judged unit is labelled: PPI++ weighs the judge 0 and the estimate is the "
                "human labels' mean"
            )
        elif np.ptp(units.judge_all) == 0:
            notes.append(
                "the judge gives the same value on every unit: PPI++ weighs it 0 and the "
                "estimate is the human labels' mean"
            )
        else:
            notes.append("the judge does not track the labels: PPI++ weighs it 0")
    if estimate.small_sample:
        notes.append(
            f"fewer than {ppi.MIN_LABELS_FOR_NORMAL_CI} labels: the normal interval is indicative"
        )
    return "; ".join(notes) or None


def rate_estimates(units: Units, metric: str, *, seed: int, resamples: int) -> list[dict]:
    """The judge-only and the PPI++ row of one rate in one scope (without the scope columns)."""
    unit = ITEM if metric == "faithfulness" else CLAIM
    if metric == "faithfulness":
        values = units.judge_all
        low, high = bootstrap_mean_interval(values, seed=seed, resamples=resamples)
        judge = ppi.Estimate(
            float(values.mean()) if values.size else None,
            low,
            high,
            0,
            int(values.size),
            mean_interval_method(values, "judge_only_bootstrap95", "judge_only_wilson95"),
            None,
            None if values.size else "no judged items",
        )
    else:
        judge = ppi.judge_only(units.judge_all)
    powered = ppi.ppi_mean(units.judge_all, units.judge_labelled, units.human_labelled)
    rows = []
    for estimate, reason in ((judge, judge.reason), (powered, _ppi_reason(powered, units))):
        rows.append(
            {
                "metric": metric,
                "method": estimate.method,
                "unit": unit,
                "value": estimate.value,
                "ci_low": estimate.ci_low,
                "ci_high": estimate.ci_high,
                "n_judged": estimate.n_judged,
                "n_labelled": estimate.n_labelled,
                "ppi_lambda": estimate.lambda_,
                "reason": reason,
            }
        )
    return rows


def estimate_scopes(verdicts: pl.DataFrame, items: pl.DataFrame) -> list[tuple[str, str, pl.Expr]]:
    """The scopes of the module docstring that have judged claims, as row filters."""
    answerable = set(items.filter(pl.col("answerable"))["item_id"].to_list())
    scopes = [
        (
            "overall",
            "answerable",
            (pl.col("source") == "golden") & pl.col("item_id").is_in(sorted(answerable)),
        ),
        ("source", "golden", pl.col("source") == "golden"),
        ("source", "production", pl.col("source") == "production"),
    ]
    return [scope for scope in scopes if verdicts.filter(scope[2]).height]


def judge_rate_estimates(
    verdicts: pl.DataFrame,
    labels: pl.DataFrame | None,
    items: pl.DataFrame,
    *,
    seed: int,
    resamples: int,
) -> pl.DataFrame:
    """Rows of ``judge_rate_estimates`` (without ``eval_run_id``): for every scope with judged
    claims and every rate of :data:`RATES`, the judge-only and the PPI++ estimate.

    ``verdicts`` are the run's ``judge_verdicts`` (repeat 1), ``labels`` the suite's human labels
    (``calibration.load_human_labels``, or ``None``), ``items`` the golden items (``item_id``,
    ``answerable``); ``seed`` and ``resamples`` drive the bootstrap of ``faithfulness``.
    """
    judged = verdicts.filter(pl.col("verdict").is_in(list(VERDICTS)))
    labelled = matched_labels(judged, labels).select(
        "source", "item_id", "claim", "human_verdict", "human_citation_supported"
    )
    claims = judged.join(labelled, on=["source", "item_id", "claim"], how="left")
    rows = []
    for scope, scope_value, selected in estimate_scopes(judged, items):
        in_scope = claims.filter(selected)
        for metric in RATES:
            for row in rate_estimates(
                _units(in_scope, metric), metric, seed=seed, resamples=resamples
            ):
                rows.append({"scope": scope, "scope_value": scope_value, **row})
    return pl.DataFrame(rows, schema=ESTIMATE_SCHEMA)


def judge_trust_estimates(
    verdicts: pl.DataFrame,
    repeats: pl.DataFrame,
    labels: pl.DataFrame | None,
    items: pl.DataFrame,
    *,
    judge_repeats: int,
    seed: int,
    resamples: int,
) -> pl.DataFrame:
    """Every row of ``judge_rate_estimates`` (without ``eval_run_id``): the judge-only and PPI++
    estimates of ``judge_rate_estimates`` and the stability rows of
    ``stability.stability_rows`` (from ``judge_repeat_verdicts``)."""
    rates = judge_rate_estimates(verdicts, labels, items, seed=seed, resamples=resamples)
    stable = pl.DataFrame(stability_rows(repeats, judge_repeats), schema=ESTIMATE_SCHEMA)
    return pl.concat([rates, stable])
