"""Evaluation run identity: what makes two runs the same run, and whether two runs compare."""

import hashlib
import json

REBASELINE_TAG = "rag_eval/rebaseline"
REBASELINE_REASON_TAG = "rag_eval/rebaseline_reason"
REQUESTED_BY_TAG = "rag_eval/requested_by"
REBASELINE_FOR_TAG = "rag_eval/rebaseline_for"


def eval_run_id(
    partition: str,
    corpus_digest: str,
    golden_digest: str,
    system_digest: str,
    judge_digest: str,
    variant: str = "",
) -> str:
    """``<partition>-<12 hex>``: the same night with the same inputs and configuration is the
    same run (a re-run replaces its rows); any change of corpus, golden set, system or judge
    configuration is a different run. ``variant`` separates a re-baseline run from the nightly
    run it was made for, even when their configurations agree."""
    material = json.dumps(
        [
            partition,
            corpus_digest,
            golden_digest,
            system_digest,
            judge_digest,
            *([variant] if variant else []),
        ]
    )
    return f"{partition}-{hashlib.sha256(material.encode()).hexdigest()[:12]}"


def comparability(candidate: dict, baseline: dict) -> tuple[bool, str]:
    """Two runs compare when they share the corpus digest and the golden-set digest.

    Returns ``(comparable, reason)``; the reason names both digests and the way forward.
    """
    problems = []
    if candidate["corpus_digest"] != baseline["corpus_digest"]:
        problems.append(
            f"corpus digest {candidate['corpus_digest'][:12]} (run {candidate['eval_run_id']}) "
            f"differs from {baseline['corpus_digest'][:12]} (baseline {baseline['eval_run_id']})"
        )
    if candidate["golden_digest"] != baseline["golden_digest"]:
        problems.append(
            f"golden-set digest {candidate['golden_digest'][:12]} differs from "
            f"{baseline['golden_digest'][:12]} (baseline {baseline['eval_run_id']})"
        )
    if not problems:
        return True, (
            f"same corpus digest {candidate['corpus_digest'][:12]} and golden-set digest "
            f"{candidate['golden_digest'][:12]}"
        )
    return False, (
        "not comparable: "
        + "; ".join(problems)
        + ". Re-baseline explicitly: rag-eval rebaseline --partition "
        + f"{candidate.get('partition_date') or '<night>'} --reason '<why the corpus changed>'"
        + " (or tag the run rag_eval/rebaseline=true with rag_eval/rebaseline_reason)"
    )


COMPARE = "compare"
REBASELINE = "rebaseline"
SKIP = "skip"


def guard_decision(summary: dict) -> tuple[str, str]:
    """What the comparison guard does with a completed run, from ``eval_summary``'s metadata.

    Returns ``(action, reason)``: ``rebaseline`` for a run tagged for re-baselining with a reason;
    ``skip`` (refused) when that tag has no reason; ``compare`` for a re-baseline run that just
    became the baseline (the run it was made for is compared next) and for a run comparable with
    its baseline; ``skip`` with both digests and the re-baseline command otherwise.
    """
    run = summary["eval_run_id"]
    if summary.get("rebaseline_requested"):
        if not str(summary.get("rebaseline_reason", "")).strip():
            return SKIP, (
                f"re-baseline of {run} refused: no reason given; tag the run "
                f"{REBASELINE_REASON_TAG}='<why the corpus changed>' (or rag-eval rebaseline --reason)"
            )
        return REBASELINE, (
            f"re-baseline requested for {run} by {summary.get('requested_by') or 'unknown'}: "
            f"{summary['rebaseline_reason']}"
        )
    if summary.get("rebaseline_for"):
        return COMPARE, (
            f"{run} re-ran the baseline configuration on the new snapshot and is now the "
            f"baseline; comparing {summary['rebaseline_for']} with it"
        )
    if summary.get("is_baseline") or not summary.get("baseline_run_id"):
        return SKIP, f"{run} is the baseline of {summary.get('golden_set')}; nothing to compare"
    if summary.get("comparable_with_baseline"):
        return COMPARE, f"{run} is comparable with baseline {summary['baseline_run_id']}"
    return SKIP, str(summary.get("comparability"))
