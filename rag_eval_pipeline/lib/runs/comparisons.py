"""Comparing a completed run with its suite's current baseline, and the one writer of
``run_comparisons``.

Across corpus or golden-set digests nothing is compared: the single row says why, naming both
digests and the re-baseline command. Otherwise every compared metric is paired per item
(``metrics.comparison``).
"""

from dataclasses import dataclass

import duckdb
import polars as pl

from rag_eval_pipeline.lib.errors import RagEvalError
from rag_eval_pipeline.lib.metrics.comparison import significant_regressions
from rag_eval_pipeline.lib.runs import registry
from rag_eval_pipeline.lib.runs.baselines import (
    comparability_noting_judges,
    compare_runs,
    current_baseline,
)
from rag_eval_pipeline.lib.store.sql import sql_query
from rag_eval_pipeline.lib.store.warehouse import read_frame, replace_rows


@dataclass(frozen=True)
class Comparison:
    """One candidate against its baseline: whether they compare, why, and the compared rows."""

    candidate: dict
    baseline: dict | None
    comparable: bool
    reason: str
    rows: pl.DataFrame

    @property
    def baseline_run_id(self) -> str:
        return self.baseline["eval_run_id"] if self.baseline else self.candidate["eval_run_id"]

    def regressions(self, alpha: float) -> list[str]:
        if not self.rows.height:
            return []
        return significant_regressions(self.rows, alpha=alpha)["metric"].to_list()


def compare_with_baseline(
    connection: duckdb.DuckDBPyConnection,
    candidate_run_id: str,
    *,
    seed: int,
    regression_alpha: float | None = None,
) -> Comparison:
    """Compare a completed run with its suite's current baseline and record the comparison,
    with the level its regression gate is checked at (``regression_alpha``, kept in each row
    so the gate's outcome can be read back as it was decided)."""
    candidate = registry.run_row(connection, candidate_run_id)
    if candidate is None or not candidate["complete"]:
        state = "not in the warehouse" if candidate is None else candidate["status"]
        raise RagEvalError(f"evaluation run {candidate_run_id} is {state}: nothing to compare")
    baseline = current_baseline(connection, candidate["suite"])
    if baseline is None or baseline["eval_run_id"] == candidate_run_id:
        comparison = Comparison(
            candidate,
            baseline,
            True,
            f"{candidate_run_id} is the baseline; nothing to compare",
            pl.DataFrame(),
        )
    else:
        comparable, reason = comparability_noting_judges(candidate, baseline)
        registry.set_baseline_for(
            connection, candidate_run_id, baseline["eval_run_id"], comparable, reason
        )
        rows = (
            compare_runs(connection, candidate_run_id, baseline["eval_run_id"], seed=seed)
            if comparable
            else pl.DataFrame()
        )
        comparison = Comparison(candidate, baseline, comparable, reason, rows)
    record_comparison(connection, comparison, regression_alpha)
    return comparison


def record_comparison(
    connection: duckdb.DuckDBPyConnection,
    comparison: Comparison,
    regression_alpha: float | None = None,
) -> None:
    candidate_run_id = comparison.candidate["eval_run_id"]
    if comparison.rows.height:
        table = comparison.rows.with_columns(
            candidate_run_id=pl.lit(candidate_run_id),
            baseline_run_id=pl.lit(comparison.baseline_run_id),
            comparable=pl.lit(True),
            reason=pl.lit(comparison.reason),
        )
    else:
        table = pl.DataFrame(
            [
                {
                    "candidate_run_id": candidate_run_id,
                    "baseline_run_id": comparison.baseline_run_id,
                    "metric": "comparability",
                    "comparable": comparison.comparable,
                    "reason": comparison.reason,
                }
            ]
        )
    table = table.with_columns(regression_alpha=pl.lit(regression_alpha, dtype=pl.Float64))
    replace_rows(connection, "run_comparisons", table, {"candidate_run_id": candidate_run_id})


def comparison_rows(connection: duckdb.DuckDBPyConnection, candidate_run_id: str) -> pl.DataFrame:
    """The recorded comparison of a candidate run, metric by metric."""
    return read_frame(connection, sql_query("runs", "comparison_rows"), {"run": candidate_run_id})
