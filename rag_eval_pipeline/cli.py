"""The ``rag-eval`` command line: what is not an asset materialization.

- ``rag-eval nightly [--partition DATE]``: run the ``nightly_eval`` job in-process against the
  Dagster instance in ``DAGSTER_HOME`` and print the summary;
- ``rag-eval rebaseline --partition DATE --reason WHY``: a night tagged for re-baselining;
- ``rag-eval accept-baseline EVAL_RUN_ID --reason WHY``: a recorded baseline decision;
- ``rag-eval history [--metric M]`` and ``rag-eval compare RUN_A RUN_B``;
- ``rag-eval summary [EVAL_RUN_ID]``: print a run's summary from the warehouse (latest by default);
- ``rag-eval freeze SNAPSHOT_DIR``: write the snapshot's manifest digest;
- ``rag-eval import trec|beir|squad ...``: a public collection as a snapshot plus golden set;
- ``rag-eval export-run EVAL_RUN_ID FILE``: a run's retrieval as a TREC run file;
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


def _run_job(
    defs, instance, job_name: str, partition: str, *, run_config=None, tags=None, verbose=False
):
    """Execute one job in-process, quiet on the console unless verbose."""
    log_level = "DEBUG" if verbose else "WARNING"
    config = {**(run_config or {}), "loggers": {"console": {"config": {"log_level": log_level}}}}
    return defs.resolve_job_def(job_name).execute_in_process(
        run_config=config,
        partition_key=partition,
        instance=instance,
        raise_on_error=False,
        tags=tags or {},
    )


def _report_failure(result) -> None:
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            cause = (
                error.cause.message if error and error.cause else (error.message if error else "")
            )
            print(f"step {event.step_key} failed: {cause.strip()}", file=sys.stderr)


def _failed_checks(result) -> tuple[list[str], list[str]]:
    """Messages of failed ERROR checks (gates that fail the night) and of WARN checks."""
    errors, warnings_ = [], []
    for evaluation in result.get_asset_check_evaluations():
        if evaluation.passed:
            continue
        entry = evaluation.metadata.get("message") or evaluation.metadata.get("reason")
        text = entry.value if entry is not None else (evaluation.description or "")
        line = f"{evaluation.asset_key.to_user_string()}/{evaluation.check_name}: {text}"
        if evaluation.severity.value == "ERROR":
            errors.append(line)
        else:
            warnings_.append(line)
    return errors, warnings_


def _summary_metadata(result) -> dict | None:
    from rag_eval_pipeline.defs.comparison import metadata_values

    materializations = result.asset_materializations_for_node("eval_summary")
    return metadata_values(materializations[-1].metadata) if materializations else None


def command_nightly(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    import dagster as dg

    from rag_eval_pipeline.definitions import defs
    from rag_eval_pipeline.defs.comparison import guard_requests
    from rag_eval_pipeline.defs.partitions import TIMEZONE
    from rag_eval_pipeline.lib import warehouse
    from rag_eval_pipeline.lib.summary import format_summary, headline_from_tables

    loaded = time.perf_counter()
    # The console shows warnings and errors; every event stays in the Dagster instance and UI.
    warnings.filterwarnings("ignore", message=".*is currently in beta")
    partition = args.partition or dt.datetime.now(ZoneInfo(TIMEZONE)).date().isoformat()
    instance = (
        dg.DagsterInstance.get()
        if os.environ.get("DAGSTER_HOME")
        else dg.DagsterInstance.ephemeral()
    )
    run_config = {}
    if getattr(args, "config", None):
        import yaml

        run_config = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
    result = _run_job(
        defs,
        instance,
        "nightly_eval",
        partition,
        run_config=run_config,
        tags=dict(args.tag or []),
        verbose=args.verbose,
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
        _report_failure(result)
        return 1
    summary = _summary_metadata(result)
    if args.print_summary and summary:
        with warehouse.connect(_warehouse_path(), read_only=True) as connection:
            print(format_summary(headline_from_tables(connection, summary["eval_run_id"])))
    failed, warned = _failed_checks(result)
    # The comparison guard, as the sensor would run it under the daemon: compare, re-baseline
    # (then compare), or say why not.
    while args.guard and summary:
        requests, reason = guard_requests(summary)
        print(f"\ncomparison guard: {reason}")
        if not requests:
            break
        request = requests[0]
        print(f"running {request.job_name} for {request.partition_key}")
        follow_up = _run_job(
            defs,
            instance,
            request.job_name,
            request.partition_key,
            run_config=request.run_config,
            tags=dict(request.tags),
            verbose=args.verbose,
        )
        if not follow_up.success:
            _report_failure(follow_up)
            return 1
        more_failed, more_warned = _failed_checks(follow_up)
        failed += more_failed
        warned += more_warned
        if request.job_name == "run_comparison_job":
            candidate = request.run_config["ops"]["run_comparison"]["config"]["candidate_run_id"]
            with warehouse.connect(_warehouse_path(), read_only=True) as connection:
                print(format_comparison(connection, candidate))
            break
        summary = _summary_metadata(follow_up)
    for line in warned:
        print(f"warning: {line}", file=sys.stderr)
    if failed:
        print("\nrelease gates failed:", file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


def comparison_line(row: dict) -> str:
    """One compared metric: both values, the delta with its interval, the p-value and test."""
    return (
        f"  {row['metric']:<16} {row['candidate_value']:.4f} vs {row['baseline_value']:.4f}  "
        f"delta {row['delta']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]  "
        f"p={row['p_value']:.4f} ({row['test']}, n={row['n']})"
    )


def format_comparison(connection, candidate_run_id: str) -> str:
    """The comparison rows of one candidate run as a table."""
    rows = connection.sql(
        "SELECT baseline_run_id, metric, candidate_value, baseline_value, delta, ci_low, ci_high, "
        "p_value, test, n, comparable, reason FROM run_comparisons "
        "WHERE candidate_run_id = $run ORDER BY metric",
        params={"run": candidate_run_id},
    ).pl()
    if not rows.height:
        return f"no comparison recorded for {candidate_run_id}"
    first = rows.row(0, named=True)
    lines = [f"{candidate_run_id} against baseline {first['baseline_run_id']}: {first['reason']}"]
    for row in rows.filter(rows["candidate_value"].is_not_null()).iter_rows(named=True):
        lines.append(comparison_line(row))
    return "\n".join(lines)


def command_rebaseline(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.run_identity import (
        REBASELINE_REASON_TAG,
        REBASELINE_TAG,
        REQUESTED_BY_TAG,
    )

    if not args.reason.strip():
        print("error: a re-baseline needs a reason (--reason)", file=sys.stderr)
        return 2
    requested_by = args.requested_by or os.environ.get("USER") or "unknown"
    tags = [
        [REBASELINE_TAG, "true"],
        [REBASELINE_REASON_TAG, args.reason],
        [REQUESTED_BY_TAG, requested_by],
    ]
    nightly_args = argparse.Namespace(
        partition=args.partition,
        config=None,
        tag=tags,
        timings=False,
        verbose=args.verbose,
        print_summary=False,
        guard=True,
    )
    return command_nightly(nightly_args)


def command_accept_baseline(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib import baselines, warehouse

    if not args.reason.strip():
        print("error: a baseline decision needs a reason (--reason)", file=sys.stderr)
        return 2
    with warehouse.connect(_warehouse_path()) as connection:
        run = baselines.run_identity(connection, args.eval_run_id)
        if run is None or run["completed_at"] is None:
            print(f"error: no completed evaluation run {args.eval_run_id!r}", file=sys.stderr)
            return 2
        decision = baselines.accept_baseline(
            connection,
            args.eval_run_id,
            kind="decision",
            reason=args.reason,
            requested_by=args.requested_by or os.environ.get("USER") or "unknown",
        )
    print(
        f"{args.eval_run_id} is now the baseline of {decision['golden_set']} "
        f"(previous: {decision['previous_baseline_run_id']}): {args.reason}"
    )
    return 0


def command_history(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib import warehouse

    path = _warehouse_path()
    if not path.is_file():
        print(f"{path}: no warehouse yet; run 'make nightly' first", file=sys.stderr)
        return 2
    with warehouse.connect(path, read_only=True) as connection:
        history = connection.sql(
            "SELECT r.partition_date, r.eval_run_id, r.snapshot_id, r.corpus_digest, r.is_baseline, "
            "r.rebaseline_for, m.value, m.ci_low, m.ci_high, m.n "
            "FROM eval_runs r JOIN retrieval_metrics m ON m.eval_run_id = r.eval_run_id "
            "AND m.scope = 'overall' AND m.measure = $metric "
            "WHERE r.completed_at IS NOT NULL AND ($golden = '' OR r.golden_set = $golden) "
            "UNION ALL "
            "SELECT r.partition_date, r.eval_run_id, r.snapshot_id, r.corpus_digest, r.is_baseline, "
            "r.rebaseline_for, m.value, m.ci_low, m.ci_high, m.n "
            "FROM eval_runs r JOIN generation_metrics m ON m.eval_run_id = r.eval_run_id "
            "AND m.scope = 'overall' AND m.scope_value = 'answerable' AND m.metric = $metric "
            "WHERE r.completed_at IS NOT NULL AND ($golden = '' OR r.golden_set = $golden) "
            "ORDER BY 1, 2",
            params={"metric": args.metric, "golden": args.golden_set or ""},
        ).fetchall()
    if not history:
        print(f"no completed runs with {args.metric}", file=sys.stderr)
        return 2
    print(f"{args.metric} by night (* baseline, R re-baseline run, | corpus changed)")
    previous = None
    for (
        night,
        run_id,
        snapshot,
        digest,
        is_baseline,
        rebaseline_for,
        value,
        low,
        high,
        n,
    ) in history:
        if previous is not None and digest != previous:
            print(f"  | corpus changed: {previous[:12]} -> {digest[:12]} (snapshot {snapshot})")
        previous = digest
        mark = "R" if rebaseline_for else ("*" if is_baseline else " ")
        interval = f"[{low:.3f}, {high:.3f}]" if low is not None else ""
        print(f"{mark} {night}  {value:.4f} {interval:<16} n={n:<4} {run_id}  corpus {digest[:12]}")
    return 0


def command_compare(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib import baselines, warehouse
    from rag_eval_pipeline.lib.run_identity import comparability

    with warehouse.connect(_warehouse_path(), read_only=True) as connection:
        candidate = baselines.run_identity(connection, args.run_a)
        baseline = baselines.run_identity(connection, args.run_b)
        for name, run in ((args.run_a, candidate), (args.run_b, baseline)):
            if run is None:
                print(f"error: no evaluation run {name!r} in the warehouse", file=sys.stderr)
                return 2
        comparable, reason = comparability(candidate, baseline)
        print(f"{args.run_a} against {args.run_b}: {reason}")
        if not comparable:
            return 1
        rows = baselines.compare_runs(connection, args.run_a, args.run_b)
    for row in rows.iter_rows(named=True):
        print(comparison_line(row))
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


def _grade_map(text: str | None) -> dict[int, int] | None:
    if not text:
        return None
    pairs = [part.split(":") for part in text.split(",")]
    return {int(source): int(target) for source, target in pairs}


def command_import(args: argparse.Namespace) -> int:
    import datetime as dt_

    from rag_eval_pipeline.lib import formats
    from rag_eval_pipeline.lib.corpus import CorpusError
    from rag_eval_pipeline.lib.golden import GoldenSetError

    options = {
        "labelled_against": args.labelled_against,
        "effective_date": dt_.date.fromisoformat(args.effective_date),
    }
    if args.format == "trec" and not (args.queries and args.qrels):
        print("error: import trec needs --queries and --qrels", file=sys.stderr)
        return 2
    try:
        if args.format == "trec":
            report = formats.import_trec(
                args.source,
                args.queries,
                args.qrels,
                args.snapshot_dir,
                args.golden,
                grade_map=_grade_map(args.grade_map),
                **options,
            )
        elif args.format == "beir":
            report = formats.import_beir(
                args.source,
                args.snapshot_dir,
                args.golden,
                qrels_path=args.qrels,
                grade_map=_grade_map(args.grade_map),
                **options,
            )
        else:
            report = formats.import_squad(args.source, args.snapshot_dir, args.golden, **options)
    except (formats.FormatError, CorpusError, GoldenSetError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = {
        "snapshot_dir": str(report.snapshot_dir),
        "golden_set": str(report.golden_path),
        "corpus_digest": report.corpus_digest,
        "documents": report.documents,
        "items": report.items,
        "answerable": report.answerable,
        "no_answer": report.no_answer,
        "skipped_queries": report.skipped_queries,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"{report.documents} documents -> {report.snapshot_dir} (digest {report.corpus_digest}); "
            f"{report.items} golden items ({report.answerable} answerable, {report.no_answer} "
            f"no-answer, {report.skipped_queries} queries skipped) -> {report.golden_path}"
        )
    return 0


def command_export_run(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib import warehouse
    from rag_eval_pipeline.lib.formats import FormatError, write_trec_run

    with warehouse.connect(_warehouse_path(), read_only=True) as connection:
        # Passage ids by default; with --doc-ids, documents ranked by their best passage (the
        # ids an imported collection's own qrels use).
        query = (
            "SELECT r.item_id AS query_id, p.doc_id, max(r.score) AS score "
            "FROM retrieval_results r JOIN eval_runs e USING (eval_run_id) "
            "JOIN corpus_passages p ON p.corpus_digest = e.corpus_digest "
            "AND p.passage_id = r.passage_id WHERE r.eval_run_id = $run GROUP BY ALL"
            if args.doc_ids
            else "SELECT item_id AS query_id, passage_id AS doc_id, score FROM retrieval_results "
            "WHERE eval_run_id = $run"
        )
        run = connection.sql(query, params={"run": args.eval_run_id}).pl()
    if not run.height:
        print(f"error: no retrieval results for run {args.eval_run_id!r}", file=sys.stderr)
        return 2
    try:
        write_trec_run(run, args.output, args.tag or "rag_eval")
    except FormatError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{run.height} lines for {run['query_id'].n_unique()} queries -> {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-eval", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    nightly = commands.add_parser("nightly", help="run the nightly evaluation job in-process")
    nightly.add_argument("--partition", help="night to evaluate (YYYY-MM-DD); default today")
    nightly.add_argument(
        "--tag", action="append", nargs=2, metavar=("KEY", "VALUE"), help="Dagster run tag"
    )
    nightly.add_argument(
        "--config", help="run configuration YAML (e.g. resources.system.config.evidence_threshold)"
    )
    nightly.add_argument("--timings", action="store_true", help="print where the time went")
    nightly.add_argument("--verbose", action="store_true", help="show Dagster's debug log")
    nightly.add_argument("--no-summary", dest="print_summary", action="store_false")
    nightly.add_argument(
        "--no-guard", dest="guard", action="store_false", help="skip the comparison guard"
    )
    nightly.set_defaults(handler=command_nightly)

    rebaseline = commands.add_parser(
        "rebaseline", help="run a night tagged for re-baselining, then the rebaseline job"
    )
    rebaseline.add_argument("--partition", help="night (YYYY-MM-DD); default today")
    rebaseline.add_argument("--reason", required=True, help="why the corpus changed")
    rebaseline.add_argument("--requested-by", help="who asks (default: $USER)")
    rebaseline.add_argument("--verbose", action="store_true")
    rebaseline.set_defaults(handler=command_rebaseline)

    accept = commands.add_parser(
        "accept-baseline", help="make a completed run its golden set's baseline, with a reason"
    )
    accept.add_argument("eval_run_id")
    accept.add_argument("--reason", required=True)
    accept.add_argument("--requested-by", help="who decides (default: $USER)")
    accept.set_defaults(handler=command_accept_baseline)

    history = commands.add_parser("history", help="a metric over nights, corpus changes marked")
    history.add_argument("--metric", default="Success@5", help="e.g. Success@5, faithfulness")
    history.add_argument("--golden-set", help="default: every golden set")
    history.set_defaults(handler=command_history)

    compare = commands.add_parser("compare", help="paired comparison of two runs")
    compare.add_argument("run_a", help="candidate eval_run_id")
    compare.add_argument("run_b", help="baseline eval_run_id")
    compare.set_defaults(handler=command_compare)

    summary = commands.add_parser("summary", help="print an evaluation run's summary")
    summary.add_argument("eval_run_id", nargs="?", help="default: the latest completed run")
    summary.add_argument("--json", action="store_true")
    summary.set_defaults(handler=command_summary)

    freeze = commands.add_parser("freeze", help="write a snapshot's manifest digest")
    freeze.add_argument("snapshot_dir", type=Path)
    freeze.set_defaults(handler=command_freeze)

    importer = commands.add_parser(
        "import", help="import TREC-layout, BEIR or SQuAD 2.0 data as a snapshot + golden set"
    )
    importer.add_argument("format", choices=["trec", "beir", "squad"])
    importer.add_argument(
        "source", help="trec: docs.jsonl; beir: the collection folder; squad: the SQuAD JSON"
    )
    importer.add_argument("--queries", help="trec: queries.jsonl")
    importer.add_argument("--qrels", help="trec: qrels (TREC or TSV); beir: qrels TSV")
    importer.add_argument("--snapshot-dir", required=True, help="corpus_snapshots/<YYYY-MM-DD>")
    importer.add_argument("--golden", required=True, help="golden-set JSONL to write")
    importer.add_argument("--labelled-against", help="default: the frozen corpus digest")
    importer.add_argument("--effective-date", default="2026-01-01")
    importer.add_argument("--grade-map", help="source:target grades, e.g. 4:3,3:2,2:2,1:2")
    importer.add_argument("--json", action="store_true")
    importer.set_defaults(handler=command_import)

    export = commands.add_parser("export-run", help="write a run's retrieval as a TREC run file")
    export.add_argument("eval_run_id")
    export.add_argument("output", type=Path)
    export.add_argument("--tag", help="run tag (default rag_eval)")
    export.add_argument(
        "--doc-ids", action="store_true", help="document ids (best passage) instead of passage ids"
    )
    export.set_defaults(handler=command_export_run)

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
