"""Where relative paths point: the project folder.

The project folder is ``RAG_EVAL_PROJECT_DIR`` when set; otherwise the source checkout the package
runs from (the folder holding ``pyproject.toml`` beside ``rag_eval_pipeline/``); otherwise, for an
installed wheel, the current working directory. Every configured relative path (suites, the
warehouse, gates, trace files) is taken from there, so a command behaves the same from any
sub-folder of a checkout.
"""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def project_root() -> Path:
    """The folder relative paths are taken from (see the module docstring)."""
    configured = os.environ.get("RAG_EVAL_PROJECT_DIR")
    if configured:
        return Path(configured).resolve()
    checkout = PACKAGE_DIR.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "sql").is_dir():
        return checkout
    return Path.cwd()


def project_path(path: str | Path) -> Path:
    """A configured path, relative paths taken from the project folder."""
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else project_root() / candidate


def packaged_path(relative: str) -> Path:
    """A file shipped with the package (in a wheel under ``rag_eval_pipeline/``) or, in a source
    checkout, the same file at the top of the repository."""
    inside = PACKAGE_DIR / relative
    return inside if inside.exists() else PACKAGE_DIR.parent / relative
