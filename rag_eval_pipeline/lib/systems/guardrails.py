"""Guardrails of the reference system, each a pure function so it can be measured on its own.

Refusal reasons are stable strings, stored in ``generation_results.refusal_reason``.
"""

import re
from collections.abc import Sequence

PROMPT_OVERRIDE = "input_check:prompt_override"
OUT_OF_SCOPE = "input_check:out_of_scope"
NO_EVIDENCE = "evidence_check:no_current_passage_above_threshold"
UNCITED = "citation_check:no_citation"
CITATION_NOT_RETRIEVED = "citation_check:cited_id_not_in_context"

# Phrases that try to change the assistant's rules (English and German); matched as words.
OVERRIDE_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}\b(instruction|rule|prompt|guideline|polic|previous|above)",
        r"\b(system|hidden|initial)\s+prompt\b",
        r"\b(print|show|reveal|repeat|output)\b.{0,30}\b(prompt|instructions|rules|password)",
        r"\bwithout\s+(any\s+)?(citation|citing|source|reference)s?\b",
        r"\b(you are now|pretend (to be|you are)|act as|jailbreak|developer mode|dan mode)\b",
        r"\bno\s+citations?\b",
        r"\b(ignorier|vergiss)\w*\b.{0,40}\b(anweisung|regel|prompt)",
        r"\bsystem-?prompt\b",
        r"\bohne\s+(quelle|quellen|zitat)",
    )
)
# Topics the procedure assistant must decline: clinical and dosing advice.
OUT_OF_SCOPE_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b(dose|doses|dosage|dosing|mg|mcg|milligram|microgram|ml/h|units? per)\b",
        r"\b(prescribe|prescription|diagnos\w*|treat(ment)? for|symptom\w*|antibiotic\w*)\b",
        r"\b(dosis|dosierung|diagnose|behandlung|medikament\w*)\b",
    )
)


def input_check(question: str) -> str | None:
    """The refusal reason when the question tries to override the rules or asks for clinical
    advice; ``None`` when it may proceed."""
    if any(pattern.search(question) for pattern in OVERRIDE_PATTERNS):
        return PROMPT_OVERRIDE
    if any(pattern.search(question) for pattern in OUT_OF_SCOPE_PATTERNS):
        return OUT_OF_SCOPE
    return None


def citation_check(cited_ids: Sequence[str], context_ids: Sequence[str]) -> str | None:
    """Reject an answer with no citation or citing an id that was not in the context sent."""
    if not cited_ids:
        return UNCITED
    if not set(cited_ids) <= set(context_ids):
        return CITATION_NOT_RETRIEVED
    return None
