"""The nightly job on other executors gives the in-process run's warehouse, table by table.

Each run is ``rag-eval nightly`` as a user runs it (a subprocess, its own warehouse and Dagster
instance), and the warehouses are compared row by row (``testing.warehouses`` says which columns
are left out and why: only wall-clock times and Dagster's run id). The Celery runs start Redis
and two workers as separate processes (``testing.engine``) and PostgreSQL from Debian's binaries
(``testing.postgres``); each is stopped by its pid. They are skipped only when ``redis-server``
or PostgreSQL is not installed on this machine; ``.ci/run`` installs both.
"""

import os
import pickle
import shutil
import subprocess
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from dagster._core.instance.ref import InstanceRef
from upath import UPath

from rag_eval_pipeline.defs import build_definitions
from rag_eval_pipeline.defs.partitions import SUITE as SUITE_DIMENSION
from rag_eval_pipeline.defs.partitions import partition_key
from rag_eval_pipeline.defs.reconstruct import STEP_IMPORTS, preload
from rag_eval_pipeline.defs.resources import RunStoreIOManager
from rag_eval_pipeline.lib.deployment import CELERY_QUEUE_TAG, Deployment
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.metrics import MEASURES_VERSION
from rag_eval_pipeline.testing.engine import REDIS, CeleryEngine
from rag_eval_pipeline.testing.postgres import PostgresServer, postgres_bin
from rag_eval_pipeline.testing.warehouses import warehouse_differences

from .conftest import FIXTURE_GATES, NIGHT, SUITE, fixture_suites, materialize_night

ROOT = Path(__file__).resolve().parents[1]
RAG_EVAL = str(Path(sys.executable).parent / "rag-eval")
BUNDLED = "procedures"
GENERATED = "generated"
# Every run compared has the same shard count: the figures do not depend on it, but
# judge_usage has a row per judging step, so one per shard.
SHARDS = "4"
PG_PASSWORD_ENV = "RAG_EVAL_TEST_PG_PASSWORD"

DEFINITION_MODULES = {path.stem for path in (ROOT / "rag_eval_pipeline" / "defs").glob("*.py")} - {
    "__init__",
    "resources",
}

needs_redis = pytest.mark.skipif(
    shutil.which(REDIS) is None,
    reason="redis-server is not installed here (apt-get install redis-server; .ci/run does)",
)
needs_postgres = pytest.mark.skipif(
    postgres_bin() is None,
    reason="PostgreSQL is not installed here (apt-get install postgresql; .ci/run does)",
)


def run_environment(folder: Path, **variables: str) -> dict[str, str]:
    """A run's own warehouse and Dagster instance under ``folder``, and ``variables``."""
    return {
        "DAGSTER_HOME": str(folder / "home"),
        "RAG_EVAL_WAREHOUSE": str(folder / "rag_eval.duckdb"),
        **variables,
    }


def nightly(suite: str, environment: dict[str, str]) -> Path:
    """``rag-eval nightly`` of ``suite``; the warehouse it wrote."""
    Path(environment["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(
        [RAG_EVAL, "nightly", "--suite", suite, "--partition", NIGHT, "--no-guard"],
        cwd=ROOT,
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return Path(environment["RAG_EVAL_WAREHOUSE"])


def dagster_run_id(warehouse: Path) -> str:
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        [(run_id,)] = connection.sql("SELECT dagster_run_id FROM eval_runs").fetchall()
    return run_id


def run_events(environment: dict[str, str], warehouse: Path) -> list:
    """The Dagster events of the warehouse's run, read from that run's instance."""
    ref = InstanceRef.from_dir(environment["DAGSTER_HOME"])
    with dg.DagsterInstance.from_ref(ref) as instance:
        return [entry for entry in instance.all_logs(dagster_run_id(warehouse))]


def step_workers(events: list) -> dict[str, str]:
    """The Celery worker each step ran on, by step key."""
    return {
        entry.dagster_event.step_key: entry.dagster_event.event_specific_data.metadata[
            "Celery worker"
        ].value.split("@")[0]
        for entry in events
        if entry.dagster_event is not None
        and "in celery worker" in (entry.dagster_event.message or "")
    }


def celery_workers_used(events: list) -> set[str]:
    """The worker names of the Celery engine events (``worker1``)."""
    return set(step_workers(events).values())


@pytest.fixture(scope="module")
def bundled_in_process(tmp_path_factory) -> Path:
    """The bundled suite's night, in-process, in four shards: what every engine must give."""
    folder = tmp_path_factory.mktemp("in_process")
    return nightly(BUNDLED, run_environment(folder, RAG_EVAL_SHARDS=SHARDS))


@pytest.fixture(scope="session")
def generated_suites(tmp_path_factory) -> Path:
    """A suite registry holding ``generated``: a generated 20,000-document library."""
    folder = tmp_path_factory.mktemp("generated")
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "generate_library.py"),
            "--documents",
            "20000",
            "--out",
            str(folder / "library"),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    registry = folder / "suites"
    registry.mkdir()
    shutil.copy(folder / "library" / "suite.yaml", registry / f"{GENERATED}.yaml")
    return registry


def test_a_worker_preloads_the_instance_storage_it_will_open(tmp_path, monkeypatch):
    """What a worker imports before forking: the storage modules of ``DAGSTER_HOME``'s
    instance when it exists, and the steps' lazy imports; a home not created yet is no error."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "not-yet"))
    assert preload() == sorted(STEP_IMPORTS)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    modules = preload()
    assert set(STEP_IMPORTS) < set(modules)
    assert "dagster._core.storage.runs" in modules
    assert all(module in sys.modules for module in modules)
    # A run launcher this worker has no package for is not its business (Dagster loads it
    # only where runs are launched): the worker still starts.
    (tmp_path / "home" / "dagster.yaml").write_text(
        "run_launcher:\n  module: rag_eval_no_such_launcher\n  class: Launcher\n"
    )
    assert "rag_eval_no_such_launcher" not in preload()


def test_only_the_warehouse_writer_goes_to_the_warehouse_queue():
    with pytest.raises(ConfigError, match=r"RAG_EVAL_WAREHOUSE_QUEUE=.warehouse.*celery"):
        Deployment.from_environment({"RAG_EVAL_WAREHOUSE_QUEUE": "warehouse"})
    deployment = Deployment.from_environment(
        {
            "RAG_EVAL_EXECUTOR": "celery",
            "RAG_EVAL_CELERY_BROKER": "redis://127.0.0.1:1/0",
            "RAG_EVAL_WAREHOUSE_QUEUE": "warehouse",
        }
    )
    definitions = build_definitions(deployment)
    queues = {
        op.name: op.tags.get(CELERY_QUEUE_TAG)
        for job in ("nightly_eval", "run_comparison_job")
        for op in definitions.resolve_job_def(job).graph.iterate_op_defs()
    }
    # run_comparison_job runs in-process wherever it is launched (docs/SCALING.md).
    assert {name for name, queue in queues.items() if queue == "warehouse"} == {
        "eval_summary",
        "release_checks",
    }
    assert {queue for queue in queues.values()} == {"warehouse", None}


@pytest.mark.parametrize("variable", ["RAG_EVAL_IO_STORE", "RAG_EVAL_RUN_STORE"])
def test_a_store_url_without_its_fsspec_driver_is_refused_before_the_night(variable):
    with pytest.raises(ConfigError, match=rf"{variable}='nosuch://bucket/x': no fsspec driver"):
        Deployment.from_environment({variable: "nosuch://bucket/x"})
    assert (
        getattr(
            Deployment.from_environment({variable: "memory://bucket/x"}),
            variable.removeprefix("RAG_EVAL_").lower(),
        )
        == "memory://bucket/x"
    )


def test_hand_offs_on_an_object_store_load_back_for_one_asset_alone():
    """``RunStoreIOManager`` on an fsspec store (``memory://``, as ``s3://`` in production):
    partitioned asset outputs and a graph's dynamic shard outputs (step keys with brackets,
    which fsspec's move would glob) are written at their names and load back, also when one
    asset is materialized alone from its stored inputs."""
    partitions = dg.MultiPartitionsDefinition(
        {
            "night": dg.DailyPartitionsDefinition(start_date="2026-10-01", end_offset=1),
            "suite": dg.DynamicPartitionsDefinition(name="suite"),
        }
    )

    @dg.asset(partitions_def=partitions)
    def handle(context: dg.AssetExecutionContext) -> dict:
        return {"key": context.partition_key, "shards": 3}

    @dg.op(out=dg.DynamicOut(int))
    def plan(handle: dict):
        for shard in range(handle["shards"]):
            yield dg.DynamicOutput(shard, mapping_key=f"shard_{shard:04d}")

    @dg.op
    def per_shard(shard: int) -> int:
        return shard * 10

    @dg.op
    def gather(values: list[int]) -> list[int]:
        return sorted(values)

    @dg.graph_asset(partitions_def=partitions)
    def sharded(handle: dict) -> list[int]:
        return gather(plan(handle).map(per_shard).collect())

    @dg.asset(partitions_def=partitions)
    def summary(sharded: list[int], handle: dict) -> dict:
        return {"values": sharded, "key": handle["key"]}

    base = f"memory://hand-offs-{os.getpid()}"
    resources = {"io_manager": RunStoreIOManager(base=base)}
    key = partition_key(NIGHT, "procedures.v2")
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("suite", ["procedures.v2"])
        assets = [handle, sharded, summary]
        whole = dg.materialize(assets, partition_key=key, instance=instance, resources=resources)
        alone = dg.materialize(
            assets, selection=["summary"], partition_key=key, instance=instance, resources=resources
        )
    expected = {"values": [0, 10, 20], "key": key}
    assert whole.output_for_node("summary") == expected
    assert alone.output_for_node("summary") == expected
    stored = [str(path) for path in UPath(base).rglob("*.pickle")]
    assert any("per_shard[shard_0002]" in path for path in stored)
    assert any(path.endswith(f"summary/{NIGHT}/procedures.v2.pickle") for path in stored)


def test_multiprocess_nightly_equals_in_process(bundled_in_process, tmp_path):
    """A process per step, the hand-offs kept in an IO store outside ``DAGSTER_HOME`` (what
    steps that share no disk, Kubernetes pods, need): Dagster's own storage holds none."""
    io_store = tmp_path / "io"
    environment = run_environment(
        tmp_path,
        RAG_EVAL_EXECUTOR="multiprocess",
        RAG_EVAL_SHARDS=SHARDS,
        RAG_EVAL_IO_STORE=str(io_store),
    )
    warehouse = nightly(BUNDLED, environment)
    assert warehouse_differences(bundled_in_process, warehouse) == []
    handed_off = {path.relative_to(io_store).parts[0] for path in io_store.rglob("*.pickle")}
    assert {"retrieval_run", "generation_run", "judge_sample", "eval_summary"} <= handed_off
    assert dagster_run_id(warehouse) in handed_off  # the plan ops' shard outputs
    storage = Path(environment["DAGSTER_HOME"]) / "storage"
    assert not [
        path for path in storage.rglob("*") if path.is_file() and "compute_logs" not in path.parts
    ]
    # Every step ran in a process of its own.
    pids = {
        entry.dagster_event.event_specific_data.metadata["pid"].value
        for entry in run_events(environment, warehouse)
        if entry.dagster_event is not None
        and entry.dagster_event.event_type_value == "STEP_WORKER_STARTED"
    }
    assert len(pids) > 10
    # The run carries its partition's tags as Dagster makes them (the UI's partition pages).
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(environment["DAGSTER_HOME"])) as instance:
        tags = instance.get_run_by_id(dagster_run_id(warehouse)).tags
    key = partition_key(NIGHT, BUNDLED)
    assert {name: tags.get(name) for name in NIGHT_TAGS} == {
        "dagster/partition": key,
        "dagster/partition/night": NIGHT,
        "dagster/partition/suite": BUNDLED,
    }


@needs_redis
@needs_postgres
def test_two_celery_workers_with_postgres_storage_equal_in_process(
    bundled_in_process, tmp_path, monkeypatch
):
    """The multi-worker deployment: Redis, two Celery workers and the Dagster storage in
    PostgreSQL (every process resolves the password from its own environment). worker1 consumes
    only the warehouse queue, as a worker beside the warehouse file may: the summary step and
    the release checks that read the warehouse after it run there and nowhere else, every other
    step on worker2."""
    monkeypatch.setenv(PG_PASSWORD_ENV, "trust-authentication-ignores-it")
    environment = run_environment(
        tmp_path, RAG_EVAL_SHARDS=SHARDS, RAG_EVAL_WAREHOUSE_QUEUE="warehouse"
    )
    home = Path(environment["DAGSTER_HOME"])
    with PostgresServer() as postgres:
        home.mkdir()
        (home / "dagster.yaml").write_text(postgres.instance_settings(PG_PASSWORD_ENV))
        engine = CeleryEngine(
            workers=2,
            root=tmp_path / "engine",
            env=environment,
            queues=("warehouse", "dagster"),
        )
        with engine:
            warehouse = nightly(BUNDLED, {**environment, **engine.environment})
        assert all(process.poll() is not None for process in engine.started)
        with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            run = instance.get_run_by_id(dagster_run_id(warehouse))
            assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        workers = step_workers(run_events(environment, warehouse))
        assert workers.pop("eval_summary") == "worker1"
        assert workers.pop("release_checks") == "worker1"
        assert len(workers) > 10 and set(workers.values()) == {"worker2"}
    assert postgres.process.poll() is not None
    assert warehouse_differences(bundled_in_process, warehouse) == []


@needs_redis
def test_two_celery_workers_on_a_generated_20000_document_suite(generated_suites, tmp_path):
    suites = str(generated_suites)
    reference = nightly(
        GENERATED,
        run_environment(tmp_path / "in_process", RAG_EVAL_SUITES=suites, RAG_EVAL_SHARDS=SHARDS),
    )
    environment = run_environment(
        tmp_path / "celery", RAG_EVAL_SUITES=suites, RAG_EVAL_SHARDS=SHARDS
    )
    engine = CeleryEngine(workers=2, root=tmp_path / "engine", env=environment)
    with engine:
        warehouse = nightly(GENERATED, {**environment, **engine.environment})
    assert all(process.poll() is not None for process in engine.started)
    assert celery_workers_used(run_events(environment, warehouse)) == {"worker1", "worker2"}
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        [(items,)] = connection.sql("SELECT count(*) FROM system_calls").fetchall()
    assert items == 2700
    assert warehouse_differences(reference, warehouse) == []


NIGHT_TAGS = {
    "dagster/partition": partition_key(NIGHT, SUITE),
    "dagster/partition/night": NIGHT,
    "dagster/partition/suite": SUITE,
}


@contextmanager
def _night_instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    """A Dagster instance under ``tmp_path/home`` that knows the fixture suite's partition."""
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions(SUITE_DIMENSION, [SUITE])
        yield instance


def _flaky_job(
    library,
    warehouse: Path,
    gates: Path = FIXTURE_GATES,
    *,
    shards: int = 1,
    fail_part: str = "no-such-part",
    fail_while: Path | None = None,
):
    """The nightly graph (``testing.flaky``) with the gates of ``gates``, its system failing in
    ``fail_part`` while ``fail_while`` exists (by default never)."""
    return dg.build_reconstructable_job(
        "rag_eval_pipeline.testing.flaky",
        "flaky_nightly",
        reconstructable_kwargs={
            "suites": str(fixture_suites(library)),
            "warehouse": str(warehouse),
            "gates": str(gates),
            "shards": shards,
            "fail_part": fail_part,
            "fail_while": str(fail_while or warehouse.parent / "never"),
        },
    )


def _failing_shard(library, tmp_path: Path, *, shards: int):
    """The flag file (shard 1 fails while it exists, which it does), the warehouse, and the
    job of a night split into ``shards``."""
    flag = tmp_path / "fail-shard-1"
    flag.touch()
    warehouse = tmp_path / "sharded" / "rag_eval.duckdb"
    job = _flaky_job(library, warehouse, shards=shards, fail_part="shard-0001", fail_while=flag)
    return flag, warehouse, job


def test_a_failed_shard_is_rerun_alone_and_replaces_only_its_part(library, tmp_path):
    """Shard 1 of 3 fails; re-execution from failure runs that shard (and what waits on it)
    only: the other shards' Parquet parts are the same files, and the warehouse is the one a run
    that never failed writes."""
    flag, warehouse, job = _failing_shard(library, tmp_path, shards=3)
    with _night_instance(tmp_path) as instance:
        with dg.execute_job(job, instance=instance, tags=NIGHT_TAGS) as failed:
            assert not failed.success
            failed_steps = {e.step_key for e in failed.all_events if e.is_step_failure}
            assert failed_steps == {"retrieval_run.retrieve_shard[shard_0001]"}
        parts = warehouse.parent / "store" / "runs"
        [run_dir] = list(parts.iterdir())
        results = run_dir / "retrieval_results"
        before = {p.name: p.stat().st_ino for p in results.iterdir()}
        assert sorted(before) == ["shard-0000.parquet", "shard-0002.parquet"]
        flag.unlink()
        options = dg.ReexecutionOptions.from_failure(failed.run_id, instance)
        with dg.execute_job(
            job, instance=instance, tags=NIGHT_TAGS, reexecution_options=options
        ) as rerun:
            assert rerun.success
            rerun_steps = {e.step_key for e in rerun.all_events if e.is_step_success}
        after = {p.name: p.stat().st_ino for p in results.iterdir()}
    assert "retrieval_run.retrieve_shard[shard_0001]" in rerun_steps
    assert not rerun_steps & {
        "corpus_snapshot",
        "golden_set",
        "retrieval_run.plan_retrieval",
        "retrieval_run.retrieve_shard[shard_0000]",
        "retrieval_run.retrieve_shard[shard_0002]",
    }
    assert sorted(after) == ["shard-0000.parquet", "shard-0001.parquet", "shard-0002.parquet"]
    assert {name: after[name] for name in before} == before
    uninterrupted = tmp_path / "uninterrupted" / "rag_eval.duckdb"
    assert materialize_night(library, uninterrupted, shards=3).success
    assert warehouse_differences(uninterrupted, warehouse) == []


def test_a_night_begun_with_other_measure_definitions_is_refused_on_re_execution(library, tmp_path):
    """A night fails in a shard; its plan's outputs (the record each shard is handed) are
    rewritten as a checkout before measure definitions were versioned wrote them. Re-executed
    from the failure, the shard refuses the record instead of computing today's figures under
    no recorded version, and nothing is published."""
    flag, warehouse, job = _failing_shard(library, tmp_path, shards=2)
    with _night_instance(tmp_path) as instance:
        with dg.execute_job(job, instance=instance, tags=NIGHT_TAGS) as failed:
            assert not failed.success
        plans = sorted(tmp_path.glob(f"**/{failed.run_id}/*plan_retrieval*/**/*"))
        handed = [path for path in plans if path.is_file()]
        assert len(handed) == 2
        for path in handed:
            spec = pickle.loads(path.read_bytes())
            del spec["record"]["measures_version"]
            path.write_bytes(pickle.dumps(spec))
        flag.unlink()
        options = dg.ReexecutionOptions.from_failure(failed.run_id, instance)
        with dg.execute_job(
            job, instance=instance, tags=NIGHT_TAGS, reexecution_options=options
        ) as rerun:
            assert not rerun.success
            [failure] = [e for e in rerun.all_events if e.is_step_failure]
    assert failure.step_key == "retrieval_run.retrieve_shard[shard_0001]"
    message = failure.step_failure_data.error.cause.message
    assert "was begun with measure definitions unrecorded; this code computes them as " in message
    assert f" as {MEASURES_VERSION}, so its figures would be recorded" in message
    assert "materialize the night again from the start" in message
    assert not warehouse.exists()


def test_a_gate_re_executed_alone_is_reported_as_recorded_or_refused_when_the_file_changed(
    library, tmp_path
):
    """A night failing a gate fails in ``release_checks``, after its summary published it.
    Re-executed from that failure (the Python API copies no tags from the run it re-executes),
    the step alone runs again and reports the result the parent run's summary recorded; after
    the gate's threshold was edited, it fails saying the recorded result is of another file and
    to materialize eval_summary again, rather than report a check of the old threshold."""
    gate = (
        "version: {version}\ngates:\n  - name: recall_at_1\n    table: retrieval_metrics\n"
        "    metric: R@1\n    statistic: value\n    op: '>='\n    threshold: {threshold}\n"
    )
    strict, relaxed = tmp_path / "strict.yaml", tmp_path / "relaxed.yaml"
    strict.write_text(gate.format(version=1, threshold=1.01))
    relaxed.write_text(gate.format(version=2, threshold=0.1))
    warehouse = tmp_path / "w" / "rag_eval.duckdb"

    def gate_check(result):
        [check] = [
            c for c in result.get_asset_check_evaluations() if c.check_name == "gate_recall_at_1"
        ]
        return check

    with _night_instance(tmp_path) as instance:
        with dg.execute_job(
            _flaky_job(library, warehouse, strict), instance, tags=NIGHT_TAGS
        ) as night:
            assert not night.success
            failed = {e.step_key for e in night.all_events if e.is_step_failure}
            assert failed == {"release_checks"}
            first = gate_check(night)
        options = dg.ReexecutionOptions.from_failure(night.run_id, instance)
        job = _flaky_job(library, warehouse, strict)
        with dg.execute_job(job, instance, tags=NIGHT_TAGS, reexecution_options=options) as again:
            steps = {e.step_key for e in again.all_events if e.is_step_success or e.is_step_failure}
            assert steps == {"release_checks"}
            assert not again.success
            recorded = gate_check(again)
        assert (recorded.passed, recorded.severity, recorded.description) == (
            False,
            dg.AssetCheckSeverity.ERROR,
            first.description,
        )
        assert "observed" in recorded.description and ">= 1.01" in recorded.description
        published = [c for c in again.get_asset_check_evaluations() if c.check_name == "published"]
        assert len(published) == 4 and all(c.passed for c in published)
        options = dg.ReexecutionOptions.from_failure(again.run_id, instance)
        job = _flaky_job(library, warehouse, relaxed)
        with dg.execute_job(job, instance, tags=NIGHT_TAGS, reexecution_options=options) as edited:
            assert not edited.success
            stale = gate_check(edited)
        # A step that cannot see the warehouse the summary wrote (a volume not mounted) says
        # so, and creates no empty warehouse in its place.
        warehouse.rename(tmp_path / "moved.duckdb")
        options = dg.ReexecutionOptions.from_failure(edited.run_id, instance)
        job = _flaky_job(library, warehouse, strict)
        with dg.execute_job(job, instance, tags=NIGHT_TAGS, reexecution_options=options) as unseen:
            assert not unseen.success
            blind = gate_check(unseen)
            unknown = [
                c for c in unseen.get_asset_check_evaluations() if c.check_name == "published"
            ]
        assert not warehouse.exists()
    # Whether the night was published cannot be seen from here: not "not published".
    assert len(unknown) == 4 and not any(c.passed for c in unknown)
    assert {c.metadata["status"].value for c in unknown} == {"unknown"}
    assert blind.severity == dg.AssetCheckSeverity.ERROR
    assert blind.description.startswith(
        f"gate recall_at_1 not assessed: no warehouse at {warehouse}"
    )
    assert not stale.passed and stale.severity == dg.AssetCheckSeverity.ERROR
    assert stale.description.startswith("gate recall_at_1 not assessed: eval_summary checked ")
    assert stale.description.endswith(
        " against strict.yaml version 1 (>= 1.01), not relaxed.yaml version 2 (>= 0.1): "
        "materialize eval_summary again to check the gates as they are now"
    )


def test_a_table_re_materialized_after_the_summary_is_not_published(library, tmp_path):
    """A finished night, then a re-execution of ``retrieval_metrics`` and the release checks
    alone: the table's new materialization came after the summary that published the night,
    so its ``published`` check warns and says to re-execute the summary; the tables the
    re-execution did not touch are still the published ones. Doing what it says (a
    re-execution of that run's summary and checks) publishes the table again."""
    warehouse = tmp_path / "w" / "rag_eval.duckdb"
    with _night_instance(tmp_path) as instance:
        with dg.execute_job(_flaky_job(library, warehouse), instance, tags=NIGHT_TAGS) as night:
            assert night.success
            [eval_run_id] = {
                c.metadata["eval_run_id"].value
                for c in night.get_asset_check_evaluations()
                if c.check_name == "published"
            }
        options = dg.ReexecutionOptions(
            parent_run_id=night.run_id, step_selection=["retrieval_metrics", "release_checks"]
        )
        job = _flaky_job(library, warehouse)
        with dg.execute_job(job, instance, tags=NIGHT_TAGS, reexecution_options=options) as again:
            steps = {e.step_key for e in again.all_events if e.is_step_success}
            published = {
                c.asset_key.path[-1]: c
                for c in again.get_asset_check_evaluations()
                if c.check_name == "published"
            }
        options = dg.ReexecutionOptions(
            parent_run_id=again.run_id, step_selection=["eval_summary", "release_checks"]
        )
        with dg.execute_job(job, instance, tags=NIGHT_TAGS, reexecution_options=options) as advised:
            assert advised.success
            republished = [
                c for c in advised.get_asset_check_evaluations() if c.check_name == "published"
            ]
    assert len(republished) == 4 and all(c.passed for c in republished)
    # Each evaluation belongs to the night's partition, re-executed or not.
    evaluations = [*published.values(), *republished]
    assert {c.partition for c in evaluations} == {NIGHT_TAGS["dagster/partition"]}
    assert steps == {"retrieval_metrics", "release_checks"}
    stale = published.pop("retrieval_metrics")
    assert (stale.passed, stale.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert stale.description == (
        f"retrieval_metrics was materialized after eval_summary published {eval_run_id}: "
        "these figures were not published; re-execute eval_summary and release_checks "
        "from this Dagster run, or materialize the night again"
    )
    assert stale.metadata["status"].value == "not published"
    assert sorted(published) == ["claim_diagnostics", "generation_metrics", "judge_calibration"]
    assert all(c.passed for c in published.values())
    assert all(c.description.startswith(f"{eval_run_id} published") for c in published.values())


def test_only_the_summary_step_opens_the_warehouse_for_writing(library, tmp_path, monkeypatch):
    """Sharded steps and metric steps write the run store; the one write of the warehouse in a
    night is eval_summary's load (so workers never contend for DuckDB's file lock)."""
    from rag_eval_pipeline.lib.store.warehouse import Warehouse

    writers = []
    writing = Warehouse.writing

    def recording(self, *args, **kwargs):
        frames = traceback.extract_stack()
        writers.append({Path(frame.filename).stem for frame in frames} & DEFINITION_MODULES)
        return writing(self, *args, **kwargs)

    monkeypatch.setattr(Warehouse, "writing", recording)
    assert materialize_night(library, tmp_path / "rag_eval.duckdb", shards=3).success
    assert writers == [{"eval_summary"}]
