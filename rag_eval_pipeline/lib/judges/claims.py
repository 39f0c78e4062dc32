"""Claims: an answer split into separately checkable statements, each with its citations.

The deterministic judge's decomposition, also used to match human labels to judged claims.
"""

import re

from rag_eval_pipeline.lib.judges.protocol import Claim
from rag_eval_pipeline.lib.text import content_terms, sentences

CITATION = re.compile(r"\s*\[([^\[\]\s]+)\]")
# Split a sentence into separately checkable claims only at semicolons; commas and subordinate
# clauses ("unless", "within", "only if") stay attached so qualifiers are never dropped.
CLAIM_BREAK = re.compile(r";\s+")


def split_claims(answer: str) -> list[Claim]:
    """Sentences (and semicolon-separated clauses), each with the citations that close it.

    A citation marker ``[id]`` ends the stretch of text it cites: every sentence of that stretch
    carries its ids. Text after the last marker carries none.
    """
    claims: list[Claim] = []
    position = 0
    stretches: list[tuple[str, list[str]]] = []
    for match in CITATION.finditer(answer):
        text = answer[position : match.start()]
        if text.strip() or not stretches:
            stretches.append((text, [match.group(1)]))
        else:
            stretches[-1][1].append(match.group(1))
        position = match.end()
    if answer[position:].strip():
        stretches.append((answer[position:], []))
    for text, cited in stretches:
        for sentence in sentences(text):
            for part in CLAIM_BREAK.split(sentence):
                if part.strip() and content_terms(part):
                    claims.append(Claim(part.strip(), tuple(cited)))
    return claims
