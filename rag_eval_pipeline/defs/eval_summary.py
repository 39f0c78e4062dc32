"""The evaluation summary asset: completes the run, settles its baseline, checks release gates.

Release gates come from the versioned gates file named by ``RAG_EVAL_GATES`` (default
``gates/release_gates.yaml``); each metric gate is an asset check on ``eval_summary`` with ERROR
severity, so a failing gate shows in the UI and makes ``rag-eval nightly`` exit non-zero.
"""

import datetime as dt
import json
import os

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import TEAM, run_link, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import EvalSettings, WarehouseResource, project_path
from rag_eval_pipeline.lib import baselines, report, warehouse
from rag_eval_pipeline.lib.gates import (
    MISSING,
    NOT_CALIBRATED,
    REGRESSION_GATE,
    describe,
    evaluate_gates,
    load_gates,
)
from rag_eval_pipeline.lib.run_identity import (
    REBASELINE_FOR_TAG,
    REBASELINE_REASON_TAG,
    REQUESTED_BY_TAG,
    comparability,
)
from rag_eval_pipeline.lib.summary import headline_from_tables, summary_markdown

GATES_FILE = project_path(os.environ.get("RAG_EVAL_GATES", "gates/release_gates.yaml"))
GATES_VERSION, GATES = load_gates(GATES_FILE)
METRIC_GATES = [gate for gate in GATES if gate.name != REGRESSION_GATE]

GATE_METRIC_ROWS = """
SELECT 'retrieval_metrics' AS "table", scope, scope_value, measure AS metric,
       value, ci_low, ci_high, n
FROM retrieval_metrics WHERE eval_run_id = $run
UNION ALL
SELECT 'generation_metrics' AS "table", scope, scope_value, metric, value, ci_low, ci_high, n
FROM generation_metrics WHERE eval_run_id = $run
"""


def settle_baseline(connection, run: dict, tags: dict, seed: int) -> dict:
    """Decide this run's baseline and record it; for a re-baseline run, store the offset.

    - a re-baseline run (tag ``rag_eval/rebaseline_for``) is compared with the old baseline
      (same configuration, old snapshot): the paired deltas are the offset the corpus change
      caused, stored in ``rebaseline_offsets``; the run then becomes the baseline;
    - the first completed run of a golden set becomes its baseline;
    - any other run records the current baseline as the one it is compared against.
    """
    current = baselines.current_baseline(connection, run["golden_set"])
    rebaseline_for = tags.get(REBASELINE_FOR_TAG)
    reason = tags.get(REBASELINE_REASON_TAG) or ""
    requested_by = tags.get(REQUESTED_BY_TAG)
    if rebaseline_for:
        if current is None or current["eval_run_id"] == run["eval_run_id"]:
            raise ValueError(f"re-baseline run {run['eval_run_id']} has no earlier baseline")
        offsets = baselines.compare_runs(
            connection, run["eval_run_id"], current["eval_run_id"], seed=seed
        ).select(
            pl.lit(run["eval_run_id"]).alias("rebaseline_run_id"),
            pl.lit(current["eval_run_id"]).alias("old_baseline_run_id"),
            "metric",
            pl.col("baseline_value").alias("old_value"),
            pl.col("candidate_value").alias("new_value"),
            pl.col("delta").alias("offset_value"),
            "ci_low",
            "ci_high",
            pl.lit(requested_by, dtype=pl.String).alias("requested_by"),
            pl.lit(reason).alias("reason"),
        )
        warehouse.replace_rows(
            connection, "rebaseline_offsets", offsets, {"rebaseline_run_id": run["eval_run_id"]}
        )
        connection.execute(
            "UPDATE eval_runs SET baseline_run_id = $old WHERE eval_run_id = $run",
            {"old": current["eval_run_id"], "run": run["eval_run_id"]},
        )
        baselines.accept_baseline(
            connection,
            run["eval_run_id"],
            kind="rebaseline",
            reason=f"re-baseline for {rebaseline_for}: {reason}",
            requested_by=requested_by,
        )
        return {"baseline": current, "is_baseline": True, "offset_rows": offsets.height}
    if current is None:
        baselines.accept_baseline(
            connection, run["eval_run_id"], kind="first_run", reason="first completed run"
        )
        return {"baseline": None, "is_baseline": True, "offset_rows": 0}
    if current["eval_run_id"] != run["eval_run_id"]:
        connection.execute(
            "UPDATE eval_runs SET baseline_run_id = $baseline WHERE eval_run_id = $run",
            {"baseline": current["eval_run_id"], "run": run["eval_run_id"]},
        )
    return {
        "baseline": current,
        "is_baseline": current["eval_run_id"] == run["eval_run_id"],
        "offset_rows": 0,
    }


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="metrics",
    owners=[TEAM],
    kinds={"duckdb"},
    code_version="eval-summary-v2",
    check_specs=[
        dg.AssetCheckSpec(f"gate_{gate.name}", asset="eval_summary", description=describe(gate))
        for gate in METRIC_GATES
    ],
)
def eval_summary(
    context: dg.AssetExecutionContext,
    retrieval_metrics: dict,
    generation_metrics: dict,
    judge_calibration: dict,
    settings: EvalSettings,
    warehouse_db: WarehouseResource,
):
    """One row per evaluation run in ``eval_runs``: identity, digests, baseline and headline
    metrics with intervals (the no-answer stratum apart), marked complete; the release gates of
    the gates file checked against it."""
    run_id = retrieval_metrics["eval_run_id"]
    with warehouse_db.connect() as connection:
        headline = headline_from_tables(connection, run_id)
        connection.execute(
            "UPDATE eval_runs SET headline = $headline, completed_at = $now WHERE eval_run_id = $run",
            {
                "headline": json.dumps(headline, sort_keys=True, default=str),
                "now": dt.datetime.now(dt.UTC).replace(tzinfo=None),
                "run": run_id,
            },
        )
        run = baselines.run_identity(connection, run_id)
        settled = settle_baseline(connection, run, dict(context.run.tags), settings.seed)
        gate_rows = warehouse.read_frame(connection, GATE_METRIC_ROWS, {"run": run_id})
        identity = warehouse.read_frame(
            connection, "SELECT * FROM eval_runs WHERE eval_run_id = $run", {"run": run_id}
        )
        report_data = report.load_report_data(connection, run_id)
    rendered = report.render_charts(report_data)
    report_file = report.write_html_report(
        report_data, report.report_path_for(project_path(warehouse_db.path), run_id), rendered
    )
    calibration = headline.get("judge_calibration") or {}
    results = evaluate_gates(
        METRIC_GATES,
        gate_rows,
        judge_calibrated=bool(calibration.get("calibrated")),
        judge_reason=calibration.get("reason", "no calibration"),
    )
    baseline = settled["baseline"]
    comparable, reason = (
        comparability(run, baseline) if baseline and not settled["is_baseline"] else (True, "")
    )
    failing = [r.message for r in results if not r.passed]
    markdown = summary_markdown(headline)
    if failing:
        markdown += "\n\n**Release gates not passed:**\n\n" + "\n".join(f"- {m}" for m in failing)
    yield dg.Output(
        {**retrieval_metrics, "headline": headline},
        metadata={
            **table_metadata(identity, "eval_runs"),
            "eval_run_id": run_id,
            "partition": run["partition_date"],
            "dagster_run": run_link(retrieval_metrics["dagster_run_id"]),
            "corpus_digest": run["corpus_digest"],
            "golden_set": run["golden_set"],
            "golden_digest": run["golden_digest"],
            "system_config_digest": run["system_config_digest"],
            "is_baseline": settled["is_baseline"],
            "baseline_run_id": baseline["eval_run_id"] if baseline else "",
            "baseline_corpus_digest": baseline["corpus_digest"] if baseline else "",
            "baseline_golden_digest": baseline["golden_digest"] if baseline else "",
            "baseline_system_id": baseline["system_id"] if baseline else "",
            "baseline_system_config": baseline["system_config"] if baseline else "{}",
            "comparable_with_baseline": comparable,
            "comparability": reason,
            "rebaseline_requested": bool(run["rebaseline"]),
            "rebaseline_reason": run["rebaseline_reason"] or "",
            "requested_by": run["rebaseline_requested_by"] or "",
            "rebaseline_for": run["rebaseline_for"] or "",
            "rebaseline_offset_rows": settled["offset_rows"],
            "gates_file": f"{GATES_FILE.name} (version {GATES_VERSION})",
            "summary": dg.MetadataValue.md(markdown),
            "charts": dg.MetadataValue.md(report.report_markdown(report_data, rendered)),
            "report": dg.MetadataValue.path(str(report_file)),
        },
    )
    for result in results:
        yield dg.AssetCheckResult(
            check_name=f"gate_{result.gate.name}",
            passed=result.passed,
            severity=dg.AssetCheckSeverity.WARN
            if result.status in (NOT_CALIBRATED, MISSING)
            else dg.AssetCheckSeverity.ERROR,
            description=result.message,
            metadata={
                "status": result.status,
                "message": result.message,
                "observed": result.observed,
                "threshold": result.gate.threshold,
                "margin": result.margin,
            },
        )
