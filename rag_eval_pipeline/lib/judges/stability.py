"""Judge stability: each sampled claim judged ``judge_repeats`` times, and how often it flips.

Users of LLM judges report scores that change between identical runs. With the run setting
``judge_repeats = R > 1`` every sampled claim is judged against its context R times: repeat 1 is
the verdict of ``judge_verdicts``; repeats 2..R are distinct calls (an LLM judge keys its cache by
the repeat index, so a repeat is never a replay of another; ``RepeatableJudge``). A judge that
does not take a repeat index (the deterministic judge) is simply asked again, and is stable by
construction. ``judge_repeat_verdicts`` holds every repeat, repeat 1 included.

``judge_unstable_claim_rate`` = claims whose verdict is not the same in all R repeats / claims
judged in all R repeats without a ``JUDGE_ERROR`` (a failed call says nothing about stability, so
such claims are left out and counted apart), with a Wilson 95% interval. Only the verdict counts;
a change of the supporting passage with the same verdict is not a flip. Scopes: ``overall`` /
``all_judged`` (golden and production claims together) and ``source`` / each source.
"""

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import polars as pl

from rag_eval_pipeline.lib.judges.protocol import JUDGE_ERROR, Context, Judge, Verdict
from rag_eval_pipeline.lib.metrics.statistics import wilson_interval

UNSTABLE_RATE = "judge_unstable_claim_rate"
REPEAT_KEY = ("source", "item_id", "claim_index")


@runtime_checkable
class RepeatableJudge(Protocol):
    """A judge that can be asked again as repeat ``repeat`` (2, 3, ...): a distinct call, never a
    replay of an earlier repeat."""

    def repeat_verdicts(
        self, pairs: Sequence[tuple[str, Context]], repeat: int
    ) -> list[Verdict]: ...


def verdicts_of_repeat(
    judge: Judge, pairs: Sequence[tuple[str, Context]], repeat: int
) -> list[Verdict]:
    """The judge's verdicts on ``pairs`` as repeat ``repeat`` (1 is the ordinary call)."""
    if repeat > 1 and isinstance(judge, RepeatableJudge):
        return judge.repeat_verdicts(pairs, repeat)
    return judge.verdicts(pairs)


def unstable_claims(repeats: pl.DataFrame) -> pl.DataFrame:
    """Per claim judged more than once (``judge_repeat_verdicts`` rows): its verdicts in repeat
    order, whether any repeat failed (``JUDGE_ERROR``) and whether the verdict changed.

    Returns ``source, item_id, claim_index, claim, verdicts, judge_error, changed``, sorted; a
    claim with a failed repeat has ``changed`` null (unknown).
    """
    return (
        repeats.sort("repeat")
        .group_by(*REPEAT_KEY)
        .agg(
            pl.col("claim").first(),
            pl.col("verdict").alias("verdicts"),
            (pl.col("verdict") == JUDGE_ERROR).any().alias("judge_error"),
            pl.col("verdict").n_unique().alias("distinct"),
        )
        .with_columns(
            pl.when(pl.col("judge_error"))
            .then(None)
            .otherwise(pl.col("distinct") > 1)
            .alias("changed")
        )
        .drop("distinct")
        .sort(*REPEAT_KEY)
    )


def stability_rows(repeats: pl.DataFrame, judge_repeats: int) -> list[dict]:
    """``judge_rate_estimates`` rows (``ESTIMATE_SCHEMA`` without ``eval_run_id``) for
    ``judge_unstable_claim_rate``: overall and per source. With one repeat there is nothing to
    compare: one row without a value, saying so."""

    def row(scope: str, value: str, claims: pl.DataFrame) -> dict:
        known = claims.filter(pl.col("changed").is_not_null())
        flips, n = int(known["changed"].sum()), known.height
        low, high = wilson_interval(flips, n)
        failed = claims.height - n
        reason = f"{judge_repeats} repeats"
        if failed:
            reason += f"; {failed} claim(s) with a JUDGE_ERROR repeat left out"
        return {
            "scope": scope,
            "scope_value": value,
            "metric": UNSTABLE_RATE,
            "method": "wilson95",
            "unit": "claim",
            "value": flips / n if n else None,
            "ci_low": low,
            "ci_high": high,
            "n_judged": n,
            "n_labelled": 0,
            "ppi_lambda": None,
            "reason": reason,
        }

    if judge_repeats <= 1 or not repeats.height:
        reason = (
            "judge_repeats is 1: every claim judged once"
            if judge_repeats <= 1
            else "no claims judged"
        )
        return [
            {
                **row("overall", "all_judged", unstable_claims(repeats)),
                "value": None,
                "ci_low": None,
                "ci_high": None,
                "n_judged": 0,
                "reason": reason,
            }
        ]
    claims = unstable_claims(repeats)
    rows = [row("overall", "all_judged", claims)]
    for source in sorted(claims["source"].unique().to_list()):
        rows.append(row("source", source, claims.filter(pl.col("source") == source)))
    return rows
