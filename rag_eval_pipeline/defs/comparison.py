"""Pinned comparisons: the run_comparison asset, the comparison guard sensor, the rebaseline job.

Two runs are compared only when they share the corpus digest and the golden-set digest. The
sensor watches ``eval_summary`` and requests the comparison only then; a run tagged for
re-baselining (with a reason) launches ``rebaseline`` instead: the baseline's system
configuration re-run on the new snapshot, whose ``eval_summary`` stores the offset and makes it
the baseline, after which the comparison proceeds. ``run_comparison`` carries a blocking check
with the same rule, so a hand materialization cannot compare across snapshots either.
"""

import json

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.eval_summary import GATES
from rag_eval_pipeline.defs.metadata import TEAM, markdown_table, run_link, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import (
    EvalSettings,
    ReferenceSystemResource,
    WarehouseResource,
)
from rag_eval_pipeline.defs.schedules import EVALUATION_ASSETS, chosen_executor
from rag_eval_pipeline.lib import baselines, warehouse
from rag_eval_pipeline.lib.comparison import significant_regressions
from rag_eval_pipeline.lib.gates import REGRESSION_GATE
from rag_eval_pipeline.lib.run_identity import (
    COMPARE,
    REBASELINE,
    REBASELINE_FOR_TAG,
    REBASELINE_REASON_TAG,
    REQUESTED_BY_TAG,
    comparability,
    guard_decision,
)

REGRESSION_ALPHA = next((g.alpha for g in GATES if g.name == REGRESSION_GATE), 0.05)
CANDIDATE_TAG = "rag_eval/candidate_run"


class ComparisonConfig(dg.Config):
    """Which run to compare; by default the latest completed nightly run of the partition."""

    candidate_run_id: str = ""


def latest_run_of_partition(connection, partition: str) -> str | None:
    rows = warehouse.read_frame(
        connection,
        "SELECT eval_run_id FROM eval_runs WHERE partition_date = $night "
        "AND completed_at IS NOT NULL AND rebaseline_for IS NULL "
        "ORDER BY completed_at DESC LIMIT 1",
        {"night": partition},
    )
    return rows["eval_run_id"][0] if rows.height else None


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="comparison",
    owners=[TEAM],
    kinds={"duckdb"},
    code_version="run-comparison-v1",
    deps=["eval_summary"],
    check_specs=[
        dg.AssetCheckSpec(
            "comparable_with_baseline",
            asset="run_comparison",
            blocking=True,
            description="The run and its baseline share the corpus and golden-set digests.",
        ),
        dg.AssetCheckSpec(
            f"gate_{REGRESSION_GATE}",
            asset="run_comparison",
            description=f"No compared metric significantly worse than the baseline (p < {REGRESSION_ALPHA}).",
        ),
    ],
)
def run_comparison(
    context: dg.AssetExecutionContext,
    config: ComparisonConfig,
    settings: EvalSettings,
    warehouse_db: WarehouseResource,
):
    """Tonight's run against its golden set's current baseline, metric by metric, paired per
    question (exact McNemar for binary outcomes, paired bootstrap for means), written to
    ``run_comparisons``. Across corpus or golden-set digests nothing is compared: the row says
    why and the blocking check fails, naming both digests and the re-baseline command."""
    with warehouse_db.connect() as connection:
        candidate_id = config.candidate_run_id or latest_run_of_partition(
            connection, context.partition_key
        )
        if candidate_id is None:
            raise ValueError(f"no completed evaluation run for night {context.partition_key}")
        candidate = baselines.run_identity(connection, candidate_id)
        baseline = baselines.current_baseline(connection, candidate["golden_set"])
        if baseline is None or baseline["eval_run_id"] == candidate_id:
            comparable, reason = True, f"{candidate_id} is the baseline; nothing to compare"
            rows = pl.DataFrame()
        else:
            comparable, reason = comparability(candidate, baseline)
            connection.execute(
                "UPDATE eval_runs SET baseline_run_id = $baseline WHERE eval_run_id = $run",
                {"baseline": baseline["eval_run_id"], "run": candidate_id},
            )
            rows = (
                baselines.compare_runs(
                    connection, candidate_id, baseline["eval_run_id"], seed=settings.seed
                )
                if comparable
                else pl.DataFrame()
            )
        baseline_id = baseline["eval_run_id"] if baseline else candidate_id
        if rows.height:
            table = rows.with_columns(
                candidate_run_id=pl.lit(candidate_id),
                baseline_run_id=pl.lit(baseline_id),
                comparable=pl.lit(True),
                reason=pl.lit(reason),
            )
        else:
            table = pl.DataFrame(
                [
                    {
                        "candidate_run_id": candidate_id,
                        "baseline_run_id": baseline_id,
                        "metric": "comparability",
                        "comparable": comparable,
                        "reason": reason,
                    }
                ]
            )
        warehouse.replace_rows(
            connection, "run_comparisons", table, {"candidate_run_id": candidate_id}
        )
    regressions = significant_regressions(rows, alpha=REGRESSION_ALPHA) if rows.height else rows
    shown = (
        rows.select("metric", "candidate_value", "baseline_value", "delta", "p_value", "test", "n")
        if rows.height
        else rows
    )
    yield dg.Output(
        None,
        metadata={
            **table_metadata(table, "run_comparisons"),
            "candidate_run_id": candidate_id,
            "baseline_run_id": baseline_id,
            "candidate_corpus_digest": candidate["corpus_digest"],
            "baseline_corpus_digest": baseline["corpus_digest"]
            if baseline
            else candidate["corpus_digest"],
            "comparable": comparable,
            "reason": reason,
            "dagster_run": run_link(context.run_id),
            "comparison": dg.MetadataValue.md(markdown_table(shown))
            if shown.height
            else dg.MetadataValue.text(reason),
        },
    )
    yield dg.AssetCheckResult(
        check_name="comparable_with_baseline",
        passed=comparable,
        severity=dg.AssetCheckSeverity.ERROR,
        description=reason,
        metadata={
            "candidate_corpus_digest": candidate["corpus_digest"],
            "baseline_corpus_digest": baseline["corpus_digest"] if baseline else "",
            "candidate_golden_digest": candidate["golden_digest"],
            "baseline_golden_digest": baseline["golden_digest"] if baseline else "",
            "reason": reason,
        },
    )
    worse = regressions["metric"].to_list() if regressions.height else []
    yield dg.AssetCheckResult(
        check_name=f"gate_{REGRESSION_GATE}",
        passed=comparable and not worse,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            f"significantly worse than baseline {baseline_id}: {', '.join(worse)}"
            if worse
            else ("no significant regression" if comparable else f"not assessed: {reason}")
        ),
        metadata={"regressed_metrics": dg.MetadataValue.json(worse)},
    )


run_comparison_job = dg.define_asset_job(
    "run_comparison_job",
    selection=dg.AssetSelection.assets("run_comparison"),
    partitions_def=nightly_partitions,
    executor_def=dg.in_process_executor,
    description="Compare a night's run with its baseline (requested by the comparison guard).",
)

rebaseline = dg.define_asset_job(
    "rebaseline",
    selection=EVALUATION_ASSETS,
    partitions_def=nightly_partitions,
    executor_def=chosen_executor(),
    description=(
        "Re-run the baseline's system configuration on the new snapshot; its eval_summary stores "
        "the offset and makes the re-run the baseline."
    ),
)

REFERENCE_FIELDS = set(ReferenceSystemResource.model_fields)


def rebaseline_run_config(summary: dict) -> dict:
    """Run configuration that re-creates the baseline's reference-system configuration."""
    stored = json.loads(summary.get("baseline_system_config") or "{}")
    if summary.get("baseline_system_id") not in ("", "reference-bm25"):
        raise ValueError(
            f"cannot re-run system {summary['baseline_system_id']!r}: only the reference system's "
            "configuration is re-created by the rebaseline job"
        )
    system = {key: value for key, value in stored.items() if key in REFERENCE_FIELDS}
    return {"resources": {"system": {"config": system}}}


def guard_requests(summary: dict) -> tuple[list[dg.RunRequest], str]:
    """The run requests (or none) and the reason, for one completed run's summary metadata."""
    action, reason = guard_decision(summary)
    partition = summary["partition"]
    if action == REBASELINE:
        try:
            run_config = rebaseline_run_config(summary)
        except ValueError as error:
            return [], str(error)
        request = dg.RunRequest(
            run_key=f"rebaseline:{summary['eval_run_id']}",
            job_name="rebaseline",
            partition_key=partition,
            run_config=run_config,
            tags={
                REBASELINE_FOR_TAG: summary["eval_run_id"],
                REBASELINE_REASON_TAG: summary["rebaseline_reason"],
                REQUESTED_BY_TAG: summary.get("requested_by") or "unknown",
            },
        )
        return [request], reason
    if action == COMPARE:
        candidate = summary.get("rebaseline_for") or summary["eval_run_id"]
        request = dg.RunRequest(
            run_key=f"compare:{candidate}:{summary['eval_run_id']}",
            job_name="run_comparison_job",
            partition_key=partition,
            run_config={"ops": {"run_comparison": {"config": {"candidate_run_id": candidate}}}},
            tags={CANDIDATE_TAG: candidate},
        )
        return [request], reason
    return [], reason


def metadata_values(metadata) -> dict:
    """Materialization metadata as plain values."""
    return {key: getattr(value, "value", value) for key, value in metadata.items()}


def summary_from_event(event: dg.EventLogEntry) -> dict:
    """eval_summary's materialization metadata as plain values."""
    return metadata_values(event.asset_materialization.metadata)


@dg.asset_sensor(
    asset_key=dg.AssetKey("eval_summary"),
    name="comparison_guard",
    jobs=[run_comparison_job, rebaseline],
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests run_comparison only for comparable runs; launches rebaseline on request.",
)
def comparison_guard(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
    """For each new eval_summary: compare, re-baseline, or skip with the reason (both digests
    and the re-baseline command when the corpus or golden set changed)."""
    requests, reason = guard_requests(summary_from_event(asset_event))
    if not requests:
        return dg.SkipReason(reason)
    context.log.info(reason)
    return requests
