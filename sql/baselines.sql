-- Baseline decisions (baseline_decisions): which run a suite is compared against, and why.
-- Written only by lib/runs/baselines.py.

-- name: current
SELECT eval_run_id FROM baseline_decisions
WHERE suite = $suite
ORDER BY decided_at DESC
LIMIT 1

-- name: record_decision
INSERT INTO baseline_decisions BY NAME
SELECT $suite AS suite, $golden_set AS golden_set, $eval_run_id AS eval_run_id,
       $decided_at AS decided_at, $kind AS kind, $previous AS previous_baseline_run_id,
       $requested_by AS requested_by, $reason AS reason

-- name: former_baselines
-- The suite's earlier baselines, newest decision first (each once): a back-filled night may
-- share its corpus and golden set with one of them, where it cannot with the current one.
SELECT eval_run_id FROM baseline_decisions
WHERE suite = $suite AND eval_run_id <> $current
GROUP BY eval_run_id
ORDER BY max(decided_at) DESC
