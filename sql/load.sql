-- Loading a finished run into the warehouse (lib/runs/load.py).

-- name: corpus_loaded
SELECT count(*) > 0 FROM corpus_snapshots WHERE corpus_digest = $corpus_digest

-- name: golden_loaded
SELECT count(*) > 0 FROM golden_items WHERE golden_digest = $golden_digest
