"""Run identity and provenance: every setting that can change a figure makes a run of its own,
suites never share a materialization or a baseline, a re-run never clobbers a baseline, and a
failing gate fails the Dagster run after every table is written."""

import hashlib
import json
import shutil

import dagster as dg
import duckdb
import pytest

from rag_eval_pipeline.defs import build_definitions
from rag_eval_pipeline.defs.release_checks import (
    NO_PARTITION,
    PUBLISHED_ASSETS,
    Materialized,
    unpublished_reason,
)
from rag_eval_pipeline.lib.deployment import Deployment
from rag_eval_pipeline.lib.errors import ConfigError
from rag_eval_pipeline.lib.metrics import MEASURES_VERSION
from rag_eval_pipeline.lib.runs.record import (
    EvalRunRecord,
    RunSettings,
    comparability,
    handed_on,
)
from rag_eval_pipeline.lib.store.tables import RUN_TABLES
from rag_eval_pipeline.testing import (
    evaluation_resources,
    materialize_suite,
    names,
    write_suite_file,
)

from .conftest import (
    FIXTURE_GATES,
    NIGHT,
    SUITE,
    failing_gate_night,
    fixture_assets,
    fixture_resources,
    fixture_suites,
)


def rows(path, query, parameters=None):
    with duckdb.connect(str(path), read_only=True) as connection:
        return connection.sql(query, params=parameters).fetchall()


def night(library, warehouse, instance, **settings):
    result = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, warehouse, **settings),
        instance=instance,
        assets=fixture_assets(),
    )
    assert result.success
    return result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]


def test_two_context_sizes_on_one_night_are_two_runs(library, tmp_path):
    warehouse = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    # The fixture retrieves at most three passages for a question: contexts of 1 and 3 differ.
    one = night(library, warehouse, instance, context_k=1)
    three = night(library, warehouse, instance, context_k=3)
    assert one != three
    stored = dict(
        rows(warehouse, "SELECT eval_run_id, settings FROM eval_runs ORDER BY eval_run_id")
    )
    assert set(stored) == {one, three}
    assert '"context_k": 1' in stored[one] and '"context_k": 3' in stored[three]
    # Both runs keep their rows: the second did not replace the first.
    counts = dict(
        rows(warehouse, "SELECT eval_run_id, count(*) FROM generation_results GROUP BY 1")
    )
    assert counts[one] == counts[three] == 6
    contexts = dict(
        rows(
            warehouse,
            "SELECT eval_run_id, max(len(context_ids)) FROM generation_results GROUP BY 1",
        )
    )
    assert contexts[one] == 1 < contexts[three] == 3


@pytest.mark.parametrize(
    "setting", ["retrieval_depth", "cutoffs", "rel_level", "seed", "judge_sample_size"]
)
def test_every_setting_that_changes_a_figure_changes_the_id(setting):
    changed = {
        "retrieval_depth": {"retrieval_depth": 30},
        "cutoffs": {"cutoffs": (1, 5)},
        "rel_level": {"rel_level": 3},
        "seed": {"seed": 7},
        "judge_sample_size": {"judge_sample_size": 10},
    }[setting]
    assert RunSettings().digest != RunSettings(**changed).digest
    assert RunSettings(cutoffs=(10, 1, 5, 3)).digest == RunSettings().digest


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"retrieval_depth": -5}, "setting 'retrieval_depth' must be from 1"),
        ({"context_k": 0}, "setting 'context_k' must be from 1 to 20, got 0"),
        ({"cutoffs": ()}, "setting 'cutoffs' must list at least one cut-off"),
        ({"cutoffs": (5, 0)}, "setting 'cutoffs' must be from 1 to 20, got 0"),
        ({"rel_level": 5}, "setting 'rel_level' must be from 1 to 3, got 5"),
    ],
)
def test_settings_that_would_silently_change_figures_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        RunSettings(**settings)


def test_two_suites_on_one_night_keep_their_materializations_and_baselines(library, tmp_path):
    warehouse = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    registry = fixture_suites(library)
    other = tmp_path / "other"
    shutil.copytree(library, other)
    write_suite_file(registry, "other", golden_set=other / "golden.jsonl", corpus_root=other)
    resources = evaluation_resources(suites=registry, warehouse=warehouse)
    for suite in (SUITE, "other"):
        assert materialize_suite(
            NIGHT, suite, resources, instance=instance, assets=fixture_assets()
        ).success
    events = instance.fetch_materializations(dg.AssetKey("golden_set"), limit=10).records
    partitions = sorted(record.partition_key for record in events)
    assert partitions == [f"{NIGHT}|golden", f"{NIGHT}|other"]
    baselines = rows(warehouse, "SELECT suite, eval_run_id FROM baseline_decisions ORDER BY suite")
    assert [suite for suite, _ in baselines] == ["golden", "other"]
    assert baselines[0][1] != baselines[1][1]
    assert rows(warehouse, "SELECT count(*) FROM eval_runs WHERE is_current_baseline") == [(2,)]


def test_rerunning_the_baseline_keeps_it_the_baseline(library, tmp_path):
    warehouse = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    first = night(library, warehouse, instance)
    again = night(library, warehouse, instance)
    assert again == first
    assert rows(
        warehouse, "SELECT eval_run_id, is_baseline, is_current_baseline, status FROM eval_runs"
    ) == [(first, True, True, "complete")]
    assert rows(warehouse, "SELECT kind FROM baseline_decisions") == [("first_run",)]


def test_a_failing_gate_fails_the_dagster_run_and_writes_every_table(library, tmp_path):
    result, instance, warehouse = failing_gate_night(library, tmp_path)
    assert not result.success
    assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.FAILURE
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert not checks["gate_impossible_recall"].passed
    assert checks["gate_impossible_recall"].severity == dg.AssetCheckSeverity.ERROR
    assert checks["gate_impossible_recall"].metadata["status"].value == "failed"
    assert result.asset_materializations_for_node("eval_summary")
    [(run_id, status)] = rows(warehouse, "SELECT eval_run_id, status FROM eval_runs")
    assert status == "complete"
    # The gate fails the run after it was published: every metric table's published check
    # passed, naming the run, in the same step as the gate.
    published = {
        c.asset_key.to_user_string(): c
        for c in result.get_asset_check_evaluations()
        if c.check_name == "published"
    }
    assert set(published) == {
        "retrieval_metrics",
        "generation_metrics",
        "judge_calibration",
        "claim_diagnostics",
    }
    for evaluation in published.values():
        assert evaluation.passed
        assert evaluation.description.startswith(f"{run_id} published, completed at ")
    for table in RUN_TABLES:
        query = f"SELECT count(*) FROM {table} WHERE eval_run_id = $run"
        assert rows(warehouse, query, {"run": run_id})[0][0] > 0, table


def test_each_metric_tables_page_names_what_produced_it(library, tmp_path):
    """An auditor on ``retrieval_metrics`` or ``generation_metrics`` finds the run, both
    digests, the system and the judge with their configuration digests and the settings'
    digest, all equal to the run's record, and where the figures are published."""
    result = materialize_suite(
        NIGHT,
        SUITE,
        fixture_resources(library, tmp_path / "w.duckdb"),
        instance=dg.DagsterInstance.ephemeral(),
        assets=fixture_assets(),
    )
    assert result.success
    [record] = rows(
        tmp_path / "w.duckdb",
        "SELECT eval_run_id, corpus_digest, golden_digest, system_id, system_config_digest, "
        "judge_id, judge_config_digest, settings_digest, measures_version FROM eval_runs",
    )
    keys = ("eval_run_id", "corpus_digest", "golden_digest", "system_id")
    keys += ("system_config_digest", "judge_id", "judge_config_digest", "settings_digest")
    keys += ("measures_version",)
    for asset in PUBLISHED_ASSETS:
        [materialization] = result.asset_materializations_for_node(asset)
        metadata = {key: getattr(v, "value", v) for key, v in materialization.metadata.items()}
        assert tuple(metadata[key] for key in keys) == record, asset
        assert metadata["published"].startswith(
            "by eval_summary after this step, in this Dagster run or a re-execution"
        )
    # What judged is shown in full beside what answered, and each metric table's headline is
    # the printed summary's figures for it.
    [run_page] = result.asset_materializations_for_node("retrieval_run")
    [judge_config] = rows(tmp_path / "w.duckdb", "SELECT judge_config FROM eval_runs")
    assert run_page.metadata["judge_config"].value == json.loads(judge_config[0])
    assert run_page.metadata["judge_id"].value == record[5]
    [retrieval_page] = result.asset_materializations_for_node("retrieval_metrics")
    assert "| Stale@5 |" in retrieval_page.metadata["headline"].value
    [generation_page] = result.asset_materializations_for_node("generation_metrics")
    headline = generation_page.metadata["headline"].value
    assert "| faithfulness |" in headline and "| false_refusal_rate |" in headline
    [summary] = result.asset_materializations_for_node("eval_summary")
    # The summary's page names what answered and what judged as the metric tables do.
    metadata = {key: getattr(v, "value", v) for key, v in summary.metadata.items()}
    assert tuple(metadata[key] for key in keys) == record, "eval_summary"
    assert summary.metadata["measures_version"].value == MEASURES_VERSION
    assert f"  measures          {MEASURES_VERSION}\n" in summary.metadata["summary"].value
    # The UI's summary is the finished run's, as `rag-eval summary` prints it: it used to be
    # taken before the run was marked complete, and read INCOMPLETE with no gates.
    assert "INCOMPLETE" not in summary.metadata["summary"].value


def test_a_metric_table_materialized_by_hand_is_not_published(library, tmp_path):
    """Materializing ``retrieval_metrics`` alone (the UI's Materialize on one asset), or with
    the inputs and the retrieval run (the same inputs give the same evaluation run, whose record
    is complete from the night before), computes it but publishes nothing: its ``published``
    check runs and says so, as a warning, and the night's published record is left as it was."""
    warehouse = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    run_id = night(library, warehouse, instance)
    assets = fixture_assets()
    for chosen in (
        {"retrieval_metrics"},
        {"corpus_snapshot", "golden_set", "retrieval_run", "retrieval_metrics"},
    ):
        by_hand = materialize_suite(
            NIGHT,
            SUITE,
            fixture_resources(library, warehouse),
            instance=instance,
            assets=assets,
            selection=[a for a in assets if names(a) and names(a) <= chosen],
        )
        assert by_hand.success
        [published] = [
            c for c in by_hand.get_asset_check_evaluations() if c.check_name == "published"
        ]
        assert published.asset_key.to_user_string() == "retrieval_metrics"
        assert not published.passed
        assert published.severity == dg.AssetCheckSeverity.WARN
        assert published.description == (
            "eval_summary did not run in this Dagster run (nor in the run it re-executes): "
            "these figures were not published"
        )
    assert rows(warehouse, "SELECT eval_run_id, status FROM eval_runs") == [(run_id, "complete")]


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (None, "R is not in the warehouse"),
        (
            {"status": "complete", "complete": True, "completed_at": None, "status_reason": None},
            "why",
        ),
        (
            {"status": "failed", "complete": False, "completed_at": None, "status_reason": "x"},
            "R is failed in the warehouse: x",
        ),
        (
            {"status": "started", "complete": False, "completed_at": None, "status_reason": None},
            "R is started in the warehouse",
        ),
    ],
)
def test_a_run_not_complete_in_the_warehouse_is_not_published(record, expected):
    from rag_eval_pipeline.defs.release_checks import published_check

    check = published_check("retrieval_metrics", "R", record, "why" if expected == "why" else "")
    assert not check.passed and check.description == expected
    assert check.severity == dg.AssetCheckSeverity.WARN


def _record(**changes) -> EvalRunRecord:
    values = {
        "suite": "procedures",
        "night": "2026-10-15",
        "snapshot_id": "2026-10-01",
        "corpus_digest": "c" * 64,
        "golden_set": "procedures",
        "golden_digest": "g" * 64,
        "system_config": {"system_id": "reference"},
        "judge_config": {"judge_id": "deterministic"},
        "settings": RunSettings(),
        **changes,
    }
    return EvalRunRecord(**values)


def test_the_measure_definitions_are_part_of_the_identity_and_recorded():
    """A run measured with other definitions is another run (its rows never replace the old
    figures); a record begun before the definitions were versioned keeps its id."""
    current = _record()
    assert current.measures_version == MEASURES_VERSION
    assert current.as_row()["measures_version"] == MEASURES_VERSION
    assert _record(measures_version="2026-01-01").eval_run_id != current.eval_run_id
    legacy = {**current.as_json()}
    del legacy["measures_version"]
    before = _record(measures_version="")
    # The identity as it was computed before: without the version.
    material = json.dumps(before.identity, separators=(",", ":"))
    assert before.identity == current.identity[:-1]
    assert before.eval_run_id == f"2026-10-15-{hashlib.sha256(material.encode()).hexdigest()[:12]}"
    assert EvalRunRecord.from_json(legacy).eval_run_id == before.eval_run_id
    assert EvalRunRecord.from_json(current.as_json()).eval_run_id == current.eval_run_id


def test_a_record_handed_on_with_other_definitions_is_refused():
    """What one step hands the next is refused when begun with other measure definitions
    (a night begun before an upgrade, re-executed after it), naming both versions."""
    current = _record()
    assert handed_on(current.as_json()) == current
    for begun, shown in (("2026-01-01", "2026-01-01"), ("", "unrecorded")):
        older = _record(measures_version=begun)
        with pytest.raises(ConfigError) as refused:
            handed_on(older.as_json())
        assert str(refused.value).startswith(
            f"evaluation run {older.eval_run_id} was begun with measure definitions {shown}; "
            f"this code computes them as {MEASURES_VERSION}, so its figures would be recorded "
            "under the wrong definitions"
        )


def test_runs_measured_with_different_definitions_do_not_compare():
    # Runs of the reference system, which a re-baseline can re-create (a baseline of another
    # system is advised accept-baseline instead: test_cli).
    row = {**_record().as_row(), "partition_date": "2026-10-16", "system_id": "reference-bm25"}
    baseline = {**row, "eval_run_id": "2026-10-15-base"}
    assert comparability(row, baseline)[0]
    assert comparability({**row, "measures_version": None}, {**baseline, "measures_version": None})[
        0
    ]
    comparable, reason = comparability(row, {**baseline, "measures_version": None})
    assert not comparable
    assert reason.startswith(
        f"not comparable: measure definitions {MEASURES_VERSION} (run {row['eval_run_id']}) "
        "differ from unrecorded (baseline 2026-10-15-base). Re-baseline explicitly: "
        "rag-eval rebaseline --partition 2026-10-16 --suite procedures --reason '<what changed>'"
    )


def test_a_backfilled_night_older_than_its_baseline_is_not_advised_a_re_baseline():
    """A night backfilled after a later night became the baseline, on an older snapshot: the
    re-baseline advice would move the baseline back to it (and the later nights would no longer
    compare), so the reason says so and advises comparing it by hand instead."""
    row = {**_record().as_row(), "partition_date": "2026-10-15", "system_id": "reference-bm25"}
    baseline = {
        **row,
        "eval_run_id": "2026-12-04-base",
        "partition_date": "2026-12-04",
        "corpus_digest": "f" * 64,
    }
    comparable, reason = comparability(row, baseline)
    assert not comparable and "rag-eval rebaseline" not in reason
    assert (
        "Night 2026-10-15 is older than the baseline's night 2026-12-04 (a backfill): "
        "re-baselining to it would move the baseline back"
    ) in reason
    assert f"rag-eval compare {row['eval_run_id']} <run>" in reason
    # A later night on another snapshot is still advised the re-baseline, also against a
    # baseline of no night (a warehouse's earliest runs, "adhoc").
    later = {**row, "partition_date": "2026-12-05"}
    assert "rag-eval rebaseline --partition 2026-12-05" in comparability(later, baseline)[1]
    adhoc = {**baseline, "partition_date": "adhoc"}
    assert "rag-eval rebaseline --partition 2026-12-05" in comparability(later, adhoc)[1]


def test_two_runs_compared_by_hand_are_named_as_runs_without_re_baseline_advice():
    """``rag-eval compare A B``: B is any run, not the suite's baseline, so the refusal names
    both as runs and advises no re-baseline of A."""
    row = {**_record().as_row(), "partition_date": "2026-10-16"}
    other = {**row, "eval_run_id": "2026-10-15-other", "corpus_digest": "f" * 64}
    comparable, reason = comparability(row, {**other, "measures_version": None}, other="run")
    assert not comparable
    assert reason == (
        f"not comparable: corpus digest {row['corpus_digest'][:12]} (run {row['eval_run_id']}) "
        f"differs from ffffffffffff (run 2026-10-15-other); measure definitions "
        f"{MEASURES_VERSION} (run {row['eval_run_id']}) differ from unrecorded "
        "(run 2026-10-15-other)"
    )


def test_an_earlier_warehouse_gains_the_measures_version_column(tmp_path):
    from rag_eval_pipeline.lib.store.warehouse import upgrade

    connection = duckdb.connect(str(tmp_path / "old.duckdb"))
    upgrade(connection)
    connection.execute("DROP VIEW eval_runs")
    connection.execute("ALTER TABLE eval_run_records DROP COLUMN measures_version")
    upgrade(connection)
    upgrade(connection)
    columns = {row[0] for row in connection.sql("DESCRIBE eval_runs").fetchall()}
    assert "measures_version" in columns
    connection.close()


@pytest.mark.parametrize(
    ("summary", "table", "reason"),
    [
        # The summary after the table in the same run, or in a re-execution of the table's run
        # (directly or further down the chain): published.
        ((0, 9, "night-a"), (0, 5, "night-a"), ""),
        ((0, 2, "night-a"), (1, 7, "night-a"), ""),
        ((1, 2, "night-a"), (2, 7, "night-a"), ""),
        # The table again after the summary: in the same run, or in a later re-execution.
        ((0, 5, "night-a"), (0, 9, "night-a"), "materialized after eval_summary published"),
        ((2, 9, "night-a"), (0, 1, "night-a"), "materialized after eval_summary published"),
        # The summary published another evaluation run than the one the table holds.
        ((0, 9, "night-a"), (0, 5, "night-b"), "holds evaluation run night-b, and eval_summary"),
        ((0, 9, "night-a"), (0, 5, ""), "holds evaluation run (none named), and"),
        # Nothing to compare with.
        (None, (0, 5, "night-a"), "eval_summary did not run in this Dagster run"),
        ((0, 9, ""), (0, 5, "night-a"), "eval_summary did not run in this Dagster run"),
        ((0, 9, "night-a"), None, "retrieval_metrics was not materialized in this Dagster run"),
    ],
)
def test_a_table_is_published_only_by_a_summary_after_it_of_its_evaluation_run(
    summary, table, reason
):
    """``release_checks.unpublished_reason`` on hand-made positions in a re-execution chain
    (``depth`` 0 is the run evaluating the check, 1 the run it re-executes, ...)."""
    summary = Materialized(*summary) if summary else None
    table = Materialized(*table) if table else None
    found = unpublished_reason("retrieval_metrics", summary, table)
    assert (found == "") if not reason else (reason in found), found


def test_the_release_checks_run_alone_without_a_night_say_how_to_run_them(library, tmp_path):
    """The UI's "Execute all" on a metric table's checks launches them with no partition; the
    step fails saying the checks are evaluated per night and how to run them again, rather than
    with Dagster's "Cannot access partition_key for a non-partitioned run"."""
    defs = build_definitions(
        Deployment(gates=str(FIXTURE_GATES)), resources=fixture_resources(library, tmp_path / "w")
    )
    job = defs.resolve_job_def("nightly_eval").get_subset(
        asset_selection=set(),
        asset_check_selection={dg.AssetCheckKey(dg.AssetKey("retrieval_metrics"), "published")},
    )
    result = job.execute_in_process(instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "release_checks"
    assert failure.step_failure_data.user_failure_data.description == NO_PARTITION


def test_the_latest_night_comes_before_runs_of_no_night_and_re_baselines():
    """``rag-eval summary``'s default run (``runs.latest_complete``): the latest night's own
    run, before a re-baseline run of that night, an older night completed later (a backfill)
    and a warehouse's earliest runs of no night ("adhoc", which sorts after every date)."""
    import duckdb

    from rag_eval_pipeline.lib.store.sql import sql_query

    with duckdb.connect() as connection:
        connection.execute(
            "CREATE TABLE eval_runs (eval_run_id VARCHAR, suite VARCHAR, partition_date VARCHAR, "
            "complete BOOLEAN, rebaseline_for VARCHAR, completed_at TIMESTAMP)"
        )
        connection.execute(
            "INSERT INTO eval_runs VALUES "
            "('legacy', 'procedures', 'adhoc', true, NULL, '2026-12-09'), "
            "('night', 'procedures', '2026-12-04', true, NULL, '2026-12-04 02:10'), "
            "('rebase', 'procedures', '2026-12-04', true, 'night', '2026-12-04 02:20'), "
            "('backfill', 'procedures', '2026-10-15', true, NULL, '2026-12-04 03:00'), "
            "('failed', 'procedures', '2026-12-05', false, NULL, NULL)"
        )
        latest = connection.execute(
            sql_query("runs", "latest_complete"), {"suite": "procedures"}
        ).fetchall()
    assert latest == [("night",)]
