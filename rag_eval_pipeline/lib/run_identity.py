"""Evaluation run identity: what makes two runs the same run, and whether two runs compare."""

import hashlib
import json

REBASELINE_TAG = "rag_eval/rebaseline"
REBASELINE_REASON_TAG = "rag_eval/rebaseline_reason"
REQUESTED_BY_TAG = "rag_eval/requested_by"


def eval_run_id(
    partition: str, corpus_digest: str, golden_digest: str, system_digest: str, judge_digest: str
) -> str:
    """``<partition>-<12 hex>``: the same night with the same inputs and configuration is the
    same run (a re-run replaces its rows); any change of corpus, golden set, system or judge
    configuration is a different run."""
    material = json.dumps([partition, corpus_digest, golden_digest, system_digest, judge_digest])
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
    )
