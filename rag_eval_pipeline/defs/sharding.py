"""What the three sharded assets share: their decorator, the fan-out and the fan-in.

``retrieval_run``, ``generation_run`` and ``judge_sample`` are graph-backed assets: a planning op
yields one dynamic output per shard of the golden items (``lib.runs.shards``), a shard op per
output does the per-item work and writes its Parquet part, and a finishing op checks every part is
there and yields the asset's output, metadata and checks. With the in-process executor the shards
run one after the other; with the multiprocess or Celery executor they run on the workers, and
Dagster's re-execution from failure re-runs a failed shard alone.
"""

from collections.abc import Iterator

import dagster as dg

from rag_eval_pipeline.defs.metadata import TEAM
from rag_eval_pipeline.lib.runs.record import EvalRunRecord, handed_on
from rag_eval_pipeline.lib.runs.shards import ShardSpec, check_parts, items_of_shard
from rag_eval_pipeline.lib.store.run_store import RunStore


def sharded_asset(
    name: str,
    *,
    partitions: dg.PartitionsDefinition,
    group: str,
    kinds: set[str],
    code_version: str,
    description: str,
    check_specs: list[dg.AssetCheckSpec] | None = None,
):
    """``@dg.graph_multi_asset`` producing the one asset ``name``."""
    return dg.graph_multi_asset(
        name=name,
        outs={
            name: dg.AssetOut(
                owners=[TEAM],
                kinds=kinds,
                code_version=code_version,
                description=description,
            )
        },
        partitions_def=partitions,
        group_name=group,
        check_specs=check_specs or [],
    )


def fan_out(record: EvalRunRecord, shards: int) -> Iterator[dg.DynamicOutput]:
    """One dynamic output per shard of the run."""
    for shard in range(shards):
        spec = ShardSpec(record.eval_run_id, record.as_json(), shard, shards)
        yield dg.DynamicOutput(spec.as_dict(), mapping_key=spec.mapping_key)


def spec_of(document: dict) -> tuple[ShardSpec, EvalRunRecord]:
    spec = ShardSpec.from_dict(document)
    return spec, handed_on(spec.record)


def fan_in(store: RunStore, shards: list[dict], tables: tuple[str, ...]) -> EvalRunRecord:
    """The run's record, once every shard's part of every table is in the run store."""
    spec, record = spec_of(shards[0])
    run_dir = store.run_dir(record.eval_run_id)
    for table in tables:
        check_parts(store.part_names(run_dir, table), spec.shards, str(run_dir / table))
    return record


def shard_inputs(store: RunStore, spec: ShardSpec, record: EvalRunRecord):
    """What a shard step reads: the snapshot's passages and the shard's golden items, in line
    order."""
    passages = store.read_table(store.corpus_dir(record.corpus_digest), "corpus_passages")
    items = store.read_table(store.golden_dir(record.golden_digest), "golden_items").sort("line")
    return passages, items_of_shard(items, spec.shard, spec.shards)
