"""The nightly schedule: at 02:00 in the platform team's time zone, every nightly suite.

A suite is evaluated by the schedule when its suite file says ``nightly: true``. The schedule is
created stopped, as Dagster schedules are by default: turn it on in the UI (Automation) or with
``dagster schedule start nightly_eval_schedule``; ``make daemon`` runs the daemon that ticks it.

A suite file that cannot be read (bad YAML, a bad field) does not stop the other suites' nights:
the tick requests every good nightly suite and logs an error naming each bad file (the tick's
log in the UI); with no good nightly suite left, the tick fails with those errors.
"""

import datetime as dt
from zoneinfo import ZoneInfo

import dagster as dg

from rag_eval_pipeline.defs.partitions import SUITE, partition_key
from rag_eval_pipeline.lib.inputs.suites import SuiteError, scan_suites


def nightly_suites(registry: str) -> tuple[list[str], list[SuiteError]]:
    """The nightly suites' names, and an error for each suite file that could not be read."""
    suites, problems = scan_suites(registry)
    return [suite.name for suite in suites if suite.nightly], problems


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
        suites, problems = nightly_suites(registry)
        for problem in problems:
            context.log.error(f"suite file left out of the night {night}: {problem}")
        if not suites and problems:
            raise SuiteError("; ".join(str(problem) for problem in problems))
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
