-- The metric rows release gates are checked against (lib/runs/gates.py).

-- name: metric_rows
SELECT 'retrieval_metrics' AS "table", scope, scope_value, measure AS metric,
       value, ci_low, ci_high, n
FROM retrieval_metrics WHERE eval_run_id = $run
UNION ALL
SELECT 'generation_metrics' AS "table", scope, scope_value, metric, value, ci_low, ci_high, n
FROM generation_metrics WHERE eval_run_id = $run
