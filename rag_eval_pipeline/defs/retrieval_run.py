"""The retrieval run asset: the system under test retrieves for every golden question."""

import datetime as dt
import json

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import TEAM, run_link, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import (
    DeterministicJudgeResource,
    EvalSettings,
    ReferenceSystemResource,
    WarehouseResource,
)
from rag_eval_pipeline.lib import warehouse
from rag_eval_pipeline.lib.run_identity import (
    REBASELINE_FOR_TAG,
    REBASELINE_REASON_TAG,
    REBASELINE_TAG,
    REQUESTED_BY_TAG,
    eval_run_id,
)
from rag_eval_pipeline.lib.system import config_digest

RESULT_SCHEMA = {
    "item_id": pl.String,
    "rank": pl.Int32,
    "passage_id": pl.String,
    "score": pl.Float64,
}


def load_passages(connection, corpus_digest: str) -> pl.DataFrame:
    return warehouse.read_frame(
        connection,
        "SELECT * FROM corpus_passages WHERE corpus_digest = $digest ORDER BY passage_id",
        {"digest": corpus_digest},
    )


def load_items(connection, golden_digest: str) -> pl.DataFrame:
    return warehouse.read_frame(
        connection,
        "SELECT * FROM golden_items WHERE golden_digest = $digest ORDER BY line",
        {"digest": golden_digest},
    )


def retrieve_all(system, questions: list[str], k: int) -> list:
    """Batch retrieval where the system offers it, one question at a time otherwise."""
    if hasattr(system, "retrieve_many"):
        return system.retrieve_many(questions, k)
    return [system.retrieve(question, k) for question in questions]


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="system_runs",
    owners=[TEAM],
    kinds={"duckdb", "bm25"},
    code_version="retrieval-v1",
)
def retrieval_run(
    context: dg.AssetExecutionContext,
    corpus_snapshot: dict,
    golden_set: dict,
    settings: EvalSettings,
    system: ReferenceSystemResource,
    judge: DeterministicJudgeResource,
    warehouse_db: WarehouseResource,
):
    """Top-k passages for every golden question from the system under test.

    Starts the evaluation run: its id is derived from the night, the corpus and golden-set
    digests and the system and judge configuration digests, recorded in ``eval_runs`` with the
    Dagster run id. Results go to ``retrieval_results`` with each passage's version status.
    """
    system_config = system.config()
    judge_config = judge.config()
    partition = context.partition_key if context.has_partition_key else "adhoc"
    tags = context.run.tags
    rebaseline_for = tags.get(REBASELINE_FOR_TAG)
    run_id = eval_run_id(
        partition,
        corpus_snapshot["corpus_digest"],
        golden_set["golden_digest"],
        config_digest(system_config),
        config_digest(judge_config),
        variant=f"rebaseline-for:{rebaseline_for}" if rebaseline_for else "",
    )
    with warehouse_db.connect() as connection:
        passages = load_passages(connection, corpus_snapshot["corpus_digest"])
        items = load_items(connection, golden_set["golden_digest"])
        sut = system.build(passages)
        hits = retrieve_all(sut, items["question"].to_list(), settings.retrieval_depth)
        results = pl.DataFrame(
            [
                {"item_id": item_id, "rank": h.rank, "passage_id": h.passage_id, "score": h.score}
                for item_id, item_hits in zip(items["item_id"], hits, strict=True)
                for h in item_hits
            ],
            schema=RESULT_SCHEMA,
        ).join(passages.select("passage_id", "status"), on="passage_id", how="left")
        results = results.with_columns(pl.lit(run_id).alias("eval_run_id"))
        identity = pl.DataFrame(
            [
                {
                    "eval_run_id": run_id,
                    "partition_date": partition,
                    "dagster_run_id": context.run_id,
                    "snapshot_id": corpus_snapshot["snapshot_id"],
                    "corpus_digest": corpus_snapshot["corpus_digest"],
                    "golden_set": golden_set["golden_set"],
                    "golden_digest": golden_set["golden_digest"],
                    "system_id": system_config["system_id"],
                    "system_config_digest": config_digest(system_config),
                    "system_config": json.dumps(system_config, sort_keys=True),
                    "judge_id": judge_config["judge_id"],
                    "judge_config_digest": config_digest(judge_config),
                    "rebaseline": tags.get(REBASELINE_TAG) == "true",
                    "rebaseline_reason": tags.get(REBASELINE_REASON_TAG),
                    "rebaseline_requested_by": tags.get(REQUESTED_BY_TAG),
                    "rebaseline_for": rebaseline_for,
                    "started_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
                }
            ]
        )
        warehouse.replace_rows(connection, "eval_runs", identity, {"eval_run_id": run_id})
        warehouse.replace_rows(connection, "retrieval_results", results, {"eval_run_id": run_id})
    handle = {
        "eval_run_id": run_id,
        "partition": partition,
        "dagster_run_id": context.run_id,
        "corpus_digest": corpus_snapshot["corpus_digest"],
        "golden_digest": golden_set["golden_digest"],
        "system_config": system_config,
        "judge_config": judge_config,
        "rebaseline_for": rebaseline_for,
    }
    empty = sum(1 for item_hits in hits if not item_hits)
    return dg.Output(
        handle,
        metadata={
            **table_metadata(results, "retrieval_results"),
            "eval_run_id": run_id,
            "dagster_run": run_link(context.run_id),
            "corpus_digest": corpus_snapshot["corpus_digest"],
            "golden_digest": golden_set["golden_digest"],
            "system_id": system_config["system_id"],
            "system_config": dg.MetadataValue.json(system_config),
            "system_config_digest": config_digest(system_config),
            "items_without_results": empty,
        },
    )
