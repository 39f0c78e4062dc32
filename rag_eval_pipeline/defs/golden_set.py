"""The golden set asset: labelled questions validated against tonight's snapshot."""

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import TEAM, table_metadata
from rag_eval_pipeline.defs.partitions import nightly_partitions
from rag_eval_pipeline.defs.resources import EvalSettings, WarehouseResource, project_path
from rag_eval_pipeline.lib import warehouse
from rag_eval_pipeline.lib.golden import (
    NO_ANSWER_STRATA,
    load_golden_set,
    validate_against_snapshot,
)


@dg.asset(
    partitions_def=nightly_partitions,
    group_name="inputs",
    owners=[TEAM],
    kinds={"duckdb", "polars"},
    code_version="golden-v1",
    check_specs=[
        dg.AssetCheckSpec(
            "no_drifted_items",
            asset="golden_set",
            description="No item's answering passage was superseded or withdrawn since labelling.",
        ),
        dg.AssetCheckSpec(
            "no_answer_share",
            asset="golden_set",
            description="At least a quarter of the items are no-answer items.",
        ),
    ],
)
def golden_set(
    context: dg.AssetExecutionContext,
    corpus_snapshot: dict,
    settings: EvalSettings,
    warehouse_db: WarehouseResource,
):
    """Golden items and graded gold passages, checked against the snapshot.

    Every gold id must exist in the snapshot the set was labelled against (an unknown id fails
    naming the line, before anything is written). Items whose answering passage is no longer
    current are kept and flagged in ``golden_drift`` for re-labelling.
    """
    path = project_path(settings.golden_set)
    golden = load_golden_set(path)
    with warehouse_db.connect() as connection:
        passages = warehouse.read_frame(
            connection,
            "SELECT passage_id, status FROM corpus_passages WHERE corpus_digest = $digest",
            {"digest": corpus_snapshot["corpus_digest"]},
        )
        drift = validate_against_snapshot(
            golden,
            passages,
            snapshot_id=corpus_snapshot["snapshot_id"],
            corpus_digest=corpus_snapshot["corpus_digest"],
            source=str(path),
        )
        scope = {"golden_digest": golden.golden_digest}
        items = golden.items.with_columns(
            pl.lit(golden.golden_digest).alias("golden_digest"),
            pl.lit(golden.name).alias("golden_set"),
        )
        warehouse.replace_rows(connection, "golden_items", items, scope)
        warehouse.replace_rows(
            connection,
            "golden_gold",
            golden.gold.with_columns(pl.lit(golden.golden_digest).alias("golden_digest")),
            scope,
        )
        warehouse.replace_rows(
            connection,
            "golden_drift",
            drift.with_columns(
                pl.lit(golden.golden_digest).alias("golden_digest"),
                pl.lit(corpus_snapshot["corpus_digest"]).alias("corpus_digest"),
            ),
            {
                "golden_digest": golden.golden_digest,
                "corpus_digest": corpus_snapshot["corpus_digest"],
            },
        )
    drifted = drift.filter(pl.col("drifted"))
    strata = {
        row["stratum"]: row["len"]
        for row in golden.items.group_by("stratum").len().iter_rows(named=True)
    }
    no_answer = sum(strata.get(s, 0) for s in NO_ANSWER_STRATA)
    yield dg.Output(
        {
            "golden_set": golden.name,
            "golden_digest": golden.golden_digest,
            "corpus_digest": corpus_snapshot["corpus_digest"],
        },
        data_version=dg.DataVersion(golden.golden_digest),
        metadata={
            **table_metadata(items, "golden_items"),
            "golden_digest": golden.golden_digest,
            "corpus_digest": corpus_snapshot["corpus_digest"],
            "items_by_stratum": dg.MetadataValue.json(strata),
            "drifted_items": drifted.height,
        },
    )
    yield dg.AssetCheckResult(
        check_name="no_drifted_items",
        passed=drifted.height == 0,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{drifted.height} item(s) labelled against {', '.join(sorted(set(golden.items['labelled_against'])))} "
            f"have an answering passage that is no longer current in {corpus_snapshot['snapshot_id']}: "
            "re-label them"
            if drifted.height
            else "no drifted items"
        ),
        metadata={
            "drifted_items": drifted.height,
            "examples": dg.MetadataValue.json(drifted.head(10).to_dicts()),
        },
    )
    yield dg.AssetCheckResult(
        check_name="no_answer_share",
        passed=no_answer * 4 >= golden.items.height,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{no_answer} of {golden.items.height} items are no-answer items (want at least a quarter)",
        metadata={"no_answer_items": no_answer, "items": golden.items.height},
    )
