"""Inputs and files: ``freeze``, ``import`` (a collection as a suite of its own), ``export-run``,
``evaluate-run``, and the listing of ``rag-eval suites``."""

import argparse
import datetime as dt
import json
from pathlib import Path

from rag_eval_pipeline.cli import project
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.inputs.suites import (
    Suite,
    check_suite_name,
    scan_suites,
    suite_file,
    write_suite,
)
from rag_eval_pipeline.lib.paths import project_path
from rag_eval_pipeline.lib.store.sql import sql_query

DEFAULT_MEASURES = ["nDCG@5", "nDCG@10", "P@5", "R@5", "RR", "AP"]


def refuse_folder(path: Path) -> None:
    """A file argument that names a folder, refused as one (the readers would say the file
    does not exist, a write would fail with IsADirectoryError)."""
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a file")


def output_file(path: Path) -> Path:
    """A file to write: not a folder, and in a folder that exists."""
    refuse_folder(path)
    folder = path.parent
    if not folder.is_dir():
        state = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(f"{path}: cannot write it, {folder} {state}")
    return path


def command_freeze(args: argparse.Namespace) -> int:
    import sys

    from rag_eval_pipeline.lib.inputs.corpus import CorpusError, freeze, read_manifest

    if not args.snapshot_dir.is_dir():
        state = "is a file, not a" if args.snapshot_dir.exists() else "no such"
        raise ConfigError(f"{args.snapshot_dir}: {state} snapshot folder")
    try:
        earlier = read_manifest(Path(args.snapshot_dir))
    except CorpusError:  # never frozen (or an unreadable manifest, which the freeze replaces)
        earlier = {}
    # A manifest naming another snapshot came with a copy of that snapshot's folder (the way a
    # new dated folder is begun): this folder was never frozen, so nothing measured on it moves.
    copied_from = earlier.get("snapshot_id")
    if copied_from == Path(args.snapshot_dir).absolute().name:
        before, copied_from = earlier.get("corpus_digest"), None
    else:
        before = None
    report = freeze(args.snapshot_dir, store=not args.no_store)
    manifest = report.manifest
    for problem in report.warnings:
        print(f"warning: {problem}", file=sys.stderr)
    if before is not None and before != manifest["corpus_digest"]:
        print(
            f"warning: {manifest['snapshot_id']} was frozen before with corpus digest "
            f"{before[:12]}; it is now {manifest['corpus_digest'][:12]}: runs measured on "
            f"{before[:12]} no longer match this folder (for a change to the library, freeze a "
            "new dated folder instead)",
            file=sys.stderr,
        )
    if copied_from:
        print(
            f"note: the manifest.json copied from {copied_from} was replaced by this folder's own",
            file=sys.stderr,
        )
    print(
        f"{manifest['snapshot_id']}: {manifest['document_count']} documents, "
        f"{manifest['passage_count']} passages, digest {manifest['corpus_digest']}"
    )
    if not args.no_store:
        base = manifest.get("base")
        parsed = (
            f"all {report.parsed} documents parsed"
            if report.parsed == manifest["document_count"]
            else f"{report.parsed} documents parsed (the others were in the parse cache)"
        )
        listed = "" if base is None else f"; manifest lists the changes from {base['snapshot_id']}"
        print(f"  {parsed}, {report.stored_bytes:,} bytes newly stored{listed}")
    return 0


# evaluate-run is one pass over two files: Polars' allocator (jemalloc) returns freed pages to
# the system at once instead of after half a second to a second (Polars' own setting, which it
# puts before this one), so the memory of the run frame, dropped once it is ranked, is not still
# held while DuckDB computes the measures (1,000,000 lines: 187 MB peak instead of 258 MB, the
# time within noise). It is read when Polars loads, which importing the command line does not
# do; a setting made by the user is kept.
EVALUATE_RUN_ALLOCATOR = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")


def command_evaluate_run(args: argparse.Namespace) -> int:
    import os
    import sys

    if "polars" not in sys.modules:
        os.environ.setdefault(*EVALUATE_RUN_ALLOCATOR)
    import polars as pl

    from rag_eval_pipeline.lib.inputs.formats import read_trec_qrels, read_trec_run
    from rag_eval_pipeline.lib.metrics import retrieval as rm

    measures = args.measure or DEFAULT_MEASURES
    for measure in measures:
        try:
            rm.parse_measure(measure)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    refuse_folder(args.qrels)
    refuse_folder(args.run)
    qrels = read_trec_qrels(args.qrels)
    # Only the ranked rows outlive this line: the run frame is freed before the measures.
    ranked = rm.rank_run(read_trec_run(args.run), qrels, measures, rel_level=args.rel_level)
    label = (
        pl.when(pl.col("k").is_null())
        .then(pl.col("measure"))
        .otherwise(pl.format("{}@{}", "measure", "k"))
    )
    values = ranked.measures(complete=args.complete).with_columns(label=label)
    order = {name: i for i, name in enumerate(measures)}
    overall = rm.aggregate(values, intervals=args.json).with_columns(label=label)
    overall = overall.sort(pl.col("label").replace_strict(order, default=len(order)))
    excluded = rm.excluded_queries(qrels, rel_level=args.rel_level)
    if args.json:
        report = {
            row["label"]: {key: row[key] for key in ("value", "ci_low", "ci_high", "n")}
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


def grade_map(text: str | None) -> dict[int, int] | None:
    """``--grade-map 4:3,3:2`` as ``{4: 3, 3: 2}``."""
    if not text:
        return None
    try:
        pairs = [part.split(":") for part in text.split(",")]
        return {int(source): int(target) for source, target in pairs}
    except ValueError:
        raise ConfigError(
            f"--grade-map {text!r}: expected source:target grades, e.g. 4:3,3:2"
        ) from None


def import_targets(args: argparse.Namespace, registry: str) -> tuple[Path, Path]:
    """Where an import writes: its own suite folder, never another suite's corpus."""
    suite = check_suite_name(args.suite, "--suite")
    if suite_file(registry, suite).exists():
        raise ConfigError(
            f"{suite_file(registry, suite)}: suite {suite!r} exists already; "
            "import into a new suite name"
        )
    folder = project_path(registry) / suite
    snapshot_dir = (
        project_path(args.snapshot_dir)
        if args.snapshot_dir
        else folder / "corpus_snapshots" / args.snapshot_date
    )
    golden = project_path(args.golden) if args.golden else folder / "golden.jsonl"
    # A bad suite file elsewhere in the registry is not this import's business (rag-eval
    # suites reports it): the good suites are the ones an import could write into.
    for other in scan_suites(registry)[0]:
        inside = snapshot_dir.resolve().is_relative_to(other.corpus_root.resolve())
        if inside or golden.resolve() == other.golden_set.resolve():
            raise ConfigError(
                f"{snapshot_dir if inside else golden}: belongs to suite {other.name!r}; an "
                "import writes into a suite of its own (leave --snapshot-dir and --golden out)"
            )
    return snapshot_dir, golden


def command_import(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.inputs import formats

    registry = project.deployment().suites
    snapshot_dir, golden = import_targets(args, registry)
    if args.format == "trec" and not (args.queries and args.qrels):
        raise ConfigError("import trec needs --queries and --qrels")
    options = {
        "labelled_against": args.labelled_against,
        "effective_date": dt.date.fromisoformat(args.effective_date),
    }
    if args.format == "trec":
        report = formats.import_trec(
            args.source,
            args.queries,
            args.qrels,
            snapshot_dir,
            golden,
            grade_map=grade_map(args.grade_map),
            **options,
        )
    elif args.format == "beir":
        report = formats.import_beir(
            args.source,
            snapshot_dir,
            golden,
            qrels_path=args.qrels,
            grade_map=grade_map(args.grade_map),
            **options,
        )
    else:
        report = formats.import_squad(args.source, snapshot_dir, golden, **options)
    suite = Suite(
        name=args.suite,
        golden_set=golden,
        corpus_root=snapshot_dir.parent,
        snapshot=snapshot_dir.name,
        nightly=args.nightly,
        description=f"imported from {args.format} {args.source}",
    )
    path = write_suite(registry, suite)
    summary = {
        "suite": args.suite,
        "suite_file": str(path),
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
            f"no-answer, {report.skipped_queries} queries skipped) -> {report.golden_path}; "
            f"suite {args.suite} -> {path}; run it with: rag-eval nightly --suite {args.suite}"
        )
    return 0


def command_export_run(args: argparse.Namespace) -> int:
    from rag_eval_pipeline.lib.inputs.formats import write_trec_run

    output_file(args.output)
    with project.existing_warehouse().reading() as connection:
        query = sql_query("export", "documents" if args.doc_ids else "passages")
        run = connection.sql(query, params={"run": args.eval_run_id}).pl()
    if not run.height:
        raise ConfigError(f"no retrieval results for run {args.eval_run_id!r}")
    write_trec_run(run, args.output, args.tag or "rag_eval")
    print(f"{run.height} lines for {run['query_id'].n_unique()} queries -> {args.output}")
    return 0


def add_commands(commands) -> None:
    freeze = commands.add_parser(
        "freeze", help="write a snapshot's manifest digest and store its documents once"
    )
    freeze.add_argument(
        "snapshot_dir", type=Path, help="the snapshot folder (<corpus_root>/<YYYY-MM-DD>)"
    )
    freeze.add_argument(
        "--no-store",
        action="store_true",
        help="write only the manifest (every document listed), leave the files as they are",
    )
    freeze.set_defaults(handler=command_freeze)

    importer = commands.add_parser(
        "import", help="import TREC-layout, BEIR or SQuAD 2.0 data as a suite of its own"
    )
    importer.add_argument(
        "format", choices=["trec", "beir", "squad"], help="the collection's format"
    )
    importer.add_argument(
        "source", help="trec: docs.jsonl; beir: the collection folder; squad: the SQuAD JSON"
    )
    importer.add_argument("--suite", required=True, help="name of the new suite")
    importer.add_argument("--queries", help="trec: queries.jsonl")
    importer.add_argument("--qrels", help="trec: qrels (TREC or TSV); beir: qrels TSV")
    importer.add_argument(
        "--snapshot-date",
        type=project.night,
        default=dt.date.today().isoformat(),
        help="name of the snapshot folder (default today)",
    )
    importer.add_argument(
        "--snapshot-dir",
        help="snapshot folder to write (default suites/<suite>/corpus_snapshots/<date>)",
    )
    importer.add_argument(
        "--golden", help="golden-set JSONL to write (default suites/<suite>/golden.jsonl)"
    )
    importer.add_argument(
        "--labelled-against",
        help="the snapshot's folder name or corpus digest (default: the frozen corpus digest)",
    )
    importer.add_argument(
        "--effective-date",
        type=project.night,
        default="2026-01-01",
        help="effective_date of every imported document (YYYY-MM-DD); default 2026-01-01",
    )
    importer.add_argument(
        "--grade-map",
        help="source:target grades, e.g. 4:3,3:2,2:2,1:2 (default: top grade to 3, other positive to 2)",
    )
    importer.add_argument(
        "--nightly", action="store_true", help="evaluate the suite in the 02:00 schedule too"
    )
    importer.add_argument("--json", action="store_true", help="the import's summary as JSON")
    importer.set_defaults(handler=command_import)

    export = commands.add_parser("export-run", help="write a run's retrieval as a TREC run file")
    export.add_argument("eval_run_id", help="the evaluation run whose retrieval is written")
    export.add_argument("output", type=Path, help="the TREC run file to write")
    export.add_argument("--tag", help="run tag (default rag_eval)")
    export.add_argument(
        "--doc-ids", action="store_true", help="document ids (best passage) instead of passage ids"
    )
    export.set_defaults(handler=command_export_run)

    evaluate = commands.add_parser("evaluate-run", help="evaluate a TREC run against TREC qrels")
    evaluate.add_argument("qrels", type=Path, help="TREC qrels file")
    evaluate.add_argument("run", type=Path, help="TREC run file")
    evaluate.add_argument(
        "-m",
        "--measure",
        action="append",
        help=f"e.g. nDCG@10, P@5, RR, AP; repeat for more; default {', '.join(DEFAULT_MEASURES)}",
    )
    evaluate.add_argument(
        "--rel-level",
        type=int,
        default=1,
        help="lowest grade counted relevant, as trec_eval -l; default 1",
    )
    evaluate.add_argument(
        "--per-query", action="store_true", help="each query's value too, before the averages"
    )
    evaluate.add_argument(
        "--json", action="store_true", help="JSON, with ci_low, ci_high and n for each measure"
    )
    evaluate.add_argument(
        "-c", "--complete", action="store_true", help="score queries missing from the run as 0"
    )
    evaluate.set_defaults(handler=command_evaluate_run)
