"""Reading and deciding about runs: ``summary``, ``history``, ``compare``, ``accept-baseline``,
``suites``, ``sql``. (``rebaseline`` is in ``cli.nightly``: it runs a night.)"""

import argparse
import json
import math
import os
import sys

from rag_eval_pipeline.cli import project
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.inputs.suites import (
    check_registry,
    check_suite_name,
    load_suite,
    scan_suites,
)
from rag_eval_pipeline.lib.store.sql import sql_query


def suite_with_runs(connection, name: str) -> bool:
    """Whether ``--suite NAME`` of a command that reads runs names a suite with runs in the
    warehouse. A suite with none must be one of the suite registry (``load_suite``, which names
    the known suites, as ``rag-eval nightly`` does); one with runs may have left it since."""
    check_suite_name(name, "--suite")
    if name in {row[0] for row in connection.sql(sql_query("history", "suites")).fetchall()}:
        return True
    load_suite(project.deployment().suites, name)
    return False


def command_summary(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.reporting.summary import (
        baseline_from_tables,
        format_summary,
        headline_from_tables,
    )
    from rag_eval_pipeline.lib.runs import registry
    from rag_eval_pipeline.lib.runs.registry import latest_complete_run

    warehouse = project.existing_warehouse()
    with warehouse.reading() as connection:
        if args.suite and not args.eval_run_id:
            suite_with_runs(connection, args.suite)
        run_id = args.eval_run_id or latest_complete_run(connection, args.suite)
        if run_id is None:
            of_suite = f" of suite {args.suite}" if args.suite else ""
            raise ConfigError(f"{warehouse.path}: no completed evaluation run{of_suite}")
        identity = registry.run_row(connection, run_id)
        if identity is None:
            raise ConfigError(f"no evaluation run {run_id!r} in {warehouse.path}")
        headline = headline_from_tables(connection, run_id, identity=identity)
        headline["baseline"] = baseline_from_tables(
            connection,
            run_id,
            configured_alpha=lambda: project.regression_alpha_or_none("the comparison is shown"),
            identity=identity,
        )
        newer = (
            []
            if args.eval_run_id
            else connection.execute(
                sql_query("runs", "newer_unfinished"), {"suite": args.suite, "eval_run_id": run_id}
            ).fetchall()
        )
        failed = failed_attempts(connection, identity, args.suite, args.eval_run_id)
    for unfinished, night, status, reason, begun_after in newer:
        # The latest night's completed run is shown; one of a later night or begun after it
        # that did not finish is not passed over in silence (tonight's failed night, say).
        why = f": {reason}" if reason else ""
        relation = "begun after this run" if begun_after else "a later night than this run's"
        print(
            f"warning: {unfinished} (night {night}), {relation}, is {status}{why}", file=sys.stderr
        )
    warned = {row[0] for row in newer}
    for line in (line for eval_run, line in failed if eval_run not in warned):
        print(f"warning: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(headline, indent=2, default=str))
    else:
        print(format_summary(headline, warehouse=str(warehouse.path)))
    return 0 if headline["status"] == "complete" else 1


# The failed attempts a summary names one by one, newest first; the rest are counted.
MAX_FAILED_ATTEMPTS = 5


def failed_attempts(
    connection, shown: dict | None, suite: str | None, asked: str | None
) -> list[tuple[str | None, str]]:
    """``(eval_run_id tag, line)`` of each failed Dagster run of a night (the nightly job, a
    re-baseline, a materialization from the UI) created after the ``shown`` run completed,
    which the warehouse cannot show: with ``asked`` (a run id given), a later attempt of that
    evaluation run that failed (the figures shown are an earlier attempt's); otherwise a failed
    night of the suite (any suite without ``suite``) that no run completed since, including one
    that failed before it had an evaluation run at all (a system that could not be asked for
    its version). A run that completed its evaluation and then failed a gate is not one. So is
    a run still marked started (or not started) whose ``rag-eval`` process on this machine is
    gone: killed, and not yet failed by the next night or the ``abandoned_runs`` sensor. Read
    from the project's Dagster instance; none when there is none."""
    from rag_eval_pipeline.lib.paths import project_root

    home = os.environ.get("DAGSTER_HOME") or str(project_root() / ".dagster_home")
    if shown is None or shown.get("completed_at") is None or not os.path.isdir(home):
        return []
    import datetime as dt

    import dagster as dg

    from rag_eval_pipeline.defs.alerts import failure_reason
    from rag_eval_pipeline.defs.sensors import abandoned_by_its_process
    from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG

    os.environ["DAGSTER_HOME"] = home
    # Runs that look unfinished: one whose process is gone was killed.
    unfinished = (
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    )
    completed = shown["completed_at"].replace(tzinfo=dt.UTC)
    found, more = [], 0
    with dg.DagsterInstance.get() as instance:
        records = instance.get_run_records(
            dg.RunsFilter(
                statuses=[
                    dg.DagsterRunStatus.FAILURE,
                    dg.DagsterRunStatus.CANCELED,
                    *unfinished,
                ],
                created_after=completed,
            )
        )
        for record in sorted(records, key=lambda record: record.create_timestamp, reverse=True):
            run = record.dagster_run
            gone = abandoned_by_its_process(run) if run.status in unfinished else None
            if run.status in unfinished and gone is None:
                continue  # still running (or another machine's: its own sweep fails it)
            night = run.tags.get("dagster/partition/night")
            of_suite = run.tags.get("dagster/partition/suite")
            eval_run = run.tags.get(EVAL_RUN_TAG)
            if of_suite is None or run.job_name == "run_comparison_job":
                continue  # not a night's evaluation (a comparison's failure is a gate's)
            if asked is not None and eval_run != asked:
                continue
            if asked is None and suite is not None and of_suite != suite:
                continue
            ended = record.end_time or record.create_timestamp.timestamp()
            since = connection.execute(
                sql_query("runs", "completed_by_or_since"),
                {
                    "run": run.run_id,
                    "suite": of_suite,
                    "night": night,
                    "ended": dt.datetime.fromtimestamp(ended, dt.UTC).replace(tzinfo=None),
                },
            ).fetchone()[0]
            if since:
                continue
            if len(found) == MAX_FAILED_ATTEMPTS:
                more += 1  # counted, its event log not read
                continue
            if run.status in unfinished:
                why = f"{gone}; still marked {run.status.value.lower()} until it is swept"
            else:  # its failed steps, or the message its run failed with (the sweep's)
                why = failure_reason(instance, run.run_id)
            what = (
                "a later attempt of this evaluation run"
                if asked is not None
                else f"night {night} of suite {of_suite}"
            )
            found.append(
                (
                    eval_run,
                    f"{what} (Dagster run {run.run_id}, after this run completed) did not finish: "
                    f"{why}",
                )
            )
    if more:
        found.append((None, f"{more} earlier failed attempt(s) after this run completed"))
    return found


def history_mark(row: dict) -> str:
    """The two-character mark of a history row: ``*`` the suite's current baseline, ``+`` a
    former baseline, then ``R`` a re-baseline run."""
    accepted = "*" if row["is_current_baseline"] else "+" if row["is_baseline"] else " "
    return accepted + ("R" if row["rebaseline_for"] else " ")


def system_label(run: dict) -> str:
    """``system <id> <config digest, 12>`` of an ``eval_runs`` row, with ``(version <v>)`` when
    the system reported one (``summary.system_version``)."""
    from rag_eval_pipeline.lib.reporting.summary import system_version

    version = system_version(run)
    label = f"system {run['system_id']} {run['system_config_digest'][:12]}"
    return f"{label} (version {version})" if version else label


def command_history(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.runs.record import run_changes
    from rag_eval_pipeline.lib.store.warehouse import read_frame

    warehouse = project.existing_warehouse()
    with warehouse.reading() as connection:
        if args.suite:
            if not suite_with_runs(connection, args.suite):
                raise ConfigError(f"{warehouse.path}: no evaluation run of suite {args.suite}")
            suites = [args.suite]
        else:
            suites = [row[0] for row in connection.sql(sql_query("history", "suites")).fetchall()]
        names = [row[0] for row in connection.sql(sql_query("history", "metrics")).fetchall()]
        if args.metric not in names:
            raise ConfigError(
                f"no runs with {args.metric} in {warehouse.path}; --metric names one of: "
                + ", ".join(names)
            )
        query = sql_query("history", "metric_by_night")
        histories = {
            suite: read_frame(connection, query, {"metric": args.metric, "suite": suite}).to_dicts()
            for suite in suites
        }
    shown = {
        suite: [row for row in rows if row["measured"] or not row["complete"]]
        for suite, rows in histories.items()
    }
    left_out = {
        suite: sum(row["complete"] and not row["measured"] for row in rows)
        for suite, rows in histories.items()
    }
    if args.suite and not shown[args.suite]:
        raise ConfigError(
            f"{args.metric} was not measured in any run of suite {args.suite}: none of its "
            f"{left_out[args.suite]} completed run(s) in {warehouse.path} has a figure of it"
        )
    print(
        f"{args.metric} by night (* current baseline, + former baseline, R re-baseline run; "
        "| corpus, golden set or measure definitions changed: not comparable across)"
    )
    for suite, rows in shown.items():
        print(f"suite {suite}:")
        previous = None
        for row in rows:
            run_id, digest = row["eval_run_id"], row["corpus_digest"]
            for what, old, new in run_changes(previous, row) if previous is not None else []:
                if what == "measure definitions":
                    print(f"  | {what} changed: {old} -> {new}")
                else:
                    snapshot = f" (snapshot {row['snapshot_id']})" if what == "corpus" else ""
                    print(f"  | {what} changed: {old[:12]} -> {new[:12]}{snapshot}")
            previous = row
            mark = history_mark(row)
            night, value, low, n = row["partition_date"], row["value"], row["ci_low"], row["n"]
            # Which system: several on one night (a changed assistant beside the reference)
            # are told apart by it, as rag-eval compare needs, and by the version it reported.
            system = system_label(row)
            if row["status"] != "complete":
                print(
                    f"{mark} {night}  incomplete ({row['status']}){'':<14} {run_id}  "
                    f"corpus {digest[:12]}  {system}"
                )
                continue
            interval = f"[{low:.3f}, {row['ci_high']:.3f}]" if low is not None else ""
            shown_value = f"{value:.4f}" if value is not None else "not measured"
            print(
                f"{mark} {night}  {shown_value} {interval:<16} n={n:<4} {run_id}  "
                f"corpus {digest[:12]}  {system}"
            )
        if left_out[suite]:
            print(
                f"  ({left_out[suite]} completed run(s) left out: {args.metric} was not "
                "measured in them)"
            )
    return 0


def command_compare(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.metrics.comparison import row_verdict
    from rag_eval_pipeline.lib.reporting.summary import comparison_line
    from rag_eval_pipeline.lib.runs.baselines import comparability_noting_judges, compare_runs
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
        comparable, reason = comparability_noting_judges(candidate, baseline, other="run")
        print(f"{args.run_a} against {args.run_b}: {reason}")
        # What was measured on each side, so a change that did not reach the service (the old
        # version still answering) shows before any delta is read.
        for side, run in (("candidate", candidate), ("baseline", baseline)):
            print(f"  {side:<9}  {run['eval_run_id']}  {system_label(run)}")
        if candidate["system_config_digest"] == baseline["system_config_digest"]:
            print("  (the same system configuration on both sides)")
        if not comparable:
            return 1
        rows = compare_runs(connection, args.run_a, args.run_b)
    alpha = project.regression_alpha_or_none("the metrics are shown")
    for row in rows.iter_rows(named=True):
        marked = row_verdict(row, alpha)
        print(comparison_line({**row, "verdict": marked}))
    return 0


def command_accept_baseline(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.runs.baselines import accept_baseline, newest_night
    from rag_eval_pipeline.lib.runs.record import comparability
    from rag_eval_pipeline.lib.runs.registry import run_row

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
        run = run_row(connection, args.eval_run_id)
        newest = newest_night(connection, run["suite"])
    if decision is None:
        print(
            f"{args.eval_run_id} is already the baseline of suite {run['suite']}: nothing recorded"
        )
        return 0
    print(
        f"{args.eval_run_id} is now the baseline of suite {decision['suite']} "
        f"(previous: {decision['previous']}): {args.reason}"
    )
    comparable, reason = comparability(newest, run)
    if not comparable:
        print(
            f"warning: every later night measured like the newest of suite {run['suite']} "
            f"({newest['partition_date']}, run {newest['eval_run_id']}) will be skipped by the "
            f"comparison guard, not compared with this baseline: {reason}",
            file=sys.stderr,
        )
    return 0


def command_suites(args: argparse.Namespace) -> int:
    """Every suite that can be used; then each bad suite file, one ``error:`` line each, and
    status 2, so one bad file neither hides the others nor goes unnoticed by a script."""
    registry = project.deployment().suites
    check_registry(registry)
    suites, problems = scan_suites(registry)
    if not suites and not problems:
        raise ConfigError(f"{registry}: no suite files")
    missing = []
    for suite in suites:
        nightly = "nightly" if suite.nightly else "on demand"
        print(f"{suite.name:<20} {nightly:<10} {suite.golden_set}  (corpus {suite.corpus_root})")
        missing += suite_path_problems(suite)
    sys.stdout.flush()
    for problem in [*map(str, problems), *missing]:
        print(f"error: {problem}", file=sys.stderr)
    return 2 if problems or missing else 0


def suite_path_problems(suite) -> list[str]:
    """What a suite file names that is not there: its golden set, its corpus root (a folder
    holding at least one snapshot folder), its human labels or trace store; each problem names
    the suite file, the field and the path."""
    from rag_eval_pipeline.lib.inputs.corpus import snapshot_folders

    where = suite.source or suite.name
    problems = []
    if not suite.golden_set.is_file():
        problems.append(f"{where}: golden_set {suite.golden_set} does not exist")
    if not suite.corpus_root.is_dir():
        problems.append(f"{where}: corpus_root {suite.corpus_root} is not a folder")
    elif suite.snapshot != "auto" and not (suite.corpus_root / suite.snapshot).is_dir():
        problems.append(f"{where}: snapshot {suite.corpus_root / suite.snapshot} does not exist")
    elif not snapshot_folders(suite.corpus_root):
        problems.append(
            f"{where}: corpus_root {suite.corpus_root} holds no snapshot folder "
            "(<YYYY-MM-DD>/documents/)"
        )
    else:
        # A dated folder with neither is no snapshot, yet the newest on or before a night is
        # the one that night takes; a folder of a delta snapshot holds its manifest alone.
        problems.extend(
            f"{where}: snapshot folder {folder} holds neither documents/ nor manifest.json"
            for _, folder in snapshot_folders(suite.corpus_root)
            if not (folder / "documents").is_dir() and not (folder / "manifest.json").is_file()
        )
    for field in ("human_labels", "trace_store"):
        path = getattr(suite, field)
        if path is not None and not path.exists():
            problems.append(f"{where}: {field} {path} does not exist")
    return problems


def command_sql(args: argparse.Namespace) -> int:
    """Run read-only SQL on the published warehouse and print the result: a table, or CSV with
    ``--csv`` (every row and column either way). The connection is read-only, so a statement
    that would write fails, as does bad SQL: one ``error:`` line naming the warehouse, status 2."""
    import duckdb
    import polars as pl

    query = sys.stdin.read() if args.query == "-" else args.query
    warehouse = project.existing_warehouse()
    with warehouse.reading() as connection:
        try:
            relation = connection.sql(query)
            frame = relation.pl() if relation is not None else None
        except duckdb.Error as error:
            raise ConfigError(f"{warehouse.path}: {' '.join(str(error).split())}") from None
        except BaseException as error:  # Polars has no type for a DuckDB INTERVAL (it panics)
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
            raise ConfigError(
                f"{warehouse.path}: a column of the result cannot be printed "
                f"({' '.join(str(error).split())[:200]}): cast it, e.g. epoch(completed_at - "
                "started_at) for an INTERVAL"
            ) from None
    if frame is None:
        return 0
    if args.csv:
        sys.stdout.write(_flat(frame).write_csv())
        return 0
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        fmt_str_lengths=120,
        tbl_width_chars=10_000,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        tbl_hide_dtype_separator=True,
    ):
        print(frame)
    return 0


def _flat(frame):
    """``frame`` with each list, array or struct column (``cited_ids``, ``context_ids``) as
    JSON text, which CSV can hold: ``["a#s1", "a#s2"]``; a null stays an empty field, and a NaN
    or infinite number inside is written as ``null`` (JSON has no such numbers)."""
    import polars as pl

    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    return frame.with_columns(
        pl.Series(
            name,
            [
                None
                if value is None
                else json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, default=str)
                for value in frame[name].to_list()
            ],
            dtype=pl.String,
        )
        for name in nested
    )


def _finite(value):
    """``value`` (a list, dict or scalar) with every NaN or infinite float replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(item) for item in value]
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value


def add_commands(commands) -> None:
    summary = commands.add_parser("summary", help="print an evaluation run's summary")
    summary.add_argument("eval_run_id", nargs="?", help="default: the latest completed run")
    summary.add_argument("--suite", help="with no run id: the latest completed run of this suite")
    summary.add_argument(
        "--json", action="store_true", help="print the run's headline as JSON instead of text"
    )
    summary.set_defaults(handler=command_summary)

    history = commands.add_parser(
        "history",
        help="a metric over nights, baselines and corpus, golden-set and measure-definition "
        "changes marked",
    )
    history.add_argument("--metric", default="Success@5", help="e.g. Success@5, faithfulness")
    history.add_argument("--suite", help="default: every suite, each on its own")
    history.set_defaults(handler=command_history)

    compare = commands.add_parser(
        "compare",
        help="paired comparison of two runs: the candidate first, then the baseline",
        description="Paired comparison of a candidate run with a baseline run on the same "
        "golden items: each metric's difference (candidate minus baseline), its interval and "
        "p-value. Both runs must be complete and comparable (same corpus digest, golden set "
        "and measure definitions).",
    )
    compare.add_argument("run_a", metavar="candidate", help="the candidate's eval_run_id")
    compare.add_argument("run_b", metavar="baseline", help="the baseline's eval_run_id")
    compare.set_defaults(handler=command_compare)

    accept = commands.add_parser(
        "accept-baseline", help="make a completed run its suite's baseline, with a reason"
    )
    accept.add_argument("eval_run_id", help="the completed run to make the baseline")
    accept.add_argument(
        "--reason", required=True, help="why this run becomes the baseline (recorded with it)"
    )
    accept.add_argument("--requested-by", help="who decides (default: $USER)")
    accept.set_defaults(handler=command_accept_baseline)

    suites = commands.add_parser("suites", help="list the suites and what they evaluate")
    suites.set_defaults(handler=command_suites)

    sql = commands.add_parser(
        "sql", help="run read-only SQL on the published warehouse (no DuckDB install needed)"
    )
    sql.add_argument("query", help="the SQL, e.g. \"SELECT * FROM eval_runs\" ('-': stdin)")
    sql.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    sql.set_defaults(handler=command_sql)
