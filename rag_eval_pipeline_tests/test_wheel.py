"""The package as a user installs it: a wheel built from the repository, installed into a fresh
virtual environment, evaluating a TREC run and running a night on a snapshot outside the checkout.

The SQL, the default gates and the instance settings must ship inside the wheel; nothing may be
read from the source tree.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[1]
UV = ROOT / ".tools" / "bin" / "uv"
FIXTURES = Path(__file__).parent / "fixtures"


def run(command: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env or os.environ,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-4000:]
    return completed


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The ``bin`` folder of a fresh virtual environment with the wheel and its locked
    dependencies installed."""
    if not UV.is_file():
        pytest.skip(f"{UV} is missing: run 'make install' first")
    root = tmp_path_factory.mktemp("wheel")
    run([UV, "build", "--wheel", "--out-dir", root / "dist"], cwd=ROOT)
    [wheel] = (root / "dist").glob("rag_eval_pipeline-*.whl")
    requirements = root / "requirements.txt"
    run(
        [UV, "export", "--frozen", "--no-dev", "--no-emit-project", "-o", requirements],
        cwd=ROOT,
    )
    run([UV, "venv", "--python", sys.executable, root / "venv"], cwd=root)
    python = root / "venv" / "bin" / "python"
    run([UV, "pip", "install", "--python", python, "-r", requirements, wheel], cwd=root)
    return root / "venv" / "bin"


def user_environment(project: Path) -> dict:
    """A user's environment: none of the project's variables, no checkout on the path."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RAG_EVAL_", "DAGSTER_", "PYTHON", "VIRTUAL_ENV"))
    }
    return {**env, "HOME": str(project)}


def test_the_wheel_ships_its_sql_gates_and_settings(installed):
    found = run(
        [
            installed / "python",
            "-c",
            "import rag_eval_pipeline, pathlib; p = pathlib.Path(rag_eval_pipeline.__file__).parent;"
            "print(p); print(sorted(f.name for f in (p / 'sql').glob('*.sql')));"
            "print((p / 'gates' / 'release_gates.yaml').is_file(), (p / 'dagster.yaml').is_file())",
        ],
        cwd=installed,
        env=user_environment(installed),
    ).stdout.splitlines()
    assert "site-packages" in found[0] and str(ROOT) not in found[0]
    assert "schema.sql" in found[1] and "retrieval_per_query.sql" in found[1]
    assert found[2] == "True True"


def test_the_wheel_evaluates_a_run_and_a_night_outside_the_checkout(installed, tmp_path):
    project = tmp_path / "team"
    (project / "suites").mkdir(parents=True)
    shutil.copytree(FIXTURES / "library", project / "library")
    (project / "suites" / "mine.yaml").write_text(
        "golden_set: library/golden.jsonl\ncorpus_root: library\nnightly: true\n"
    )
    shutil.copy(FIXTURES / "gates.yaml", project / "gates.yaml")
    env = {**user_environment(project), "RAG_EVAL_GATES": "gates.yaml"}
    rag_eval = installed / "rag-eval"

    qrels = project / "qrels.txt"
    qrels.write_text("q1 0 a 2\nq1 0 b 1\nq2 0 c 1\n")
    trec_run = project / "run.txt"
    trec_run.write_text("q1 Q0 b 1 3.0 t\nq1 Q0 a 2 2.0 t\nq2 Q0 c 1 5.0 t\n")
    evaluated = run([rag_eval, "evaluate-run", qrels, trec_run, "-m", "RR"], project, env)
    assert "RR                      \tall\t1.0000" in evaluated.stdout

    night = run([rag_eval, "nightly", "--suite", "mine", "--partition", "2026-10-15"], project, env)
    assert "Evaluation run 2026-10-15-" in night.stdout
    assert "is the baseline of mine" in night.stdout
    warehouse = project / "warehouse" / "rag_eval.duckdb"
    assert (project / ".dagster_home" / "dagster.yaml").is_file()
    with duckdb.connect(str(warehouse), read_only=True) as connection:
        assert connection.sql("SELECT suite, status FROM eval_runs").fetchall() == [
            ("mine", "complete")
        ]
        assert connection.sql("SELECT count(*) FROM retrieval_results").fetchall()[0][0] > 0
