"""The generation run asset: guarded answers with cited passage ids."""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import TEAM, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import (
    EvalSettings,
    ReferenceSystemResource,
    WarehouseResource,
)
from rag_eval_pipeline.defs.retrieval_run import load_items, load_passages
from rag_eval_pipeline.lib import warehouse
from rag_eval_pipeline.lib.system import Hit

GENERATION_SCHEMA = {
    "eval_run_id": pl.String,
    "item_id": pl.String,
    "refused": pl.Boolean,
    "refusal_reason": pl.String,
    "answer": pl.String,
    "cited_ids": pl.List(pl.String),
    "context_ids": pl.List(pl.String),
    "citation_valid": pl.Boolean,
    "best_score": pl.Float64,
}


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="system_runs",
    owners=[TEAM],
    kinds={"duckdb"},
    code_version="generation-v1",
    check_specs=[
        dg.AssetCheckSpec(
            "answers_cite_retrieved_passages",
            asset="generation_run",
            description="Every answer given cites only ids that were in the context sent.",
        )
    ],
)
def generation_run(
    context: dg.AssetExecutionContext,
    retrieval_run: dict,
    settings: EvalSettings,
    system: ReferenceSystemResource,
    warehouse_db: WarehouseResource,
):
    """The system's answer (or refusal, with its reason) for every golden question.

    The context sent is the top ``context_k`` retrieved passages. Citation validity (every
    cited id among the ids in the context sent) is measured here independently of the system's
    own citation check, so a system that skips the check is still caught.
    """
    run_id = retrieval_run["eval_run_id"]
    with warehouse_db.connect() as connection:
        passages = load_passages(connection, retrieval_run["corpus_digest"])
        items = load_items(connection, retrieval_run["golden_digest"])
        retrieved = warehouse.read_frame(
            connection,
            "SELECT item_id, passage_id, score, rank FROM retrieval_results "
            "WHERE eval_run_id = $run ORDER BY item_id, rank",
            {"run": run_id},
        )
        hits_by_item: dict[str, list[Hit]] = {}
        for row in retrieved.iter_rows(named=True):
            hits_by_item.setdefault(row["item_id"], []).append(
                Hit(row["passage_id"], row["score"], row["rank"])
            )
        sut = system.build(passages)
        rows = []
        for item_id, question in zip(items["item_id"], items["question"], strict=True):
            response = sut.respond(question, hits_by_item.get(item_id, []), settings.context_k)
            answered = not response.refused
            rows.append(
                {
                    "eval_run_id": run_id,
                    "item_id": item_id,
                    "refused": response.refused,
                    "refusal_reason": response.refusal_reason,
                    "answer": response.answer,
                    "cited_ids": list(response.cited_ids),
                    "context_ids": list(response.context_ids),
                    "citation_valid": (
                        bool(response.cited_ids)
                        and set(response.cited_ids) <= set(response.context_ids)
                    )
                    if answered
                    else None,
                    "best_score": response.best_score,
                }
            )
        results = pl.DataFrame(rows, schema=GENERATION_SCHEMA)
        warehouse.replace_rows(connection, "generation_results", results, {"eval_run_id": run_id})
    answered = results.filter(~pl.col("refused"))
    invalid = answered.filter(~pl.col("citation_valid"))
    reasons = {
        row["refusal_reason"]: row["len"]
        for row in results.filter(pl.col("refused"))
        .group_by("refusal_reason")
        .len()
        .iter_rows(named=True)
    }
    yield dg.Output(
        retrieval_run,
        metadata={
            **table_metadata(results, "generation_results"),
            "eval_run_id": run_id,
            "corpus_digest": retrieval_run["corpus_digest"],
            "golden_digest": retrieval_run["golden_digest"],
            "answered": answered.height,
            "refusals_by_reason": dg.MetadataValue.json(reasons),
        },
    )
    yield dg.AssetCheckResult(
        check_name="answers_cite_retrieved_passages",
        passed=invalid.height == 0,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"answers_with_invalid_citations": invalid.height},
    )
