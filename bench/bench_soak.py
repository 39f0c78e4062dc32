"""Soak: a month of nights back-filled under the daemon, with a reader and a flaky judge.

Starts ``dagster-daemon`` on a temporary Dagster home, back-fills ``--nights`` nights (default 30)
of the bundled suite with ``dagster job backfill``, with the LLM judge pointed at a local fake
endpoint that fails a share of requests (default 10%) with a transient 500, while a reader opens
the published warehouse read-only every second. The comparison guard compares every night with
the baseline under the daemon. When every run has ended it reports, against the goal
(nights, nights - 1, 0, 0):

- nights completed: evaluation runs complete in the warehouse;
- comparisons made: candidate runs with a ``run_comparisons`` row;
- reads failed: reader sessions that raised;
- rows lost: rows a run wrote to the run store that are not in the warehouse.

It stops everything it started by its pid.

    .venv/bin/python bench/bench_soak.py [--nights 30] [--flaky 0.1]
"""

import argparse
import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
from dagster._core.instance.ref import InstanceRef

from rag_eval_pipeline.testing.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
KEY = "sk-soak"
FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


class Reader(threading.Thread):
    """Opens the published warehouse read-only once a second and counts what fails."""

    def __init__(self, warehouse: Path):
        super().__init__(daemon=True)
        self.warehouse = warehouse
        self.reads = 0
        self.failures: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            if not self.warehouse.exists():
                continue
            try:
                with duckdb.connect(str(self.warehouse), read_only=True) as connection:
                    connection.sql("SELECT count(*) FROM eval_runs WHERE complete").fetchall()
                self.reads += 1
            except duckdb.Error as error:
                self.failures.append(str(error))


def lost_rows(store: Path, warehouse: Path) -> int:
    """Rows of complete runs' retrieval and generation tables missing from the warehouse."""
    lost = 0
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        runs = [
            row[0]
            for row in connection.sql("SELECT eval_run_id FROM eval_runs WHERE complete").fetchall()
        ]
        for run in runs:
            for table in ("retrieval_results", "generation_results", "judge_verdicts"):
                parts = list((store / "runs" / run / table).glob("*.parquet"))
                staged = pl.read_parquet(parts).height if parts else 0
                loaded = connection.sql(
                    f"SELECT count(*) FROM {table} WHERE eval_run_id = $run", params={"run": run}
                ).fetchall()[0][0]
                lost += max(0, staged - loaded)
    return lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--flaky", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the daemon started below is stopped by its pid.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    scratch = Path(tempfile.mkdtemp(prefix="rag-eval-soak-"))
    home = scratch / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    warehouse = scratch / "warehouse" / "rag_eval.duckdb"
    first = dt.date(2026, 10, 1)
    nights = [(first + dt.timedelta(days=i)).isoformat() for i in range(args.nights)]
    daemon = None
    reader = Reader(warehouse)
    with FakeOpenAI(KEY) as judge:
        judge.flaky(args.flaky)
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "RAG_EVAL_WAREHOUSE": str(warehouse),
            "RAG_EVAL_JUDGE": "llm",
            "RAG_EVAL_JUDGE_BASE_URL": judge.base_url,
            "RAG_EVAL_JUDGE_MODEL": "soak-judge",
            "RAG_EVAL_JUDGE_KEY_ENV": "RAG_EVAL_SOAK_KEY",
            "RAG_EVAL_SOAK_KEY": KEY,
        }
        started = time.perf_counter()
        try:
            daemon = subprocess.Popen(
                [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                cwd=ROOT,
                env=env,
                stdout=(scratch / "daemon.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
            with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
                instance.add_dynamic_partitions("suite", ["procedures"])
            reader.start()
            subprocess.run(
                [
                    str(BIN / "dagster"),
                    "job",
                    "backfill",
                    "-w",
                    "workspace.yaml",
                    "-j",
                    "nightly_eval",
                    "--partitions",
                    ",".join(f"{night}|procedures" for night in nights),
                    "--noprompt",
                ],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
            )
            with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
                deadline = time.monotonic() + args.timeout
                while time.monotonic() < deadline:
                    runs = instance.get_runs()
                    nightly = [r for r in runs if r.job_name == "nightly_eval"]
                    comparisons = [r for r in runs if r.job_name == "run_comparison_job"]
                    done = [r for r in nightly if r.status in FINISHED]
                    compared = [r for r in comparisons if r.status in FINISHED]
                    if len(done) == len(nights) and len(compared) >= len(nights) - 1:
                        break
                    time.sleep(5)
                statuses = {}
                for run in instance.get_runs():
                    statuses.setdefault(run.job_name, []).append(run.status.value)
        finally:
            reader.stopping.set()
            if daemon is not None and daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    daemon.kill()
        wall = time.perf_counter() - started
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        completed = connection.sql(
            "SELECT count(*) FROM eval_runs WHERE complete AND rebaseline_for IS NULL"
        ).fetchall()[0][0]
        comparisons_made = connection.sql(
            "SELECT count(DISTINCT candidate_run_id) FROM run_comparisons WHERE comparable"
        ).fetchall()[0][0]
        judge_errors = connection.sql(
            "SELECT count(*) FILTER (WHERE verdict = 'JUDGE_ERROR'), count(*) FROM judge_verdicts"
        ).fetchall()[0]
    lost = lost_rows(warehouse.parent / "store", warehouse)
    print(
        f"soak: {args.nights} nights back-filled under the daemon, {args.flaky:.0%} of judge "
        f"requests failing transiently, a reader every second; wall {wall:.0f} s"
    )
    print(f"  runs by job and status: { {k: sorted(v) for k, v in statuses.items()} }")
    print(
        f"  judge requests {judge.request_count}; verdicts {judge_errors[1]}, "
        f"of which JUDGE_ERROR {judge_errors[0]}"
    )
    print(f"  nights completed   {completed}   (goal {args.nights})")
    print(f"  comparisons made   {comparisons_made}   (goal {args.nights - 1})")
    print(
        f"  reads failed       {len(reader.failures)} of {reader.reads + len(reader.failures)}   (goal 0)"
    )
    print(f"  rows lost          {lost}   (goal 0)")
    print(f"  (scratch folder {scratch})")


if __name__ == "__main__":
    main()
