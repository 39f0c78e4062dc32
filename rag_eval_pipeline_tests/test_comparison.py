"""Pinned comparisons: the real sensor, schedule and jobs on an ephemeral Dagster instance
holding real materializations of the fixture library."""

import json
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pytest
from dagster._core.definitions.partitions.context import partition_loading_context
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar

from rag_eval_pipeline.cli import main
from rag_eval_pipeline.defs import build_definitions
from rag_eval_pipeline.defs.resources import EvalSettings, ReferenceSystemResource
from rag_eval_pipeline.lib.deployment import Deployment
from rag_eval_pipeline.lib.inputs.corpus import freeze_snapshot
from rag_eval_pipeline.lib.metrics import MEASURES_VERSION
from rag_eval_pipeline.lib.metrics.comparison import (
    COMPARED_METRICS,
    mcnemar_exact,
    paired_bootstrap,
)
from rag_eval_pipeline.lib.runs.record import (
    REBASELINE_REASON_TAG,
    REBASELINE_TAG,
    REQUESTED_BY_TAG,
)
from rag_eval_pipeline.lib.store.sql import sql_statements
from rag_eval_pipeline.testing import materialize_suite, names

from .conftest import FIXTURE_GATES, SUITE, fixture_assets, fixture_resources


class Nights:
    """Materializes nights of the fixture suite into one ephemeral instance and warehouse."""

    def __init__(self, library: Path, warehouse: Path):
        self.library = library
        self.warehouse = warehouse
        self.instance = dg.DagsterInstance.ephemeral()
        self.cursor: str | None = None
        self.assets = fixture_assets()
        self.defs = build_definitions(
            Deployment(gates=str(FIXTURE_GATES)),
            resources=fixture_resources(library, warehouse),
        )

    def run(self, night: str, tags: dict | None = None, system: dict | None = None):
        resources = fixture_resources(self.library, self.warehouse)
        if system is not None:
            resources["system"] = ReferenceSystemResource(**system)
        result = materialize_suite(
            night, SUITE, resources, instance=self.instance, assets=self.assets, tags=tags
        )
        assert result.success
        return result

    def compare(self, night: str, run_config: dict | None = None, tags: dict | None = None):
        return materialize_suite(
            night,
            SUITE,
            fixture_resources(self.library, self.warehouse),
            instance=self.instance,
            assets=self.assets,
            selection=[a for a in self.assets if "run_comparison" in names(a)],
            run_config=run_config,
            tags=tags,
        )

    def tick(self):
        """One tick of the guard, carrying its cursor from tick to tick as the daemon does."""
        context = dg.build_sensor_context(
            instance=self.instance, definitions=self.defs, cursor=self.cursor
        )
        # The daemon evaluates sensors with the instance as the dynamic-partitions store.
        with partition_loading_context(dynamic_partitions_store=self.instance):
            tick = self.defs.resolve_sensor_def("comparison_guard").evaluate_tick(context)
        self.cursor = tick.cursor
        return tick

    def summary_facts(self, night: str) -> dict:
        """The newest ``eval_summary`` materialization's metadata values of ``night``."""
        [record] = self.instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("eval_summary"), asset_partitions=[f"{night}|{SUITE}"]
            ),
            limit=1,
        ).records
        metadata = record.asset_materialization.metadata
        return {key: value.value for key, value in metadata.items()}

    def query(self, sql: str, parameters: dict | None = None):
        with duckdb.connect(str(self.warehouse), read_only=True) as connection:
            return connection.sql(sql, params=parameters).fetchall()


@pytest.fixture
def nights(library, tmp_path):
    return Nights(library, tmp_path / "w.duckdb")


def new_snapshot(library: Path) -> None:
    """2026-11-01: the fridge procedure revised (v1 superseded by v2 with a new threshold)."""
    old = library / "2026-10-01"
    new = library / "2026-11-01"
    shutil.copytree(old, new)
    documents = new / "documents"
    v1 = (documents / "STORE-FRIDGE-001@v1.md").read_text()
    (documents / "STORE-FRIDGE-001@v1.md").write_text(
        v1.replace("status: current", "status: superseded\nsuperseded_by: STORE-FRIDGE-001@v2")
    )
    (documents / "STORE-FRIDGE-001@v2.md").write_text(
        v1.replace("version: 1", "version: 2").replace("8 °C", "6 °C")
    )
    freeze_snapshot(new)


def test_first_run_is_the_baseline_and_nothing_is_compared(nights):
    nights.run("2026-10-15")
    tick = nights.tick()
    assert tick.run_requests == []
    assert "is the baseline of golden" in tick.skip_message
    assert nights.query("SELECT kind, reason FROM baseline_decisions") == [
        ("first_run", "first completed run")
    ]
    # The UI says what run_baselines says: the baseline is compared with nothing.
    facts = nights.summary_facts("2026-10-15")
    assert facts["is_baseline"] is True and facts["baseline_run_id"] == ""
    assert facts["comparable_with_baseline"] is None
    assert nights.query("SELECT comparable FROM run_baselines") == [(None,)]
    nights.run("2026-10-15")  # a re-run of the baseline
    assert nights.summary_facts("2026-10-15")["comparable_with_baseline"] is None


def test_same_digests_request_the_comparison(nights):
    nights.run("2026-10-15")
    nights.tick()
    nights.run("2026-10-16")
    tick = nights.tick()
    assert [r.job_name for r in tick.run_requests] == ["run_comparison_job"]
    request = tick.run_requests[0]
    assert request.partition_key == "2026-10-16|golden"
    candidate = request.run_config["ops"]["run_comparison"]["config"]["candidate_run_id"]
    assert candidate.startswith("2026-10-16-")
    result = nights.compare("2026-10-16", request.run_config)
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"comparable_with_baseline": True, "gate_no_significant_regression": True}
    rows = nights.query(
        "SELECT metric, delta, p_value, n, comparable FROM run_comparisons "
        "WHERE candidate_run_id = $run ORDER BY metric",
        {"run": candidate},
    )
    assert ("Success@5", 0.0, 1.0, 3, True) in rows
    assert len(rows) == len(COMPARED_METRICS)


def test_a_night_whose_guard_ran_in_its_own_process_is_not_decided_again(nights):
    """``rag-eval nightly`` applies the guard in its own process and tags the night (and what
    its guard launches) ``rag_eval/guard: in_process``: the daemon's guard, started afterwards
    (its cursor at the start of history) or running beside it, skips that night, saying why,
    and still decides a night run without the tag."""
    from rag_eval_pipeline.defs.sensors import GUARD_TAG, IN_PROCESS

    nights.run("2026-10-15")
    nights.tick()
    guarded = nights.run("2026-10-16", tags={GUARD_TAG: IN_PROCESS})
    tick = nights.tick()
    assert tick.run_requests == []
    assert f"decided by rag-eval nightly in its own process (run {guarded.run_id})" in (
        tick.skip_message
    )
    nights.run("2026-10-17")
    [request] = nights.tick().run_requests
    candidate = request.run_config["ops"]["run_comparison"]["config"]["candidate_run_id"]
    assert candidate.startswith("2026-10-17-")


def test_a_night_whose_process_died_before_deciding_is_decided_by_the_daemon(nights):
    """A night tagged for the in-process guard is left to its ``rag-eval nightly`` while that
    process runs (kept for the next tick), skipped once the process tagged it decided, and
    decided by the sensor when the process ended without deciding (killed during its
    comparison: no comparison would ever be made otherwise)."""
    import os
    import socket
    import subprocess

    from rag_eval_pipeline.defs.sensors import (
        GUARD_DONE_TAG,
        GUARD_TAG,
        HOST_TAG,
        IN_PROCESS,
        PID_TAG,
    )

    nights.run("2026-10-15")
    nights.tick()
    here = {GUARD_TAG: IN_PROCESS, HOST_TAG: socket.gethostname(), GUARD_DONE_TAG: "pending"}
    running = nights.run("2026-10-16", tags={**here, PID_TAG: str(os.getpid())})
    first = nights.tick()
    assert first.run_requests == []
    assert f"left to rag-eval nightly, deciding it in its process {os.getpid()}" in (
        first.skip_message
    )
    still = nights.tick()
    assert still.run_requests == [] and "left to rag-eval nightly" in still.skip_message
    nights.instance.add_run_tags(running.run_id, {GUARD_DONE_TAG: "true"})
    done = nights.tick()
    assert done.run_requests == []
    assert f"decided by rag-eval nightly in its own process (run {running.run_id})" in (
        done.skip_message
    )
    assert "no evaluation run completed since" in nights.tick().skip_message

    gone = subprocess.Popen(["true"])
    gone.wait()
    died = nights.run("2026-10-17", tags={**here, PID_TAG: str(gone.pid)})
    [request] = nights.tick().run_requests
    assert request.job_name == "run_comparison_job"
    candidate = request.run_config["ops"]["run_comparison"]["config"]["candidate_run_id"]
    assert candidate == died.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    # A night of a rag-eval from before the tag (no "pending"): decided by its process, as ever.
    older = {key: value for key, value in here.items() if key != GUARD_DONE_TAG}
    nights.run("2026-10-18", tags={**older, PID_TAG: str(gone.pid)})
    old_tick = nights.tick()
    assert old_tick.run_requests == [] and "decided by rag-eval nightly" in old_tick.skip_message


def test_different_corpus_digest_is_skipped_with_both_digests(nights, library, monkeypatch):
    """A night on another corpus snapshot than its baseline is skipped, naming both digests and
    the re-baseline command, and the webhook is told once (``not_comparable``): nights stop
    being compared until a person re-baselines, which an unattended team must hear of."""
    from .test_operations import Webhook

    nights.run("2026-10-15")
    new_snapshot(library)
    nights.run("2026-11-02")
    with Webhook() as hook:
        monkeypatch.setenv("RAG_EVAL_ALERT_WEBHOOK", hook.url)
        tick = nights.tick()
        again = nights.tick()
    assert tick.run_requests == []
    old_digest, new_digest = (
        row[0]
        for row in nights.query("SELECT corpus_digest FROM eval_runs ORDER BY partition_date")
    )
    assert old_digest[:12] in tick.skip_message and new_digest[:12] in tick.skip_message
    assert "rag-eval rebaseline --partition 2026-11-02" in tick.skip_message
    [alert] = hook.received
    [night] = nights.query("SELECT eval_run_id FROM eval_runs WHERE partition_date = '2026-11-02'")
    assert (alert["kind"], alert["eval_run_id"]) == ("not_comparable", night[0])
    assert alert["text"].startswith(
        f"rag_eval: __ephemeral_asset_job__ 2026-11-02|golden (evaluation run {night[0]}) was "
        "not compared: "
    )
    assert new_digest[:12] in alert["text"] and "rag-eval rebaseline" in alert["text"]
    assert "no evaluation run completed since" in again.skip_message


def test_different_golden_digest_is_skipped(nights, library):
    nights.run("2026-10-15")
    golden = library / "golden.jsonl"
    golden.write_text(
        golden.read_text().replace("what dose of paracetamol", "what dose of ibuprofen")
    )
    nights.run("2026-10-16")
    tick = nights.tick()
    assert tick.run_requests == []
    assert "golden-set digest" in tick.skip_message and "differs" in tick.skip_message


def test_rebaseline_tag_without_a_reason_is_refused(nights, library):
    nights.run("2026-10-15")
    new_snapshot(library)
    nights.run("2026-11-02", tags={REBASELINE_TAG: "true"})
    tick = nights.tick()
    assert tick.run_requests == []
    assert "refused: no reason given" in tick.skip_message
    assert nights.query("SELECT count(*) FROM rebaseline_offsets") == [(0,)]


def test_the_regression_gate_is_not_assessed_when_the_baseline_is_compared_with_itself():
    """Materialized by hand on the baseline's own night, ``run_comparison`` compares nothing
    (no rows): the regression gate said "no significant regression" and passed, a pass where
    nothing was measured. It is not assessed (a warning, as across digests), saying why."""
    import polars as pl

    from rag_eval_pipeline.defs.comparison import comparison_checks
    from rag_eval_pipeline.lib.runs.comparisons import Comparison

    run = {
        "eval_run_id": "2026-10-14-188658b68b28",
        "corpus_digest": "4dc2",
        "golden_digest": "bde7",
        "measures_version": MEASURES_VERSION,
    }
    reason = "2026-10-14-188658b68b28 is the baseline; nothing to compare"
    comparable, gate = comparison_checks(Comparison(run, run, True, reason, pl.DataFrame()), 0.05)
    assert comparable.passed
    assert not gate.passed
    assert gate.severity == dg.AssetCheckSeverity.WARN
    assert gate.description == f"not assessed: {reason}"


def test_the_rebaseline_run_config_carries_the_baselines_settings():
    """A baseline measured at cut-offs 1, 5 and 20 (a gate at Success@20) is re-run at them:
    with the defaults the re-baseline's offsets would mix the settings in, and the gate would
    fail it before it began. The digests recorded beside the settings are not configuration;
    a baseline without recorded settings runs with the defaults."""
    from rag_eval_pipeline.defs.sensors import rebaseline_run_config

    recorded = {
        "retrieval_depth": 20,
        "context_k": 5,
        "cutoffs": [1, 5, 20],
        "rel_level": 2,
        "judge_sample_size": 600,
        "judge_repeats": 1,
        "seed": 7,
        "bootstrap_resamples": 1000,
        "human_labels_digest": "abc",
        "trace_store_digest": "",
    }
    summary = {
        "eval_run_id": "2026-11-02-aaaaaaaaaaaa",
        "baseline_system_id": "reference-bm25",
        "baseline_system_config": json.dumps({"system_id": "reference-bm25", "k1": 1.2}),
        "baseline_settings": json.dumps(recorded),
    }
    config = rebaseline_run_config(summary)
    assert config["resources"]["settings"]["config"] == {
        key: value for key, value in recorded.items() if not key.endswith("_digest")
    }
    EvalSettings(**config["resources"]["settings"]["config"])  # a valid settings block
    assert (
        "settings" not in rebaseline_run_config({**summary, "baseline_settings": "{}"})["resources"]
    )
    assert (
        "settings"
        not in rebaseline_run_config(
            {k: v for k, v in summary.items() if k != "baseline_settings"}
        )["resources"]
    )


def test_the_comparison_page_links_both_runs_and_names_both_golden_digests():
    """``run_comparison``'s ``dagster_run`` is the run that compared: the page also links the
    Dagster runs that measured the candidate and the baseline, and names both golden-set
    digests beside the corpus digests (they were only on the check)."""
    import polars as pl

    from rag_eval_pipeline.defs.comparison import comparison_metadata
    from rag_eval_pipeline.lib.runs.comparisons import Comparison

    def run(eval_run_id: str, dagster_run_id: str) -> dict:
        return {
            "eval_run_id": eval_run_id,
            "dagster_run_id": dagster_run_id,
            "corpus_digest": "4dc2",
            "golden_digest": f"golden-of-{eval_run_id}",
            "measures_version": MEASURES_VERSION,
        }

    candidate, baseline = run("2026-10-15-a", "run-a"), run("2026-10-14-b", "run-b")
    rows = pl.DataFrame(schema={"metric": pl.String})
    metadata = comparison_metadata(
        Comparison(candidate, baseline, False, "other golden set", rows), "2026-10-15-a", "cmp"
    )
    assert metadata["dagster_run"].url == "/runs/cmp"
    assert metadata["candidate_dagster_run"].url == "/runs/run-a"
    assert metadata["baseline_dagster_run"].url == "/runs/run-b"
    assert metadata["candidate_golden_digest"] == "golden-of-2026-10-15-a"
    assert metadata["baseline_golden_digest"] == "golden-of-2026-10-14-b"
    # The suite's first run has no baseline: its entries are empty, not the candidate's own.
    first = comparison_metadata(
        Comparison(candidate, None, False, "no baseline yet", rows), "2026-10-15-a", "cmp"
    )
    assert "baseline_dagster_run" not in first
    assert first["baseline_golden_digest"] == first["baseline_corpus_digest"] == ""
    assert first["baseline_measures_version"] == ""


def test_a_rebaseline_runs_pages_say_whose_night_they_rebaseline(nights, library):
    """The rebaseline job materializes the night's partition again, after the night: the
    partition's newest ``retrieval_run`` and metric tables are then the re-baseline run's (the
    old baseline's system on the new snapshot), not the night's. Their pages name the night's
    run they re-baseline, as ``eval_summary`` does; the night's own pages leave it empty."""
    nights.run("2026-10-15")
    new_snapshot(library)
    tags = {REBASELINE_TAG: "true", REBASELINE_REASON_TAG: "revised", REQUESTED_BY_TAG: "owner"}
    night = nights.run("2026-11-02", tags=tags)
    [candidate] = nights.query(
        "SELECT eval_run_id FROM eval_runs WHERE partition_date = '2026-11-02'"
    )
    request = nights.tick().run_requests[0]
    rebaseline = nights.run(
        "2026-11-02",
        tags=dict(request.tags),
        system=request.run_config["resources"]["system"]["config"],
    )
    for asset in ("retrieval_run", "retrieval_metrics", "generation_metrics", "judge_calibration"):
        [own] = night.asset_materializations_for_node(asset)
        [again] = rebaseline.asset_materializations_for_node(asset)
        assert own.metadata["rebaseline_for"].value == "", asset
        assert again.metadata["rebaseline_for"].value == candidate[0], asset
        assert again.metadata["eval_run_id"].value != candidate[0], asset
    assert nights.summary_facts("2026-11-02")["rebaseline_for"] == candidate[0]


def test_rebaseline_stores_the_offset_and_the_comparison_runs(nights, library):
    nights.run("2026-10-15")
    old_baseline = nights.query("SELECT eval_run_id FROM eval_runs")[0][0]
    new_snapshot(library)
    reason = "fridge procedure revised"
    nights.run(
        "2026-11-02",
        tags={REBASELINE_TAG: "true", REBASELINE_REASON_TAG: reason, REQUESTED_BY_TAG: "lab owner"},
    )
    candidate = nights.query(
        "SELECT eval_run_id FROM eval_runs WHERE partition_date = '2026-11-02'"
    )[0][0]
    tick = nights.tick()
    assert [r.job_name for r in tick.run_requests] == ["rebaseline"]
    request = tick.run_requests[0]
    assert request.tags[REBASELINE_REASON_TAG] == reason
    # It re-runs the baseline's settings too (its cut-offs, samples, seeds), not the defaults.
    [(baseline_settings,)] = nights.query(
        "SELECT settings FROM eval_runs WHERE is_current_baseline"
    )
    settings = request.run_config["resources"]["settings"]["config"]
    assert settings == {
        key: value for key, value in json.loads(baseline_settings).items() if key in settings
    }
    assert set(settings) == set(EvalSettings.model_fields)
    # The rebaseline job re-creates the baseline's system configuration from run config.
    nights.run(
        "2026-11-02",
        tags=dict(request.tags),
        system=request.run_config["resources"]["system"]["config"],
    )
    offsets = dict(
        (metric, (old, new, offset, requested_by))
        for metric, old, new, offset, requested_by in nights.query(
            "SELECT metric, old_value, new_value, offset_value, requested_by FROM rebaseline_offsets"
        )
    )
    assert offsets["Success@5"][3] == "lab owner"
    for old, new, offset, _ in offsets.values():
        assert offset == pytest.approx(new - old)
    decisions = nights.query(
        "SELECT kind, previous_baseline_run_id, requested_by FROM baseline_decisions ORDER BY decided_at"
    )
    assert decisions[-1] == ("rebaseline", old_baseline, "lab owner")
    # The re-baseline run is on another snapshot than the old baseline: not comparable with it,
    # in the UI as in run_baselines.
    facts = nights.summary_facts("2026-11-02")
    [(rebaseline_run, comparable)] = nights.query(
        "SELECT eval_run_id, comparable FROM run_baselines WHERE baseline_run_id = $old "
        "AND eval_run_id <> $candidate",
        {"old": old_baseline, "candidate": candidate},
    )
    assert facts["eval_run_id"] == rebaseline_run
    assert facts["comparable_with_baseline"] is False and comparable is False
    tick = nights.tick()
    assert [r.job_name for r in tick.run_requests] == ["run_comparison_job"]
    compare = tick.run_requests[0]
    assert compare.run_config["ops"]["run_comparison"]["config"]["candidate_run_id"] == candidate
    result = nights.compare("2026-11-02", compare.run_config)
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["comparable_with_baseline"] is True
    compared = nights.query(
        "SELECT DISTINCT baseline_run_id, comparable FROM run_comparisons WHERE candidate_run_id = $run",
        {"run": candidate},
    )
    assert compared[0][1] is True and compared[0][0] != old_baseline


def test_a_back_filled_night_on_a_former_baselines_snapshot_names_that_baseline(nights, library):
    """After a re-baseline onto a new snapshot, a night back-filled on the old snapshot is not
    comparable with the current baseline, and the reason names the former baseline it does
    compare with and the command comparing the two."""
    nights.run("2026-10-15")
    [(old_baseline,)] = nights.query("SELECT eval_run_id FROM eval_runs")
    new_snapshot(library)
    tags = {REBASELINE_TAG: "true", REBASELINE_REASON_TAG: "fridge procedure revised"}
    nights.run("2026-11-02", tags=tags)
    [request] = nights.tick().run_requests
    nights.run(
        "2026-11-02",
        tags=dict(request.tags),
        system=request.run_config["resources"]["system"]["config"],
    )
    nights.tick()
    nights.run("2026-10-20")
    [(back_filled, reason)] = nights.query(
        "SELECT r.eval_run_id, b.reason FROM eval_runs r JOIN run_baselines b USING (eval_run_id) "
        "WHERE r.partition_date = '2026-10-20'"
    )
    assert reason.startswith("not comparable: corpus digest")
    assert reason.endswith(
        f". Run {old_baseline} (night 2026-10-15), a former baseline of this suite, shares its "
        f"corpus, golden set and measure definitions: rag-eval compare {back_filled} "
        f"{old_baseline}"
    )
    tick = nights.tick()
    assert tick.run_requests == [] and f"rag-eval compare {back_filled}" in tick.skip_message


def test_a_re_baseline_after_relabelling_names_the_golden_set_change(nights, library):
    """Re-baselined after the golden set changed on the same corpus: the offsets printed are
    said to be the golden set change's, not the corpus's."""
    from rag_eval_pipeline.cli.nightly import format_offsets

    nights.run("2026-10-15")
    golden = library / "golden.jsonl"
    golden.write_text(
        golden.read_text().replace("what dose of paracetamol", "what dose of ibuprofen")
    )
    tags = {REBASELINE_TAG: "true", REBASELINE_REASON_TAG: "reworded an item"}
    nights.run("2026-10-16", tags=tags)
    [request] = nights.tick().run_requests
    result = nights.run(
        "2026-10-16",
        tags=dict(request.tags),
        system=request.run_config["resources"]["system"]["config"],
    )
    rebaseline_run = result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]
    with duckdb.connect(str(nights.warehouse), read_only=True) as connection:
        printed = format_offsets(rebaseline_run, connection)
    assert printed.splitlines()[0].endswith(
        "(the baseline's system on both: the effect of the golden set change alone):"
    )


def test_hand_materialized_comparison_across_snapshots_is_blocked(nights, library):
    nights.run("2026-10-15")
    new_snapshot(library)
    nights.run("2026-11-02")
    result = nights.compare("2026-11-02")
    # The blocking check fails with ERROR severity, which fails the run itself.
    assert not result.success
    evaluation = next(
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "comparable_with_baseline"
    )
    assert evaluation.passed is False
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert "not comparable: corpus digest" in evaluation.description
    assert "rag-eval rebaseline" in evaluation.description
    rows = nights.query("SELECT metric, comparable FROM run_comparisons")
    assert rows == [("comparability", False)]


def test_schedule_requests_the_nights_partition_at_two(tmp_path):
    # A night's partition is named by the date the run happens on (end_offset=1), the same
    # date `make nightly` uses, so the 02:00 tick on 29 November evaluates 2026-11-29.
    # The registry holds the checkout's bundled suite file and an on-demand suite, not the
    # checkout's suites/ folder, where a user's own nightly suite would be requested too.
    registry = tmp_path / "suites"
    registry.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "suites" / "procedures.yaml", registry)
    (registry / "on-demand.yaml").write_text(
        "golden_set: golden_sets/procedures.jsonl\ncorpus_root: corpus_snapshots\nnightly: false\n"
    )
    defs = build_definitions(Deployment(suites=str(registry)))
    schedule = defs.resolve_schedule_def("nightly_eval_schedule")
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=__import__("datetime").datetime(2026, 11, 29, 2, 0),
            repository_def=defs.get_repository_def(),
        )
        requests = schedule.evaluate_tick(context).run_requests
        assert instance.get_dynamic_partitions("suite") == ["procedures"]
    # One partition per nightly suite: the night of the tick and the bundled suite (the
    # on-demand suite is neither requested nor added as a partition).
    assert [r.partition_key.split("|")[0] for r in requests] == ["2026-11-29"]
    assert [r.partition_key for r in requests] == ["2026-11-29|procedures"]
    assert requests[0].job_name in (None, "nightly_eval")


@pytest.mark.parametrize(
    ("candidate", "baseline"),
    [
        ([1, 1, 0, 0, 1, 0, 1, 1, 0, 1] * 3, [1, 0, 0, 1, 1, 1, 1, 0, 0, 1] * 3),
        ([1] * 20 + [0] * 5, [0] * 12 + [1] * 13),
        ([1, 0, 1], [1, 0, 1]),
    ],
)
def test_mcnemar_agrees_with_statsmodels(candidate, baseline):
    p_value, b, c = mcnemar_exact([bool(x) for x in candidate], [bool(x) for x in baseline])
    table = [
        [sum(1 for n, o in zip(candidate, baseline, strict=True) if o and n), b],
        [c, sum(1 for n, o in zip(candidate, baseline, strict=True) if not o and not n)],
    ]
    assert p_value == pytest.approx(mcnemar(table, exact=True).pvalue, abs=1e-12)


def test_paired_bootstrap_agrees_with_scipy():
    rng = np.random.default_rng(7)
    baseline = rng.random(200)
    candidate = baseline + rng.normal(0.05, 0.1, 200)
    delta, low, high, p_value = paired_bootstrap(candidate, baseline, resamples=20000)
    reference = stats.bootstrap(
        (candidate, baseline),
        lambda new, old: np.mean(new - old),
        paired=True,
        vectorized=False,
        n_resamples=20000,
        method="percentile",
        random_state=11,
    ).confidence_interval
    assert delta == pytest.approx(np.mean(candidate - baseline))
    assert low == pytest.approx(reference.low, abs=0.003)
    assert high == pytest.approx(reference.high, abs=0.003)
    assert p_value < 0.001


def create_item_tables(connection) -> None:
    """The per-item tables ``comparison_item_values.sql`` reads, with the columns it needs."""
    connection.execute(
        "CREATE TABLE retrieval_item_metrics (eval_run_id VARCHAR, item_id VARCHAR, "
        "measure VARCHAR, k INTEGER, value DOUBLE)"
    )
    connection.execute(
        "CREATE TABLE generation_item_metrics (eval_run_id VARCHAR, item_id VARCHAR, "
        "answerable BOOLEAN, refused BOOLEAN, correct BOOLEAN, confident_wrong BOOLEAN, "
        "token_f1 DOUBLE, citation_valid BOOLEAN)"
    )
    connection.execute(
        "CREATE TABLE judge_verdicts (eval_run_id VARCHAR, item_id VARCHAR, source VARCHAR, "
        "verdict VARCHAR)"
    )


def test_citation_validity_and_faithfulness_are_compared_on_the_items_both_runs_answered():
    """Citation validity pairs the answerable items answered in both runs, faithfulness the
    answerable items judged in both (golden verdicts; judge errors left out), each computed by
    hand here: a1 cites validly then not (b = 1, c = 0: McNemar p = 2 * 0.5 = 1.0), a2 and a4
    validly in both (1 -> 2/3 over n = 3); a3 is refused by the candidate (paired in neither), n1 is a no-answer item (in
    neither). Faithfulness a1 2/2 -> 1/2 (a judge error left out), a2 1/2 -> 3/4 (a production
    verdict left out): 0.75 -> 0.625 over n = 2; a4 has only a judge error (no value)."""
    from rag_eval_pipeline.lib.runs.baselines import compare_runs, item_values

    items = [
        # run, item, answerable, refused, citation_valid
        ("base", "a1", True, False, True),
        ("base", "a2", True, False, True),
        ("base", "a3", True, False, True),
        ("base", "a4", True, False, True),
        ("base", "n1", False, False, False),
        ("cand", "a1", True, False, False),
        ("cand", "a2", True, False, True),
        ("cand", "a3", True, True, None),
        ("cand", "a4", True, False, True),
        ("cand", "n1", False, False, True),
    ]
    verdicts = [
        ("base", "a1", "golden", "ENTAILED"),
        ("base", "a1", "golden", "ENTAILED"),
        ("base", "a2", "golden", "ENTAILED"),
        ("base", "a2", "golden", "CONTRADICTED"),
        ("base", "a3", "golden", "ENTAILED"),
        ("base", "a4", "golden", "ENTAILED"),
        ("base", "n1", "golden", "UNSUPPORTED"),
        ("cand", "a1", "golden", "ENTAILED"),
        ("cand", "a1", "golden", "UNSUPPORTED"),
        ("cand", "a1", "golden", "JUDGE_ERROR"),
        ("cand", "a2", "golden", "ENTAILED"),
        ("cand", "a2", "golden", "ENTAILED"),
        ("cand", "a2", "golden", "ENTAILED"),
        ("cand", "a2", "golden", "UNSUPPORTED"),
        ("cand", "a2", "production", "UNSUPPORTED"),
        ("cand", "a4", "golden", "JUDGE_ERROR"),
        ("cand", "n1", "golden", "ENTAILED"),
    ]
    with duckdb.connect() as connection:
        create_item_tables(connection)
        connection.executemany(
            "INSERT INTO generation_item_metrics VALUES (?, ?, ?, ?, NULL, FALSE, NULL, ?)", items
        )
        connection.executemany("INSERT INTO judge_verdicts VALUES (?, ?, ?, ?)", verdicts)
        connection.execute(
            "CREATE TABLE eval_runs (eval_run_id VARCHAR, judge_id VARCHAR, "
            "judge_config_digest VARCHAR)"
        )
        connection.execute(
            "INSERT INTO eval_runs VALUES ('base', 'deterministic', 'aaa'), "
            "('cand', 'deterministic', 'aaa'), ('other', 'llm', 'bbb')"
        )
        values = item_values(connection, "cand")
        assert sorted(values.filter(metric="faithfulness").rows()) == [
            ("a1", "faithfulness", 0.5),
            ("a2", "faithfulness", 0.75),
        ]
        compared = {
            row["metric"]: row
            for row in compare_runs(connection, "cand", "base").iter_rows(named=True)
        }
        # The same items judged by another judge: faithfulness is left out, and said so.
        connection.execute(
            "UPDATE judge_verdicts SET eval_run_id = 'other' WHERE eval_run_id = 'base'"
        )
        connection.execute(
            "UPDATE generation_item_metrics SET eval_run_id = 'other' WHERE eval_run_id = 'base'"
        )
        other_judge = compare_runs(connection, "cand", "other")["metric"].to_list()
        from rag_eval_pipeline.lib.runs.baselines import judge_note
        from rag_eval_pipeline.lib.runs.registry import run_row

        note = judge_note(run_row(connection, "cand"), run_row(connection, "other"))
    validity, faithfulness = compared["citation_validity"], compared["faithfulness"]
    assert (validity["baseline_value"], validity["n"]) == (1.0, 3)
    assert validity["candidate_value"] == pytest.approx(2 / 3)
    assert validity["test"] == "mcnemar_exact" and validity["p_value"] == 1.0
    assert faithfulness["baseline_value"] == pytest.approx(0.75)
    assert faithfulness["candidate_value"] == pytest.approx(0.625)
    assert faithfulness["delta"] == pytest.approx(-0.125) and faithfulness["n"] == 2
    assert faithfulness["test"] == "paired_bootstrap"
    assert "citation_validity" in other_judge and "faithfulness" not in other_judge
    assert note == (
        "faithfulness not compared: judged by deterministic (aaa), the other run by llm (bbb)"
    )


def test_refusals_are_compared_per_stratum_and_confident_wrong_on_answerable_items():
    """A refusal is a failure on an answerable item and a success on a no-answer one, so the
    comparison keeps them apart as the summary does: here the candidate answers one more
    answerable item right and refuses both no-answer items the baseline answered. By hand:
    false_refusal 1/2 -> 0/2, confident_wrong (answerable) 0/2 -> 0/2, correct_refusal 0/2 ->
    2/2; one "refused" rate over all four items would have stayed at 1/4 -> 2/4, a regression."""
    from rag_eval_pipeline.lib.metrics.comparison import compare_items
    from rag_eval_pipeline.lib.runs.baselines import item_values

    rows = [
        # run, item, answerable, refused, correct, confident_wrong
        ("base", "a1", True, False, True, False),
        ("base", "a2", True, True, False, False),
        ("base", "n1", False, False, False, True),
        ("base", "n2", False, False, False, True),
        ("cand", "a1", True, False, True, False),
        ("cand", "a2", True, False, True, False),
        ("cand", "n1", False, True, True, False),
        ("cand", "n2", False, True, True, False),
    ]
    with duckdb.connect() as connection:
        create_item_tables(connection)
        connection.executemany(
            "INSERT INTO generation_item_metrics VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)", rows
        )
        candidate, baseline = item_values(connection, "cand"), item_values(connection, "base")
    compared = {
        row["metric"]: row
        for row in compare_items(candidate, baseline, COMPARED_METRICS).iter_rows(named=True)
    }
    assert "refused" not in compared
    values = {m: (r["baseline_value"], r["candidate_value"], r["n"]) for m, r in compared.items()}
    assert values["false_refusal"] == (0.5, 0.0, 2)
    assert values["confident_wrong"] == (0.0, 0.0, 2)
    assert values["correct_refusal"] == (0.0, 1.0, 2)
    assert values["answer_correct"] == (0.5, 1.0, 2)


def test_a_baseline_measured_with_other_definitions_is_not_compared_until_rebaselined(
    nights, monkeypatch, capsys
):
    """A baseline recorded before the measure definitions were versioned (an earlier warehouse:
    its ``measures_version`` is NULL) is not compared with tonight's run, the guard saying so
    and naming the re-baseline; the re-baseline re-runs the baseline's configuration under
    today's definitions on the same snapshot, and the night is then compared with it."""
    nights.run("2026-10-15")
    nights.tick()
    with duckdb.connect(str(nights.warehouse)) as connection:
        connection.execute("UPDATE eval_run_records SET measures_version = NULL")
    nights.run("2026-10-16")
    tick = nights.tick()
    assert tick.run_requests == []
    assert (
        f"measure definitions {MEASURES_VERSION} (run 2026-10-16-" in tick.skip_message
        and "differ from unrecorded (baseline 2026-10-15-" in tick.skip_message
    )
    assert "rag-eval rebaseline --partition 2026-10-16" in tick.skip_message
    # Materialized by hand, the comparison is blocked, its check naming both definitions.
    blocked = nights.compare("2026-10-16")
    assert not blocked.success
    [check] = [
        e
        for e in blocked.get_asset_check_evaluations()
        if e.check_name == "comparable_with_baseline"
    ]
    versions = {k: check.metadata[k].value for k in check.metadata if "measures_version" in k}
    assert versions == {
        "candidate_measures_version": MEASURES_VERSION,
        "baseline_measures_version": "unrecorded",
    }
    # rag-eval compare of the two names both as runs and advises no re-baseline.
    monkeypatch.setenv("RAG_EVAL_WAREHOUSE", str(nights.warehouse))
    (old,), (new,) = nights.query("SELECT eval_run_id FROM eval_runs ORDER BY partition_date")
    capsys.readouterr()
    assert main(["compare", new, old]) == 1
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{new} against {old}: not comparable: measure definitions {MEASURES_VERSION} "
        f"(run {new}) differ from unrecorded (run {old})"
    )
    reason = "measure definitions of " + MEASURES_VERSION
    nights.run("2026-10-16", tags={REBASELINE_TAG: "true", REBASELINE_REASON_TAG: reason})
    [request] = nights.tick().run_requests
    assert request.job_name == "rebaseline"
    nights.run(
        "2026-10-16",
        tags=dict(request.tags),
        system=request.run_config["resources"]["system"]["config"],
    )
    [compare] = nights.tick().run_requests
    result = nights.compare("2026-10-16", compare.run_config)
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["comparable_with_baseline"] is True
    # Same system, same snapshot: the offset the definitions alone made is recorded.
    assert nights.query("SELECT count(*) FROM rebaseline_offsets")[0][0] > 0
    # The re-baseline says what it re-measured: the definitions, not a corpus.
    [(why,)] = nights.query(
        "SELECT reason FROM run_baselines WHERE eval_run_id IN "
        "(SELECT eval_run_id FROM eval_runs WHERE rebaseline_for IS NOT NULL "
        "AND rebaseline_for <> '')"
    )
    assert why.startswith("re-baseline of 2026-10-15-")
    assert f": measure definitions {MEASURES_VERSION} (run 2026-10-16-" in why
    assert "differ from unrecorded (baseline 2026-10-15-" in why and "corpus" not in why
    # rag-eval history marks where the definitions changed, as it marks a corpus change.
    capsys.readouterr()
    assert main(["history", "--metric", "Success@5"]) == 0
    shown = capsys.readouterr().out.splitlines()
    [mark] = [i for i, line in enumerate(shown) if "| measure definitions changed" in line]
    assert shown[mark] == f"  | measure definitions changed: unrecorded -> {MEASURES_VERSION}"
    assert "2026-10-15" in shown[mark - 1]
    assert "2026-10-16" in shown[mark + 1] and not any("corpus changed" in s for s in shown)


def test_history_and_summary_read_a_warehouse_not_yet_upgraded(nights, monkeypatch, capsys):
    """After upgrading the code, read-only commands meet the warehouse as the earlier code
    left it (a publish upgrades it, a read does not): no ``measures_version`` column, no
    ``regression_alpha``. They read it, showing the definitions as unrecorded and the gate at
    the gates file's level, rather than fail on the missing columns."""
    nights.run("2026-10-15")
    nights.run("2026-10-16")
    assert nights.compare("2026-10-16").success
    with duckdb.connect(str(nights.warehouse)) as connection:
        connection.execute("DROP VIEW eval_runs")
        connection.execute("ALTER TABLE eval_run_records DROP COLUMN measures_version")
        connection.execute("ALTER TABLE run_comparisons DROP COLUMN regression_alpha")
        for statement in sql_statements("views"):
            connection.execute(statement)
    monkeypatch.setenv("RAG_EVAL_WAREHOUSE", str(nights.warehouse))
    capsys.readouterr()
    assert main(["history", "--metric", "Success@5"]) == 0
    shown = capsys.readouterr().out
    assert "2026-10-15" in shown and "2026-10-16" in shown
    assert "changed" not in shown.split("\n", 1)[1]
    assert main(["summary"]) == 0
    shown = capsys.readouterr().out
    assert "\n  measures          unrecorded\n" in shown
    # Nor is the regression gate's level kept with the comparison: the gates file's is used.
    assert (
        "  gate no_significant_regression (p < 0.05, the gates file's level now: the comparison "
        "did not record its own): passed"
    ) in shown


def test_the_drift_warning_names_the_drifted_items_and_why(library, tmp_path):
    """On a snapshot where an item's answering passage was superseded, the golden set's drift
    check names that item, the snapshot it was labelled against and the reason, not every
    label of the set; the item's gold ids were still checked against its own snapshot."""
    from .conftest import materialize_night

    new_snapshot(library)
    result = materialize_night(library, tmp_path / "w.duckdb", night="2026-11-15")
    [drift] = [
        e for e in result.get_asset_check_evaluations() if e.check_name == "no_drifted_items"
    ]
    assert not drift.passed
    assert drift.description == (
        "1 item(s) have an answering passage that is not current, or changed, in 2026-11-01: q2 (labelled "
        "against 2026-10-01): STORE-FRIDGE-001@v1#s1 is superseded: re-label them (golden_drift "
        "lists every one)"
    )


def test_a_gold_passage_edited_since_labelling_is_drift(library, tmp_path):
    """A passage whose id stayed but whose text changed (no new version) no longer says what
    the item's reference answers were written from: the item is flagged, naming the passage and
    the snapshot it was labelled against."""
    from .conftest import materialize_night

    old = library / "2026-10-01"
    new = library / "2026-11-01"
    shutil.copytree(old, new, copy_function=shutil.copyfile)
    document = new / "documents" / "STORE-FRIDGE-001@v1.md"
    document.write_text(document.read_text().replace("STR-04", "STR-05"))
    freeze_snapshot(new)
    result = materialize_night(library, tmp_path / "w.duckdb", night="2026-11-15")
    [drift] = [
        e for e in result.get_asset_check_evaluations() if e.check_name == "no_drifted_items"
    ]
    assert not drift.passed
    assert drift.description.startswith(
        "1 item(s) have an answering passage that is not current, or changed, in 2026-11-01: q2 (labelled "
        "against 2026-10-01): STORE-FRIDGE-001@v1#s1 changed since 2026-10-01"
    )


def test_verdicts_follow_each_metrics_direction_and_the_level():
    from rag_eval_pipeline.lib.metrics.comparison import BETTER, WORSE, verdict

    assert verdict("R@5", -0.1, 0.01, 0.05) == WORSE
    assert verdict("R@5", 0.1, 0.01, 0.05) == BETTER
    # Fewer false refusals and confident wrong answers are better.
    assert verdict("false_refusal", 0.1, 0.01, 0.05) == WORSE
    assert verdict("confident_wrong", -0.1, 0.01, 0.05) == BETTER
    # Not significant at the level (p = alpha is not below it), or nothing to judge.
    assert verdict("R@5", -0.1, 0.05, 0.05) is None
    assert verdict("R@5", -0.1, 0.04, 0.01) is None
    assert verdict("R@5", None, None, 0.05) is None
    assert verdict("R@5", 0.0, 0.01, 0.05) is None


def test_the_summary_says_what_each_run_was_compared_with_and_the_regression_gate(nights, library):
    """``rag-eval summary``'s release gates are the ones checked when the run completed; the
    regression gate is checked later, against the baseline. The summary says how that went:
    the baseline itself, comparable but not compared yet, compared (the gate failed naming the
    metrics the check named, at the level the check used, each line marked worse or better),
    or not compared and why; and a baseline replaced since is named beside the one now."""
    from rag_eval_pipeline.lib.reporting.summary import baseline_from_tables, baseline_lines
    from rag_eval_pipeline.lib.runs.baselines import accept_baseline

    def run_of(night: str) -> str:
        [(run,)] = nights.query(
            "SELECT eval_run_id FROM eval_runs WHERE partition_date = $night", {"night": night}
        )
        return run

    def said(night: str, configured=lambda: None) -> list[str]:
        run = run_of(night)
        with duckdb.connect(str(nights.warehouse), read_only=True) as connection:
            found = baseline_from_tables(connection, run, configured_alpha=configured)
            return baseline_lines(found, run)

    nights.run("2026-10-15")
    baseline = run_of("2026-10-15")
    assert said("2026-10-15")[1:] == [
        "Against the baseline: this run is its suite's baseline: nothing to compare",
        "  gate no_significant_regression: not assessed",
    ]
    # An evidence threshold far above the default refuses most questions: shorter answers.
    nights.run("2026-10-16", system={"evidence_threshold": 50.0})
    regressed = run_of("2026-10-16")
    assert said("2026-10-16")[1:] == [
        f"Against baseline {baseline}: comparable, not compared yet (under the daemon, its "
        "comparison_guard sensor compares the run with the suite's baseline); rag-eval compare "
        f"{regressed} {baseline} compares the two now",
        "  gate no_significant_regression: not assessed",
    ]
    result = nights.compare("2026-10-16")
    [gate] = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "gate_no_significant_regression"
    ]
    named = gate.metadata["regressed_metrics"].data
    assert not gate.passed and named
    # The level the check used is kept with the comparison, and read back: today's gates file
    # (a stricter level here) does not change what the check decided.
    [(alpha,)] = nights.query("SELECT DISTINCT regression_alpha FROM run_comparisons")
    assert alpha == 0.05
    compared = said("2026-10-16", configured=lambda: 1e-9)
    with duckdb.connect(str(nights.warehouse), read_only=True) as connection:
        found = baseline_from_tables(connection, regressed)
    assert found["regression_gate"] == "failed" and found["regression_alpha"] == 0.05
    assert compared[1].startswith(f"Against baseline {baseline}: same corpus digest")
    assert compared[2] == (
        "  gate no_significant_regression (p < 0.05): FAILED: significantly worse in "
        + ", ".join(named)
    )
    marked = {line.split()[0] for line in compared[3:] if line.endswith("  worse")}
    assert marked == set(named)
    # The comparison's page in the UI marks them the same way.
    [materialization] = result.asset_materializations_for_node("run_comparison")
    table = materialization.metadata["comparison"].value.splitlines()
    assert table[0].rstrip(" |").endswith("verdict")
    in_table = {line.split("|")[1].strip() for line in table if line.rstrip(" |").endswith("worse")}
    assert in_table == set(named)
    # A comparison recorded before the level was kept is marked at the gates file's level now,
    # said so; without a readable gates file, not marked at all.
    with duckdb.connect(str(nights.warehouse)) as connection:
        connection.execute("UPDATE run_comparisons SET regression_alpha = NULL")
    legacy = said("2026-10-16", configured=lambda: 0.05)
    assert legacy[2].startswith(
        "  gate no_significant_regression (p < 0.05, the gates file's level now: the comparison "
        "did not record its own): FAILED"
    )
    unmarked = said("2026-10-16")
    assert unmarked[2].startswith("  gate no_significant_regression: not shown")
    assert not any(line.endswith(("  worse", "  better")) for line in unmarked)
    # The regressed run made the baseline since: its recorded comparison says so.
    with duckdb.connect(str(nights.warehouse)) as connection:
        accept_baseline(connection, regressed, kind="decision", reason="accepted by hand")
    assert f"  the suite's baseline is now this run, not {baseline}" in said("2026-10-16")
    # A night on another snapshot is not compared; the reason names both digests.
    new_snapshot(library)
    nights.run("2026-11-02")
    skipped = said("2026-11-02")
    assert skipped[1].startswith(f"Against baseline {regressed}: not comparable: corpus digest")
    assert skipped[2] == "  gate no_significant_regression: not assessed"


def test_the_summary_says_when_whether_a_run_compares_was_never_recorded():
    """A warehouse upgraded from before suites has baselines without a comparability verdict
    (NULL): not read as comparable."""
    from rag_eval_pipeline.lib.reporting.summary import baseline_lines

    old = {
        "is_current_baseline": False,
        "current_baseline_run_id": "b",
        "decision": {"baseline_run_id": "b", "comparable": None, "reason": "recorded before"},
        "compared": [],
    }
    assert baseline_lines(old, "r")[1:] == [
        "Against baseline b: whether the two compare was not recorded (recorded before)",
        "  gate no_significant_regression: not assessed",
    ]


def test_an_unreadable_gates_file_leaves_comparisons_unmarked_with_a_warning(
    tmp_path, monkeypatch, capsys
):
    from rag_eval_pipeline.cli import project

    monkeypatch.setenv("RAG_EVAL_GATES", str(tmp_path / "missing.yaml"))
    assert project.regression_alpha_or_none("the comparison is shown") is None
    warning = capsys.readouterr().err
    assert "missing.yaml" in warning and "the comparison is shown without worse or better" in (
        warning
    )


def test_the_summary_names_the_golden_items_that_drifted_in_the_runs_snapshot(nights, library):
    """A night on a snapshot where an answering passage was superseded scores those items like
    the rest: the summary says how many drifted and names the first, with why, so a reader
    without the night's warnings knows which figures moved with the corpus."""
    from rag_eval_pipeline.lib.reporting.summary import format_summary, headline_from_tables

    def summary(night: str) -> str:
        [(run,)] = nights.query(
            "SELECT eval_run_id FROM eval_runs WHERE partition_date = $night", {"night": night}
        )
        with duckdb.connect(str(nights.warehouse), read_only=True) as connection:
            return format_summary(headline_from_tables(connection, run))

    nights.run("2026-10-15")
    assert "golden drift" not in summary("2026-10-15")
    new_snapshot(library)
    nights.run("2026-11-02")
    drifted = nights.query(
        "SELECT d.item_id, d.drift_reason FROM golden_drift AS d JOIN eval_runs AS r "
        "USING (golden_digest, corpus_digest) WHERE r.partition_date = '2026-11-02' "
        "AND d.drifted ORDER BY d.item_id"
    )
    assert drifted, "the revised fridge procedure answers some golden items"
    lines = summary("2026-11-02").splitlines()
    [at] = [number for number, line in enumerate(lines) if "golden drift" in line]
    assert lines[at].startswith(f"  golden drift      {len(drifted)} item(s) whose answering")
    # Three short lines (the UI shows the summary as one block of text, unwrapped).
    named = lines[at + 2]
    assert named.startswith(" " * 20 + "re-label them (golden_drift lists every one): ")
    assert lines[at + 3].startswith("  system ")
    item, reason = drifted[0]
    assert f": {item} ({reason})" in named and "superseded" in reason
    if len(drifted) > 3:
        assert named.endswith(f"; and {len(drifted) - 3} more")


def test_the_nightlys_comparison_table_marks_metrics_at_the_recorded_level():
    """``rag-eval nightly`` prints the comparison the guard ran with each significant change
    marked in its metric's direction, at the level recorded with it; one recorded without a
    level is printed unmarked."""
    import polars as pl

    from rag_eval_pipeline.cli.nightly import format_comparison

    def rows(alpha):
        return pl.DataFrame(
            {
                "baseline_run_id": ["b", "b"],
                "metric": ["token_f1", "false_refusal"],
                "candidate_value": [0.5, 0.4],
                "baseline_value": [0.5, 0.1],
                "delta": [0.0, 0.3],
                "ci_low": [0.0, 0.2],
                "ci_high": [0.0, 0.4],
                "p_value": [1.0, 0.001],
                "test": ["paired_bootstrap", "mcnemar_exact"],
                "n": [10, 10],
                "comparable": [True, True],
                "reason": ["same", "same"],
                "regression_alpha": pl.Series([alpha, alpha], dtype=pl.Float64),
            }
        )

    marked = format_comparison("c", rows(0.05)).splitlines()
    # In rag-eval compare's order: false_refusal comes before token_f1.
    assert [line.split()[0] for line in marked[1:]] == ["false_refusal", "token_f1"]
    assert marked[1].endswith("p=0.0010 (mcnemar_exact, n=10)  worse")
    assert marked[2].endswith("(paired_bootstrap, n=10)")
    assert format_comparison("c", rows(0.0005)).splitlines()[1].endswith("n=10)")
    assert format_comparison("c", rows(None)).splitlines()[1].endswith("n=10)")


def test_a_p_value_below_the_printed_precision_is_not_printed_as_zero():
    """McNemar's exact p for 20 discordant pairs all one way is 1.9e-06: ``p<0.0001``, not
    ``p=0.0000``, which reads as a certainty no test gives."""
    from rag_eval_pipeline.lib.reporting.summary import comparison_line

    row = {
        "metric": "Success@5",
        "candidate_value": 0.7,
        "baseline_value": 0.95,
        "delta": -0.25,
        "ci_low": -0.35,
        "ci_high": -0.1625,
        "p_value": 1.9073486328125e-06,
        "test": "mcnemar_exact",
        "n": 80,
        "verdict": "worse",
    }
    assert comparison_line(row).endswith("p<0.0001 (mcnemar_exact, n=80)  worse")
    assert comparison_line({**row, "p_value": 0.00005}).endswith(
        "p=0.0001 (mcnemar_exact, n=80)  worse"
    )
    # The UI's table of the comparison says the same.
    import polars as pl

    from rag_eval_pipeline.defs.comparison import comparison_metadata
    from rag_eval_pipeline.lib.runs.comparisons import Comparison

    run = {"eval_run_id": "r", "corpus_digest": "c", "golden_digest": "g"}
    rows = pl.DataFrame([{k: v for k, v in row.items() if k != "verdict"}])
    table = comparison_metadata(Comparison(run, run, True, "same", rows), "r", "cmp")
    assert "| <0.0001 | mcnemar_exact | 80 |" in table["comparison"].value
