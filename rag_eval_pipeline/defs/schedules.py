"""The nightly schedule: at 02:00 in the platform team's time zone, every nightly suite.

A suite is evaluated by the schedule when its suite file says ``nightly: true``. The schedule is
created stopped, as Dagster schedules are by default: turn it on in the UI (Automation) or with
``dagster schedule start nightly_eval_schedule``; ``make daemon`` runs the daemon that ticks it.
"""

import datetime as dt
from zoneinfo import ZoneInfo

import dagster as dg

from rag_eval_pipeline.defs.partitions import SUITE, partition_key
from rag_eval_pipeline.lib.inputs.suites import list_suites


def nightly_suites(registry: str) -> list[str]:
    return [suite.name for suite in list_suites(registry) if suite.nightly]


def build_nightly_schedule(job, timezone: str, registry: str) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="nightly_eval_schedule",
        job=job,
        cron_schedule="0 2 * * *",
        execution_timezone=timezone,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Every nightly suite at 02:00; the partition is the night the run happens on.",
    )
    def nightly_eval_schedule(context: dg.ScheduleEvaluationContext):
        """One run per nightly suite for the night of the tick (a new suite is added as a
        partition first)."""
        moment = context.scheduled_execution_time or dt.datetime.now(dt.UTC)
        night = moment.astimezone(ZoneInfo(timezone)).date().isoformat()
        suites = nightly_suites(registry)
        if not suites:
            return dg.SkipReason(f"no suite in {registry} says nightly: true")
        known = set(context.instance.get_dynamic_partitions(SUITE))
        missing = [suite for suite in suites if suite not in known]
        if missing:
            context.instance.add_dynamic_partitions(SUITE, missing)
        return [
            dg.RunRequest(
                run_key=f"nightly:{night}:{suite}", partition_key=partition_key(night, suite)
            )
            for suite in suites
        ]

    return nightly_eval_schedule
