"""Measures: retrieval and generation registries, intervals, paired comparisons.

``MEASURES_VERSION`` names the definitions every figure of a run is computed with: the
measures, their conventions (gain, ties, cut-offs, denominators), the interval methods and the
paired tests. Change it with any change that can move a figure computed from the same per-item
inputs. It is part of a run's identity and recorded with it (``eval_run_records``), and two runs
measured with different definitions are not compared (``lib.runs.record.comparability``): the
re-baseline re-runs the baseline's configuration under the new ones.
"""

# 2026-12-07: a mean of 0/1 per-item values is a proportion, with its Wilson interval
# (``statistics.proportion_successes``): R@k, P@1, RR@1, nDCG@1 of such items read as Success does.
MEASURES_VERSION = "2026-12-07"
