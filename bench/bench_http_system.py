"""Benchmark: the HTTP system under test against a local service, and the in-process system.

Starts ``rag-eval serve-reference --latency-ms 50`` (a subprocess, so the service does not share
the client's interpreter) on the bundled 2026-10-01 snapshot and asks it every question of the
bundled suite (266) at the default concurrency (8). The ideal wall time of that live pass is
items x latency / concurrency = 266 x 0.05 s / 8 = 1.66 s; the goal is within 1.3x of it (the
pass measured whole: the /health check, the calls, writing the capture and reading it back). For
reference, the same questions through the in-process reference system (retrieval and answers),
and the whole nightly graph both ways (``--graph``).

Prints requests made, retries, system errors, wall time and the ratio; exits 1 when the goal is
missed or anything but a clean run happened.

    .venv/bin/python bench/bench_http_system.py [--repeat 3] [--latency-ms 50] [--graph]
"""

import argparse
import datetime as dt
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rag_eval_pipeline.defs.resources import HttpSystemResource
from rag_eval_pipeline.lib.inputs.corpus import load_snapshot, snapshot_tables
from rag_eval_pipeline.lib.inputs.golden import load_golden_set
from rag_eval_pipeline.lib.inputs.suites import load_suite
from rag_eval_pipeline.lib.systems.http import ClientSettings, HttpSystem
from rag_eval_pipeline.lib.systems.reference import ReferenceSystem
from rag_eval_pipeline.lib.systems.run import queries_of
from rag_eval_pipeline.testing import evaluation_resources, materialize_suite

ROOT = Path(__file__).resolve().parents[1]
RAG_EVAL = str(Path(sys.executable).parent / "rag-eval")
SNAPSHOT = "2026-10-01"
NIGHT = "2026-10-15"
GOAL_RATIO = 1.3
DEPTH = 20


def start_service(latency_ms: float) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [
            *(RAG_EVAL, "serve-reference", "--port", "0", "--snapshot", SNAPSHOT),
            *("--latency-ms", str(latency_ms)),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    found = re.search(r"http://127\.0\.0\.1:\d+", process.stdout.readline())
    if not found:
        process.kill()
        sys.exit("serve-reference did not print its URL")
    return process, found.group(0)


def graph_wall(system=None) -> float:
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        result = materialize_suite(
            NIGHT,
            "procedures",
            evaluation_resources(
                suites=ROOT / "suites", warehouse=Path(folder) / "w.duckdb", system=system
            ),
        )
        wall = time.perf_counter() - started
    if not result.success:
        sys.exit("the nightly graph failed")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--graph", action="store_true", help="also time the nightly graph")
    args = parser.parse_args()
    suite = load_suite(ROOT / "suites", "procedures")
    snapshot = load_snapshot(suite.corpus_root / SNAPSHOT)
    passages = snapshot_tables(snapshot, loaded_at=dt.datetime.now())["corpus_passages"]
    queries = queries_of(load_golden_set(suite.golden_set).items.sort("line"))
    settings = ClientSettings()
    ideal = len(queries) * args.latency_ms / 1000 / settings.concurrency

    reference = ReferenceSystem(passages)
    local = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        hits = reference.retrieve_batch(queries, DEPTH)
        reference.respond_batch(queries, hits, 5)
        local.append(time.perf_counter() - started)

    process, url = start_service(args.latency_ms)
    try:
        walls, clean = [], True
        with tempfile.TemporaryDirectory() as folder:
            for attempt in range(args.repeat):
                system = HttpSystem(
                    url, passages, capture=Path(folder) / f"{attempt}.parquet", settings=settings
                )
                started = time.perf_counter()
                system.retrieve_batch(queries, DEPTH)
                walls.append(time.perf_counter() - started)
                stats = system.stats
                clean &= stats.errors == 0 and stats.requests == len(queries)
                print(
                    f"live pass {attempt + 1}: {stats.items} items, {stats.requests} requests, "
                    f"{stats.retries} retries, {stats.errors} system errors, "
                    f"calls {stats.wall_s:.2f} s, with /health, capture and read-back "
                    f"{walls[-1]:.2f} s"
                )
        graphs = (
            (graph_wall(), graph_wall(HttpSystemResource(base_url=url))) if args.graph else None
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    wall = statistics.median(walls)
    ratio = wall / ideal
    print(
        f"ideal:               {ideal:.2f} s  ({len(queries)} items x {args.latency_ms:g} ms / "
        f"concurrency {settings.concurrency})"
    )
    print(f"live pass (median):  {wall:.2f} s, ratio to ideal {ratio:.3f} (goal <= {GOAL_RATIO})")
    print(
        f"in-process system:   {statistics.median(local):.2f} s for the same questions "
        "(retrieval and answers, no latency added)"
    )
    if graphs:
        print(
            f"nightly graph:       in-process {graphs[0]:.2f} s, over HTTP {graphs[1]:.2f} s "
            f"(+{args.latency_ms:g} ms per request)"
        )
    ok = ratio <= GOAL_RATIO and clean
    print("goals met" if ok else "GOAL MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
