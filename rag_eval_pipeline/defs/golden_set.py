"""The golden set asset: the suite's labelled questions, validated against tonight's snapshot."""

from pathlib import Path

import dagster as dg
import polars as pl

from rag_eval_pipeline.defs.metadata import evaluation_asset, table_metadata
from rag_eval_pipeline.defs.partitions import night_and_suite, nightly_check
from rag_eval_pipeline.defs.resources import SuiteRegistryResource, WarehouseResource
from rag_eval_pipeline.lib.inputs.corpus import frozen_digests
from rag_eval_pipeline.lib.inputs.golden import (
    NO_ANSWER_STRATA,
    check_gold_in,
    check_labelled_against,
    golden_tables,
    load_golden_set,
    strata_counts,
    validate_against_snapshot,
)
from rag_eval_pipeline.lib.judges.run import check_judge_inputs
from rag_eval_pipeline.lib.runs.registry import utc_now
from rag_eval_pipeline.lib.store.staging import (
    is_staged,
    stage_drift,
    stage_snapshot,
    stage_tables,
)


def build_golden_set(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @evaluation_asset(
        "golden_set",
        partitions=partitions,
        group="inputs",
        kinds={"parquet", "polars"},
        code_version="golden-v2",
        check_specs=[
            nightly_check(
                "no_drifted_items",
                asset="golden_set",
                partitions=partitions,
                description=(
                    "No item's answering passage was superseded, withdrawn or changed since "
                    "labelling."
                ),
            ),
            nightly_check(
                "no_answer_share",
                asset="golden_set",
                partitions=partitions,
                description="At least a quarter of the items are no-answer items.",
            ),
        ],
    )
    def golden_set(
        context: dg.AssetExecutionContext,
        corpus_snapshot: dict,
        suites: SuiteRegistryResource,
        warehouse_db: WarehouseResource,
    ):
        """Golden items and graded gold passages of the suite, checked against the snapshot.

        Every item is labelled against one snapshot of the suite's corpus root (its folder name,
        its frozen digest or the digest's first 12 or more characters), and every gold id must
        exist in the snapshot the set was labelled against (an unknown id fails naming the line,
        before anything is written). Items whose answering passage is no longer current are
        kept and flagged in ``golden_drift`` for re-labelling. The suite's human labels and
        trace store are read and checked whole here too (a missing file, a bad line, a
        production trace on a corpus state that is no snapshot of the corpus root), so bad input
        for the judging steps stops the night before its system runs.
        """
        _, suite_name = night_and_suite(context)
        suite = suites.suite(suite_name)
        path = suite.golden_set
        golden = load_golden_set(path)
        digest = corpus_snapshot["corpus_digest"]
        labelled = check_labelled_against(
            golden,
            suite.corpus_root,
            snapshot_id=corpus_snapshot["snapshot_id"],
            corpus_digest=digest,
            source=str(path),
        )
        store = warehouse_db.run_store()
        # Items labelled against another snapshot: their gold checked against it, as labelled
        # (verified and staged once, as a night's snapshot is; later nights only hash its files).
        labelled_digests = []
        for folder in sorted(set(labelled.values())):
            staged = stage_snapshot(store, Path(suite.corpus_root) / folder, loaded_at=utc_now())
            then = store.read_table(store.corpus_dir(staged.corpus_digest), "corpus_passages")
            labels = [label for label, named in labelled.items() if named == folder]
            check_gold_in(golden, then, labels, snapshot_id=staged.snapshot_id, source=str(path))
            digests = then.select("passage_id", labelled_digest="passage_digest")
            labelled_digests += [
                digests.with_columns(labelled_against=pl.lit(label)) for label in labels
            ]
        passages = store.read_table(store.corpus_dir(digest), "corpus_passages")
        drift = validate_against_snapshot(
            golden,
            passages,
            snapshot_id=corpus_snapshot["snapshot_id"],
            corpus_digest=digest,
            source=str(path),
            labelled=pl.concat(labelled_digests) if labelled_digests else None,
        )
        # What judging reads later (labels, production traces) is refused now, before the
        # system under test is asked anything.
        known = frozen_digests(suite.corpus_root)
        check_judge_inputs(suite, lambda state: state in known or is_staged(store, state))
        tables = golden_tables(golden)
        stage_tables(store, store.golden_dir(golden.golden_digest), tables)
        stage_drift(store, golden.golden_digest, digest, drift)
        drifted = drift.filter(pl.col("drifted"))
        strata = strata_counts(golden.items)
        yield dg.Output(
            {
                "golden_set": golden.name,
                "golden_digest": golden.golden_digest,
                "corpus_digest": digest,
            },
            data_version=dg.DataVersion(golden.golden_digest),
            metadata={
                **table_metadata(tables["golden_items"], "golden_items"),
                "suite": suite_name,
                "golden_set_file": str(path),
                "golden_digest": golden.golden_digest,
                "corpus_digest": digest,
                "items_by_stratum": dg.MetadataValue.json(strata),
                "drifted_items": drifted.height,
            },
        )
        yield from golden_checks(golden.items, drifted, strata, corpus_snapshot["snapshot_id"])

    return golden_set


def golden_checks(items: pl.DataFrame, drifted: pl.DataFrame, strata: dict, snapshot_id: str):
    """The two warnings of a golden set: drifted items (to re-label) and too few no-answer items.
    The drift warning names the first drifted items (by line) with the snapshot each was
    labelled against and why its answering passage is not current tonight."""
    shown = (
        drifted.join(items.select("item_id", "line", "labelled_against"), on="item_id")
        .sort("line")
        .head(3)
    )
    examples = "; ".join(
        f"{row['item_id']} (labelled against {row['labelled_against']}): {row['drift_reason']}"
        for row in shown.iter_rows(named=True)
    )
    more = f"; and {drifted.height - shown.height} more" if drifted.height > shown.height else ""
    yield dg.AssetCheckResult(
        check_name="no_drifted_items",
        passed=drifted.height == 0,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{drifted.height} item(s) have an answering passage that is not current, or "
            f"changed, in {snapshot_id}: {examples}{more}: re-label them (golden_drift lists "
            "every one)"
            if drifted.height
            else "no drifted items"
        ),
        metadata={
            "drifted_items": drifted.height,
            "examples": dg.MetadataValue.json(drifted.head(10).to_dicts()),
        },
    )
    no_answer = sum(strata.get(s, 0) for s in NO_ANSWER_STRATA)
    yield dg.AssetCheckResult(
        check_name="no_answer_share",
        passed=no_answer * 4 >= items.height,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{no_answer} of {items.height} items are no-answer items (want at least a quarter)"
        ),
        metadata={"no_answer_items": no_answer, "items": items.height},
    )
