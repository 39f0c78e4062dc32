"""Sensors: the comparison guard, and the sweep that ends runs whose process is gone.

The comparison guard keeps a cursor over every completed evaluation run (each ``eval_summary``
materialization, in the order they were recorded), so a run is compared, re-baselined or skipped
with its reason exactly once, however many finish within one tick: a backfill of ten nights gets
ten decisions. A night run by ``rag-eval nightly`` with its guard (``GUARD_TAG``, on the night and
the runs its guard launches) is decided in that process, so the sensor skips its summary: a
daemon started after such nights, or running beside them, does not decide them again. The rule
is ``lib.runs.guard``; this module turns its decision into run requests:
the ``rebaseline`` job with the baseline's system configuration (only the reference system's
configuration can be re-created), or ``run_comparison_job`` for the candidate run.

``abandoned_runs`` fails a Dagster run still marked started whose process has died on this
machine (a ``rag-eval nightly`` killed with ``kill -9``), and marks its evaluation run failed, so
dead runs never hold the run queue or look finished.
"""

import json
import os
import socket

import dagster as dg

from rag_eval_pipeline.defs.alerts import alert_not_comparable
from rag_eval_pipeline.defs.comparison import CANDIDATE_TAG
from rag_eval_pipeline.defs.partitions import partition_key
from rag_eval_pipeline.defs.resources import (
    EvalSettings,
    ReferenceSystemResource,
    WarehouseResource,
)
from rag_eval_pipeline.lib.runs.guard import COMPARE, NOT_COMPARABLE, REBASELINE, guard_decision
from rag_eval_pipeline.lib.runs.record import (
    REBASELINE_FOR_TAG,
    REBASELINE_REASON_TAG,
    REFERENCE_SYSTEM_ID,
    REQUESTED_BY_TAG,
)

REFERENCE_FIELDS = set(ReferenceSystemResource.model_fields)
SETTING_FIELDS = set(EvalSettings.model_fields)
# On a run whose comparison guard ``rag-eval nightly`` applies in its own process (the night
# and the runs that guard launches): the sensor leaves its summary to that process.
GUARD_TAG = "rag_eval/guard"
IN_PROCESS = "in_process"
# Added by ``rag-eval nightly`` to such a run once its guard decided it (and ran what it
# decided). A night whose process ended without it (killed during its comparison) is decided by
# the sensor after all.
GUARD_DONE_TAG = "rag_eval/guard_decided"
GUARD_PENDING = "pending"  # its value until then
HOST_TAG = "rag_eval/host"
PID_TAG = "rag_eval/pid"
PAGE = 100


def executed_by_rag_eval(run: dg.DagsterRun) -> bool:
    """Whether ``run`` was executed in the ``rag-eval`` process its host and pid tags name.
    A re-execution never is: the webserver or the daemon launches it, and Dagster copies its
    parent's tags onto it (the UI re-executes with them), that process's among them."""
    return bool(run.tags.get(PID_TAG)) and run.parent_run_id is None


def rebaseline_run_config(summary: dict) -> dict:
    """Run configuration that re-creates the baseline's reference-system configuration and its
    settings."""
    stored = json.loads(summary.get("baseline_system_config") or "{}")
    if summary.get("baseline_system_id") not in ("", REFERENCE_SYSTEM_ID):
        raise ValueError(
            f"cannot re-run system {summary['baseline_system_id']!r}: only the reference system's "
            "configuration is re-created by the rebaseline job; to compare from this corpus on, "
            f"accept the run as the new baseline: rag-eval accept-baseline {summary['eval_run_id']}"
            " --reason '<what changed>' (the change's own effect is then not measured)"
        )
    system = {key: value for key, value in stored.items() if key in REFERENCE_FIELDS}
    resources: dict = {"system": {"config": system}}
    # And its settings (depth, cut-offs, samples, seeds): the whole configuration, so the offsets
    # are what the corpus, golden set or definitions moved, and a gate at one of its cut-offs is
    # assessed. A baseline whose settings were not recorded runs with the defaults.
    recorded = json.loads(summary.get("baseline_settings") or "{}")
    settings = {key: value for key, value in recorded.items() if key in SETTING_FIELDS}
    if settings:
        resources["settings"] = {"config": settings}
    return {"resources": resources}


def guard_requests(summary: dict) -> tuple[list[dg.RunRequest], str]:
    """The run requests (or none) and the reason, for one completed run's summary metadata."""
    action, reason = guard_decision(summary)
    key = partition_key(summary["partition"], summary["suite"])
    if action == REBASELINE:
        try:
            run_config = rebaseline_run_config(summary)
        except ValueError as error:
            return [], str(error)
        request = dg.RunRequest(
            run_key=f"rebaseline:{summary['eval_run_id']}",
            job_name="rebaseline",
            partition_key=key,
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
            partition_key=key,
            run_config={"ops": {"run_comparison": {"config": {"candidate_run_id": candidate}}}},
            tags={CANDIDATE_TAG: candidate},
        )
        return [request], reason
    return [], reason


def metadata_values(metadata) -> dict:
    """Materialization metadata as plain values."""
    return {key: getattr(value, "value", value) for key, value in metadata.items()}


def completed_since(instance: dg.DagsterInstance, cursor: str | None):
    """Every ``eval_summary`` materialization after ``cursor``, oldest first, and the new
    cursor."""
    records = []
    while True:
        page = instance.fetch_materializations(
            dg.AssetKey("eval_summary"), limit=PAGE, cursor=cursor, ascending=True
        )
        records += page.records
        cursor = page.cursor if page.records else cursor
        if not page.has_more:
            return records, cursor


def _guard_cursor(text: str | None) -> tuple[str | None, list[str]]:
    """The guard's cursor: the last ``eval_summary`` materialization seen, and the Dagster runs
    whose summary ``rag-eval nightly`` was still deciding in its process at the last tick (a
    plain materialization cursor, as written before there were any, has none)."""
    if not text:
        return None, []
    try:
        state = json.loads(text)
    except ValueError:
        return text, []
    if not isinstance(state, dict):
        return text, []
    return state.get("after"), [str(run_id) for run_id in state.get("pending", [])]


def summary_of_run(instance: dg.DagsterInstance, run_id: str) -> dict | None:
    """The ``eval_summary`` metadata a Dagster run materialized (its last), or None."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records
    for record in reversed(records):
        materialization = record.event_log_entry.dagster_event.event_specific_data.materialization
        if materialization.asset_key == dg.AssetKey("eval_summary"):
            return metadata_values(materialization.metadata)
    return None


DECIDED, DECIDING, ENDED = "decided", "deciding", "ended"


def in_process_state(run: dg.DagsterRun) -> str:
    """Where the in-process guard of ``run`` stands: ``decided`` (tagged so; or run on another
    machine, or before runs carried their process, which cannot be checked: left to that
    process, as always), ``deciding`` (its ``rag-eval nightly`` is still running here) or
    ``ended`` (that process ended without deciding: killed, or interrupted)."""
    pid, host = run.tags.get(PID_TAG), run.tags.get(HOST_TAG)
    # Only a run begun as ``pending`` can be left undecided: runs from before the tag existed
    # were decided by their process, as always.
    if run.tags.get(GUARD_DONE_TAG) != GUARD_PENDING or not pid or host != socket.gethostname():
        return DECIDED
    return DECIDING if process_alive(int(pid)) else ENDED


def build_comparison_guard(jobs: list) -> dg.SensorDefinition:
    @dg.sensor(
        name="comparison_guard",
        jobs=jobs,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "For every completed evaluation run, exactly once: compare it with its baseline, "
            "launch the re-baseline, or say why not."
        ),
    )
    def comparison_guard(context: dg.SensorEvaluationContext):
        """A decision for each ``eval_summary`` materialization since the cursor: the run
        requests it makes, and the reason of every run it skips (both digests and the
        re-baseline command when the corpus or golden set changed). A night that
        ``rag-eval nightly`` decides in its own process is left to it while that process runs
        (kept in the cursor and looked at again each tick), and decided here if the process
        ended without deciding it."""
        after, pending = _guard_cursor(context.cursor)
        records, after = completed_since(context.instance, after)
        summaries = [(run_id, summary_of_run(context.instance, run_id)) for run_id in pending]
        summaries += [
            (record.run_id, metadata_values(record.asset_materialization.metadata))
            for record in records
        ]
        requests, skipped, still_pending = [], [], []
        for run_id, summary in summaries:
            if summary is None:
                continue
            run = context.instance.get_run_by_id(run_id)
            made: list[dg.RunRequest] = []
            # A re-execution carries its parent's guard tag but is the daemon's run to decide.
            state = (
                in_process_state(run)
                if run is not None
                and run.tags.get(GUARD_TAG) == IN_PROCESS
                and run.parent_run_id is None
                else None
            )
            if state == DECIDED:
                reason = f"decided by rag-eval nightly in its own process (run {run_id})"
            elif state == DECIDING:
                still_pending.append(run_id)
                reason = (
                    f"left to rag-eval nightly, deciding it in its process "
                    f"{run.tags[PID_TAG]} (run {run_id})"
                )
            else:
                made, reason = guard_requests(summary)
                if guard_decision(summary)[0] == NOT_COMPARABLE:
                    try:
                        alert_not_comparable(run, summary, reason, context.log)
                    except RuntimeError as error:  # the webhook did not take it
                        context.log.warning(str(error))
                if state == ENDED:
                    reason = (
                        f"rag-eval nightly (process {run.tags[PID_TAG]}) ended before deciding "
                        f"run {run_id}, so it is decided here: {reason}"
                    )
            context.log.info(f"{summary['eval_run_id']}: {reason}")
            requests += made
            if not made:
                skipped.append(f"{summary['eval_run_id']}: {reason}")
        skip = None
        if not requests:
            skip = dg.SkipReason("; ".join(skipped) or "no evaluation run completed since")
        cursor = json.dumps({"after": after, "pending": still_pending}) if still_pending else after
        return dg.SensorResult(run_requests=requests, cursor=cursor, skip_reason=skip)

    return comparison_guard


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def abandoned_by_its_process(run: dg.DagsterRun) -> str | None:
    """Why ``run`` is abandoned (``the process that ran it (pid … on …) is gone``) when the
    ``rag-eval`` process of this machine that executed it no longer exists; None otherwise
    (another machine's run, a run the daemon or the webserver launched, a process alive)."""
    pid, host = run.tags.get(PID_TAG), socket.gethostname()
    if not executed_by_rag_eval(run) or run.tags.get(HOST_TAG) != host or process_alive(int(pid)):
        return None
    return f"the process that ran it (pid {pid} on {host}) is gone"


def fail_abandoned_runs(
    instance: dg.DagsterInstance, warehouse: WarehouseResource, log=None
) -> list[str]:
    """Fail every run started by a process of this machine that no longer exists; returns the
    Dagster run ids it failed. Each one's evaluation run, if it began, is marked failed too, and
    its alert posted (``defs.alerts.alert_failed_run``): these are runs of ``rag-eval nightly``,
    executed in its process, which the run-status sensor does not see."""
    from rag_eval_pipeline.defs.alerts import alert_failed_run

    failed = []
    # NOT_STARTED too: a process killed before its run's first step leaves it so.
    statuses = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING]
    active = dg.RunsFilter(statuses=[*statuses, dg.DagsterRunStatus.STARTED])
    for run in instance.get_runs(filters=active, limit=500):
        reason = abandoned_by_its_process(run)
        if reason is None:
            continue
        instance.report_run_failed(run, message=reason)
        try:
            alert_failed_run(instance, run, reason, warehouse)
        except RuntimeError as error:  # the webhook did not take it: the run is failed anyway
            if log is not None:
                log.warning(str(error))
        failed.append(run.run_id)
    return failed


@dg.sensor(
    name="abandoned_runs",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Fails runs marked started whose process on this machine has died.",
)
def abandoned_runs(context: dg.SensorEvaluationContext, warehouse_db: WarehouseResource):
    """A run killed with its process (``kill -9``, a crashed machine) is failed, with the pid
    in the message, so the queue drains and the run never looks finished."""
    failed = fail_abandoned_runs(context.instance, warehouse_db, context.log)
    return dg.SkipReason(
        f"failed {len(failed)} abandoned run(s): {', '.join(failed)}"
        if failed
        else "no abandoned runs"
    )
