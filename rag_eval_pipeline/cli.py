"""The ``rag-eval`` command line: what is not an asset materialization.

- ``rag-eval nightly [--partition DATE]``: run the ``nightly_eval`` job in-process against the
  Dagster instance in ``DAGSTER_HOME`` and print the summary;
- ``rag-eval summary [EVAL_RUN_ID]``: print a run's summary from the warehouse (latest by default);
- ``rag-eval freeze SNAPSHOT_DIR``: write the snapshot's manifest digest;
- ``rag-eval evaluate-run QRELS RUN [-m MEASURE ...] [--rel-level N] [--per-query] [--json]``:
  trec_eval-style evaluation of a TREC run file against TREC qrels.
"""

import argparse
import datetime as dt
import json
import os
import sys
import time
import warnings
from pathlib import Path
from zoneinfo import ZoneInfo

DEFAULT_WAREHOUSE = "warehouse/rag_eval.duckdb"


def _warehouse_path() -> Path:
    from rag_eval_pipeline.defs.resources import project_path

    return project_path(os.environ.get("RAG_EVAL_WAREHOUSE", DEFAULT_WAREHOUSE))


def _latest_run(connection) -> str | None:
    rows = connection.sql(
        "SELECT eval_run_id FROM eval_runs WHERE completed_at IS NOT NULL "
        "ORDER BY completed_at DESC LIMIT 1"
    ).fetchall()
    return rows[0][0] if rows else None


def command_summary(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib import warehouse
    from rag_eval_pipeline.lib.summary import format_summary, headline_from_tables

    path = _warehouse_path()
    if not path.is_file():
        print(f"{path}: no warehouse yet; run 'make nightly' first", file=sys.stderr)
        return 2
    with warehouse.connect(path, read_only=True) as connection:
        run_id = args.eval_run_id or _latest_run(connection)
        if run_id is None:
            print(f"{path}: no completed evaluation run", file=sys.stderr)
            return 2
        headline = headline_from_tables(connection, run_id)
    print(json.dumps(headline, indent=2, default=str) if args.json else format_summary(headline))
    return 0


def command_nightly(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    import dagster as dg

    from rag_eval_pipeline.definitions import defs
    from rag_eval_pipeline.defs.partitions import TIMEZONE
    from rag_eval_pipeline.lib import warehouse
    from rag_eval_pipeline.lib.summary import format_summary, headline_from_tables

    loaded = time.perf_counter()
    partition = args.partition or dt.datetime.now(ZoneInfo(TIMEZONE)).date().isoformat()
    instance = (
        dg.DagsterInstance.get()
        if os.environ.get("DAGSTER_HOME")
        else dg.DagsterInstance.ephemeral()
    )
    job = defs.resolve_job_def("nightly_eval")
    # The console shows warnings and errors; every event stays in the Dagster instance and UI.
    warnings.filterwarnings("ignore", message=".*is currently in beta")
    log_level = "DEBUG" if args.verbose else "WARNING"
    result = job.execute_in_process(
        run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        partition_key=partition,
        instance=instance,
        raise_on_error=False,
        tags=dict(args.tag or []),
    )
    finished = time.perf_counter()
    if args.timings:
        print(f"timing: imports and definitions {loaded - started:.2f} s", file=sys.stderr)
        for event in result.all_events:
            if event.is_step_success:
                print(
                    f"timing: {event.step_key} {event.event_specific_data.duration_ms / 1000:.2f} s",
                    file=sys.stderr,
                )
        print(f"timing: job {finished - loaded:.2f} s", file=sys.stderr)
    if not result.success:
        for event in result.all_events:
            if event.is_step_failure:
                error = event.event_specific_data.error
                cause = (
                    error.cause.message
                    if error and error.cause
                    else (error.message if error else "")
                )
                print(f"step {event.step_key} failed: {cause.strip()}", file=sys.stderr)
        return 1
    run_output = result.output_for_node("eval_summary") if args.print_summary else None
    if run_output:
        with warehouse.connect(_warehouse_path(), read_only=True) as connection:
            print(format_summary(headline_from_tables(connection, run_output["eval_run_id"])))
    return 0


def command_freeze(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.corpus import CorpusError, freeze_snapshot

    try:
        manifest = freeze_snapshot(args.snapshot_dir)
    except CorpusError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(
        f"{manifest['snapshot_id']}: {manifest['document_count']} documents, "
        f"{manifest['passage_count']} passages, digest {manifest['corpus_digest']}"
    )
    return 0


def command_evaluate_run(args: argparse.Namespace) -> int:
    import polars as pl

    from rag_eval_pipeline.lib import retrieval_metrics as rm
    from rag_eval_pipeline.lib.formats import FormatError, read_trec_qrels, read_trec_run

    measures = args.measure or ["nDCG@5", "nDCG@10", "P@5", "R@5", "RR", "AP"]
    try:
        for measure in measures:
            rm.parse_measure(measure)
        qrels = read_trec_qrels(args.qrels)
        run = read_trec_run(args.run)
    except (FormatError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    values = rm.per_query(run, qrels, measures, rel_level=args.rel_level, complete=args.complete)
    values = values.with_columns(
        label=pl.when(pl.col("k").is_null())
        .then(pl.col("measure"))
        .otherwise(pl.format("{}@{}", "measure", "k"))
    )
    order = {name: i for i, name in enumerate(measures)}
    overall = rm.aggregate(values, intervals=args.json).with_columns(
        label=pl.when(pl.col("k").is_null())
        .then(pl.col("measure"))
        .otherwise(pl.format("{}@{}", "measure", "k"))
    )
    overall = overall.sort(pl.col("label").replace_strict(order, default=len(order)))
    excluded = rm.excluded_queries(qrels, rel_level=args.rel_level)
    if args.json:
        report = {
            row["label"]: {
                "value": row["value"],
                "ci_low": row["ci_low"],
                "ci_high": row["ci_high"],
                "n": row["n"],
            }
            for row in overall.iter_rows(named=True)
        }
        report["excluded_queries"] = {"value": len(excluded), "n": len(excluded)}
        if args.per_query:
            report["per_query"] = {
                query: {row["label"]: row["value"] for row in group.iter_rows(named=True)}
                for (query,), group in values.group_by("query_id", maintain_order=True)
            }
        print(json.dumps(report, indent=2))
        return 0
    if args.per_query:
        for row in values.sort("query_id").iter_rows(named=True):
            print(f"{row['label']:<24}\t{row['query_id']}\t{row['value']:.4f}")
    for row in overall.iter_rows(named=True):
        print(f"{row['label']:<24}\tall\t{row['value']:.4f}")
    print(f"{'num_q':<24}\tall\t{overall['n'].max() if overall.height else 0}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-eval", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    nightly = commands.add_parser("nightly", help="run the nightly evaluation job in-process")
    nightly.add_argument("--partition", help="night to evaluate (YYYY-MM-DD); default today")
    nightly.add_argument(
        "--tag", action="append", nargs=2, metavar=("KEY", "VALUE"), help="Dagster run tag"
    )
    nightly.add_argument("--timings", action="store_true", help="print where the time went")
    nightly.add_argument("--verbose", action="store_true", help="show Dagster's debug log")
    nightly.add_argument("--no-summary", dest="print_summary", action="store_false")
    nightly.set_defaults(handler=command_nightly)

    summary = commands.add_parser("summary", help="print an evaluation run's summary")
    summary.add_argument("eval_run_id", nargs="?", help="default: the latest completed run")
    summary.add_argument("--json", action="store_true")
    summary.set_defaults(handler=command_summary)

    freeze = commands.add_parser("freeze", help="write a snapshot's manifest digest")
    freeze.add_argument("snapshot_dir", type=Path)
    freeze.set_defaults(handler=command_freeze)

    evaluate = commands.add_parser("evaluate-run", help="evaluate a TREC run against TREC qrels")
    evaluate.add_argument("qrels", type=Path)
    evaluate.add_argument("run", type=Path)
    evaluate.add_argument("-m", "--measure", action="append", help="e.g. nDCG@10, P@5, RR, AP")
    evaluate.add_argument("--rel-level", type=int, default=1, help="grade counted relevant")
    evaluate.add_argument("--per-query", action="store_true")
    evaluate.add_argument("--json", action="store_true")
    evaluate.add_argument(
        "-c", "--complete", action="store_true", help="score queries missing from the run as 0"
    )
    evaluate.set_defaults(handler=command_evaluate_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
