"""The judge's bill before the run: how many questions, requests and tokens judging will take.

``plan_judging`` builds exactly the questions ``judges.run.judge_traces`` and
``judges.diagnostics.diagnose`` would put to the judge for a sample, without asking any:

- claim splits: one per sampled answer (``judge_sample``), one per distinct reference answer
  (``claim_diagnostics``);
- verdicts of every claim against its context, ``judge_repeats`` times (repeats 2..R apart);
  citation verdicts of every claim that cites a passage; the diagnostic verdicts (each answer
  and reference claim against the reference answer or the answer and against every passage).

Claims of an answer not split yet are counted with the deterministic splitter
(``claims.split_claims``): exact for the deterministic judge, an estimate for an LLM judge unless
its cache already holds the split (then the cached claims are used). For a judge that calls a
model (one with ``planned_claims`` / ``planned_verdict``, the LLM judge) a *request* is a
question not in its cache, identical questions of one batch asked once (as the judge does), and
a question an earlier step of the plan asks counts as cached (a claim's verdict against the
one passage it cites is asked again by the diagnostics), and its tokens are estimated as
``judges.llm.estimated_tokens`` states: the characters of the prompt
text and the JSON payload / 4, plus a reply allowance (30 tokens a verdict; the answer's
characters / 4 + 16 a claim split). A local judge (the deterministic one) sends no requests.
"""

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import polars as pl

from rag_eval_pipeline.lib.judges.budget import JudgeBudget
from rag_eval_pipeline.lib.judges.claims import split_claims
from rag_eval_pipeline.lib.judges.diagnostics import (
    DiagnosticItem,
    diagnostic_pairs,
)
from rag_eval_pipeline.lib.judges.protocol import Claim, Context, Judge, PaidJudge
from rag_eval_pipeline.lib.judges.run import claims_to_judge, verdict_pairs


class PlanLine(NamedTuple):
    """One kind of question: how many, how many the cache answers, requests and tokens (and the
    estimate of each request, in the order they would be sent)."""

    step: str
    what: str
    questions: int
    cached: int
    requests: int
    tokens: int
    request_tokens: tuple[int, ...] = ()


class JudgePlan(NamedTuple):
    """The plan of a run's judging, and what it would cost."""

    judge_id: str
    calls_a_model: bool
    lines: list[PlanLine]
    budget: JudgeBudget

    @property
    def questions(self) -> int:
        return sum(line.questions for line in self.lines)

    @property
    def requests(self) -> int:
        return sum(line.requests for line in self.lines)

    @property
    def tokens(self) -> int:
        return sum(line.tokens for line in self.lines)

    @property
    def cost(self) -> float | None:
        return self.budget.cost(self.tokens)

    def budget_stop(self) -> str | None:
        """Where the budget would stop judging, if it would: at the first request (in the order
        they are sent, one at a time) whose estimate no longer fits, as the judge stops."""
        limits = []
        if self.budget.max_tokens is not None:
            limits.append(self.budget.max_tokens)
        if self.budget.max_cost is not None and self.budget.price_per_1k_tokens:
            limits.append(self.budget.max_cost / self.budget.price_per_1k_tokens * 1000)
        if not limits or self.tokens <= min(limits):
            return None
        limit, spent, sent = min(limits), 0, 0
        for line in self.lines:
            for cost in line.request_tokens:
                if spent + cost > limit:
                    return (
                        f"the budget stops judging in {line.step} ({line.what}) after about "
                        f"{sent:,} of {self.requests:,} requests ({spent:,} of {self.tokens:,} "
                        "estimated tokens); the rest would be JUDGE_ERROR 'budget exhausted'"
                    )
                spent += cost
                sent += 1
        return None


def _claims(judge: Judge, answer: str) -> list[Claim]:
    """The judge's cached split of ``answer`` if it has one, else the deterministic split."""
    found = judge.cached_claims(answer) if isinstance(judge, PaidJudge) else None
    return found if found is not None else split_claims(answer)


def _splits_line(judge: Judge, step: str, what: str, answers: Sequence[str]) -> PlanLine:
    if not isinstance(judge, PaidJudge):
        return PlanLine(step, what, len(answers), 0, 0, 0)
    outcomes = [judge.planned_claims(answer) for answer in answers]
    costs = tuple(tokens for hit, tokens in outcomes if not hit)
    return PlanLine(
        step, what, len(answers), len(answers) - len(costs), len(costs), sum(costs), costs
    )


def _verdicts_line(
    judge: Judge,
    step: str,
    what: str,
    pairs: Sequence[tuple[str, Context]],
    repeats: Sequence[int],
    asked: set[tuple],
) -> PlanLine:
    """Questions of ``pairs`` asked as each of ``repeats``: identical questions of one batch are
    one request, and a question an earlier batch of the plan asks (``asked``, updated) will be
    in the cache by then."""
    questions = len(pairs) * len(repeats)
    if not isinstance(judge, PaidJudge):
        return PlanLine(step, what, questions, 0, 0, 0)
    cached = 0
    costs: list[int] = []
    earlier = set(asked)
    for repeat in repeats:
        seen: dict[tuple, tuple[bool, int]] = {}
        for claim, context in pairs:
            key = (claim, tuple((str(p), str(t)) for p, t in context), repeat)
            if key not in seen:
                seen[key] = (
                    (True, 0) if key in earlier else judge.planned_verdict(claim, context, repeat)
                )
            cached += seen[key][0]
        costs += [cost for hit, cost in seen.values() if not hit]
        asked.update(seen)
    return PlanLine(step, what, questions, cached, len(costs), sum(costs), tuple(costs))


def plan_judging(
    judge: Judge,
    sample: pl.DataFrame,
    texts: Mapping[tuple[str, str], str],
    *,
    repeats: int,
    diagnosed: list[DiagnosticItem],
    budget: JudgeBudget | None = None,
) -> JudgePlan:
    """The plan (module docstring) for judging ``sample`` (``item_id, answer, context_ids,
    corpus_digest, source``) with ``repeats`` repeats, and diagnosing ``diagnosed``."""
    answers = sample["answer"].to_list()
    splits = [_claims(judge, answer) for answer in answers]
    claimed, _ = claims_to_judge(sample, splits, texts)
    context_pairs, citation_pairs = verdict_pairs(claimed)
    asked: set[tuple] = set()
    lines = [
        _splits_line(judge, "judge_sample", "claim splits of the answers", answers),
        _verdicts_line(
            judge,
            "judge_sample",
            "verdicts against the context, with citation verdicts",
            context_pairs + citation_pairs,
            [1],
            asked,
        ),
        _verdicts_line(
            judge,
            "judge_sample",
            f"repeat verdicts (repeats 2 to {repeats})" if repeats > 1 else "repeat verdicts",
            context_pairs,
            list(range(2, repeats + 1)),
            asked,
        ),
    ]
    references = sorted({answer for item in diagnosed for answer in item.reference_answers})
    reference_claims = {
        item.golden_item_id: list(
            dict.fromkeys(c.text for a in item.reference_answers for c in _claims(judge, a))
        )
        for item in diagnosed
    }
    answer_claims: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for c in claimed:
        answer_claims.setdefault((c.source, c.item_id), []).append((c.index, c.claim.text))
    pairs = diagnostic_pairs(diagnosed, answer_claims, reference_claims)
    lines += [
        _splits_line(
            judge, "claim_diagnostics", "claim splits of the reference answers", references
        ),
        _verdicts_line(
            judge,
            "claim_diagnostics",
            "diagnostic verdicts",
            [(p.claim, p.context) for p in pairs],
            [1],
            asked,
        ),
    ]
    return JudgePlan(
        judge.judge_id,
        isinstance(judge, PaidJudge),
        lines,
        budget or JudgeBudget(),
    )


def format_plan(plan: JudgePlan, facts: Sequence[tuple[str, str]]) -> str:
    """The plan as ``rag-eval judge-plan`` prints it: ``facts`` (label, text) first, then a line
    per kind of question, the totals, how tokens were estimated, the cost and the budget."""
    lines = [f"  {label:<16} {text}" for label, text in facts]
    header = (
        f"  {'step':<18} {'what':<54} {'questions':>9} {'cached':>7} {'requests':>8} {'tokens':>10}"
    )
    lines += ["", header]
    for line in plan.lines:
        lines.append(
            f"  {line.step:<18} {line.what:<54} {line.questions:>9,} {line.cached:>7,} "
            f"{line.requests:>8,} {line.tokens:>10,}"
        )
    lines.append(
        f"  {'total':<18} {'':<54} {plan.questions:>9,} "
        f"{sum(line.cached for line in plan.lines):>7,} {plan.requests:>8,} {plan.tokens:>10,}"
    )
    lines.append("")
    if not plan.calls_a_model:
        lines.append(
            f"  {plan.judge_id} judges locally: no model requests, no tokens, nothing to pay."
        )
        return "\n".join(lines)
    lines.append(
        "  tokens: estimated, (prompt text + payload characters) / 4 plus a reply allowance (30 a "
        "verdict, answer characters / 4 + 16 a claim split); claims of answers not yet split are "
        "counted with the deterministic splitter"
    )
    if plan.cost is None:
        lines.append(
            "  cost: no price configured (RAG_EVAL_JUDGE_PRICE_PER_1K_TOKENS, --price-per-1k or "
            "the judge resource's price_per_1k_tokens)"
        )
    else:
        lines.append(
            f"  cost: about {plan.cost:,.4g} at {plan.budget.price_per_1k_tokens:g} per 1,000 "
            "tokens (one price for prompt and reply tokens)"
        )
    stop = plan.budget_stop()
    if plan.budget.limited:
        limits = []
        if plan.budget.max_tokens is not None:
            limits.append(f"{plan.budget.max_tokens:,} tokens")
        if plan.budget.max_cost is not None:
            limits.append(f"cost {plan.budget.max_cost:g}")
        lines.append(f"  budget: {' and '.join(limits)}: " + (stop or "enough for the whole plan"))
    else:
        lines.append("  budget: none (budget_tokens / budget_cost on the judge resource)")
    return "\n".join(lines)


def plan_json(plan: JudgePlan) -> dict:
    """The plan as plain data (``rag-eval judge-plan --json``)."""
    return {
        "judge_id": plan.judge_id,
        "calls_a_model": plan.calls_a_model,
        "lines": [
            {key: value for key, value in line._asdict().items() if key != "request_tokens"}
            for line in plan.lines
        ],
        "questions": plan.questions,
        "requests": plan.requests,
        "tokens": plan.tokens,
        "cost": plan.cost,
        "price_per_1k_tokens": plan.budget.price_per_1k_tokens,
        "budget_tokens": plan.budget.max_tokens,
        "budget_cost": plan.budget.max_cost,
        "budget_stop": plan.budget_stop(),
    }
