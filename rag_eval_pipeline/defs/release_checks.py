"""The release checks: what a night's summary published, reported on the assets it came from.

Dagster records a materialization when its step ends, so the metric tables of a night that was
interrupted before ``eval_summary`` published it still read "Materialized" in the UI. Every
metric table therefore carries a ``published`` check, evaluated in one step after the
summary: it passes when the warehouse holds the run's record complete. A night that stopped
before that step shows the check as not executed ("Execution failed" on a failed run), so its
figures never look like a finished night's.

The release gates (``gate_<name>`` on ``eval_summary``) are reported by the same step, from the
``gate_results`` rows the summary wrote in the same publish as the tables. They are blocking
with ERROR severity: a failing gate fails the Dagster run (red in the UI, seen by the run-status
sensor) after the run is published, and the comparison guard still compares the run. Reporting
them here rather than in ``eval_summary`` itself keeps a failing gate from skipping the
``published`` checks.
"""

from collections.abc import Mapping

import dagster as dg

from rag_eval_pipeline.defs.resources import WarehouseResource
from rag_eval_pipeline.lib.runs.gates import MISSING, NOT_CALIBRATED, GateSet, describe
from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG
from rag_eval_pipeline.lib.store.sql import sql_query
from rag_eval_pipeline.lib.store.warehouse import read_frame

PUBLISHED_CHECK = "published"
# The assets whose metadata shows figures. The inputs and the system runs materialize what
# they say (the snapshot loaded, the system asked) whether or not the night is published;
# each check evaluation costs the instance two event writes (about 40 ms on SQLite).
PUBLISHED_ASSETS = (
    "retrieval_metrics",
    "generation_metrics",
    "judge_calibration",
    "claim_diagnostics",
)
PUBLISHED_DESCRIPTION = (
    "The night this materialization belongs to was published: eval_summary of the same Dagster "
    "run wrote every table into the warehouse and completed the run's eval_runs record. Not "
    "executed means the run stopped before that; its figures are not a finished night's."
)


def gate_check_name(gate_name: str) -> str:
    return f"gate_{gate_name}"


def gate_check(row: Mapping) -> dg.AssetCheckResult:
    """A recorded gate result (a ``gate_results`` row) as its asset check: ERROR when it
    fails, WARN when it was not assessed (judge not calibrated, metric missing)."""
    not_assessed = row["status"] in (NOT_CALIBRATED, MISSING)
    return dg.AssetCheckResult(
        asset_key="eval_summary",
        check_name=gate_check_name(row["gate"]),
        passed=bool(row["passed"]),
        severity=dg.AssetCheckSeverity.WARN if not_assessed else dg.AssetCheckSeverity.ERROR,
        description=row["message"],
        metadata={
            "status": row["status"],
            "message": row["message"],
            "observed": row["observed"],
            "threshold": row["threshold"],
            "margin": row["margin"],
        },
    )


def unrecorded_gate(gate_name: str, eval_run_id: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        asset_key="eval_summary",
        check_name=gate_check_name(gate_name),
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"gate {gate_name} has no result recorded for {eval_run_id} in gate_results",
    )


def published_check(asset: str, eval_run_id: str, run: Mapping | None) -> dg.AssetCheckResult:
    """``published`` on ``asset``: passes when the run's record is complete in the warehouse;
    WARN otherwise (the asset is not wrong, it is not part of a finished night: materialized by
    hand without the summary, or the record names the run failed)."""
    complete = bool(run and run["complete"])
    completed_at = f"{run['completed_at']:%Y-%m-%d %H:%M:%S}" if complete else ""
    if complete:
        description = f"{eval_run_id} published, completed at {completed_at} UTC"
    elif not eval_run_id:
        description = "this Dagster run names no evaluation run (no rag_eval/eval_run_id tag)"
    elif run is None:
        description = f"{eval_run_id} is not in the warehouse"
    else:
        reason = f": {run['status_reason']}" if run["status_reason"] else ""
        description = f"{eval_run_id} is {run['status']} in the warehouse{reason}"
    return dg.AssetCheckResult(
        asset_key=asset,
        check_name=PUBLISHED_CHECK,
        passed=complete,
        severity=dg.AssetCheckSeverity.WARN,
        description=description,
        metadata={
            "eval_run_id": eval_run_id,
            "status": run["status"] if run else "missing",
            "completed_at": completed_at,
        },
    )


def build_release_checks(
    gates: GateSet, writer_tags: Mapping[str, str] | None = None
) -> dg.AssetChecksDefinition:
    """One step after ``eval_summary``: ``published`` on every metric table, then the
    release gates. It reads the warehouse, so it runs where the summary does (``writer_tags``)."""
    metric_gates = gates.metric_gates
    specs = [
        dg.AssetCheckSpec(
            PUBLISHED_CHECK,
            asset=asset,
            additional_deps=["eval_summary"],
            description=PUBLISHED_DESCRIPTION,
        )
        for asset in PUBLISHED_ASSETS
    ] + [
        dg.AssetCheckSpec(
            gate_check_name(gate.name),
            asset="eval_summary",
            description=describe(gate),
            blocking=True,
        )
        for gate in metric_gates
    ]

    @dg.multi_asset_check(
        name="release_checks",
        specs=specs,
        can_subset=True,
        op_tags=dict(writer_tags or {}),
        description="What eval_summary published (every metric table's published check) and the "
        "release gates it recorded with the run.",
    )
    def release_checks(context: dg.AssetCheckExecutionContext, warehouse_db: WarehouseResource):
        # The tag is added by the run's retrieval step and again by its summary (a run that
        # materializes the summary alone, or re-executes from a failure, has it too).
        dagster_run = context.instance.get_run_by_id(context.run.run_id)
        eval_run_id = dagster_run.tags.get(EVAL_RUN_TAG, "") if dagster_run else ""
        params = {"run": eval_run_id}
        with warehouse_db.warehouse().reading() as connection:
            runs = read_frame(connection, sql_query("gates", "published_run"), params)
            recorded = read_frame(connection, sql_query("gates", "recorded_results"), params)
        run = runs.row(0, named=True) if runs.height else None
        # Materializing some assets by hand selects their checks alone.
        selected = {(key.asset_key.path[-1], key.name) for key in context.selected_asset_check_keys}
        for asset in PUBLISHED_ASSETS:
            if (asset, PUBLISHED_CHECK) in selected:
                yield published_check(asset, eval_run_id, run)
        by_gate = {row["gate"]: row for row in recorded.iter_rows(named=True)}
        for gate in metric_gates:
            if ("eval_summary", gate_check_name(gate.name)) not in selected:
                continue
            row = by_gate.get(gate.name)
            yield gate_check(row) if row else unrecorded_gate(gate.name, eval_run_id)

    return release_checks
