"""Reading and deciding about runs: ``summary``, ``history``, ``compare``, ``accept-baseline``,
``suites``."""

import argparse
import json
import os

from rag_eval_pipeline.cli import project
from rag_eval_pipeline.cli.nightly import comparison_line
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.inputs.suites import check_suite_name, list_suites
from rag_eval_pipeline.lib.store.sql import sql_query


def command_summary(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.reporting.summary import format_summary, headline_from_tables
    from rag_eval_pipeline.lib.runs.registry import latest_complete_run

    warehouse = project.existing_warehouse()
    with warehouse.reading() as connection:
        run_id = args.eval_run_id or latest_complete_run(connection, args.suite)
        if run_id is None:
            raise ConfigError(f"{warehouse.path}: no completed evaluation run")
        try:
            headline = headline_from_tables(connection, run_id)
        except KeyError:
            raise ConfigError(f"no evaluation run {run_id!r} in {warehouse.path}") from None
    if args.json:
        print(json.dumps(headline, indent=2, default=str))
    else:
        print(format_summary(headline, warehouse=str(warehouse.path)))
    return 0 if headline["status"] == "complete" else 1


def command_history(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.runs.record import measures_of
    from rag_eval_pipeline.lib.store.warehouse import read_frame

    warehouse = project.existing_warehouse()
    with warehouse.reading() as connection:
        suites = (
            [check_suite_name(args.suite, "--suite")]
            if args.suite
            else [row[0] for row in connection.sql(sql_query("history", "suites")).fetchall()]
        )
        query = sql_query("history", "metric_by_night")
        histories = {
            suite: read_frame(connection, query, {"metric": args.metric, "suite": suite}).to_dicts()
            for suite in suites
        }
        if not any(rows for rows in histories.values()):
            names = [row[0] for row in connection.sql(sql_query("history", "metrics")).fetchall()]
            raise ConfigError(
                f"no runs with {args.metric} in {warehouse.path}; --metric names one of: "
                + ", ".join(names)
            )
    print(
        f"{args.metric} by night (* baseline, R re-baseline run, "
        "| corpus or measure definitions changed: not comparable across)"
    )
    for suite, rows in histories.items():
        if not rows:
            continue
        print(f"suite {suite}:")
        previous = measured = None
        for row in rows:
            run_id, digest, measures = row["eval_run_id"], row["corpus_digest"], measures_of(row)
            if previous is not None and digest != previous:
                print(
                    f"  | corpus changed: {previous[:12]} -> {digest[:12]} "
                    f"(snapshot {row['snapshot_id']})"
                )
            if measured is not None and measures != measured:
                print(f"  | measure definitions changed: {measured} -> {measures}")
            previous, measured = digest, measures
            mark = "R" if row["rebaseline_for"] else ("*" if row["is_baseline"] else " ")
            night, value, low, n = row["partition_date"], row["value"], row["ci_low"], row["n"]
            if row["status"] != "complete":
                print(
                    f"{mark} {night}  incomplete ({row['status']}){'':<14} {run_id}  "
                    f"corpus {digest[:12]}"
                )
                continue
            interval = f"[{low:.3f}, {row['ci_high']:.3f}]" if low is not None else ""
            shown = f"{value:.4f}" if value is not None else "not measured"
            print(f"{mark} {night}  {shown} {interval:<16} n={n:<4} {run_id}  corpus {digest[:12]}")
    return 0


def command_compare(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.runs.baselines import compare_runs
    from rag_eval_pipeline.lib.runs.record import comparability
    from rag_eval_pipeline.lib.runs.registry import run_row

    warehouse = project.existing_warehouse()
    with warehouse.reading() as connection:
        candidate = run_row(connection, args.run_a)
        baseline = run_row(connection, args.run_b)
        for name, run in ((args.run_a, candidate), (args.run_b, baseline)):
            if run is None:
                raise ConfigError(f"no evaluation run {name!r} in {warehouse.path}")
            if not run["complete"]:
                raise ConfigError(f"evaluation run {name} is {run['status']}, not complete")
        comparable, reason = comparability(candidate, baseline, other="run")
        print(f"{args.run_a} against {args.run_b}: {reason}")
        if not comparable:
            return 1
        rows = compare_runs(connection, args.run_a, args.run_b)
    for row in rows.iter_rows(named=True):
        print(comparison_line(row))
    return 0


def command_accept_baseline(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.runs.baselines import accept_baseline

    if not args.reason.strip():
        raise ConfigError("a baseline decision needs a reason (--reason)")
    project.existing_warehouse()
    with project.warehouse_resource().publishing() as connection:
        decision = accept_baseline(
            connection,
            args.eval_run_id,
            kind="decision",
            reason=args.reason,
            requested_by=args.requested_by or os.environ.get("USER") or "unknown",
        )
    print(
        f"{args.eval_run_id} is now the baseline of suite {decision['suite']} "
        f"(previous: {decision['previous']}): {args.reason}"
    )
    return 0


def command_suites(args: argparse.Namespace) -> int:
    registry = project.deployment().suites
    suites = list_suites(registry)
    if not suites:
        raise ConfigError(f"{registry}: no suite files")
    for suite in suites:
        nightly = "nightly" if suite.nightly else "on demand"
        print(f"{suite.name:<20} {nightly:<10} {suite.golden_set}  (corpus {suite.corpus_root})")
    return 0


def add_commands(commands) -> None:
    summary = commands.add_parser("summary", help="print an evaluation run's summary")
    summary.add_argument("eval_run_id", nargs="?", help="default: the latest completed run")
    summary.add_argument("--suite", help="with no run id: the latest completed run of this suite")
    summary.add_argument("--json", action="store_true")
    summary.set_defaults(handler=command_summary)

    history = commands.add_parser(
        "history", help="a metric over nights, corpus and measure-definition changes marked"
    )
    history.add_argument("--metric", default="Success@5", help="e.g. Success@5, faithfulness")
    history.add_argument("--suite", help="default: every suite, each on its own")
    history.set_defaults(handler=command_history)

    compare = commands.add_parser("compare", help="paired comparison of two runs")
    compare.add_argument("run_a", help="candidate eval_run_id")
    compare.add_argument("run_b", help="baseline eval_run_id")
    compare.set_defaults(handler=command_compare)

    accept = commands.add_parser(
        "accept-baseline", help="make a completed run its suite's baseline, with a reason"
    )
    accept.add_argument("eval_run_id")
    accept.add_argument("--reason", required=True)
    accept.add_argument("--requested-by", help="who decides (default: $USER)")
    accept.set_defaults(handler=command_accept_baseline)

    suites = commands.add_parser("suites", help="list the suites and what they evaluate")
    suites.set_defaults(handler=command_suites)
