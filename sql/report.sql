-- The per-run report (lib/reporting/report.py). Parameter: $run (and those named).

-- name: run
SELECT eval_run_id, suite, status, status_reason, partition_date, dagster_run_id, snapshot_id, corpus_digest, golden_set,
       golden_digest, system_id, system_config_digest, judge_id, judge_config_digest,
       settings_digest, baseline_run_id, is_baseline, rebaseline, rebaseline_reason, rebaseline_requested_by,
       CAST(started_at AS VARCHAR) AS started_at, CAST(completed_at AS VARCHAR) AS completed_at,
       system_config, measures_version
FROM eval_runs WHERE eval_run_id = $run

-- name: retrieval
SELECT scope, scope_value, measure, value, ci_low, ci_high, n, interval_method
FROM retrieval_metrics WHERE eval_run_id = $run
ORDER BY scope, scope_value, metric, k NULLS LAST, measure

-- name: generation
SELECT scope, scope_value, metric, value, ci_low, ci_high, n, interval_method
FROM generation_metrics WHERE eval_run_id = $run
ORDER BY scope, scope_value, metric

-- name: sufficiency
SELECT context_sufficient, answer_correct, count FROM sufficiency_correctness
WHERE eval_run_id = $run ORDER BY context_sufficient DESC, answer_correct DESC

-- name: sweep
SELECT threshold, unanswerable_answered, answerable_refused, recommended
FROM abstention_sweep WHERE eval_run_id = $run ORDER BY threshold

-- name: calibration
SELECT judge_id, n, agreement, ci_low, ci_high, kappa, calibrated, reason
FROM judge_calibration WHERE eval_run_id = $run ORDER BY judge_id

-- name: history
SELECT r.partition_date, r.eval_run_id, r.snapshot_id, r.corpus_digest, r.measures_version,
       m.measure AS metric, m.value, m.ci_low, m.ci_high, m.n
FROM eval_runs AS r
JOIN retrieval_metrics AS m
  ON m.eval_run_id = r.eval_run_id AND m.scope = 'overall' AND list_contains($measures, m.measure)
WHERE r.suite = $suite
  AND r.golden_digest = $golden
  AND r.system_config_digest = $system
  AND (r.complete OR r.eval_run_id = $run)
ORDER BY r.partition_date, r.started_at, r.eval_run_id, m.measure
