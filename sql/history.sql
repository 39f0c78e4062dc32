-- A metric night by night for one suite (rag-eval history), and the suite's newest night
-- (rag-eval accept-baseline). Every column of eval_runs is selected, as a warehouse not yet
-- upgraded by a publish (read-only sessions do not upgrade it) may lack the newest
-- (measures_version). Parameters: $metric, $suite.

-- name: metric_by_night
-- Every run of the suite, in night order; measured: a completed run with a figure of $metric
-- (its value null where the run could not compute it). Incomplete runs have no figure.
WITH figures AS (
    SELECT eval_run_id, value, ci_low, ci_high, n
    FROM retrieval_metrics
    WHERE scope = 'overall' AND measure = $metric
    UNION ALL
    SELECT eval_run_id, value, ci_low, ci_high, n
    FROM generation_metrics
    WHERE scope = 'overall' AND scope_value = 'answerable' AND metric = $metric
)
SELECT r.*, f.eval_run_id IS NOT NULL AS measured, f.value, f.ci_low, f.ci_high, f.n
FROM eval_runs AS r
LEFT JOIN figures AS f ON f.eval_run_id = r.eval_run_id AND r.complete
WHERE r.suite = $suite
ORDER BY r.partition_date, r.started_at, r.eval_run_id

-- name: suites
SELECT DISTINCT suite FROM eval_runs ORDER BY suite

-- name: metrics
-- What --metric can name: the overall retrieval measures and answerable generation metrics.
SELECT DISTINCT measure AS metric FROM retrieval_metrics WHERE scope = 'overall'
UNION
SELECT DISTINCT metric FROM generation_metrics
WHERE scope = 'overall' AND scope_value = 'answerable'
ORDER BY metric

-- name: newest_night
-- The latest completed run of the suite's latest night with a completed run.
SELECT * FROM eval_runs
WHERE suite = $suite AND complete
ORDER BY partition_date DESC, completed_at DESC, eval_run_id DESC
LIMIT 1
