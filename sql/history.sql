-- A metric night by night for one suite (rag-eval history). Incomplete runs are listed with no
-- figure. Every column of eval_runs is selected, as a warehouse not yet upgraded by a publish
-- (read-only sessions do not upgrade it) may lack the newest (measures_version). Parameters:
-- $metric, $suite.

-- name: metric_by_night
WITH figures AS (
    SELECT eval_run_id, value, ci_low, ci_high, n
    FROM retrieval_metrics
    WHERE scope = 'overall' AND measure = $metric
    UNION ALL
    SELECT eval_run_id, value, ci_low, ci_high, n
    FROM generation_metrics
    WHERE scope = 'overall' AND scope_value = 'answerable' AND metric = $metric
)
SELECT r.*, f.value, f.ci_low, f.ci_high, f.n
FROM eval_runs AS r
LEFT JOIN figures AS f ON f.eval_run_id = r.eval_run_id AND r.complete
WHERE r.suite = $suite AND (f.eval_run_id IS NOT NULL OR NOT r.complete)
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
