-- Stale retrieval per answerable item and cut-off: 1 when a superseded passage ranks within the
-- top k above every current gold passage (grade >= $rel_level) in the top k, else 0.
-- Parameters: $eval_run_id, $golden_digest, $rel_level, $ks.
WITH items AS (
    SELECT item_id
    FROM golden_items
    WHERE golden_digest = $golden_digest AND answerable
      AND item_id IN (
          SELECT item_id FROM golden_gold
          WHERE golden_digest = $golden_digest AND grade >= $rel_level
      )
),
-- A passage's rank is its position in the item's list in the system's rank order (the measures'
-- rank: a system may leave gaps between its ranks), numbered before the gold is joined.
positions AS (
    SELECT item_id, passage_id, status,
           row_number() OVER (PARTITION BY item_id ORDER BY rank) AS rank
    FROM retrieval_results
    WHERE eval_run_id = $eval_run_id
),
results AS (
    SELECT r.item_id, r.rank, r.status, g.grade
    FROM positions AS r
    LEFT JOIN golden_gold AS g
        ON g.golden_digest = $golden_digest AND g.item_id = r.item_id AND g.passage_id = r.passage_id
),
cutoffs AS (
    SELECT unnest($ks) AS k
)
SELECT
    i.item_id AS query_id,
    'Stale' AS measure,
    c.k::INTEGER AS k,
    CASE
        WHEN min(r.rank) FILTER (WHERE r.status = 'superseded')
             < coalesce(min(r.rank) FILTER (WHERE r.grade >= $rel_level AND r.status = 'current'), 1e9)
        THEN 1.0 ELSE 0.0
    END::DOUBLE AS value
FROM items AS i
CROSS JOIN cutoffs AS c
LEFT JOIN results AS r ON r.item_id = i.item_id AND r.rank <= c.k
GROUP BY i.item_id, c.k
