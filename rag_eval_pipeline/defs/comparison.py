"""The run_comparison asset: tonight's run against its suite's baseline, with the blocking check
that refuses comparisons across corpus or golden-set digests.

The comparison guard (``defs.sensors``) requests it only for comparable runs; a hand
materialization across snapshots is blocked by ``comparable_with_baseline`` too.
"""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import (
    evaluation_asset,
    markdown_table,
    run_link,
    table_metadata,
)
from rag_eval_pipeline.defs.partitions import night_and_suite, nightly_check
from rag_eval_pipeline.defs.resources import EvalSettings, WarehouseResource
from rag_eval_pipeline.lib.errors import RagEvalError
from rag_eval_pipeline.lib.metrics.comparison import row_verdict
from rag_eval_pipeline.lib.reporting.summary import p_value_text
from rag_eval_pipeline.lib.runs.comparisons import compare_with_baseline
from rag_eval_pipeline.lib.runs.gates import REGRESSION_GATE, GateSet
from rag_eval_pipeline.lib.runs.record import measures_of
from rag_eval_pipeline.lib.runs.registry import latest_complete_of_partition

CANDIDATE_TAG = "rag_eval/candidate_run"


class ComparisonConfig(dg.Config):
    """Which run to compare; by default the latest completed nightly run of the partition."""

    candidate_run_id: str = ""


def build_run_comparison(
    partitions: dg.PartitionsDefinition, gates: GateSet
) -> dg.AssetsDefinition:
    alpha = gates.regression_alpha

    @evaluation_asset(
        "run_comparison",
        partitions=partitions,
        group="comparison",
        kinds={"duckdb"},
        code_version="run-comparison-v2",
        deps=["eval_summary"],
        check_specs=[
            nightly_check(
                "comparable_with_baseline",
                asset="run_comparison",
                partitions=partitions,
                blocking=True,
                description="The run and its baseline share the corpus and golden-set digests "
                "and the measure definitions.",
            ),
            nightly_check(
                f"gate_{REGRESSION_GATE}",
                asset="run_comparison",
                partitions=partitions,
                blocking=True,
                description=f"No compared metric significantly worse than the baseline (p < {alpha}).",
            ),
        ],
    )
    def run_comparison(
        context: dg.AssetExecutionContext,
        config: ComparisonConfig,
        settings: EvalSettings,
        warehouse_db: WarehouseResource,
    ):
        """Tonight's run against its suite's current baseline, metric by metric, paired per
        question (exact McNemar for binary outcomes, paired bootstrap for means), written to
        ``run_comparisons``. A night the comparison guard finds not comparable (another corpus
        or golden-set digest, or other measure definitions) is not materialized here at all:
        the reason is on its ``eval_summary`` (``comparability``), in ``run_baselines`` and in
        ``rag-eval summary``. Materialized by hand across digests, nothing is compared: the row
        says why and the blocking check fails, naming both digests and the re-baseline
        command."""
        night, suite = night_and_suite(context)
        with warehouse_db.publishing() as connection:
            candidate_id = config.candidate_run_id or latest_complete_of_partition(
                connection, night, suite
            )
            if candidate_id is None:
                raise RagEvalError(
                    f"no completed evaluation run of suite {suite} for night {night}"
                )
            comparison = compare_with_baseline(
                connection, candidate_id, seed=settings.seed, regression_alpha=alpha
            )
        yield dg.Output(
            None, metadata=comparison_metadata(comparison, candidate_id, context.run_id, alpha)
        )
        yield from comparison_checks(comparison, alpha)

    return run_comparison


def comparison_metadata(
    comparison, candidate_id: str, dagster_run_id: str, alpha: float = 0.05
) -> dict:
    """What the UI shows of a comparison: the table (each delta with its 95% interval; each
    metric significantly worse or better at ``alpha``, the regression gate's level, marked so in
    ``verdict``), the level itself (``regression_alpha``), both runs and digests, and why."""
    shown = (
        comparison.rows.select(
            "metric",
            "candidate_value",
            "baseline_value",
            "delta",
            "ci_low",
            "ci_high",
            "p_value",
            "test",
            "n",
        ).with_columns(
            pl.Series(
                "p_value",
                [p_value_text(p) for p in comparison.rows["p_value"].to_list()],
                dtype=pl.String,
            ),
            pl.Series(
                "verdict",
                [row_verdict(row, alpha) or "" for row in comparison.rows.iter_rows(named=True)],
                dtype=pl.String,
            ),
        )
        if comparison.rows.height
        else comparison.rows
    )
    # Without a baseline (the suite's first run) the baseline's entries are empty, never the
    # candidate's own run and digests.
    baseline = comparison.baseline or {}
    return {
        **table_metadata(comparison.rows, "run_comparisons"),
        "candidate_run_id": candidate_id,
        "baseline_run_id": comparison.baseline_run_id,
        # Each run's own Dagster run (where its figures were measured), beside this
        # comparison's: ``dagster_run`` is the run that compared them.
        **_measured_in("candidate_dagster_run", comparison.candidate),
        **_measured_in("baseline_dagster_run", baseline),
        "candidate_corpus_digest": comparison.candidate["corpus_digest"],
        "baseline_corpus_digest": baseline.get("corpus_digest") or "",
        "candidate_golden_digest": comparison.candidate["golden_digest"],
        "baseline_golden_digest": baseline.get("golden_digest") or "",
        "candidate_measures_version": measures_of(comparison.candidate),
        "baseline_measures_version": measures_of(baseline) if baseline else "",
        "comparable": comparison.comparable,
        "reason": comparison.reason,
        "regression_alpha": alpha,
        "dagster_run": run_link(dagster_run_id),
        "comparison": dg.MetadataValue.md(markdown_table(shown))
        if shown.height
        else dg.MetadataValue.text(comparison.reason),
    }


def _measured_in(label: str, run) -> dict:
    """A link to the Dagster run that measured ``run`` (an ``eval_runs`` row), when it names one."""
    dagster_run_id = run.get("dagster_run_id")
    return {label: run_link(dagster_run_id)} if dagster_run_id else {}


def comparison_checks(comparison, alpha: float):
    """The two blocking checks: comparable runs (the same corpus and golden-set digests and
    measure definitions), and no significant regression (not assessed, a warning, when the runs
    are not comparable)."""
    baseline = comparison.baseline or comparison.candidate
    worse = comparison.regressions(alpha)
    yield dg.AssetCheckResult(
        check_name="comparable_with_baseline",
        passed=comparison.comparable,
        severity=dg.AssetCheckSeverity.ERROR,
        description=comparison.reason,
        metadata={
            "candidate_corpus_digest": comparison.candidate["corpus_digest"],
            "baseline_corpus_digest": baseline["corpus_digest"],
            "candidate_golden_digest": comparison.candidate["golden_digest"],
            "baseline_golden_digest": baseline["golden_digest"],
            "candidate_measures_version": measures_of(comparison.candidate),
            "baseline_measures_version": measures_of(baseline),
            "reason": comparison.reason,
        },
    )
    # The baseline compared with itself (materialized by hand on its own night) has no rows:
    # nothing was compared, so the gate is not assessed, never "no significant regression".
    assessed = comparison.comparable and comparison.rows.height > 0
    if worse:
        description = (
            f"significantly worse than baseline {comparison.baseline_run_id}: {', '.join(worse)}"
        )
    elif assessed:
        description = "no significant regression"
    else:
        description = f"not assessed: {comparison.reason}"
    yield dg.AssetCheckResult(
        check_name=f"gate_{REGRESSION_GATE}",
        passed=assessed and not worse,
        severity=dg.AssetCheckSeverity.ERROR if assessed else dg.AssetCheckSeverity.WARN,
        description=description,
        metadata={"regressed_metrics": dg.MetadataValue.json(worse)},
    )
