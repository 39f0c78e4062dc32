"""Unattended nights: the guard loses nothing, dead runs end, readers and the writer never block
each other, judge faults are their own outcome, bad input is refused, failures raise alerts.

Real materializations in an ephemeral instance, real processes and signals, a real HTTP judge
endpoint and webhook on 127.0.0.1.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from dagster._core.definitions.partitions.context import partition_loading_context
from dagster._core.instance.ref import InstanceRef

from rag_eval_pipeline.defs import build_definitions
from rag_eval_pipeline.defs.alerts import failure_alerts
from rag_eval_pipeline.defs.resources import LLMJudgeResource, WarehouseResource
from rag_eval_pipeline.lib.deployment import Deployment
from rag_eval_pipeline.testing import evaluation_assets, materialize_suite, names
from rag_eval_pipeline.testing.fake_openai import FakeOpenAI

from .conftest import (
    FIXTURE_GATES,
    NIGHT,
    SUITE,
    failing_gate_night,
    fixture_assets,
    fixture_resources,
    fixture_suites,
)

ROOT = Path(__file__).resolve().parents[1]
RAG_EVAL = str(Path(sys.executable).parent / "rag-eval")
KEY_ENV = "RAG_EVAL_TEST_JUDGE_KEY"
API_KEY = "sk-operations-test"
JUDGE_GATES = """version: 1
max_judge_error_share: 0.05
gates:
  - name: faithfulness
    table: generation_metrics
    metric: faithfulness
    statistic: value
    op: '>='
    threshold: 0.5
    needs_calibrated_judge: true
  - name: no_significant_regression
"""


def query(path: Path, sql: str, parameters: dict | None = None) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as connection:
        return connection.sql(sql, params=parameters).fetchall()


class Guard:
    """The comparison guard ticking over an ephemeral instance, its cursor kept between ticks."""

    def __init__(self, library: Path, warehouse: Path):
        self.library, self.warehouse = library, warehouse
        self.instance = dg.DagsterInstance.ephemeral()
        self.defs = build_definitions(
            Deployment(gates=str(FIXTURE_GATES)), resources=fixture_resources(library, warehouse)
        )
        self.assets = fixture_assets()
        self.cursor: str | None = None

    def night(self, night: str) -> str:
        result = materialize_suite(
            night,
            SUITE,
            fixture_resources(self.library, self.warehouse),
            instance=self.instance,
            assets=self.assets,
        )
        assert result.success
        return result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]

    def tick(self):
        context = dg.build_sensor_context(
            instance=self.instance, definitions=self.defs, cursor=self.cursor
        )
        with partition_loading_context(dynamic_partitions_store=self.instance):
            tick = self.defs.resolve_sensor_def("comparison_guard").evaluate_tick(context)
        self.cursor = tick.cursor
        return tick


def compared(tick) -> list[str]:
    return [
        request.run_config["ops"]["run_comparison"]["config"]["candidate_run_id"]
        for request in tick.run_requests
        if request.job_name == "run_comparison_job"
    ]


def test_two_runs_in_one_tick_are_both_compared(library, tmp_path):
    guard = Guard(library, tmp_path / "w.duckdb")
    guard.night("2026-10-15")
    assert guard.tick().run_requests == []
    second, third = guard.night("2026-10-16"), guard.night("2026-10-17")
    assert compared(guard.tick()) == [second, third]
    # Exactly once: the next tick has nothing new.
    again = guard.tick()
    assert again.run_requests == [] and "no evaluation run completed since" in again.skip_message


def test_a_ten_night_backfill_gets_ten_comparisons(library, tmp_path):
    guard = Guard(library, tmp_path / "w.duckdb")
    guard.night("2026-10-01")
    guard.tick()
    nights = [f"2026-10-{day:02d}" for day in range(2, 12)]
    runs = [guard.night(night) for night in nights]
    tick = guard.tick()
    assert compared(tick) == runs
    assert len({request.run_key for request in tick.run_requests}) == 10
    assert [r.partition_key for r in tick.run_requests] == [f"{n}|golden" for n in nights]


def cli_environment(library: Path, tmp_path: Path, **extra: str) -> dict:
    return {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "home"),
        "RAG_EVAL_WAREHOUSE": str(tmp_path / "warehouse" / "rag_eval.duckdb"),
        "RAG_EVAL_SUITES": str(fixture_suites(library)),
        "RAG_EVAL_GATES": str(FIXTURE_GATES),
        **extra,
    }


def nightly(night: str, env: dict, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [RAG_EVAL, "nightly", "--suite", SUITE, "--partition", night, "--no-guard"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def night_to_its_end(night: str, env: dict, *options: str) -> subprocess.CompletedProcess:
    """``rag-eval nightly`` of the fixture suite, run to its end."""
    return subprocess.run(
        [RAG_EVAL, "nightly", "--suite", SUITE, "--partition", night, *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def wait_for_line(process: subprocess.Popen, text: str, timeout: float = 120) -> str:
    """Read stderr until a line containing ``text``; returns what was read."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"no line with {text!r} in: {''.join(seen)}")


def instance_at(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_fails_the_dagster_run_and_the_evaluation_run(library, tmp_path, stop):
    """SIGTERM or SIGINT during a step: the process exits with that signal's code (143, 130),
    the error names it, and both runs are failed."""
    env = cli_environment(library, tmp_path)
    process = nightly(NIGHT, env)
    wait_for_line(process, "retrieval_run")
    started = time.monotonic()
    process.send_signal(stop)
    _, err = process.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert process.returncode == 128 + stop
    assert f"interrupted ({stop.name})" in err or f"interrupted by {stop.name}" in err, err
    assert "Traceback" not in err
    with instance_at(tmp_path / "home") as instance:
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.FAILURE
        eval_run_id = run.tags["rag_eval/eval_run_id"]
    warehouse = tmp_path / "warehouse" / "rag_eval.duckdb"
    assert query(
        warehouse, "SELECT status FROM eval_runs WHERE eval_run_id = $r", {"r": eval_run_id}
    ) == [("failed",)]


def test_an_interrupt_before_the_first_step_fails_the_run_it_says_it_failed(tmp_path, monkeypatch):
    """SIGTERM between the run's creation and its first step leaves it NOT_STARTED: the
    interrupt fails it there and then, as the error line says, not at the next sweep."""
    from rag_eval_pipeline.cli.nightly import end_interrupted_runs
    from rag_eval_pipeline.defs.sensors import HOST_TAG, PID_TAG

    monkeypatch.setenv("RAG_EVAL_WAREHOUSE", str(tmp_path / "warehouse" / "rag_eval.duckdb"))
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    with dg.instance_for_test() as instance:
        run = instance.add_run(
            dg.DagsterRun(
                job_name="nightly_eval", tags=tags, status=dg.DagsterRunStatus.NOT_STARTED
            )
        )
        end_interrupted_runs(instance, tags, "interrupted by SIGTERM")
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE


def test_a_killed_run_is_failed_by_the_next_night_and_never_jams_the_queue(
    library, tmp_path, monkeypatch
):
    """A ``rag-eval nightly`` killed with SIGKILL is failed by the daemon's sweep (and by the
    next night), which posts its alert: the run-status sensor leaves such a run to them."""
    env = cli_environment(library, tmp_path)
    process = nightly(NIGHT, env)
    wait_for_line(process, "retrieval_run")
    process.kill()
    process.wait(timeout=30)
    with instance_at(tmp_path / "home") as instance:
        [killed] = instance.get_runs()
        assert killed.status == dg.DagsterRunStatus.STARTED
        # The daemon's sweep sees the run's process is gone.
        defs = build_definitions(Deployment(gates=str(FIXTURE_GATES)))
        sensor = defs.resolve_sensor_def("abandoned_runs")
        context = dg.build_sensor_context(
            instance=instance,
            resources={"warehouse_db": WarehouseResource(path=env["RAG_EVAL_WAREHOUSE"])},
        )
        with Webhook() as hook:
            monkeypatch.setenv("RAG_EVAL_ALERT_WEBHOOK", hook.url)
            skip = sensor.evaluate_tick(context).skip_message
        monkeypatch.delenv("RAG_EVAL_ALERT_WEBHOOK")
        assert f"failed 1 abandoned run(s): {killed.run_id}" == skip
        [alert] = hook.received
        assert (alert["kind"], alert["dagster_run_id"]) == ("run_failure", killed.run_id)
        assert "is gone" in alert["text"]
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
        eval_run_id = killed.tags["rag_eval/eval_run_id"]
    warehouse = Path(env["RAG_EVAL_WAREHOUSE"])
    [(status, reason)] = query(
        warehouse,
        "SELECT status, status_reason FROM eval_runs WHERE eval_run_id = $r",
        {"r": eval_run_id},
    )
    assert status == "failed" and "is gone" in reason
    # And a killed run found by the next night from the command line.
    process = nightly("2026-10-16", env)
    wait_for_line(process, "retrieval_run")
    process.kill()
    process.wait(timeout=30)
    finished = night_to_its_end("2026-10-17", env, "--no-guard")
    assert finished.returncode == 0, finished.stderr
    assert "failed abandoned run" in finished.stderr
    with instance_at(tmp_path / "home") as instance:
        statuses = sorted(run.status.value for run in instance.get_runs())
    assert statuses == ["FAILURE", "FAILURE", "SUCCESS"]


def test_a_rerun_of_a_complete_night_that_dies_leaves_it_complete_and_the_baseline(
    library, tmp_path
):
    """Running a completed night again is the same evaluation run (same inputs and settings):
    while the new attempt runs, and after it is killed, the warehouse keeps the finished run
    complete, with its figures, as the suite's baseline; the next night is compared with it.
    A re-run that completes writes its own record over it."""
    env = cli_environment(library, tmp_path)
    first = nightly(NIGHT, env)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    warehouse = Path(env["RAG_EVAL_WAREHOUSE"])
    [(eval_run_id, completed_at, headline)] = query(
        warehouse, "SELECT eval_run_id, completed_at, headline FROM eval_runs"
    )
    again = nightly(NIGHT, env)
    wait_for_line(again, "generation_run")
    again.kill()
    again.wait(timeout=30)
    later = night_to_its_end("2026-10-16", env)
    assert later.returncode == 0, later.stderr
    assert "failed abandoned run" in later.stderr
    assert f"is comparable with baseline {eval_run_id}" in later.stdout
    assert query(
        warehouse,
        "SELECT status, completed_at, headline, is_current_baseline FROM eval_runs "
        "WHERE eval_run_id = $r",
        {"r": eval_run_id},
    ) == [("complete", completed_at, headline, True)]
    third = nightly(NIGHT, env)
    _, err = third.communicate(timeout=300)
    assert third.returncode == 0, err
    [(status, completed_again)] = query(
        warehouse,
        "SELECT status, completed_at FROM eval_runs WHERE eval_run_id = $r",
        {"r": eval_run_id},
    )
    assert status == "complete" and completed_again > completed_at


ANALYST = textwrap.dedent(
    """
    import duckdb, sys, time, pathlib
    connection = duckdb.connect(sys.argv[1], read_only=True)
    before = connection.sql("SELECT count(*) FROM eval_runs").fetchall()[0][0]
    pathlib.Path(sys.argv[2]).write_text(str(before))
    while not pathlib.Path(sys.argv[3]).exists():
        connection.sql("SELECT count(*) FROM retrieval_metrics").fetchall()
        time.sleep(0.05)
    print(connection.sql("SELECT count(*) FROM eval_runs").fetchall()[0][0])
    """
)


def test_an_analyst_session_and_fifty_reads_never_block_the_night(library, tmp_path):
    env = cli_environment(library, tmp_path)
    first = nightly("2026-10-15", env)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    warehouse = Path(env["RAG_EVAL_WAREHOUSE"])
    opened, done = tmp_path / "opened", tmp_path / "done"
    analyst = subprocess.Popen(
        [sys.executable, "-c", ANALYST, str(warehouse), str(opened), str(done)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not opened.exists():
        time.sleep(0.05)
    failures: list[str] = []
    reads = 0

    def short_reads() -> None:
        nonlocal reads
        while reads < 50:
            try:
                with duckdb.connect(str(warehouse), read_only=True) as connection:
                    connection.sql("SELECT count(*) FROM eval_runs").fetchall()
            except duckdb.Error as error:
                failures.append(str(error))
            reads += 1
            time.sleep(0.1)

    reader = threading.Thread(target=short_reads)
    reader.start()
    # Two nights at once, while the analyst holds the file and the reader keeps reading.
    second, third = nightly("2026-10-16", env), nightly("2026-10-17", env)
    assert second.wait(timeout=300) == 0, second.stderr.read()
    assert third.wait(timeout=300) == 0, third.stderr.read()
    reader.join(timeout=60)
    done.touch()
    out, err = analyst.communicate(timeout=60)
    assert analyst.returncode == 0, err
    assert failures == [] and reads == 50
    # The analyst's session kept the state it opened; a new session sees all three nights.
    assert out.strip() == opened.read_text() == "1"
    assert query(warehouse, "SELECT count(*) FROM eval_runs WHERE complete") == [(3,)]


def llm_judge(fake: FakeOpenAI, tmp_path: Path, **options) -> LLMJudgeResource:
    return LLMJudgeResource(
        base_url=fake.base_url,
        model="fake-judge",
        api_key_env=KEY_ENV,
        cache_path=str(tmp_path / "judge_cache.sqlite"),
        **options,
    )


def judged_night(library, tmp_path, judge):
    gates = tmp_path / "judge_gates.yaml"
    gates.write_text(JUDGE_GATES)
    warehouse = tmp_path / "w.duckdb"
    result = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, warehouse, judge=judge),
        assets=evaluation_assets(gates),
    )
    return result, warehouse


@pytest.fixture
def judge_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, API_KEY)


def test_a_judge_that_answers_429_forever_fails_its_gates_not_the_figures(
    library, tmp_path, judge_key
):
    with FakeOpenAI(API_KEY) as fake:
        fake.fail_always("rate_limit", retry_after="0")
        result, warehouse = judged_night(
            library, tmp_path, llm_judge(fake, tmp_path, max_retries=2)
        )
    assert not result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    gate = checks["gate_faithfulness"]
    assert not gate.passed and "the judge failed on 100.0% of the claims" in gate.description
    rows = dict(
        query(
            warehouse,
            "SELECT metric, value FROM generation_metrics "
            "WHERE scope = 'overall' AND scope_value = 'answerable'",
        )
    )
    # Faithfulness is not measured (no claim was judged), never 0.0.
    assert "faithfulness" not in rows and rows["judge_error_rate"] == 1.0
    assert query(warehouse, "SELECT DISTINCT verdict FROM judge_verdicts") == [("JUDGE_ERROR",)]
    # A night with a failed judge is complete but never becomes the baseline.
    assert query(warehouse, "SELECT status, is_baseline FROM eval_runs") == [("complete", False)]
    assert query(warehouse, "SELECT count(*) FROM baseline_decisions") == [(0,)]


def test_a_judge_that_never_answers_stops_at_the_deadline(library, tmp_path, judge_key):
    started = time.monotonic()
    with FakeOpenAI(API_KEY) as fake:
        fake.fail_always("slow", seconds=120)
        judge = llm_judge(fake, tmp_path, timeout=0.5, max_retries=1, deadline_seconds=3.0)
        result, warehouse = judged_night(library, tmp_path, judge)
    assert time.monotonic() - started < 30
    assert result.asset_materializations_for_node("eval_summary")
    assert query(warehouse, "SELECT DISTINCT verdict FROM judge_verdicts") == [("JUDGE_ERROR",)]


def test_a_failed_claim_split_affects_only_its_item(library, tmp_path, judge_key):
    with FakeOpenAI(API_KEY) as fake:
        fake.fail("not_json", times=2)
        judge = llm_judge(fake, tmp_path, max_retries=1, concurrency=1)
        _, warehouse = judged_night(library, tmp_path, judge)
    errors = query(
        warehouse,
        "SELECT item_id, claim_index FROM judge_verdicts WHERE verdict = 'JUDGE_ERROR'",
    )
    assert errors == [("q1", 0)]
    judged = query(
        warehouse,
        "SELECT DISTINCT item_id FROM judge_verdicts WHERE verdict <> 'JUDGE_ERROR' ORDER BY 1",
    )
    assert judged == [("q2",), ("q3",)]
    rate = query(
        warehouse,
        "SELECT value FROM generation_metrics WHERE metric = 'judge_error_rate' "
        "AND scope = 'overall' AND scope_value = 'answerable'",
    )[0][0]
    assert 0 < rate < 1


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("- resources\n- settings\n", "run.yaml: a run configuration is a mapping"),
        (
            "resources:\n  settings:\n    config: {retrieval_depth: -5}\n",
            "setting 'retrieval_depth' must be from 1",
        ),
        (
            "resources:\n  settings:\n    config: {context_k: 0}\n",
            "setting 'context_k' must be from 1 to 20, got 0",
        ),
        (
            "resources:\n  settings:\n    config: {cutoffs: [5, 50]}\n",
            "setting 'cutoffs' must be from 1 to 20, got 50",
        ),
        ("resources: {settings: {config: {context_k: [", "run.yaml: not valid YAML"),
    ],
)
def test_bad_run_configuration_is_refused_before_anything_is_written(
    library, tmp_path, config, message
):
    (tmp_path / "run.yaml").write_text(config)
    env = cli_environment(library, tmp_path)
    completed = subprocess.run(
        [RAG_EVAL, "nightly", "--suite", SUITE, "--config", str(tmp_path / "run.yaml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    [line] = completed.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not Path(env["RAG_EVAL_WAREHOUSE"]).exists()
    assert not (tmp_path / "warehouse" / "store").exists()


class Webhook:
    """An HTTP server on 127.0.0.1 that keeps every JSON body posted to it."""

    def __init__(self):
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                return

            def do_POST(self) -> None:
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/rag-eval"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.server.shutdown()
        self.server.server_close()


def alert_for_failed_run(result, instance, warehouse: Path) -> None:
    run = instance.get_run_by_id(result.run_id)
    [record] = instance.get_records_for_run(
        result.run_id, of_type=dg.DagsterEventType.RUN_FAILURE
    ).records
    failure = record.event_log_entry.dagster_event
    context = dg.build_run_status_sensor_context(
        sensor_name="failure_alerts",
        dagster_event=failure,
        dagster_instance=instance,
        dagster_run=run,
        resources={"warehouse_db": WarehouseResource(path=str(warehouse))},
    ).for_run_failure()
    failure_alerts(context)


def test_a_failing_gate_posts_an_alert_and_no_url_means_no_alert(library, tmp_path, monkeypatch):
    result, instance, warehouse = failing_gate_night(library, tmp_path)
    assert not result.success
    monkeypatch.delenv("RAG_EVAL_ALERT_WEBHOOK", raising=False)
    alert_for_failed_run(result, instance, warehouse)  # no URL: nothing posted, no error
    with Webhook() as hook:
        monkeypatch.setenv("RAG_EVAL_ALERT_WEBHOOK", hook.url)
        alert_for_failed_run(result, instance, warehouse)
    [alert] = hook.received
    assert alert["kind"] == "gate_failure"
    assert alert["partition"] == f"{NIGHT}|golden" and alert["eval_run_id"].startswith(NIGHT)
    assert "gate_impossible_recall" in alert["text"] and "R@1" in alert["text"]
    assert hook.url not in json.dumps(alert)


@dg.op
def one_step() -> None:
    return None


@dg.job
def one_step_job() -> None:
    """Dagster runs of it stand for nights' runs in the sweep and alert tests."""
    one_step()


def test_a_night_ended_after_its_publish_alerts_its_recorded_gate_failures(
    library, tmp_path, monkeypatch
):
    """A night killed after eval_summary published it and before release_checks reported its
    gates: the warehouse holds the run complete with a failed gate, and the alert of its failed
    Dagster run (no check evaluated in it) names that gate (``gate_failure``), not only that the
    process is gone."""
    from rag_eval_pipeline.defs.alerts import alert_failed_run
    from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

    result, instance, warehouse = failing_gate_night(library, tmp_path)
    eval_run_id = result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]

    # The evaluation run as published by a Dagster run that ended before its release checks.
    def attempt():
        return instance.create_run_for_job(
            one_step_job, tags={EVAL_RUN_TAG: eval_run_id}, status=dg.DagsterRunStatus.STARTED
        )

    killed, later = attempt(), attempt()
    with Warehouse(warehouse).writing() as connection:
        connection.execute(
            "UPDATE eval_run_records SET dagster_run_id = $dagster WHERE eval_run_id = $run",
            {"dagster": killed.run_id, "run": eval_run_id},
        )
    gone = "the process that ran it (pid 1 on host) is gone"
    refused = "step retrieval_run failed: connection refused"
    with Webhook() as hook:
        monkeypatch.setenv("RAG_EVAL_ALERT_WEBHOOK", hook.url)
        alert_failed_run(instance, killed, gone, WarehouseResource(path=str(warehouse)))
        # A later attempt of the same evaluation run failed before its publish: its own failure.
        alert_failed_run(instance, later, refused, WarehouseResource(path=str(warehouse)))
    alert, again = hook.received
    assert again["kind"] == "run_failure" and refused in again["text"]
    assert alert["kind"] == "gate_failure", alert
    assert alert["eval_run_id"] == eval_run_id
    assert "gate_impossible_recall" in alert["text"] and "R@1" in alert["text"]
    assert "recorded with the run" in alert["text"]
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        [(status,)] = connection.sql(
            "SELECT status FROM eval_runs WHERE eval_run_id = $run", params={"run": eval_run_id}
        ).fetchall()
    assert status == "complete"


def test_rag_eval_nightly_posts_the_alert_of_a_failed_gate_itself(library, tmp_path):
    """A night run by ``rag-eval nightly`` (cron, a CI job) executes in that process, which the
    daemon's run-status sensor leaves to it: the command posts the alert itself, once, and
    exits 1; the evaluation run stays complete (its gates failed, not the run)."""
    gates = tmp_path / "gates.yaml"
    gates.write_text(
        "version: 1\ngates:\n  - name: impossible_recall\n    table: retrieval_metrics\n"
        "    metric: R@1\n    statistic: value\n    op: '>='\n    threshold: 1.01\n"
    )
    project = tmp_path / "project"
    project.mkdir()
    warehouse = project / "warehouse" / "rag_eval.duckdb"
    with Webhook() as hook:
        env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"} | {
            "RAG_EVAL_PROJECT_DIR": str(project),
            "RAG_EVAL_SUITES": str(fixture_suites(library)),
            "RAG_EVAL_WAREHOUSE": str(warehouse),
            "RAG_EVAL_GATES": str(gates),
            "RAG_EVAL_ALERT_WEBHOOK": hook.url,
        }
        completed = subprocess.run(
            [RAG_EVAL, "nightly", "--suite", "golden", "--partition", NIGHT, "--no-summary"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        summary = subprocess.run(
            [RAG_EVAL, "summary"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
    assert completed.returncode == 1, completed.stderr
    assert "release gates failed" in completed.stderr
    [alert] = hook.received
    assert alert["kind"] == "gate_failure" and "gate_impossible_recall" in alert["text"]
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        [(eval_run_id, status)] = connection.sql(
            "SELECT eval_run_id, status FROM eval_runs"
        ).fetchall()
        gates = connection.sql(
            "SELECT eval_run_id, gate, status, passed, op, threshold FROM gate_results"
        ).fetchall()
    assert (alert["eval_run_id"], status) == (eval_run_id, "complete")
    # The run's own record says which gate failed, and so does its summary.
    assert gates == [(eval_run_id, "impossible_recall", "failed", False, ">=", 1.01)]
    assert "Release gates (gates.yaml, version 1): 0 passed, 1 failed, 0 not assessed" in (
        summary.stdout
    )
    assert re.search(r"^  FAILED +impossible_recall", summary.stdout, re.MULTILINE)
    # The regression gate is not among them: the summary says what it was compared with.
    assert (
        "Against the baseline: this run is its suite's baseline: nothing to compare\n"
        "  gate no_significant_regression: not assessed"
    ) in summary.stdout
    # A no-answer stratum the golden set has no item of is "not measured", not left out.
    assert re.search(
        r"^  near_miss: +not measured \(no items of this stratum", summary.stdout, re.MULTILINE
    )


def test_a_failed_run_posts_a_run_failure_alert(library, tmp_path, monkeypatch):
    warehouse = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    (library / "golden.jsonl").write_text("{not json\n")
    broken = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, warehouse),
        instance=instance,
        assets=fixture_assets(),
    )
    assert not broken.success
    with Webhook() as hook:
        monkeypatch.setenv("RAG_EVAL_ALERT_WEBHOOK", hook.url)
        alert_for_failed_run(broken, instance, warehouse)
    [alert] = hook.received
    assert alert["kind"] == "run_failure" and alert["eval_run_id"] is None
    # The alert the daemon posts says what the command line says: the step, file, line, problem
    # (not Dagster's "Steps failed: ['golden_set']").
    assert alert["text"].startswith(
        f"rag_eval: __ephemeral_asset_job__ {NIGHT}|golden failed: step golden_set failed: "
        f"{library / 'golden.jsonl'}:1: malformed JSON"
    ), alert["text"]


def test_a_significant_regression_fails_the_comparison_and_posts_an_alert(tmp_path, monkeypatch):
    """On the bundled suite, an evidence threshold of 5 refuses far more questions: the
    comparison's regression gate fails its run, and the alert says which metrics regressed."""
    from rag_eval_pipeline.defs.resources import ReferenceSystemResource
    from rag_eval_pipeline.testing import evaluation_resources

    warehouse = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    assets = fixture_assets()
    for night, threshold in (("2026-10-15", 3.0), ("2026-10-16", 5.0)):
        resources = evaluation_resources(
            suites=ROOT / "suites",
            warehouse=warehouse,
            system=ReferenceSystemResource(evidence_threshold=threshold),
        )
        assert materialize_suite(
            night, "procedures", resources, instance=instance, assets=assets
        ).success
    comparison = materialize_suite(
        "2026-10-16",
        "procedures",
        resources,
        instance=instance,
        assets=assets,
        selection=[a for a in assets if "run_comparison" in names(a)],
    )
    assert not comparison.success
    with Webhook() as hook:
        monkeypatch.setenv("RAG_EVAL_ALERT_WEBHOOK", hook.url)
        alert_for_failed_run(comparison, instance, warehouse)
    [alert] = hook.received
    assert alert["kind"] == "regression"
    assert "false_refusal" in alert["text"] and "answer_correct" in alert["text"]


def test_the_alert_text_names_a_regression():
    from rag_eval_pipeline.lib.reporting.alerts import REGRESSION, alert_for

    alert = alert_for(
        dagster_run_id="r1",
        job="run_comparison_job",
        partition="2026-10-16|procedures",
        eval_run_id="2026-10-16-abc",
        failed_checks=[
            (
                "gate_no_significant_regression",
                "significantly worse than baseline 2026-10-15-def: Success@5, answer_correct",
            )
        ],
        failure_message="1 blocking asset check failed",
    )
    assert alert.kind == REGRESSION
    assert alert.text.startswith("rag_eval: run_comparison_job 2026-10-16|procedures")
    assert "Success@5, answer_correct" in alert.text


@pytest.fixture(autouse=True)
def _no_real_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_a_run_killed_inside_the_summary_is_not_the_latest_complete_run(library, tmp_path):
    from rag_eval_pipeline.lib.runs.registry import latest_complete_run
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

    warehouse = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    assets = fixture_assets()
    resources = fixture_resources(library, warehouse)
    first = materialize_suite(NIGHT, SUITE, resources, instance=instance, assets=assets)
    first_id = first.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    # The next night begins (its record is written, status started) and dies before loading.
    partial = materialize_suite(
        "2026-10-16",
        SUITE,
        resources,
        instance=instance,
        assets=assets,
        selection=[
            a for a in assets if names(a) & {"corpus_snapshot", "golden_set", "retrieval_run"}
        ],
    )
    partial_id = partial.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    with Warehouse(warehouse).reading() as connection:
        assert latest_complete_run(connection, SUITE) == first_id
    # The next write of the warehouse (any night's, a baseline decision) lists the run that
    # began as started: incomplete, never missing and never complete.
    with resources["warehouse_db"].publishing():
        pass
    with Warehouse(warehouse).reading() as connection:
        assert latest_complete_run(connection, SUITE) == first_id
    assert query(
        warehouse, "SELECT status FROM eval_runs WHERE eval_run_id = $r", {"r": partial_id}
    ) == [("started",)]


def test_a_writer_killed_while_publishing_leaves_no_copy_behind_the_next_publish(tmp_path):
    """A writer killed with SIGKILL inside its publish leaves its private copy (and write-ahead
    log) beside the warehouse; the next writer, holding the publish lock, removes it, and
    leaves other files alone. The published file is the one from before the kill."""
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

    path = tmp_path / "rag_eval.duckdb"
    with Warehouse(path).writing() as connection:
        connection.execute("CREATE TABLE notes (n INTEGER)")
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, sys\n"
            "from rag_eval_pipeline.lib.store.warehouse import Warehouse\n"
            "with Warehouse(sys.argv[1]).writing() as connection:\n"
            "    connection.execute('INSERT INTO notes VALUES (1)')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
    )
    assert killed.returncode == -signal.SIGKILL
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".rag_eval.duckdb."))
    assert left and all(
        re.fullmatch(r"\.rag_eval\.duckdb\.[0-9]+\.[0-9a-f]{32}(\.wal)?", n) for n in left
    )
    unrelated = tmp_path / ".rag_eval.duckdb.notes"
    unrelated.write_text("kept")
    with Warehouse(path).writing() as connection:
        assert connection.sql("SELECT count(*) FROM notes").fetchall() == [(0,)]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [unrelated.name]


READ_WRITE_ANALYST = textwrap.dedent(
    """
    import duckdb, os, pathlib, signal, sys, time
    connection = duckdb.connect(sys.argv[1])
    connection.execute("INSERT INTO notes VALUES (7)")
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    pathlib.Path(sys.argv[2]).write_text("opened")
    while not pathlib.Path(sys.argv[3]).exists():
        time.sleep(0.05)
    connection.close()
    """
)


def notes_warehouse(tmp_path: Path):
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

    warehouse = Warehouse(tmp_path / "rag_eval.duckdb")
    with warehouse.writing() as connection:
        connection.execute("CREATE TABLE notes (n INTEGER)")
    return warehouse


def test_a_read_write_session_stops_the_publish_and_every_reader_says_who_holds_it(
    tmp_path, monkeypatch, capsys
):
    """An analyst who opened the warehouse read-write and wrote: publishing over it would leave
    their log beside a file it does not match (no reader could open the warehouse after), so
    the write is refused naming the session's process; readers, the command line and the alert
    of a failed night say who holds it instead of DuckDB's bare lock error. Once the session
    closes (DuckDB checkpoints its rows into the file) the next write publishes them too."""
    from rag_eval_pipeline.cli import main
    from rag_eval_pipeline.defs.alerts import alert_failed_run
    from rag_eval_pipeline.lib.runs.record import EVAL_RUN_TAG
    from rag_eval_pipeline.lib.store.warehouse import WarehouseUnavailable

    warehouse = notes_warehouse(tmp_path)
    published = warehouse.path.read_bytes()
    opened, done = tmp_path / "opened", tmp_path / "done"
    analyst = subprocess.Popen(
        [sys.executable, "-c", READ_WRITE_ANALYST, str(warehouse.path), str(opened), str(done)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not opened.exists():
            assert analyst.poll() is None, analyst.stderr.read()
            time.sleep(0.05)
        holder = f"held open read-write by PID {analyst.pid}"
        refused = pytest.raises(WarehouseUnavailable, match=f"{holder}.*nothing was published")
        with refused, warehouse.writing() as connection:
            connection.execute("INSERT INTO notes VALUES (1)")
        assert warehouse.path.read_bytes() == published
        assert not list(tmp_path.glob(".rag_eval.duckdb.*"))
        told = pytest.raises(WarehouseUnavailable, match=f"{holder}.*read-only")
        with told, warehouse.reading():
            pass
        monkeypatch.setenv("RAG_EVAL_WAREHOUSE", str(warehouse.path))
        capsys.readouterr()
        assert main(["sql", "SELECT count(*) FROM notes"]) == 2
        assert holder in capsys.readouterr().err
        instance = dg.DagsterInstance.ephemeral()
        run = instance.create_run_for_job(
            one_step_job, tags={EVAL_RUN_TAG: "2026-10-15-000000000000"}
        )
        with Webhook() as hook:
            monkeypatch.setenv("RAG_EVAL_ALERT_WEBHOOK", hook.url)
            alert_failed_run(
                instance,
                run,
                "step eval_summary failed",
                WarehouseResource(path=str(warehouse.path)),
            )
        [alert] = hook.received
        assert alert["kind"] == "run_failure"
        assert "could not be updated" in alert["text"] and holder in alert["text"]
    finally:
        done.touch()
        analyst.wait(timeout=60)
    assert analyst.returncode == 0, analyst.stderr.read()
    with warehouse.writing() as connection:
        connection.execute("INSERT INTO notes VALUES (1)")
    with warehouse.reading() as connection:
        assert connection.sql("SELECT n FROM notes ORDER BY n").fetchall() == [(1,), (7,)]


def test_the_log_a_killed_read_write_session_left_is_published_with_the_next_write(tmp_path):
    """A read-write session killed before it checkpointed leaves its log (``<file>.wal``) beside
    the warehouse, holding rows the file has not: the next write copies it with the file, so
    those rows are published with its own, and removes it (it would not match the new file)."""
    warehouse = notes_warehouse(tmp_path)
    killed = subprocess.run(
        [sys.executable, "-c", READ_WRITE_ANALYST, str(warehouse.path), "kill", ""],
        capture_output=True,
    )
    assert killed.returncode == -signal.SIGKILL
    assert warehouse.log_path.exists()
    with warehouse.writing() as connection:
        connection.execute("INSERT INTO notes VALUES (1)")
    assert not warehouse.log_path.exists()
    assert not list(tmp_path.glob(".rag_eval.duckdb.*"))
    with warehouse.reading() as connection:
        assert connection.sql("SELECT n FROM notes ORDER BY n").fetchall() == [(1,), (7,)]


def test_a_failure_counts_as_bad_input_only_when_this_package_raised_an_input_error(
    library, tmp_path
):
    """A night failing on a broken golden set failed on input (``rag-eval nightly`` exits 2);
    the same failure with a class of that name raised by another library's code is not."""
    from types import SimpleNamespace

    from rag_eval_pipeline.lib.runs.failures import failed_on_input, failed_steps

    golden = library / "golden.jsonl"
    golden.write_text(golden.read_text(encoding="utf-8") + "{not json\n", encoding="utf-8")
    result = materialize_suite(
        NIGHT, SUITE, fixture_resources(library, tmp_path / "w.duckdb"), assets=fixture_assets()
    )
    assert not result.success and failed_on_input(result.all_events)
    [(event, error)] = list(failed_steps(result.all_events))
    elsewhere = ['  File "/opt/lib/python3.11/site-packages/other/config.py", line 9, in f\n']

    def foreign(info):
        if info is None:
            return None
        return info._replace(stack=elsewhere, cause=foreign(info.cause))

    failure = SimpleNamespace(
        is_step_failure=True,
        step_key=event.step_key,
        event_specific_data=SimpleNamespace(error=foreign(error)),
    )
    assert not failed_on_input([failure])


def test_a_night_killed_before_its_first_step_is_failed_by_the_sweep(tmp_path, monkeypatch):
    """``rag-eval nightly`` killed after creating its Dagster run and before the run started
    leaves it NOT_STARTED: the next night's sweep fails it too, naming the gone process, so it
    never waits for a start that will not come (nor for the run monitor's start timeout)."""
    from rag_eval_pipeline.defs.sensors import HOST_TAG, PID_TAG, fail_abandoned_runs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(gone.pid)}
    instance = dg.DagsterInstance.ephemeral()
    run = instance.create_run_for_job(
        one_step_job, tags=tags, status=dg.DagsterRunStatus.NOT_STARTED
    )
    monkeypatch.delenv("RAG_EVAL_ALERT_WEBHOOK", raising=False)
    warehouse = WarehouseResource(path=str(tmp_path / "w.duckdb"))
    assert fail_abandoned_runs(instance, warehouse) == [run.run_id]
    failed = instance.get_run_by_id(run.run_id)
    assert failed.status == dg.DagsterRunStatus.FAILURE


def test_a_re_execution_of_a_rag_eval_night_is_not_that_processs_run(tmp_path, monkeypatch):
    """The UI re-executes a night ``rag-eval nightly`` ran (docs/AUDITORS.md §4) with its
    parent's tags, that process's host and pid among them, but the webserver or the daemon
    launches it: the abandoned-run sweep leaves it running once that process is gone, and the
    run-status sensor posts its alert when it fails, while leaving the alert of a run the
    process executed (and the sweep failed) to them, so it is posted once."""
    from rag_eval_pipeline.defs.sensors import HOST_TAG, PID_TAG, fail_abandoned_runs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(gone.pid)}
    instance = dg.DagsterInstance.ephemeral()
    started = dg.DagsterRunStatus.STARTED
    parent = instance.create_run_for_job(one_step_job, tags=tags, status=started)
    child = instance.create_run_for_job(
        one_step_job,
        tags=tags,
        status=started,
        parent_run_id=parent.run_id,
        root_run_id=parent.run_id,
    )
    warehouse = tmp_path / "w.duckdb"
    monkeypatch.delenv("RAG_EVAL_ALERT_WEBHOOK", raising=False)
    assert fail_abandoned_runs(instance, WarehouseResource(path=str(warehouse))) == [parent.run_id]
    assert instance.get_run_by_id(child.run_id).status == started
    instance.report_run_failed(instance.get_run_by_id(child.run_id), message="a step failed")
    with Webhook() as hook:
        monkeypatch.setenv("RAG_EVAL_ALERT_WEBHOOK", hook.url)
        for run in (parent, child):
            alert_for_failed_run(run, instance, warehouse)
    assert [alert["dagster_run_id"] for alert in hook.received] == [child.run_id]
