"""Loading the project's SQL files (``sql/`` at the top of the repository).

Queries are plain files with named parameters (``$name``) bound at execution, never formatted in.
"""

from functools import cache
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"


@cache
def load_sql(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    path = SQL_DIR / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such SQL file")
    return path.read_text(encoding="utf-8")


def sql_statements(name: str) -> list[str]:
    """The statements of a SQL file, split at semicolons that end a line."""
    return [part.strip() for part in load_sql(name).split(";\n") if part.strip()]


def query_frame(connection, query: str, parameters: dict | list | None = None):
    """Run a query with bound parameters and return a Polars frame."""
    return connection.sql(query, params=parameters).pl()
