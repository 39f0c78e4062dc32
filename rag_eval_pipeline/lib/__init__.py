"""Pure logic of the evaluation pipeline, grouped as the pipeline runs: inputs, systems, judges,
metrics, runs, store, reporting. Nothing here imports Dagster."""
