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
-- Speed and memory: the run is never sorted, exploded or held at once. For the cut-offs, one
-- aggregate keeps each query's max(k) first doc ids in trec_eval's order (score, then doc id,
-- both descending: exactly the largest (score, doc_id) pairs); each judged passage then finds its
-- rank in that list. Only judged passages can add gain or relevance, so no other row is needed.
-- AP and RR without a cut-off also need the rank of every relevant retrieved row below max(k):
-- it is counted (1 + the rows of its query ranked above it) while the run streams past the
-- relevant rows.
WITH top_lists AS (
    SELECT query_id, max_by(doc_id, {score: score, doc_id: doc_id}, list_max($ks)) AS docs
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
      AND ($complete OR query_id IN (SELECT query_id FROM top_lists))
),
judged_top AS (
    SELECT q.query_id, q.doc_id, list_position(t.docs, q.doc_id) AS rank, q.grade
    FROM qrels AS q
    JOIN top_lists AS t ON t.query_id = q.query_id
    WHERE list_position(t.docs, q.doc_id) IS NOT NULL
),
relevant_retrieved AS (
    SELECT r.query_id, r.doc_id, r.score, q.grade
    FROM run AS r
    JOIN qrels AS q ON q.query_id = r.query_id AND q.doc_id = r.doc_id
    WHERE $need_uncut AND q.grade >= $rel_level
),
-- Rows ranked above a relevant row, counted while the run streams past the (small) relevant rows.
above_relevant AS (
    SELECT h.query_id, h.doc_id, count(*) AS above
    FROM run AS r
    JOIN relevant_retrieved AS h
        ON r.query_id = h.query_id
        AND (r.score > h.score OR (r.score = h.score AND r.doc_id > h.doc_id))
    GROUP BY h.query_id, h.doc_id
),
relevant_below AS (
    SELECT h.query_id, 1 + coalesce(a.above, 0) AS rank, h.grade
    FROM relevant_retrieved AS h
    LEFT JOIN above_relevant AS a ON a.query_id = h.query_id AND a.doc_id = h.doc_id
    WHERE 1 + coalesce(a.above, 0) > list_max($ks)
),
judged_rows AS (
    SELECT query_id, rank, greatest(grade, 0) AS gain, grade >= $rel_level AS relevant
    FROM (
        SELECT query_id, rank, grade FROM judged_top
        UNION ALL
        SELECT query_id, rank, grade FROM relevant_below
    )
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
