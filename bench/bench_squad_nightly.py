"""Wall time and peak memory of the full SQuAD 2.0 dev nightly run (11,873 questions).

Imports ``squad2-dev/dev-v2.0.rebuilt.json`` into a temporary folder (its time reported apart,
not part of the run), then materializes the whole nightly graph in a fresh Python process with
the reference system (BM25) and the deterministic judge on a 100-item sample, in-process
executor, into a temporary warehouse. The child's wall time includes its imports; its peak
resident memory comes from ``os.wait4`` (that child alone). As a reference measured in the same
session, a child that only imports dagster, polars and duckdb, so the ratio stays comparable on
a noisy machine. Goals: under 90 s and 2 GB.

    RAG_EVAL_DATASETS=../shared/datasets .venv/bin/python bench/bench_squad_nightly.py [--repeat 1]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rag_eval_pipeline.lib.inputs.formats import import_squad

ROOT = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 90.0
GOAL_BYTES = 2 * 1024**3
NIGHT = "2026-10-15"
SNAPSHOT = "2026-01-01"

REFERENCE = "import dagster, duckdb, polars"
NIGHTLY = """
import json, sys
import dagster as dg
from rag_eval_pipeline.definitions import ASSETS
from rag_eval_pipeline.defs.resources import (
    DeterministicJudgeResource, EvalSettings, ReferenceSystemResource, WarehouseResource,
)
corpus_root, golden_set, warehouse, night = sys.argv[1:5]
result = dg.materialize(
    ASSETS,
    resources={
        "settings": EvalSettings(
            corpus_root=corpus_root, golden_set=golden_set, human_labels="", judge_sample_size=100
        ),
        "system": ReferenceSystemResource(),
        "judge": DeterministicJudgeResource(),
        "warehouse_db": WarehouseResource(path=warehouse),
    },
    partition_key=night,
    instance=dg.DagsterInstance.ephemeral(),
)
steps = {
    event.step_key: event.event_specific_data.duration_ms / 1000
    for event in result.all_events
    if event.event_type_value == "STEP_SUCCESS"
}
print(json.dumps({"success": result.success, "steps": steps,
                  "eval_run_id": result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]}))
"""


def run_child(arguments: list[str]) -> tuple[float, int, str]:
    """Run a Python child; its wall time, its own peak RSS in bytes, and its stdout."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, *arguments], cwd=ROOT, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if process.returncode != 0:
        sys.exit(f"child failed ({process.returncode}):\n{stderr[-3000:]}")
    return elapsed, usage.ru_maxrss * 1024, stdout  # ru_maxrss is in KiB on Linux


def headline(warehouse: Path, eval_run_id: str) -> list[str]:
    import duckdb

    with duckdb.connect(str(warehouse), read_only=True) as connection:
        retrieval = connection.sql(
            "SELECT measure, value, n FROM retrieval_metrics WHERE eval_run_id = $run "
            "AND scope = 'overall' AND measure IN ('Success@5', 'RR@5', 'nDCG@10') ORDER BY 1",
            params={"run": eval_run_id},
        ).fetchall()
        generation = connection.sql(
            "SELECT scope_value, metric, value, n FROM generation_metrics WHERE eval_run_id = $run "
            "AND scope = 'overall' AND metric IN ('squad_exact_match', 'squad_f1', "
            "'false_refusal_rate', 'correct_refusal_rate', 'faithfulness', 'token_f1') "
            "ORDER BY 1, 2",
            params={"run": eval_run_id},
        ).fetchall()
    lines = [f"  {measure:<10} {value:.4f}  (n={n})" for measure, value, n in retrieval]
    lines += [
        f"  {scope}: {metric:<22} {value:.4f}  (n={n})" for scope, metric, value, n in generation
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="nightly runs to time (median)")
    parser.add_argument("--datasets", default=os.environ.get("RAG_EVAL_DATASETS"))
    args = parser.parse_args()
    if not args.datasets:
        sys.exit("RAG_EVAL_DATASETS is not set: point it at the shared datasets folder")
    source = Path(args.datasets) / "squad2-dev" / "dev-v2.0.rebuilt.json"
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        started = time.perf_counter()
        report = import_squad(source, root / "corpus" / SNAPSHOT, root / "squad2-dev.jsonl")
        import_seconds = time.perf_counter() - started
        reference = [run_child(["-c", REFERENCE]) for _ in range(3)]
        runs = []
        for attempt in range(args.repeat):
            warehouse = root / f"warehouse-{attempt}.duckdb"
            arguments = [str(root / "corpus"), str(report.golden_path), str(warehouse), NIGHT]
            elapsed, peak, stdout = run_child(["-c", NIGHTLY, *arguments])
            outcome = json.loads(stdout.strip().splitlines()[-1])
            runs.append((elapsed, peak, outcome, warehouse))
        wall = statistics.median(r[0] for r in runs)
        peak = max(r[1] for r in runs)
        reference_wall = statistics.median(r[0] for r in reference)
        print(
            f"SQuAD 2.0 dev: {report.items} questions ({report.no_answer} unanswerable), "
            f"{report.documents} passages; import {import_seconds:.1f} s (not in the run)"
        )
        print(
            f"nightly run: median wall {wall:.1f} s over {args.repeat} run(s) "
            f"({', '.join(f'{r[0]:.1f}' for r in runs)}); goal < {GOAL_SECONDS:.0f} s: "
            f"{'met' if wall < GOAL_SECONDS else 'MISSED'}"
        )
        print(
            f"peak memory: {peak / 1024**2:.0f} MiB; goal < {GOAL_BYTES / 1024**3:.0f} GiB: "
            f"{'met' if peak < GOAL_BYTES else 'MISSED'}"
        )
        print(
            f"reference, python -c '{REFERENCE}': median {reference_wall:.2f} s, "
            f"peak {max(r[1] for r in reference) / 1024**2:.0f} MiB"
        )
        print(f"ratio nightly / reference import: {wall / reference_wall:.1f}x")
        last = runs[-1]
        print("steps (last run, s):")
        for step, seconds in sorted(last[2]["steps"].items(), key=lambda s: -s[1]):
            print(f"  {step:<20} {seconds:6.2f}")
        print(f"headline (eval run {last[2]['eval_run_id']}):")
        print("\n".join(headline(last[3], last[2]["eval_run_id"])))


if __name__ == "__main__":
    main()
