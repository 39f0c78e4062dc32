-- Trusting the judge, for the summary and the report (lib/reporting/judge_trust.py). Parameter: $run.

-- name: calibration
SELECT judge_id, n, agreement, ci_low, ci_high, kappa, calibrated, reason
FROM judge_calibration WHERE eval_run_id = $run ORDER BY judge_id

-- name: rates
SELECT scope, scope_value, metric, method, unit, value, ci_low, ci_high, n_judged, n_labelled,
       ppi_lambda, reason
FROM judge_rate_estimates WHERE eval_run_id = $run
ORDER BY scope, scope_value, metric, method

-- name: unstable_claims
-- Claims whose verdict changed between repeats (repeats with a JUDGE_ERROR left out).
SELECT source, item_id, claim_index, any_value(claim) AS claim,
       list(verdict ORDER BY "repeat") AS verdicts
FROM judge_repeat_verdicts WHERE eval_run_id = $run
GROUP BY source, item_id, claim_index
HAVING count(DISTINCT verdict) > 1 AND NOT bool_or(verdict = 'JUDGE_ERROR')
ORDER BY source, item_id, claim_index

-- name: usage
SELECT step, judge_id, requests, replayed, estimated_tokens, reported_tokens, tokens, cost,
       budget_tokens, budget_cost, budget_exhausted, not_sent, reason
FROM judge_usage WHERE eval_run_id = $run ORDER BY step DESC

-- name: diagnostics
SELECT scope_value AS source, metric, value, ci_low, ci_high, n_items, n_items_left_out
FROM diagnostic_metrics WHERE eval_run_id = $run ORDER BY scope_value, metric
