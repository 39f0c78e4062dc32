-- Per-query retrieval measures, long format: one row per (query_id, measure, k).
-- Relations: run(query_id, doc_id, score), qrels(query_id, doc_id, grade).
-- Parameters: $rel_level (grade counted relevant), $ks (cut-offs, at least one), $complete (score
-- queries that have relevant passages but no retrieved row as 0, like trec_eval -c),
-- $need_uncut (compute AP and RR without a cut-off; they need the rank of every relevant row).
-- Conventions (trec_eval): rank by score descending, ties by doc id descending; a passage is
-- relevant only when the qrels judge it at or above $rel_level (an unjudged passage never is, even
-- at $rel_level <= 0); P@k divides by k even when fewer were retrieved; R@k and AP divide by every
-- relevant passage in the qrels; RR with no cut-off is trec_eval's recip_rank; nDCG gain is the
-- grade (negative grades count 0), the ideal order ranks every judged passage by grade; nDCG_exp
-- uses the gain 2^grade - 1.
-- Queries with no passage at or above $rel_level are not scored here (the caller counts them).
--
-- Speed: only the rows that can still matter are ranked and joined to the qrels. With cut-offs
-- alone those are the rows scoring at least the max(k)-th best score of their query: ties at that
-- score are all kept, so the ranks below are exactly trec_eval's. AP and RR without a cut-off
-- need every row ranked, and only then is the whole run ranked.
WITH depth_floor AS (
    SELECT query_id, list_min(max(score, list_max($ks))) AS floor_score
    FROM run
    GROUP BY query_id
),
judged AS (
    SELECT query_id, count(*) FILTER (WHERE grade >= $rel_level) AS n_rel
    FROM qrels
    GROUP BY query_id
),
scored AS (
    SELECT query_id, n_rel
    FROM judged
    WHERE n_rel > 0
      AND ($complete OR query_id IN (SELECT query_id FROM depth_floor))
),
candidates AS (
    SELECT query_id, doc_id, score
    FROM run
    WHERE $need_uncut
    UNION ALL
    SELECT r.query_id, r.doc_id, r.score
    FROM run AS r
    JOIN depth_floor AS f ON f.query_id = r.query_id
    WHERE NOT $need_uncut AND r.score >= f.floor_score
),
ranked AS (
    SELECT
        query_id,
        doc_id,
        row_number() OVER (PARTITION BY query_id ORDER BY score DESC, doc_id DESC) AS rank
    FROM candidates
),
judged_rows AS (
    SELECT
        r.query_id,
        r.rank,
        greatest(coalesce(q.grade, 0), 0) AS gain,
        coalesce(q.grade >= $rel_level, false) AS relevant
    FROM ranked AS r
    LEFT JOIN qrels AS q ON q.query_id = r.query_id AND q.doc_id = r.doc_id
    WHERE r.rank <= list_max($ks) OR (q.grade >= $rel_level AND $need_uncut)
),
ideal AS (
    SELECT
        query_id,
        grade AS gain,
        row_number() OVER (PARTITION BY query_id ORDER BY grade DESC) AS rank
    FROM qrels
    WHERE grade > 0
    QUALIFY rank <= list_max($ks)
),
cutoffs AS (
    SELECT unnest($ks) AS k
),
at_k AS (
    SELECT
        r.query_id,
        c.k,
        count(*) FILTER (WHERE r.relevant) AS rel_ret,
        min(r.rank) FILTER (WHERE r.relevant) AS first_rel,
        sum(r.gain / log2(r.rank + 1)) AS dcg,
        sum((pow(2, r.gain) - 1) / log2(r.rank + 1)) AS dcg_exp
    FROM judged_rows AS r
    JOIN cutoffs AS c ON r.rank <= c.k
    GROUP BY r.query_id, c.k
),
ideal_at_k AS (
    SELECT
        i.query_id,
        c.k,
        sum(i.gain / log2(i.rank + 1)) AS idcg,
        sum((pow(2, i.gain) - 1) / log2(i.rank + 1)) AS idcg_exp
    FROM ideal AS i
    JOIN cutoffs AS c ON i.rank <= c.k
    GROUP BY i.query_id, c.k
),
cut_measures AS (
    SELECT
        s.query_id,
        c.k,
        (coalesce(a.rel_ret, 0) > 0)::DOUBLE AS "Success",
        coalesce(a.rel_ret, 0) / s.n_rel AS "R",
        coalesce(a.rel_ret, 0) / c.k AS "P",
        coalesce(1.0 / a.first_rel, 0.0) AS "RR",
        CASE WHEN i.idcg > 0 THEN coalesce(a.dcg, 0) / i.idcg ELSE 0.0 END AS "nDCG",
        CASE
            WHEN i.idcg_exp > 0 THEN coalesce(a.dcg_exp, 0) / i.idcg_exp ELSE 0.0
        END AS "nDCG_exp"
    FROM scored AS s
    CROSS JOIN cutoffs AS c
    LEFT JOIN at_k AS a ON a.query_id = s.query_id AND a.k = c.k
    LEFT JOIN ideal_at_k AS i ON i.query_id = s.query_id AND i.k = c.k
),
-- AP's running count of relevant rows is taken over the relevant rows alone.
hits AS (
    SELECT
        query_id,
        rank,
        row_number() OVER (PARTITION BY query_id ORDER BY rank) AS rel_so_far
    FROM judged_rows
    WHERE relevant
),
whole_run AS (
    SELECT
        s.query_id,
        s.n_rel,
        coalesce(sum(h.rel_so_far / h.rank), 0) AS ap_sum,
        min(h.rank) AS first_rel
    FROM scored AS s
    LEFT JOIN hits AS h ON h.query_id = s.query_id
    WHERE $need_uncut
    GROUP BY s.query_id, s.n_rel
)
SELECT query_id, measure, k::INTEGER AS k, value::DOUBLE AS value
FROM cut_measures
UNPIVOT (value FOR measure IN ("Success", "R", "P", "RR", "nDCG", "nDCG_exp"))
UNION ALL
SELECT query_id, 'AP' AS measure, NULL::INTEGER AS k, (ap_sum / n_rel)::DOUBLE AS value
FROM whole_run
UNION ALL
SELECT
    query_id,
    'RR' AS measure,
    NULL::INTEGER AS k,
    coalesce(1.0 / first_rel, 0.0)::DOUBLE AS value
FROM whole_run
