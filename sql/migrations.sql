-- Idempotent upgrades of warehouses created by earlier versions of sql/schema.sql.
ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS rebaseline_for VARCHAR;
ALTER TABLE generation_item_metrics ALTER COLUMN correct DROP NOT NULL;
ALTER TABLE generation_item_metrics ALTER COLUMN exact_match DROP NOT NULL;
ALTER TABLE generation_item_metrics ALTER COLUMN token_f1 DROP NOT NULL
