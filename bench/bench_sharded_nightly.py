"""Benchmark: a sharded night on one Celery worker against two, with a slow live system.

Generates a 20,000-document library (``bench/generate_library.py``; or reuses ``--library``),
serves the reference system over HTTP with ``--latency-ms`` (200) added to every request
(``rag-eval serve-reference``, a separate process), and runs ``rag-eval nightly`` of that suite
with ``RAG_EVAL_SYSTEM=http`` on a Celery engine (``testing.engine``: Redis and N workers, each a
separate process) twice: one worker, then two, both at the same per-worker
concurrency (one step at a time per worker, ``--http-concurrency`` requests in flight per step)
and the same shards. Each run has its own warehouse and Dagster instance; both warehouses must
be equal (``testing.warehouses``).

Prints each run's wall time, the ratio (goal: two workers at least 1.7x faster), and where the
time went, from each run's Dagster event log (``testing.timeline``): per asset the elapsed and
busy seconds, the time no step was running, and the engine's wait between handing a step out and
its start. Exits 1 when the goal is missed or the warehouses differ.

    .venv/bin/python bench/bench_sharded_nightly.py [--library /tmp/lib20k] [--shards 4]
        [--latency-ms 200] [--http-concurrency 8] [--keep DIR]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import duckdb
from dagster._core.instance.ref import InstanceRef

from rag_eval_pipeline.testing.engine import CeleryEngine, stop
from rag_eval_pipeline.testing.timeline import format_timeline, run_timeline, timeline_summary
from rag_eval_pipeline.testing.warehouses import warehouse_differences

ROOT = Path(__file__).resolve().parents[1]
RAG_EVAL = str(Path(sys.executable).parent / "rag-eval")
SUITE = "generated"
NIGHT = "2026-10-15"
SNAPSHOT = "2026-10-01"
GOAL_RATIO = 1.7


def suite_registry(folder: Path, library: Path | None, documents: int) -> Path:
    """A registry holding the generated suite (generated now unless ``library`` has one)."""
    if library is None or not (library / "suite.yaml").is_file():
        library = library or folder / "library"
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "generate_library.py"),
                *("--documents", str(documents), "--out", str(library)),
            ],
            check=True,
            capture_output=True,
        )
        print(f"generated {documents} documents in {time.perf_counter() - started:.1f} s")
    registry = folder / "suites"
    registry.mkdir(exist_ok=True)
    shutil.copy(library / "suite.yaml", registry / f"{SUITE}.yaml")
    return registry


def start_service(environment: dict, latency_ms: float) -> tuple[subprocess.Popen, str]:
    # The snapshot in force on the night (a library may also hold later ones).
    command = [RAG_EVAL, "serve-reference", "--suite", SUITE, "--snapshot", SNAPSHOT, "--port", "0"]
    service = subprocess.Popen(
        [*command, "--latency-ms", str(latency_ms)],
        cwd=ROOT,
        env={**os.environ, **environment},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    found = re.search(r"http://127\.0\.0\.1:\d+", service.stdout.readline())
    if not found:
        stop(service)
        sys.exit("serve-reference did not print its URL")
    return service, found.group(0)


def night_on_workers(folder: Path, workers: int, environment: dict) -> dict:
    """One night on ``workers`` Celery workers: wall time, the run's timeline, its warehouse."""
    run_environment = {
        **environment,
        "DAGSTER_HOME": str(folder / "home"),
        "RAG_EVAL_WAREHOUSE": str(folder / "rag_eval.duckdb"),
    }
    (folder / "home").mkdir(parents=True)
    with CeleryEngine(workers=workers, root=folder / "engine", env=run_environment) as engine:
        started = time.perf_counter()
        completed = subprocess.run(
            [RAG_EVAL, "nightly", "--suite", SUITE, "--partition", NIGHT, "--no-guard"],
            cwd=ROOT,
            env={**os.environ, **run_environment, **engine.environment},
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"nightly on {workers} worker(s) failed:\n{completed.stderr[-3000:]}")
    warehouse = Path(run_environment["RAG_EVAL_WAREHOUSE"])
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        [(run_id, calls, errors)] = connection.sql(
            "SELECT (SELECT dagster_run_id FROM eval_runs), count(*), "
            "count(*) FILTER (WHERE outcome <> 'ok') FROM system_calls"
        ).fetchall()
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(folder / "home"))) as instance:
        run_wall, steps = run_timeline(instance, run_id)
    return {
        "wall": wall,
        "summary": timeline_summary(run_wall, steps),
        "steps": steps,
        "warehouse": warehouse,
        "calls": calls,
        "errors": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, help="a generate_library.py output to reuse")
    parser.add_argument("--documents", type=int, default=20000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--http-concurrency", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="keep the runs' folders here")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_sharded_"))
    folder.mkdir(parents=True, exist_ok=True)
    registry = suite_registry(folder, args.library, args.documents)
    service, url = start_service({"RAG_EVAL_SUITES": str(registry)}, args.latency_ms)
    environment = {
        "RAG_EVAL_SUITES": str(registry),
        "RAG_EVAL_SHARDS": str(args.shards),
        "RAG_EVAL_SYSTEM": "http",
        "RAG_EVAL_SYSTEM_URL": url,
    }
    try:
        runs = {
            workers: night_on_workers(folder / f"w{workers}", workers, environment)
            for workers in (1, 2)
        }
    finally:
        stop(service)
    one, two = runs[1], runs[2]
    items = one["calls"]
    ideal = items * args.latency_ms / 1000 / args.http_concurrency
    print(
        f"suite {SUITE}: {items} items, {args.shards} shards, {args.latency_ms:.0f} ms added "
        f"per request, {args.http_concurrency} requests in flight per step, one step at a time "
        f"per worker; the latency alone is {ideal:.1f} s on one worker"
    )
    for workers, run in runs.items():
        print(
            f"\n{workers} worker(s): nightly {run['wall']:.1f} s "
            f"({run['calls']} calls, {run['errors']} not ok)"
        )
        print(format_timeline(run["summary"]))
    ratio = one["wall"] / two["wall"]
    sharded = ("retrieval_run", "generation_run", "judge_sample")
    sharded_one = sum(one["summary"]["assets"][name]["elapsed"] for name in sharded)
    sharded_two = sum(two["summary"]["assets"][name]["elapsed"] for name in sharded)
    print("\nsteps of the 2-worker run (seconds from the run's start):")
    for step in two["steps"]:
        print(
            f"  {step.step_key:<44} {step.worker:<8} handed out {step.handed_out:6.1f} "
            f"start {step.started:6.1f} end {step.ended:6.1f} ({step.seconds:5.1f} s)"
        )
    differences = warehouse_differences(one["warehouse"], two["warehouse"])
    print(f"\nwarehouses equal: {not differences}" + "".join(f"\n  {d}" for d in differences))
    print(
        f"sharded assets (retrieval, generation, judge) elapsed: {sharded_one:.1f} s on one "
        f"worker, {sharded_two:.1f} s on two: {sharded_one / sharded_two:.2f}x"
    )
    print(
        f"ratio one worker / two workers, whole night: {ratio:.2f}x (goal >= {GOAL_RATIO}x): "
        f"{'met' if ratio >= GOAL_RATIO else 'missed'}"
    )
    if args.keep:
        print(f"runs kept in {folder}")
    else:
        shutil.rmtree(folder)
    return 0 if ratio >= GOAL_RATIO and not differences else 1


if __name__ == "__main__":
    sys.exit(main())
