"""The error types for input, settings and state the pipeline cannot use.

Every subclass names where the problem is (the file and line, the record, the setting) and what is
wrong, so the command line can print it as one ``error:`` line and the UI shows it as the step's
failure message. Anything else that escapes is a bug, not bad input.
"""

from collections.abc import Sequence


def named_few(names: Sequence[str], limit: int = 5) -> str:
    """At most ``limit`` of ``names`` joined by commas, then how many more there are: what a
    message names when many things are wrong (``a, b, c, d, e and 7 more``)."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


class RagEvalError(ValueError):
    """Input, configuration or state the pipeline cannot use; the message says where and why."""


class InputError(RagEvalError):
    """A file, record or setting the user gave that cannot be used (a snapshot, a golden set, a
    trace or label file, a run setting): ``rag-eval`` exits 2 for it, also when it fails a
    step of a run, where a failure of the system, the judge or the store exits 1."""


class ConfigError(InputError):
    """A run setting, suite definition or command-line value that cannot be used."""
