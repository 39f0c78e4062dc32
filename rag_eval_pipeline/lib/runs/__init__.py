"""Evaluation runs: the run record and its identity, the registry, baselines, gates, the guard."""
