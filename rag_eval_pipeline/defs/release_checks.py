"""The release checks: what a night's summary published, reported on the assets it came from.

Dagster records a materialization when its step ends, so the metric tables of a night that was
interrupted before ``eval_summary`` published it still read "Materialized" in the UI. Every
metric table therefore carries a ``published`` check, evaluated in one step after the
summary: it passes when ``eval_summary`` ran after the table's materialization, in the same
Dagster run (or, for a table this run did not materialize, in a run it re-executes, directly or
through earlier re-executions), published the evaluation run that materialization names, and
the warehouse holds its record complete. A table re-materialized in a re-execution that did not
run the summary again, or for another evaluation run (a setting changed), is not published. A
night that stopped before that step shows the check as not executed ("Execution failed" on a
failed run), and a metric table materialized by hand without the summary as a warning, so their
figures never look like a finished night's. Every check is partitioned as the assets are
(night x suite), so each night's result stands apart in the UI.

The release gates (``gate_<name>`` on ``eval_summary``) are reported by the same step, from the
``gate_results`` rows the summary wrote in the same publish as the tables. They are blocking
with ERROR severity: a failing gate fails the Dagster run (red in the UI, seen by the run-status
sensor) after the run is published, and the comparison guard still compares the run. Reporting
them here rather than in ``eval_summary`` itself keeps a failing gate from skipping the
``published`` checks. A recorded result is reported only for the gate as the gates file states it
now (file, version, operator, threshold); a gate checked against another file, or not recorded,
fails saying to materialize ``eval_summary`` again.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import dagster as dg

from rag_eval_pipeline.defs.partitions import nightly_check
from rag_eval_pipeline.defs.resources import WarehouseResource
from rag_eval_pipeline.lib.runs.gates import MISSING, NOT_CALIBRATED, Gate, GateSet, describe
from rag_eval_pipeline.lib.store.sql import sql_query
from rag_eval_pipeline.lib.store.warehouse import read_frame

PUBLISHED_CHECK = "published"
SUMMARY = dg.AssetKey("eval_summary")
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
    "The night this materialization belongs to was published: eval_summary ran after it, in the "
    "same Dagster run (or, for a table not materialized again, in the run it re-executes), "
    "for the same evaluation run, wrote every table into the warehouse and completed the run's "
    "eval_runs record. Not executed means the run stopped before that; its figures are not a "
    "finished night's."
)


NOT_SUMMARIZED = (
    "eval_summary did not run in this Dagster run (nor in the run it re-executes): "
    "these figures were not published"
)
NO_PARTITION = (
    "the release checks are evaluated per night and suite, after that night's eval_summary: "
    "re-execute the night's Dagster run (its release_checks step), or materialize the night; "
    "a run of the checks alone with no partition has nothing to check"
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


def unassessed_gate(
    gate_name: str, reason: str, severity: dg.AssetCheckSeverity
) -> dg.AssetCheckResult:
    """A gate this step could not report from the summary's record, and why."""
    return dg.AssetCheckResult(
        asset_key="eval_summary",
        check_name=gate_check_name(gate_name),
        passed=False,
        severity=severity,
        description=f"gate {gate_name} not assessed: {reason}",
        metadata={"status": "not assessed", "message": reason},
    )


def recorded_gate(gate: Gate, gates: GateSet, row: Mapping | None, eval_run_id: str):
    """The gate as the summary recorded it; an ERROR when it recorded no result for it, or one
    checked against other gates (the file edited, then only this step re-executed)."""
    if row is None:
        reason = f"eval_summary recorded no result for it on {eval_run_id} (gate_results)"
        return unassessed_gate(gate.name, reason, dg.AssetCheckSeverity.ERROR)
    checked = (row["gates_file"], row["gates_version"], row["op"], row["threshold"])
    current = (gates.path.name, gates.version, gate.op, float(gate.threshold))
    if checked != current:
        reason = (
            f"eval_summary checked {eval_run_id} against {row['gates_file']} version "
            f"{row['gates_version']} ({row['op']} {row['threshold']:g}), not {gates.path.name} "
            f"version {gates.version} ({gate.op} {float(gate.threshold):g}): materialize "
            "eval_summary again to check the gates as they are now"
        )
        return unassessed_gate(gate.name, reason, dg.AssetCheckSeverity.ERROR)
    return gate_check(row)


@dataclass(frozen=True)
class Materialized:
    """An asset's newest materialization seen from a Dagster run: how many re-executions back
    (0 is the run itself), its event's storage id and the evaluation run it names."""

    depth: int
    storage_id: int
    eval_run_id: str


def materialized_in_chain(
    instance: dg.DagsterInstance, dagster_run_id: str, keys: Iterable[dg.AssetKey]
) -> dict[dg.AssetKey, Materialized]:
    """The newest materialization of each of ``keys`` in this Dagster run or, for a key this
    run did not materialize, in the run it re-executes (and so on up the re-executions)."""
    wanted, found = set(keys), {}
    seen: set[str] = set()
    depth = 0
    while dagster_run_id and dagster_run_id not in seen and wanted - found.keys():
        seen.add(dagster_run_id)
        # Newest first, and every one of them (a limit would keep the oldest).
        records = instance.get_records_for_run(
            dagster_run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, ascending=False
        ).records
        for record in records:
            materialization = record.event_log_entry.asset_materialization
            if materialization is None or materialization.asset_key not in wanted - found.keys():
                continue
            entry = materialization.metadata.get("eval_run_id")
            found[materialization.asset_key] = Materialized(
                depth, record.storage_id, str(getattr(entry, "value", entry) or "")
            )
        run = instance.get_run_by_id(dagster_run_id)
        dagster_run_id = run.parent_run_id if run is not None else None
        depth += 1
    return found


def unpublished_reason(asset: str, summary: Materialized | None, table: Materialized | None):
    """Why ``asset``'s materialization is not the one the summary published, or "" when it is:
    the summary must come after it (in the same Dagster run, or in a re-execution of the run
    that materialized it) and publish the evaluation run it names."""
    if summary is None or not summary.eval_run_id:
        return NOT_SUMMARIZED
    if table is None:
        return f"{asset} was not materialized in this Dagster run nor in the run it re-executes"
    after = summary.depth < table.depth or (
        summary.depth == table.depth and summary.storage_id > table.storage_id
    )
    if not after:
        return (
            f"{asset} was materialized after eval_summary published {summary.eval_run_id}: "
            "these figures were not published; re-execute eval_summary and release_checks "
            "from this Dagster run, or materialize the night again"
        )
    if table.eval_run_id != summary.eval_run_id:
        return (
            f"{asset} holds evaluation run {table.eval_run_id or '(none named)'}, and "
            f"eval_summary published {summary.eval_run_id}: these figures were not published"
        )
    return ""


def published_check(
    asset: str,
    eval_run_id: str,
    run: Mapping | None,
    missing: str = "",
    status: str = "not published",
) -> dg.AssetCheckResult:
    """``published`` on ``asset``: passes when the summary published ``eval_run_id`` after the
    asset's materialization (``unpublished_reason``) and its record is complete in the
    warehouse; WARN otherwise (the asset is not wrong, it is not part of a finished night:
    materialized by hand without the summary, after it, or the record names the run failed).
    ``missing`` says why there was nothing to look up, and ``status`` what that means (``unknown``
    when this step could not see the warehouse)."""
    complete = bool(eval_run_id and not missing and run and run["complete"])
    completed_at = f"{run['completed_at']:%Y-%m-%d %H:%M:%S}" if complete else ""
    if complete:
        description = f"{eval_run_id} published, completed at {completed_at} UTC"
    elif missing:
        description = missing
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
            "status": run["status"] if run and not missing else status,
            "completed_at": completed_at,
        },
    )


def build_release_checks(
    partitions: dg.PartitionsDefinition,
    gates: GateSet,
    writer_tags: Mapping[str, str] | None = None,
) -> dg.AssetChecksDefinition:
    """One step after ``eval_summary``: ``published`` on every metric table, then the
    release gates. It reads the warehouse, so it runs where the summary does (``writer_tags``).

    The checks are partitioned as the assets are (night x suite, ``nightly_check``), so each
    night shows whether it was published, not the newest evaluation of any night."""
    metric_gates = gates.metric_gates
    specs = [
        nightly_check(
            PUBLISHED_CHECK,
            asset=asset,
            partitions=partitions,
            additional_deps=["eval_summary"],
            description=PUBLISHED_DESCRIPTION,
        )
        for asset in PUBLISHED_ASSETS
    ] + [
        nightly_check(
            gate_check_name(gate.name),
            asset="eval_summary",
            partitions=partitions,
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
        if not context.has_partition_key:
            # The UI's "Execute all" on a metric table's checks launches them with no night.
            raise dg.Failure(description=NO_PARTITION)
        # Materializing some assets by hand selects their checks alone.
        selected = {(key.asset_key.path[-1], key.name) for key in context.selected_asset_check_keys}
        chain = materialized_in_chain(
            context.instance,
            context.run.run_id,
            [SUMMARY, *(dg.AssetKey(asset) for asset in PUBLISHED_ASSETS)],
        )
        summary = chain.get(SUMMARY)
        eval_run_id = summary.eval_run_id if summary else ""
        warehouse = warehouse_db.warehouse()
        missing, status, run, recorded = "", "not published", None, {}
        if not eval_run_id:
            missing = NOT_SUMMARIZED
        elif not warehouse.exists():
            status = "unknown"  # whether the night was published cannot be seen from here
            missing = (
                f"no warehouse at {warehouse.path}: this step must see the warehouse "
                f"eval_summary published {eval_run_id} into"
            )
        else:
            params = {"run": eval_run_id}
            with warehouse.reading() as connection:
                runs = read_frame(connection, sql_query("gates", "published_run"), params)
                rows = read_frame(connection, sql_query("gates", "recorded_results"), params)
            run = runs.row(0, named=True) if runs.height else None
            recorded = {row["gate"]: row for row in rows.iter_rows(named=True)}
        for asset in PUBLISHED_ASSETS:
            if (asset, PUBLISHED_CHECK) in selected:
                why_not = missing or unpublished_reason(
                    asset, summary, chain.get(dg.AssetKey(asset))
                )
                yield published_check(asset, eval_run_id, run, why_not, status)
        for gate in metric_gates:
            if ("eval_summary", gate_check_name(gate.name)) not in selected:
                continue
            if not eval_run_id:
                yield unassessed_gate(gate.name, missing, dg.AssetCheckSeverity.WARN)
            elif missing:
                yield unassessed_gate(gate.name, missing, dg.AssetCheckSeverity.ERROR)
            else:
                yield recorded_gate(gate, gates, recorded.get(gate.name), eval_run_id)

    return release_checks
