"""The one error type for input and settings the pipeline cannot use.

Every subclass names where the problem is (the file and line, the record, the setting) and what is
wrong, so the command line can print it as one ``error:`` line and the UI shows it as the step's
failure message. Anything else that escapes is a bug, not bad input.
"""


class RagEvalError(ValueError):
    """Input, configuration or state the pipeline cannot use; the message says where and why."""


class ConfigError(RagEvalError):
    """A run setting, suite definition or command-line value that cannot be used."""
