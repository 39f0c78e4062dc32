"""The comparison guard's rule: what to do with a completed evaluation run.

Two runs are compared only when they share the corpus digest, the golden-set digest and the
measure definitions (``record.comparability``). For each
completed run, from the facts the summary step recorded (``eval_summary``'s metadata):

- a run tagged for re-baselining with a reason: launch the ``rebaseline`` job (the baseline's
  system configuration on the night's corpus and golden set, under today's measure definitions);
  without a reason: refuse, saying how to give one;
- a re-baseline run that just became the baseline: compare the night it was made for with it;
- the baseline itself: nothing to compare;
- a run comparable with its baseline: compare;
- anything else: not comparable, naming what differs and the re-baseline command (skipped,
  with an alert: nights stop being compared until a person re-baselines).

The same rule runs in the ``comparison_guard`` sensor under the daemon and in ``rag-eval nightly``.
"""

from collections.abc import Mapping

from rag_eval_pipeline.lib.runs.record import REBASELINE_REASON_TAG

COMPARE = "compare"
REBASELINE = "rebaseline"
SKIP = "skip"
# Skipped because it differs from its baseline (corpus, golden set or measure definitions): a
# person has to re-baseline, so the guard also posts a ``not_comparable`` alert.
NOT_COMPARABLE = "not_comparable"


def guard_decision(summary: Mapping) -> tuple[str, str]:
    """``(action, reason)`` for one completed run (module docstring)."""
    run = summary["eval_run_id"]
    if summary.get("rebaseline_requested"):
        if not str(summary.get("rebaseline_reason", "")).strip():
            return SKIP, (
                f"re-baseline of {run} refused: no reason given; tag the run "
                f"{REBASELINE_REASON_TAG}='<what changed>' (or rag-eval rebaseline --reason)"
            )
        return REBASELINE, (
            f"re-baseline requested for {run} by {summary.get('requested_by') or 'unknown'}: "
            f"{summary['rebaseline_reason']}"
        )
    if summary.get("rebaseline_for"):
        return COMPARE, (
            f"{run} re-ran the baseline configuration where {summary['rebaseline_for']} "
            f"is measured (its corpus, golden set and measure definitions) and is now the "
            f"baseline; comparing {summary['rebaseline_for']} with it"
        )
    if summary.get("is_baseline"):
        return SKIP, f"{run} is the baseline of {summary.get('suite')}; nothing to compare"
    if not summary.get("baseline_run_id"):
        return SKIP, str(summary.get("comparability") or f"{run} has no baseline to compare with")
    if summary.get("comparable_with_baseline"):
        return COMPARE, f"{run} is comparable with baseline {summary['baseline_run_id']}"
    return NOT_COMPARABLE, str(summary.get("comparability"))
