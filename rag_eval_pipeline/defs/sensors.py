"""The comparison guard: for each completed run, compare, re-baseline, or say why not.

The rule is ``lib.runs.guard``; this module turns its decision into run requests: the
``rebaseline`` job with the baseline's system configuration (only the reference system's
configuration can be re-created), or ``run_comparison_job`` for the candidate run.
"""

import json

import dagster as dg

from rag_eval_pipeline.defs.comparison import CANDIDATE_TAG
from rag_eval_pipeline.defs.partitions import partition_key
from rag_eval_pipeline.defs.resources import ReferenceSystemResource
from rag_eval_pipeline.lib.runs.guard import COMPARE, REBASELINE, guard_decision
from rag_eval_pipeline.lib.runs.record import (
    REBASELINE_FOR_TAG,
    REBASELINE_REASON_TAG,
    REQUESTED_BY_TAG,
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


def build_comparison_guard(jobs: list) -> dg.SensorDefinition:
    @dg.asset_sensor(
        asset_key=dg.AssetKey("eval_summary"),
        name="comparison_guard",
        jobs=jobs,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests run_comparison only for comparable runs; launches rebaseline on request.",
    )
    def comparison_guard(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
        """For each new eval_summary: compare, re-baseline, or skip with the reason (both digests
        and the re-baseline command when the corpus or golden set changed)."""
        requests, reason = guard_requests(
            metadata_values(asset_event.asset_materialization.metadata)
        )
        if not requests:
            return dg.SkipReason(reason)
        context.log.info(reason)
        return requests

    return comparison_guard
