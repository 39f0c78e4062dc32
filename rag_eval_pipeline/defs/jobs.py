"""Jobs: the nightly evaluation, the re-baseline, and the comparison.

``nightly_eval`` materializes the whole evaluation of one night and suite; ``rebaseline`` is the
same graph run with the baseline's system configuration on the new snapshot (or under new
measure definitions); ``run_comparison_job``
compares a completed run with its baseline (requested by the comparison guard).
"""

import dagster as dg

from rag_eval_pipeline.lib.deployment import Deployment

RECONSTRUCT_MODULE = "rag_eval_pipeline.defs.reconstruct"
CELERY_TICK_SECONDS = 0.1
EVALUATION_ASSETS = dg.AssetSelection.groups("inputs", "system_runs", "judging", "metrics")


def chosen_executor(deployment: Deployment) -> dg.ExecutorDefinition:
    """The executor the deployment names: in-process (the default: on two cores the
    multiprocess executor's start-up per step costs more than most steps take), multiprocess,
    Celery workers over a broker (``docs/SCALING.md``), or a Kubernetes job per step."""
    if deployment.executor == "celery":
        from dagster_celery import celery_executor, core_execution_loop

        # The run's loop sleeps this long between looks at finished steps, whatever finished:
        # at dagster-celery's 1 s a night of 14 dependent levels idles 13-16 s. A look costs
        # one broker round trip per step in flight.
        core_execution_loop.TICK_SECONDS = CELERY_TICK_SECONDS
        return celery_executor.configured(
            {
                "broker": deployment.celery_broker,
                "backend": deployment.celery_backend or deployment.celery_broker,
            },
            name="celery",
        )
    if deployment.executor == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor
    if deployment.executor == "multiprocess":
        # A forkserver that has imported the definitions once forks each step's process: a
        # spawned process would import them again, about 6 s per step on two cores. What the
        # steps import lazily is preloaded too (``defs.reconstruct.STEP_IMPORTS``).
        from rag_eval_pipeline.defs.reconstruct import STEP_IMPORTS

        preload = [RECONSTRUCT_MODULE, *STEP_IMPORTS]
        return dg.multiprocess_executor.configured(
            {"start_method": {"forkserver": {"preload_modules": preload}}},
            name="multiprocess",
        )
    return dg.in_process_executor


def build_jobs(partitions: dg.PartitionsDefinition, deployment: Deployment) -> tuple:
    """``nightly_eval``, ``rebaseline`` and ``run_comparison_job`` on the chosen executor."""
    executor = chosen_executor(deployment)
    nightly_eval = dg.define_asset_job(
        "nightly_eval",
        selection=EVALUATION_ASSETS,
        partitions_def=partitions,
        executor_def=executor,
        description="The whole evaluation of one night and suite: inputs, runs, judge, metrics.",
    )
    rebaseline = dg.define_asset_job(
        "rebaseline",
        selection=EVALUATION_ASSETS,
        partitions_def=partitions,
        executor_def=executor,
        description=(
            "Re-run the baseline's system configuration on the night's corpus and golden set, "
            "under today's measure definitions; its eval_summary "
            "stores the offset and makes the re-run the baseline."
        ),
    )
    run_comparison_job = dg.define_asset_job(
        "run_comparison_job",
        selection=dg.AssetSelection.assets("run_comparison"),
        partitions_def=partitions,
        executor_def=dg.in_process_executor,
        description="Compare a night's run with its baseline (requested by the comparison guard).",
    )
    return nightly_eval, rebaseline, run_comparison_job
