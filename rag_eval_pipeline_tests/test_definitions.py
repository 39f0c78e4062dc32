"""The graph's shape, pinned: a change to assets, groups, checks, jobs or schedules is a diff."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from rag_eval_pipeline.definitions import defs as lazy_defs

defs = lazy_defs()

ROOT = Path(__file__).resolve().parents[1]

EXPECTED_GRAPH = {
    "corpus_snapshot": ("inputs", []),
    "golden_set": ("inputs", ["corpus_snapshot"]),
    "retrieval_run": ("system_runs", ["corpus_snapshot", "golden_set"]),
    "generation_run": ("system_runs", ["retrieval_run"]),
    "judge_sample": ("judging", ["generation_run"]),
    "judge_calibration": ("judging", ["judge_sample"]),
    "claim_diagnostics": ("judging", ["judge_sample"]),
    "retrieval_metrics": ("metrics", ["retrieval_run"]),
    "generation_metrics": ("metrics", ["generation_run", "judge_sample"]),
    "eval_summary": (
        "metrics",
        ["claim_diagnostics", "generation_metrics", "judge_calibration", "retrieval_metrics"],
    ),
    "run_comparison": ("comparison", ["eval_summary"]),
}
EXPECTED_CHECKS = {
    ("corpus_snapshot", "has_current_passages"),
    ("golden_set", "no_drifted_items"),
    ("golden_set", "no_answer_share"),
    ("retrieval_run", "system_errors_within_bound"),
    ("generation_run", "answers_cite_retrieved_passages"),
    ("eval_summary", "gate_success_at_5"),
    ("eval_summary", "gate_confident_wrong"),
    ("eval_summary", "gate_refuses_prompt_injection"),
    ("eval_summary", "gate_refuses_out_of_scope"),
    ("eval_summary", "gate_faithfulness"),
    ("run_comparison", "comparable_with_baseline"),
    ("run_comparison", "gate_no_significant_regression"),
} | {
    (table, "published")
    for table in (
        "retrieval_metrics",
        "generation_metrics",
        "judge_calibration",
        "claim_diagnostics",
    )
}


def test_asset_keys_groups_and_edges():
    graph = defs.resolve_asset_graph()
    shape = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        shape[key.to_user_string()] = (
            node.group_name,
            sorted(parent.to_user_string() for parent in node.parent_keys),
        )
    expected = {name: (group, sorted(parents)) for name, (group, parents) in EXPECTED_GRAPH.items()}
    assert shape == expected


def test_asset_checks():
    graph = defs.resolve_asset_graph()
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert checks == EXPECTED_CHECKS


def test_jobs_and_schedules():
    job = defs.resolve_job_def("nightly_eval")
    # Partitioned by night (daily) and suite (dynamic): two suites never share a partition.
    dimensions = {d.name: d.partitions_def for d in job.partitions_def.partitions_defs}
    assert dimensions["night"].get_cron_schedule() == "0 0 * * *"
    assert isinstance(dimensions["suite"], dg.DynamicPartitionsDefinition)
    assert job.executor_def.name == "in_process"
    schedule = defs.resolve_schedule_def("nightly_eval_schedule")
    assert schedule.cron_schedule == "0 2 * * *"
    assert schedule.execution_timezone == os.environ.get("RAG_EVAL_TIMEZONE", "UTC")
    assert schedule.job_name == "nightly_eval"
    assert sorted(s.name for s in defs.schedules) == ["nightly_eval_schedule"]
    assert sorted(s.name for s in defs.sensors) == [
        "abandoned_runs",
        "comparison_guard",
        "failure_alerts",
    ]
    assert sorted(j.name for j in defs.jobs) == ["nightly_eval", "rebaseline", "run_comparison_job"]
    nightly = {key.to_user_string() for key in job.asset_layer.executable_asset_keys}
    assert "run_comparison" not in nightly and "eval_summary" in nightly
    # The published checks and the release gates run in one step after the summary, in both
    # jobs that publish a night.
    for name in ("nightly_eval", "rebaseline"):
        graph = defs.resolve_job_def(name).graph
        assert "release_checks" in {node.name for node in graph.nodes}
        upstream = {
            d.node.name
            for d in graph.dependency_structure.all_upstream_outputs_from_node("release_checks")
        }
        assert upstream >= {"eval_summary"}, upstream


def test_assets_carry_owners_kinds_and_code_versions():
    for asset in defs.assets:
        spec = next(iter(asset.specs))
        assert spec.owners == ["team:evaluation"], spec.key
        assert spec.code_version, spec.key
        assert spec.description, spec.key
        assert spec.kinds, spec.key


def test_executor_and_time_zone_switch_by_configuration():
    code = (
        "from rag_eval_pipeline.definitions import defs;"
        "defs = defs();"
        "j = defs.resolve_job_def('nightly_eval');"
        "s = defs.resolve_schedule_def('nightly_eval_schedule');"
        "print(j.executor_def.name, s.execution_timezone)"
    )
    env = {**os.environ, "RAG_EVAL_EXECUTOR": "multiprocess", "RAG_EVAL_TIMEZONE": "Europe/Berlin"}
    output = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    assert output == ["multiprocess", "Europe/Berlin"]


def test_definitions_validate_against_the_workspace():
    dagster = Path(sys.executable).parent / "dagster"
    completed = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DAGSTER_HOME": str(ROOT / ".dagster_home")},
    )
    assert completed.returncode == 0, completed.stderr
    assert "rag_eval_pipeline" in completed.stdout + completed.stderr


def test_dagster_is_imported_only_outside_lib():
    modules = list((ROOT / "rag_eval_pipeline" / "lib").rglob("*.py"))
    assert len(modules) > 20
    for module in modules:
        assert "import dagster" not in module.read_text(), module.name
    assert dg.__version__ == "1.13.27"
