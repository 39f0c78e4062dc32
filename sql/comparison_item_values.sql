-- Per-item values of one evaluation run, long format (item_id, metric, value), for paired
-- comparisons: retrieval measures by their full name (e.g. 'nDCG@10') and generation outcomes,
-- each over the items it is defined on, as the summary's headline scopes them: answer_correct,
-- false_refusal, confident_wrong and token_f1 over answerable items, correct_refusal over the
-- no-answer items (a refusal is a failure on one and a success on the other, so one "refused"
-- rate over both cannot say better or worse); citation_validity over answered answerable items
-- (1 when every cited id was in the context sent and at least one was cited); faithfulness over
-- judged answered answerable items with at least one judged claim (ENTAILED claims / judged
-- claims, judge errors left out, golden items' verdicts only, as lib/metrics/generation.py
-- defines it). UNPIVOT leaves out
-- the NULLs of the other items, and a comparison pairs only items with a value in both runs.
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
        CASE WHEN answerable THEN refused::DOUBLE END AS false_refusal,
        CASE WHEN NOT answerable THEN refused::DOUBLE END AS correct_refusal,
        CASE WHEN answerable THEN confident_wrong::DOUBLE END AS confident_wrong,
        CASE WHEN answerable THEN token_f1 END AS token_f1,
        CASE WHEN answerable AND NOT refused THEN citation_valid::DOUBLE END AS citation_validity
    FROM generation_item_metrics
    WHERE eval_run_id = $eval_run_id
)
UNPIVOT (
    value FOR metric IN (
        answer_correct, false_refusal, correct_refusal, confident_wrong, token_f1,
        citation_validity
    )
)
UNION ALL
SELECT
    verdicts.item_id,
    'faithfulness' AS metric,
    count(*) FILTER (WHERE verdict = 'ENTAILED')::DOUBLE
        / count(*) FILTER (WHERE verdict IN ('ENTAILED', 'CONTRADICTED', 'UNSUPPORTED'))
        AS value
FROM judge_verdicts AS verdicts
JOIN generation_item_metrics AS items
    ON items.eval_run_id = verdicts.eval_run_id AND items.item_id = verdicts.item_id
WHERE verdicts.eval_run_id = $eval_run_id AND verdicts.source = 'golden'
    AND items.answerable AND NOT items.refused
GROUP BY verdicts.item_id
HAVING count(*) FILTER (WHERE verdict IN ('ENTAILED', 'CONTRADICTED', 'UNSUPPORTED')) > 0
