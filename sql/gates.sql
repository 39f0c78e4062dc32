-- The metric rows release gates are checked against (lib/runs/gates.py).

-- name: metric_rows
SELECT 'retrieval_metrics' AS "table", scope, scope_value, measure AS metric,
       value, ci_low, ci_high, n
FROM retrieval_metrics WHERE eval_run_id = $run
UNION ALL
SELECT 'generation_metrics' AS "table", scope, scope_value, metric, value, ci_low, ci_high, n
FROM generation_metrics WHERE eval_run_id = $run
UNION ALL
-- The judge-only estimates and the stability rate (the prediction-powered rows are ppi_rows).
SELECT 'judge_rate_estimates' AS "table", scope, scope_value, metric, value, ci_low, ci_high,
       n_judged AS n
FROM judge_rate_estimates WHERE eval_run_id = $run AND method NOT LIKE 'ppi%'

-- name: ppi_rows
-- The prediction-powered estimates judge gates rest on once enough labels matched.
SELECT scope, scope_value, metric, method, unit, value, ci_low, ci_high, n_judged, n_labelled,
       reason
FROM judge_rate_estimates WHERE eval_run_id = $run AND method LIKE 'ppi%'

-- name: forget_results
-- A run evaluated again (the same identity) keeps the gates of its latest summary only.
DELETE FROM gate_results WHERE eval_run_id = $run

-- name: record_result
INSERT INTO gate_results VALUES (
    $run, $gate, $gates_file, $gates_version, $status, $passed, $observed, $op, $threshold,
    $margin, $message
)

-- name: recorded_results
-- The gates a published run was checked against, as its release checks report them.
SELECT gate, gates_file, gates_version, status, passed, observed, op, threshold, margin, message
FROM gate_results WHERE eval_run_id = $run
ORDER BY gate

-- name: published_run
-- Whether the summary published the run: its record complete in the warehouse.
SELECT status, status = 'complete' AS complete, completed_at, status_reason
FROM eval_run_records WHERE eval_run_id = $run
