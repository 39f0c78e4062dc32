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
-- The recommended threshold with the items it was chosen on: the run's own, so its counts are
-- in-sample (lib/reporting/summary.py sweep_lines says so), and the fewest answerable items any
-- threshold of the run's sweep refuses (all of them: nothing to sweep).
SELECT s.threshold, s.unanswerable_answered, s.answerable_refused,
       count(g.item_id) FILTER (WHERE NOT g.answerable) AS unanswerable_items,
       count(g.item_id) FILTER (WHERE g.answerable) AS answerable_items,
       (SELECT min(a.answerable_refused) FROM abstention_sweep a WHERE a.eval_run_id = $run)
           AS fewest_answerable_refused
FROM abstention_sweep s
LEFT JOIN generation_item_metrics g ON g.eval_run_id = s.eval_run_id
WHERE s.eval_run_id = $run AND s.recommended
GROUP BY s.threshold, s.unanswerable_answered, s.answerable_refused

-- name: calibration
SELECT judge_id, n, agreement, kappa, calibrated, reason FROM judge_calibration
WHERE eval_run_id = $run

-- name: gates
SELECT gate, status, passed, observed, op, threshold, margin, message, gates_file, gates_version
FROM gate_results WHERE eval_run_id = $run ORDER BY passed, gate

-- name: system_error_items
-- The items whose call to the system under test failed (left out of every rate), in id order.
SELECT item_id, cause FROM system_calls
WHERE eval_run_id = $run AND outcome <> 'ok'
ORDER BY item_id

-- name: baseline_decision
-- What the run was measured against when it was published or compared: its baseline, whether
-- the two compare, and why (lib/reporting/summary.py baseline_lines).
SELECT baseline_run_id, comparable, reason, decided_at FROM run_baselines WHERE eval_run_id = $run

-- name: golden_drift
-- The run's drifted golden items (answering passage not current, or changed, in the run's
-- snapshot): how many, and the first few in id order with why.
SELECT item_id, drift_reason, count(*) OVER () AS drifted FROM golden_drift
WHERE golden_digest = $golden AND corpus_digest = $corpus AND drifted
ORDER BY item_id
LIMIT 3
