"""The generation run asset: guarded answers with cited passage ids."""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import counts, evaluation_asset, table_metadata
from rag_eval_pipeline.defs.resources import SystemResource, WarehouseResource
from rag_eval_pipeline.defs.retrieval_run import record_of
from rag_eval_pipeline.lib.systems.run import generation_results


def build_generation_run(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "generation_run",
        partitions=partitions,
        group="system_runs",
        kinds={"parquet"},
        code_version="generation-v2",
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
        system: SystemResource,
        warehouse_db: WarehouseResource,
    ):
        """The system's answer (or refusal, with its reason) for every golden question.

        The context sent is the top ``context_k`` retrieved passages. Citation validity (every
        cited id among the ids in the context sent) is measured here independently of the
        system's own citation check, so a system that skips the check is still caught.
        """
        record = record_of(retrieval_run)
        store = warehouse_db.run_store()
        run_dir = store.run_dir(record.eval_run_id)
        passages = store.read_table(store.corpus_dir(record.corpus_digest), "corpus_passages")
        items = store.read_table(store.golden_dir(record.golden_digest), "golden_items")
        retrieved = store.read_table(run_dir, "retrieval_results")
        results = generation_results(
            system.build(passages), items.sort("line"), retrieved, record.settings.context_k
        ).with_columns(eval_run_id=pl.lit(record.eval_run_id))
        store.write_table(run_dir, "generation_results", results)
        invalid = results.filter(~pl.col("refused") & ~pl.col("citation_valid"))
        yield dg.Output(
            retrieval_run,
            metadata={
                **table_metadata(results, "generation_results"),
                "eval_run_id": record.eval_run_id,
                "corpus_digest": record.corpus_digest,
                "golden_digest": record.golden_digest,
                "answered": int((~results["refused"]).sum()),
                "refusals_by_reason": dg.MetadataValue.json(
                    counts(results.filter(pl.col("refused")), "refusal_reason")
                ),
            },
        )
        yield dg.AssetCheckResult(
            check_name="answers_cite_retrieved_passages",
            passed=invalid.height == 0,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"answers_with_invalid_citations": invalid.height},
        )

    return generation_run
