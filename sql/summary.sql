-- The headline of one evaluation run (lib/reporting/summary.py). Parameter: $run.

-- name: retrieval
SELECT measure, value, ci_low, ci_high, n FROM retrieval_metrics
WHERE eval_run_id = $run AND scope = 'overall' AND list_contains($names, measure)

-- name: generation
SELECT scope, scope_value, metric, value, ci_low, ci_high, n FROM generation_metrics
WHERE eval_run_id = $run

-- name: sufficiency
SELECT context_sufficient, answer_correct, count FROM sufficiency_correctness
WHERE eval_run_id = $run ORDER BY context_sufficient DESC, answer_correct DESC

-- name: recommended_threshold
SELECT threshold, unanswerable_answered, answerable_refused FROM abstention_sweep
WHERE eval_run_id = $run AND recommended

-- name: calibration
SELECT judge_id, n, agreement, kappa, calibrated, reason FROM judge_calibration
WHERE eval_run_id = $run

-- name: gates
SELECT gate, status, passed, observed, op, threshold, margin, message, gates_file, gates_version
FROM gate_results WHERE eval_run_id = $run ORDER BY passed, gate
