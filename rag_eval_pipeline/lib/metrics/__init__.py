"""Measures: retrieval and generation registries, intervals, paired comparisons."""
