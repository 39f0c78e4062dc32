"""Text handling shared by the reference system and the deterministic judge.

Tokens are lowercase words and numbers; content tokens drop English and German stop words and are
stemmed with the Snowball English stemmer (PyStemmer), the same analysis the BM25 index uses.
"""

import re
from functools import lru_cache

import Stemmer

TOKEN = re.compile(r"[0-9]+(?:[.,][0-9]+)?|[^\W\d_]+", re.UNICODE)
NUMBER = re.compile(r"^[0-9]+(?:[.,][0-9]+)?$")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")

STOP_WORDS = frozenset(
    """
    a an and are as at be been before being but by can could did do does doing for from had
    has have how i if in into is it its just may me might must my no nor not of on or our
    own shall should so some such than that the their them then there these they this those
    to too up us was we were what when where which while who whom why will with would you
    your yours pls please u ur hi hey thanks thx der die das und ist ein eine einen wie was
    wer wo wann mit von zu im in den dem des auf für fuer bei oder nicht ich wir sie es man
    muss soll kann
    """.split()  # noqa: SIM905 - a word list reads better as prose
)
NEGATIONS = frozenset({"not", "no", "never", "without", "nicht", "kein", "keine", "nie"})


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    """Lowercase word and number tokens, in order."""
    return [token.lower() for token in TOKEN.findall(text)]


def content_terms(text: str) -> list[str]:
    """Stemmed tokens without stop words (numbers kept as written, decimal comma as point)."""
    kept = [word for word in words(text) if word not in STOP_WORDS]
    stems = _stemmer().stemWords([w for w in kept if not NUMBER.match(w)])
    stem_iter = iter(stems)
    return [w.replace(",", ".") if NUMBER.match(w) else next(stem_iter) for w in kept]


def numbers(text: str) -> set[str]:
    """Numbers mentioned in a text, normalised (``4,5`` and ``4.5`` are the same)."""
    return {w.replace(",", ".") for w in words(text) if NUMBER.match(w)}


def sentences(text: str) -> list[str]:
    """Split prose into sentences at ., ! or ? followed by a capital, digit or quote."""
    flat = " ".join(text.split())
    return [part.strip() for part in SENTENCE_END.split(flat) if part.strip()]
