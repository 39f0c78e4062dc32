-- Per-item values of one evaluation run, long format (item_id, metric, value), for paired
-- comparisons: retrieval measures by their full name (e.g. 'nDCG@10') and generation outcomes.
-- Parameter: $eval_run_id.
SELECT
    item_id,
    CASE WHEN k IS NULL THEN measure ELSE measure || '@' || k END AS metric,
    value
FROM retrieval_item_metrics
WHERE eval_run_id = $eval_run_id
UNION ALL
SELECT item_id, metric, value
FROM (
    SELECT
        item_id,
        CASE WHEN answerable THEN correct::DOUBLE END AS answer_correct,
        refused::DOUBLE AS refused,
        confident_wrong::DOUBLE AS confident_wrong,
        CASE WHEN answerable THEN token_f1 END AS token_f1
    FROM generation_item_metrics
    WHERE eval_run_id = $eval_run_id
)
UNPIVOT (value FOR metric IN (answer_correct, refused, confident_wrong, token_f1))
