-- Upgrades of warehouses written by earlier versions, run before sql/views.sql (idempotent).

-- name: legacy_eval_runs_is_a_table
SELECT count(*) > 0 FROM information_schema.tables
WHERE table_name = 'eval_runs' AND table_type = 'BASE TABLE'

-- name: legacy_records
-- Before suites, eval_runs was a table keyed by night; its golden set was its suite.
INSERT INTO eval_run_records BY NAME
SELECT
    eval_run_id, golden_set AS suite, coalesce(partition_date, 'adhoc') AS partition_date,
    coalesce('rebaseline-for:' || rebaseline_for, '') AS variant, dagster_run_id, snapshot_id,
    corpus_digest, golden_set, golden_digest, system_id, system_config_digest, system_config,
    judge_id, judge_config_digest, '{}' AS judge_config, 'unrecorded' AS settings_digest,
    '{}' AS settings, rebaseline, rebaseline_reason, rebaseline_requested_by, rebaseline_for,
    CASE WHEN completed_at IS NULL THEN 'started' ELSE 'complete' END AS status,
    NULL AS status_reason, started_at, completed_at, headline, NULL AS report_path
FROM eval_runs
WHERE eval_run_id NOT IN (SELECT eval_run_id FROM eval_run_records)

-- name: legacy_baselines
INSERT INTO run_baselines BY NAME
SELECT eval_run_id, baseline_run_id, NULL AS comparable, 'recorded before suites' AS reason,
       coalesce(completed_at, started_at) AS decided_at
FROM eval_runs
WHERE baseline_run_id IS NOT NULL
  AND eval_run_id NOT IN (SELECT eval_run_id FROM run_baselines)

-- name: legacy_drop
DROP TABLE eval_runs

-- name: decision_suite_column
ALTER TABLE baseline_decisions ADD COLUMN IF NOT EXISTS suite VARCHAR

-- name: decision_suite_value
UPDATE baseline_decisions SET suite = golden_set WHERE suite IS NULL

-- name: optional_outcomes
ALTER TABLE generation_item_metrics ALTER COLUMN correct DROP NOT NULL;
ALTER TABLE generation_item_metrics ALTER COLUMN exact_match DROP NOT NULL;
ALTER TABLE generation_item_metrics ALTER COLUMN token_f1 DROP NOT NULL

-- name: capture_columns
-- The trace file a live run captured (lib/systems/capture.py) and its SHA-256.
ALTER TABLE eval_run_records ADD COLUMN IF NOT EXISTS trace_file VARCHAR;
ALTER TABLE eval_run_records ADD COLUMN IF NOT EXISTS trace_digest VARCHAR

-- name: measures_version_column
-- The measure definitions a run was computed with (lib/metrics/__init__.py); NULL for runs
-- recorded before, which compare with no run that has one.
ALTER TABLE eval_run_records ADD COLUMN IF NOT EXISTS measures_version VARCHAR

-- name: comparison_alpha_column
-- The regression gate's level each comparison was checked at (lib/runs/comparisons.py).
ALTER TABLE run_comparisons ADD COLUMN IF NOT EXISTS regression_alpha DOUBLE
