"""The run-status sensor: a failed night marks its evaluation run failed and posts an alert.

A release gate that fails, a comparison that shows a significant regression (its gate is
blocking, so the comparison run fails) and a run that fails for any other reason all end in a
failed Dagster run; this sensor sees each one once, marks the evaluation run failed when it had
not completed, and posts a short JSON message to the webhook in ``RAG_EVAL_ALERT_WEBHOOK``
(read when the sensor runs). No URL, no alert, no error.
"""

import dagster as dg
import duckdb

from rag_eval_pipeline.defs.release_checks import gate_check_name
from rag_eval_pipeline.defs.resources import WarehouseResource
from rag_eval_pipeline.lib.reporting.alerts import alert_for, not_comparable_alert, post_alert
from rag_eval_pipeline.lib.runs import registry
from rag_eval_pipeline.lib.runs.failures import step_failure_lines
from rag_eval_pipeline.lib.runs.gates import FAILED
from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG
from rag_eval_pipeline.lib.store.sql import sql_query
from rag_eval_pipeline.lib.store.warehouse import WarehouseUnavailable, read_frame

WEBHOOK_VARIABLE = "RAG_EVAL_ALERT_WEBHOOK"


def failure_reason(instance: dg.DagsterInstance, run_id: str, fallback: str | None = None) -> str:
    """Why a run failed, as ``rag-eval nightly`` says it: its failed steps' lines, or
    ``fallback`` (Dagster's run failure message) when no step failed (a run killed from
    outside, a run that never started); without ``fallback``, the message its run failure was
    reported with (the abandoned-run sweep's "the process that ran it ... is gone"), else
    "failed"."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    lines = step_failure_lines(r.event_log_entry.dagster_event for r in records.records)
    if lines:
        return "; ".join(lines)
    if fallback is not None:
        return fallback
    failures = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    messages = [r.event_log_entry.dagster_event.message for r in failures.records]
    return next((message for message in reversed(messages) if message), "failed")


def failed_checks(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, str]]:
    """``(check name, description)`` of the run's failed ERROR checks."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    failed = []
    for record in records:
        evaluation = record.event_log_entry.dagster_event.event_specific_data
        if not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR:
            failed.append((evaluation.check_name, evaluation.description or ""))
    return failed


def recorded_gate_failures(run: dg.DagsterRun, warehouse_db: WarehouseResource) -> list:
    """``(check name, message)`` of the gates that failed on the evaluation run this Dagster run
    completed, as its summary recorded them (``gate_results``): for a run that ended after its
    publish and before its ``release_checks`` step reported them (killed there), whose alert
    would otherwise say only that the process is gone while the warehouse holds the run
    complete, its gates failed. Only when this Dagster run published it: a later attempt of the
    same evaluation run that failed before its publish is alerted for its own failure."""
    eval_run_id = run.tags.get(EVAL_RUN_TAG)
    warehouse = warehouse_db.warehouse()
    if not eval_run_id or not warehouse.exists():
        return []
    with warehouse.reading() as connection:
        row = registry.run_row(connection, eval_run_id)
        if row is None or not row["complete"] or row["dagster_run_id"] != run.run_id:
            return []
        try:
            rows = read_frame(
                connection, sql_query("gates", "recorded_results"), {"run": eval_run_id}
            )
        except duckdb.CatalogException:  # a warehouse written before runs kept their gates
            return []
    return [
        (
            gate_check_name(row["gate"]),
            f"{row['message']} (recorded with the run; not reported as a check)",
        )
        for row in rows.iter_rows(named=True)
        if row["status"] == FAILED
    ]


def abandon_eval_run(run: dg.DagsterRun, message: str, warehouse_db: WarehouseResource) -> None:
    """Mark the evaluation run of a failed Dagster run failed, with ``message`` (a run that had
    completed stays complete: a failed gate does not undo it)."""
    eval_run_id = run.tags.get(EVAL_RUN_TAG)
    if eval_run_id:
        warehouse_db.abandon(eval_run_id, message)


def alert_failed_run(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    message: str,
    warehouse_db: WarehouseResource,
    log=None,
) -> int | None:
    """What a failed run brings: its evaluation run marked failed (when it had not completed)
    and an alert posted to the webhook in ``RAG_EVAL_ALERT_WEBHOOK``, if one is set. The sensor
    does this for the runs the daemon sees; ``rag-eval nightly`` for the runs it executes in
    its own process, which the sensor leaves to it. Returns the webhook's HTTP status, or None
    when no webhook is set. A warehouse that cannot be read or written now (a session holds it
    read-write) does not stop the alert: the alert says so."""
    checks = failed_checks(instance, run.run_id)
    try:
        abandon_eval_run(run, message, warehouse_db)
        if not any(name.startswith("gate_") for name, _ in checks):
            checks += recorded_gate_failures(run, warehouse_db)
    except WarehouseUnavailable as problem:
        message = f"{message}; the warehouse could not be updated: {problem}"
        if log is not None:
            log.warning(f"run {run.run_id}: {problem}")
    alert = alert_for(
        dagster_run_id=run.run_id,
        job=run.job_name,
        partition=run.tags.get("dagster/partition"),
        eval_run_id=run.tags.get(EVAL_RUN_TAG),
        failed_checks=checks,
        failure_message=message,
    )
    return post_configured(alert, log)


def post_configured(alert, log=None) -> int | None:
    """Post ``alert`` to the webhook in ``RAG_EVAL_ALERT_WEBHOOK``; the HTTP status, or None when
    no webhook is set (``RuntimeError`` when it did not take it after its retries)."""
    url = dg.EnvVar(WEBHOOK_VARIABLE).get_value()
    if not url:
        if log is not None:
            log.info(
                f"no {WEBHOOK_VARIABLE}: not posting {alert.kind} alert for {alert.dagster_run_id}"
            )
        return None
    status = post_alert(url, alert)
    if log is not None:
        log.info(f"posted {alert.kind} alert for {alert.dagster_run_id}: HTTP {status}")
    return status


def alert_not_comparable(run: dg.DagsterRun | None, summary: dict, reason: str, log=None):
    """Post the ``not_comparable`` alert of a completed night the guard skipped because it
    differs from its baseline (``post_configured``)."""
    alert = not_comparable_alert(
        dagster_run_id=run.run_id if run is not None else "",
        job=run.job_name if run is not None else "nightly_eval",
        partition=run.tags.get("dagster/partition") if run is not None else None,
        eval_run_id=summary["eval_run_id"],
        reason=reason,
    )
    return post_configured(alert, log)


@dg.run_failure_sensor(
    name="failure_alerts",
    default_status=dg.DefaultSensorStatus.RUNNING,
    monitor_all_code_locations=False,
    description="Marks a failed night's evaluation run failed and posts an alert to the webhook.",
)
def failure_alerts(context: dg.RunFailureSensorContext, warehouse_db: WarehouseResource):
    from rag_eval_pipeline.defs.sensors import executed_by_rag_eval

    run = context.dagster_run
    if executed_by_rag_eval(run):
        # Its process (or the abandoned-run sweep, for one whose process died) alerts for it;
        # an interrupted one is reported by that process's exit status, not an alert.
        context.log.info(f"run {run.run_id} was executed by rag-eval, which alerts for it")
        return
    reason = failure_reason(
        context.instance, run.run_id, context.failure_event.message or "the run failed"
    )
    alert_failed_run(context.instance, run, reason, warehouse_db, context.log)
