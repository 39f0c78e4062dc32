"""SQuAD 2.0 dev through the real nightly graph, scored against the official figures.

Two replayed systems bracket the official definitions of exact match and F1 (the SQuAD 2.0
evaluation script): always abstaining scores 50.0716 overall (the 5,945 unanswerable questions
right, the 5,928 answerable ones wrong), and answering with the first gold answer scores 100.
The unanswerable questions must come through as the ``near_miss`` stratum.

Needs ``RAG_EVAL_DATASETS`` pointing at the shared datasets folder (``squad2-dev/``). The import
is shared by the module; both replays write into one warehouse, one evaluation run each.
"""

import json
import os
from pathlib import Path

import duckdb
import polars as pl
import pytest

from rag_eval_pipeline.defs.resources import ReplaySystemResource
from rag_eval_pipeline.lib.inputs.formats import import_squad
from rag_eval_pipeline.lib.inputs.golden import GOLD_SCHEMA, ITEM_SCHEMA, load_golden_set
from rag_eval_pipeline.lib.metrics.generation import item_outcomes
from rag_eval_pipeline.testing import evaluation_resources, materialize_suite, write_suite_file

from .conftest import fixture_assets

DATASETS = os.environ.get("RAG_EVAL_DATASETS")
needs_squad = pytest.mark.skipif(
    not DATASETS,
    reason="RAG_EVAL_DATASETS is not set: point it at the shared datasets folder "
    "(e.g. RAG_EVAL_DATASETS=../shared/datasets) to run SQuAD 2.0 dev through the graph",
)
NIGHT = "2026-10-15"
SNAPSHOT = "2026-01-01"


@pytest.fixture(scope="module")
def squad(tmp_path_factory) -> dict:
    """SQuAD 2.0 dev imported once: snapshot folder, golden set, items and gold passages."""
    root = tmp_path_factory.mktemp("squad")
    source = Path(DATASETS) / "squad2-dev" / "dev-v2.0.rebuilt.json"
    report = import_squad(source, root / "corpus" / SNAPSHOT, root / "squad2-dev.jsonl")
    golden = load_golden_set(report.golden_path)
    return {"root": root, "report": report, "golden": golden}


def write_traces(path: Path, traces: list[dict]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    return path


def replay_traces(squad: dict, oracle: bool) -> list[dict]:
    """One trace per question, in golden-set order: always abstain, or the oracle that answers
    the first gold answer citing its paragraph (and abstains where there is no answer)."""
    golden = squad["golden"]
    paragraph = dict(zip(golden.gold["item_id"], golden.gold["passage_id"], strict=True))
    traces = []
    for item in golden.items.sort("line").iter_rows(named=True):
        passage = paragraph[item["item_id"]]
        answers = item["reference_answers"]
        answering = oracle and bool(answers)
        shown = [passage] if oracle else []
        traces.append(
            {
                "item_id": item["item_id"],
                "question": item["question"],
                "retrieved": [{"passage_id": passage, "score": 10.0, "rank": 1}] if oracle else [],
                "context_ids": shown,
                "answer": f"{answers[0]} [{passage}]" if answering else "",
                "cited_ids": [passage] if answering else [],
                "refused": not answering,
                "refusal_reason": None if answering else "replay:abstains",
                "system_version": "oracle" if oracle else "always-abstain",
                "corpus_digest": squad["report"].corpus_digest,
            }
        )
    return traces


def materialize_replay(squad: dict, traces: Path, warehouse_path: Path) -> str:
    """The whole graph for one night with the replay as the system under test; its run id."""
    registry = squad["root"] / "suites"
    write_suite_file(
        registry,
        "squad",
        golden_set=squad["report"].golden_path,
        corpus_root=squad["root"] / "corpus",
    )
    result = materialize_suite(
        NIGHT,
        "squad",
        evaluation_resources(
            suites=registry,
            warehouse=warehouse_path,
            system=ReplaySystemResource(path=str(traces)),
        ),
        assets=fixture_assets(),
    )
    assert result.success
    return result.output_for_node("retrieval_run", "retrieval_run")["eval_run_id"]


@pytest.fixture(scope="module")
def replayed(squad) -> dict:
    """Both replays in one warehouse: its connection and the two evaluation run ids."""
    root = squad["root"]
    warehouse_path = root / "warehouse.duckdb"
    runs = {
        name: materialize_replay(
            squad,
            write_traces(root / f"{name}.jsonl", replay_traces(squad, oracle=name == "oracle")),
            warehouse_path,
        )
        for name in ("abstain", "oracle")
    }
    connection = duckdb.connect(str(warehouse_path), read_only=True)
    yield {"connection": connection, **runs}
    connection.close()


def squad_scores(replayed: dict, run: str) -> dict[str, tuple[float, int]]:
    rows = replayed["connection"].sql(
        "SELECT metric, value, n FROM generation_metrics WHERE eval_run_id = $run "
        "AND scope = 'overall' AND scope_value = 'all_items' "
        "AND metric IN ('squad_exact_match', 'squad_f1')",
        params={"run": replayed[run]},
    )
    return {metric: (value, n) for metric, value, n in rows.fetchall()}


@needs_squad
@pytest.mark.datasets
def test_the_two_replays_are_two_evaluation_runs(replayed):
    assert replayed["abstain"] != replayed["oracle"]
    configs = replayed["connection"].sql("SELECT system_config FROM eval_runs").fetchall()
    digests = {json.loads(config)["trace_digest"] for (config,) in configs}
    assert len(digests) == 2


@needs_squad
@pytest.mark.datasets
def test_always_abstaining_scores_the_official_50_0716(replayed):
    scores = squad_scores(replayed, "abstain")
    assert set(scores) == {"squad_exact_match", "squad_f1"}
    for value, n in scores.values():
        assert n == 11873
        # 5,945 of 11,873 questions have no answer: the empty prediction is right exactly there.
        assert round(value * 100, 4) == 50.0716


@needs_squad
@pytest.mark.datasets
def test_answering_the_first_gold_answer_scores_100(replayed):
    scores = squad_scores(replayed, "oracle")
    assert scores == {"squad_exact_match": (1.0, 11873), "squad_f1": (1.0, 11873)}


@needs_squad
@pytest.mark.datasets
def test_unanswerable_questions_are_the_near_miss_stratum(replayed):
    connection = replayed["connection"]
    strata = connection.sql(
        "SELECT stratum, count(*) FROM golden_items GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert strata == [("answerable", 5928), ("near_miss", 5945)]
    refusals = connection.sql(
        "SELECT scope_value, value, n FROM generation_metrics WHERE eval_run_id = $run "
        "AND scope = 'stratum' AND metric = 'correct_refusal_rate'",
        params={"run": replayed["oracle"]},
    ).fetchall()
    assert refusals == [("near_miss", 1.0, 5945)]
    # Apart from the headline: the answerable scope counts only the answerable questions.
    headline_n = connection.sql(
        "SELECT DISTINCT n FROM generation_metrics WHERE eval_run_id = $run "
        "AND scope = 'overall' AND scope_value = 'answerable' AND metric = 'exact_match'",
        params={"run": replayed["oracle"]},
    ).fetchall()
    assert headline_n == [(5928,)]


def test_bracketed_answer_text_is_not_a_citation_marker():
    # Three SQuAD 2.0 dev answers hold brackets ("Z[i]", "wid[en]", "[Date]"). Only a marker
    # naming a passage of the context sent is a citation; the official script keeps the rest.
    answers = {"z": "the Gaussian integers Z[i]", "w": "wid[en] people's choices", "d": "[Date]"}
    items = pl.DataFrame(
        [
            {
                "item_id": item_id,
                "line": line,
                "question": "?",
                "language": "en",
                "stratum": "answerable",
                "answerable": True,
                "reference_answers": [answer],
                "must_mention": [],
                "labelled_against": "x",
            }
            for line, (item_id, answer) in enumerate(answers.items(), start=1)
        ],
        schema=ITEM_SCHEMA,
    )
    responses = pl.DataFrame(
        {
            "item_id": list(answers),
            "refused": [False] * 3,
            "answer": [f"{answer} [P@v1#s1]" for answer in answers.values()],
            "cited_ids": [["P@v1#s1"]] * 3,
            "context_ids": [["P@v1#s1"]] * 3,
            "citation_valid": [True] * 3,
            "best_score": [1.0] * 3,
        }
    )
    gold = pl.DataFrame(
        {"item_id": list(answers), "passage_id": ["P@v1#s1"] * 3, "grade": [3] * 3},
        schema=GOLD_SCHEMA,
    )
    outcomes = item_outcomes(items, responses, gold)
    assert outcomes["exact_match"].to_list() == [1.0, 1.0, 1.0]
    assert outcomes["token_f1"].to_list() == [1.0, 1.0, 1.0]
