-- Per-query retrieval measures, long format: one row per (query_id, measure, k).
-- Relations: run(query_id, doc_id, score), qrels(query_id, doc_id, grade).
-- Parameters: $rel_level (grade counted relevant), $ks (cut-offs), $complete (score queries that
-- have relevant passages but no retrieved row as 0, like trec_eval -c).
-- Conventions (trec_eval): rank by score descending, ties by doc id descending; P@k divides by k
-- even when fewer were retrieved; R@k and AP divide by every relevant passage in the qrels; RR with
-- no cut-off is trec_eval's recip_rank; nDCG gain is the grade (negative grades count 0), the ideal
-- order ranks every judged passage by grade; nDCG_exp uses the gain 2^grade - 1.
-- Queries with no passage at or above $rel_level are not scored here (the caller counts them).
WITH judged AS (
    SELECT query_id, count(*) FILTER (WHERE grade >= $rel_level) AS n_rel
    FROM qrels
    GROUP BY query_id
),
scored AS (
    SELECT query_id, n_rel
    FROM judged
    WHERE n_rel > 0
      AND ($complete OR query_id IN (SELECT query_id FROM run))
),
ranked AS (
    SELECT
        r.query_id,
        row_number() OVER (PARTITION BY r.query_id ORDER BY r.score DESC, r.doc_id DESC) AS rank,
        greatest(coalesce(q.grade, 0), 0) AS gain,
        coalesce(q.grade, 0) >= $rel_level AS relevant
    FROM run AS r
    LEFT JOIN qrels AS q ON q.query_id = r.query_id AND q.doc_id = r.doc_id
    WHERE r.query_id IN (SELECT query_id FROM scored)
),
ideal AS (
    SELECT
        query_id,
        grade AS gain,
        row_number() OVER (PARTITION BY query_id ORDER BY grade DESC) AS rank
    FROM qrels
    WHERE grade > 0 AND query_id IN (SELECT query_id FROM scored)
),
cutoffs AS (
    SELECT unnest($ks) AS k
),
at_k AS (
    SELECT
        s.query_id,
        c.k,
        count(r.rank) FILTER (WHERE r.relevant) AS rel_ret,
        min(r.rank) FILTER (WHERE r.relevant) AS first_rel,
        coalesce(sum(r.gain / log2(r.rank + 1)), 0) AS dcg,
        coalesce(sum((pow(2, r.gain) - 1) / log2(r.rank + 1)), 0) AS dcg_exp
    FROM scored AS s
    CROSS JOIN cutoffs AS c
    LEFT JOIN ranked AS r ON r.query_id = s.query_id AND r.rank <= c.k
    GROUP BY s.query_id, c.k
),
ideal_at_k AS (
    SELECT
        s.query_id,
        c.k,
        coalesce(sum(i.gain / log2(i.rank + 1)), 0) AS idcg,
        coalesce(sum((pow(2, i.gain) - 1) / log2(i.rank + 1)), 0) AS idcg_exp
    FROM scored AS s
    CROSS JOIN cutoffs AS c
    LEFT JOIN ideal AS i ON i.query_id = s.query_id AND i.rank <= c.k
    GROUP BY s.query_id, c.k
),
whole_run AS (
    SELECT
        s.query_id,
        s.n_rel,
        coalesce(sum(r.rel_so_far / r.rank) FILTER (WHERE r.relevant), 0) AS ap_sum,
        min(r.rank) FILTER (WHERE r.relevant) AS first_rel
    FROM scored AS s
    LEFT JOIN (
        SELECT *, sum(relevant::INTEGER) OVER (PARTITION BY query_id ORDER BY rank) AS rel_so_far
        FROM ranked
    ) AS r ON r.query_id = s.query_id
    GROUP BY s.query_id, s.n_rel
),
cut_measures AS (
    SELECT
        a.query_id,
        a.k,
        (a.rel_ret > 0)::DOUBLE AS "Success",
        a.rel_ret / s.n_rel AS "R",
        a.rel_ret / a.k AS "P",
        coalesce(1.0 / a.first_rel, 0.0) AS "RR",
        CASE WHEN i.idcg > 0 THEN a.dcg / i.idcg ELSE 0.0 END AS "nDCG",
        CASE WHEN i.idcg_exp > 0 THEN a.dcg_exp / i.idcg_exp ELSE 0.0 END AS "nDCG_exp"
    FROM at_k AS a
    JOIN scored AS s ON s.query_id = a.query_id
    JOIN ideal_at_k AS i ON i.query_id = a.query_id AND i.k = a.k
)
SELECT query_id, measure, k::INTEGER AS k, value::DOUBLE AS value
FROM cut_measures
UNPIVOT (value FOR measure IN ("Success", "R", "P", "RR", "nDCG", "nDCG_exp"))
UNION ALL
SELECT query_id, 'AP' AS measure, NULL::INTEGER AS k, (ap_sum / n_rel)::DOUBLE AS value
FROM whole_run
UNION ALL
SELECT query_id, 'RR' AS measure, NULL::INTEGER AS k, coalesce(1.0 / first_rel, 0.0)::DOUBLE AS value
FROM whole_run
