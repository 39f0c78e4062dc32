"""Jobs: the nightly evaluation, the re-baseline, and the comparison.

``nightly_eval`` materializes the whole evaluation of one night and suite; ``rebaseline`` is the
same graph run with the baseline's system configuration on the new snapshot; ``run_comparison_job``
compares a completed run with its baseline (requested by the comparison guard).
"""

import dagster as dg

EVALUATION_ASSETS = dg.AssetSelection.groups("inputs", "system_runs", "judging", "metrics")
EXECUTORS = {"in_process": dg.in_process_executor, "multiprocess": dg.multiprocess_executor}


def build_jobs(partitions: dg.PartitionsDefinition, executor: str) -> tuple:
    """``nightly_eval``, ``rebaseline`` and ``run_comparison_job`` on the given executor."""
    nightly_eval = dg.define_asset_job(
        "nightly_eval",
        selection=EVALUATION_ASSETS,
        partitions_def=partitions,
        executor_def=EXECUTORS[executor],
        description="The whole evaluation of one night and suite: inputs, runs, judge, metrics.",
    )
    rebaseline = dg.define_asset_job(
        "rebaseline",
        selection=EVALUATION_ASSETS,
        partitions_def=partitions,
        executor_def=EXECUTORS[executor],
        description=(
            "Re-run the baseline's system configuration on the new snapshot; its eval_summary "
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
