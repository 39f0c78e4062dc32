"""The run-status sensor: a failed night marks its evaluation run failed and posts an alert.

A release gate that fails, a comparison that shows a significant regression (its gate is
blocking, so the comparison run fails) and a run that fails for any other reason all end in a
failed Dagster run; this sensor sees each one once, marks the evaluation run failed when it had
not completed, and posts a short JSON message to the webhook in ``RAG_EVAL_ALERT_WEBHOOK``
(read when the sensor runs). No URL, no alert, no error.
"""

import dagster as dg

from rag_eval_pipeline.defs.resources import WarehouseResource
from rag_eval_pipeline.lib.reporting.alerts import alert_for, post_alert
from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG

WEBHOOK_VARIABLE = "RAG_EVAL_ALERT_WEBHOOK"


def failed_checks(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, str]]:
    """``(check name, description)`` of the run's failed ERROR checks."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION, limit=1000
    ).records
    failed = []
    for record in records:
        evaluation = record.event_log_entry.dagster_event.event_specific_data
        if not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR:
            failed.append((evaluation.check_name, evaluation.description or ""))
    return failed


@dg.run_failure_sensor(
    name="failure_alerts",
    default_status=dg.DefaultSensorStatus.RUNNING,
    monitor_all_code_locations=False,
    description="Marks a failed night's evaluation run failed and posts an alert to the webhook.",
)
def failure_alerts(context: dg.RunFailureSensorContext, warehouse_db: WarehouseResource):
    run = context.dagster_run
    eval_run_id = run.tags.get(EVAL_RUN_TAG)
    message = context.failure_event.message or "the run failed"
    if eval_run_id:
        warehouse_db.abandon(eval_run_id, message)
    alert = alert_for(
        dagster_run_id=run.run_id,
        job=run.job_name,
        partition=run.tags.get("dagster/partition"),
        eval_run_id=eval_run_id,
        failed_checks=failed_checks(context.instance, run.run_id),
        failure_message=message,
    )
    url = dg.EnvVar(WEBHOOK_VARIABLE).get_value()
    if not url:
        context.log.info(f"no {WEBHOOK_VARIABLE}: not posting {alert.kind} alert for {run.run_id}")
        return
    status = post_alert(url, alert)
    context.log.info(f"posted {alert.kind} alert for {run.run_id}: HTTP {status}")
