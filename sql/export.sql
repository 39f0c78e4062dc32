-- A run's retrieval as TREC run lines (rag-eval export-run). Parameter: $run.

-- name: passages
SELECT item_id AS query_id, passage_id AS doc_id, score
FROM retrieval_results
WHERE eval_run_id = $run

-- name: documents
-- Documents ranked by their best passage: the ids an imported collection's own qrels use.
SELECT r.item_id AS query_id, p.doc_id, max(r.score) AS score
FROM retrieval_results AS r
JOIN eval_runs AS e USING (eval_run_id)
JOIN corpus_passages AS p ON p.corpus_digest = e.corpus_digest AND p.passage_id = r.passage_id
WHERE r.eval_run_id = $run
GROUP BY ALL
