"""Jobs and the nightly schedule.

``nightly_eval`` materializes the whole evaluation graph for one night. It runs in-process by
default: on a two-core machine the multiprocess executor costs 1.5-2 s of process start-up per
step, more than most steps take. ``RAG_EVAL_EXECUTOR=multiprocess`` switches it for bigger
machines (shards then run in parallel).
"""

import os

import dagster as dg

from rag_eval_pipeline.defs.partitions import nightly_partitions

EVALUATION_ASSETS = dg.AssetSelection.groups("inputs", "system_runs", "judging", "metrics")


def chosen_executor() -> dg.ExecutorDefinition:
    """The executor named by ``RAG_EVAL_EXECUTOR`` (``in_process``, the default, or
    ``multiprocess``)."""
    name = os.environ.get("RAG_EVAL_EXECUTOR", "in_process")
    executors = {"in_process": dg.in_process_executor, "multiprocess": dg.multiprocess_executor}
    if name not in executors:
        raise ValueError(f"RAG_EVAL_EXECUTOR={name!r}; expected one of {', '.join(executors)}")
    return executors[name]


nightly_eval = dg.define_asset_job(
    "nightly_eval",
    selection=EVALUATION_ASSETS,
    partitions_def=nightly_partitions,
    executor_def=chosen_executor(),
    description="The whole evaluation for one night: snapshot, golden set, runs, judge, metrics.",
)

nightly_eval_schedule = dg.build_schedule_from_partitioned_job(
    nightly_eval, hour_of_day=2, minute_of_hour=0, name="nightly_eval_schedule"
)
