"""TREC run / qrels reading and writing, BEIR / TREC / SQuAD imports (``lib.formats``).

Bad input must name the file, the line and the problem; an import must produce a snapshot and a
golden set that the project's own loaders accept, and leave nothing behind when it fails. The
last tests import the real public collections when ``RAG_EVAL_DATASETS`` points at them.
"""

import json
import os
import re
from pathlib import Path

import polars as pl
import pytest

from rag_eval_pipeline.lib.inputs import formats
from rag_eval_pipeline.lib.inputs.corpus import DOC_ID_PATTERN, load_snapshot
from rag_eval_pipeline.lib.inputs.formats import (
    FormatError,
    grade_rule,
    import_beir,
    import_squad,
    import_trec,
    read_beir,
    read_qrels,
    read_qrels_table,
    read_trec_qrels,
    read_trec_run,
    safe_doc_id,
    write_trec_run,
)
from rag_eval_pipeline.lib.inputs.golden import (
    GoldenSetError,
    load_golden_set,
    validate_against_snapshot,
)
from rag_eval_pipeline.lib.systems.protocol import Query
from rag_eval_pipeline.lib.systems.reference import ReferenceSystem


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    return write(path, "".join(json.dumps(record) + "\n" for record in records))


def load_and_validate(snapshot_dir: Path, golden_path: Path):
    snapshot = load_snapshot(snapshot_dir)
    golden = load_golden_set(golden_path)
    drift = validate_against_snapshot(
        golden,
        snapshot.passages,
        snapshot_id=snapshot.snapshot_id,
        corpus_digest=snapshot.corpus_digest,
        source=str(golden_path),
    )
    return snapshot, golden, drift


def gold_of(golden) -> dict[str, list[tuple[str, int]]]:
    return {
        item: sorted(zip(frame["passage_id"], frame["grade"], strict=True))
        for (item,), frame in golden.gold.group_by("item_id")
    }


# --- TREC run files -------------------------------------------------------------------------


def test_run_is_read_with_spaces_tabs_and_blank_lines(tmp_path):
    path = write(
        tmp_path / "run.txt",
        "q1 Q0 d1 1 2.5 sys\n\nq1\tQ0\td2\t2\t  -1e-3\tsys\r\nq2 Q0 d1 1 7 sys\n",
    )
    run = read_trec_run(path)
    assert run.to_dicts() == [
        {"query_id": "q1", "doc_id": "d1", "score": 2.5},
        {"query_id": "q1", "doc_id": "d2", "score": -0.001},
        {"query_id": "q2", "doc_id": "d1", "score": 7.0},
    ]


def test_run_with_wrong_field_count_names_file_line_and_counts(tmp_path):
    path = write(tmp_path / "run.txt", "q1 Q0 d1 1 2.5 sys\n\nq1 Q0 d2 2 2.0\n")
    with pytest.raises(FormatError) as error:
        read_trec_run(path)
    assert str(error.value) == (
        f"{path}:3: found 5 fields, expected 6 (qid Q0 docno rank score tag)"
    )


@pytest.mark.parametrize("score", ["high", "nan", "inf", "1,5"])
def test_run_with_bad_score_names_file_line_and_value(tmp_path, score):
    path = write(tmp_path / "run.txt", f"q1 Q0 d1 1 2.5 sys\nq1 Q0 d2 2 {score} sys\n")
    with pytest.raises(
        FormatError, match=rf"^{re.escape(str(path))}:2: score '{score}' is not a finite number$"
    ):
        read_trec_run(path)


def test_run_with_duplicate_pair_names_both_lines(tmp_path):
    path = write(
        tmp_path / "run.txt",
        "q1 Q0 d1 1 3 sys\nq1 Q0 d2 2 2 sys\nq2 Q0 d1 1 3 sys\nq1 Q0 d1 3 1 sys\n",
    )
    with pytest.raises(FormatError) as error:
        read_trec_run(path)
    message = str(error.value)
    assert message.startswith(f"{path}:4: duplicate document for query (q1, d1)")
    assert message.endswith("first given on line 1")


def test_missing_and_empty_run_files_are_named(tmp_path):
    with pytest.raises(FormatError, match=r"missing\.txt: file does not exist"):
        read_trec_run(tmp_path / "missing.txt")
    with pytest.raises(FormatError, match=r"empty\.txt: run file has no lines"):
        read_trec_run(write(tmp_path / "empty.txt", "\n\n"))


def test_write_then_read_run_round_trips_scores_exactly(tmp_path):
    frame = pl.DataFrame(
        {
            "query_id": ["q2", "q1", "q1", "q1", "q1", "q2"],
            "doc_id": ["a", "d-1", "d-3", "d-2", "d-0", "b"],
            "score": [0.1 + 0.2, 1e-20, 5.0, 5.0, -3.25, 1 / 3],
        }
    )
    path = tmp_path / "out" / "run.trec"
    write_trec_run(frame, path, "bm25")
    back = read_trec_run(path)
    assert back.sort("query_id", "doc_id").equals(frame.sort("query_id", "doc_id"))
    # trec_eval order: score descending, ties by doc id descending; ranks restart per query.
    assert path.read_text().splitlines() == [
        "q1 Q0 d-3 1 5.0 bm25",
        "q1 Q0 d-2 2 5.0 bm25",
        "q1 Q0 d-1 3 1e-20 bm25",
        "q1 Q0 d-0 4 -3.25 bm25",
        "q2 Q0 b 1 0.3333333333333333 bm25",
        "q2 Q0 a 2 0.30000000000000004 bm25",
    ]
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.trec"]


def test_write_run_refuses_bad_ids_and_tags_and_writes_nothing(tmp_path):
    path = tmp_path / "run.trec"
    spaced = pl.DataFrame({"query_id": ["q 1"], "doc_id": ["d1"], "score": [1.0]})
    with pytest.raises(FormatError, match="row 1 has query_id 'q 1'"):
        write_trec_run(spaced, path, "tag")
    ok = pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "score": [1.0]})
    with pytest.raises(FormatError, match="run tag 'my tag'"):
        write_trec_run(ok, path, "my tag")
    twice = pl.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["d1", "d1"], "score": [1.0, 2.0]})
    with pytest.raises(FormatError, match="duplicate document for query"):
        write_trec_run(twice, path, "tag")
    assert list(tmp_path.iterdir()) == []


# --- qrels ----------------------------------------------------------------------------------


def test_trec_qrels_keep_negative_grades(tmp_path):
    path = write(tmp_path / "qrels", "1 0 d1 2\n1 0 d2 -1\n2\t0\td1\t0\n")
    assert read_trec_qrels(path).to_dicts() == [
        {"query_id": "1", "doc_id": "d1", "grade": 2},
        {"query_id": "1", "doc_id": "d2", "grade": -1},
        {"query_id": "2", "doc_id": "d1", "grade": 0},
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 0 d1 1\n1 0 d2 1.5\n", ":2: grade '1.5' is not an integer"),
        ("1 0 d1 1\n1 0 d2 high\n", ":2: grade 'high' is not an integer"),
        ("1 0 d1 1\n1 d2 1\n", ":2: found 3 fields, expected 4 (qid iter docno rel)"),
        (
            "1 0 d1 1\n1 0 d2 0\n\n1 0 d1 2\n",
            ":4: duplicate judgement for query and document (1, d1), first given on line 1",
        ),
    ],
)
def test_bad_trec_qrels_name_file_line_and_problem(tmp_path, text, message):
    path = write(tmp_path / "qrels.txt", text)
    with pytest.raises(FormatError) as error:
        read_trec_qrels(path)
    assert str(error.value) == f"{path}{message}"


def test_qrels_tables_read_beir_tsv_and_whitespace_headers(tmp_path):
    beir = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\nq1\tdoc a\t1\nq2\td2\t0\n")
    assert read_qrels_table(beir).rows() == [("q1", "doc a", 1), ("q2", "d2", 0)]
    shared = write(tmp_path / "qrels.tsv", "qid docid grade\n1 184 3\n")
    assert read_qrels(shared).rows() == [("1", "184", 3)]
    trec = write(tmp_path / "qrels.trec", "1 0 184 3\n")
    assert read_qrels(trec).rows() == [("1", "184", 3)]
    bad = write(tmp_path / "bad.tsv", "qid docid grade\n1 184 3\n1 29 x\n")
    with pytest.raises(
        FormatError, match=rf"^{re.escape(str(bad))}:3: grade 'x' is not an integer$"
    ):
        read_qrels(bad)


# --- id and grade mapping -------------------------------------------------------------------


def test_safe_doc_id_keeps_valid_ids_and_rewrites_others_deterministically():
    assert safe_doc_id("SPEC-LABEL-004") == "SPEC-LABEL-004"
    assert safe_doc_id("184") == "184"
    rewritten = {safe_doc_id(source) for source in ("a b", "a_b", "a/b", "_a", "é")}
    assert len(rewritten) == 5
    assert all(DOC_ID_PATTERN.match(doc_id) for doc_id in rewritten)
    assert safe_doc_id("Fresno,_California_3") == safe_doc_id("Fresno,_California_3")
    assert safe_doc_id("Fresno,_California_3").startswith("Fresno__California_3-")
    assert safe_doc_id("Sky_(United_Kingdom)_0") == "Sky__United_Kingdom__0-491a6f2e"


def test_grade_rule_sends_top_grade_to_3_and_other_positives_to_2():
    cranfield = pl.DataFrame({"grade": [1, 2, 3, 4, -1]})
    assert grade_rule(cranfield) == {1: 2, 2: 2, 3: 2, 4: 3}
    binary = pl.DataFrame({"grade": [0, 1]})
    assert grade_rule(binary) == {0: 0, 1: 3}


# --- imports --------------------------------------------------------------------------------


@pytest.fixture
def beir_folder(tmp_path) -> Path:
    folder = tmp_path / "beir"
    write_jsonl(
        folder / "corpus.jsonl",
        [
            {"_id": "d1", "title": "Cold chain", "text": "Vaccines are kept between 2 and 8 C."},
            {"_id": "doc 2/b", "title": "", "text": "Returns are accepted within 30 days."},
            {"_id": "d3", "title": "Headings", "text": "First line\n## not a section\nlast"},
            {"_id": "d4", "title": "Blank", "text": ""},
        ],
    )
    write_jsonl(
        folder / "queries.jsonl",
        [
            {"_id": "q1", "text": "how cold are vaccines kept"},
            {"_id": "q2", "text": "return window"},
            {"_id": "q3", "text": "unanswerable question"},
            {"_id": "q4", "text": "a training query not in the test split"},
        ],
    )
    write(
        folder / "qrels" / "test.tsv",
        "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t1\nq2\tdoc 2/b\t2\nq3\td4\t0\n",
    )
    return folder


def test_read_beir_folder(beir_folder):
    collection = read_beir(beir_folder)
    assert collection.corpus["doc_id"].to_list() == ["d1", "doc 2/b", "d3", "d4"]
    assert collection.queries.height == 4
    assert collection.qrels.rows()[0] == ("q1", "d1", 2)


def test_beir_import_gives_a_snapshot_and_golden_set_the_loaders_accept(beir_folder, tmp_path):
    snapshot_dir = tmp_path / "corpus_snapshots" / "beir-mini"
    golden_path = tmp_path / "golden_sets" / "beir-mini.jsonl"
    report = import_beir(beir_folder, snapshot_dir, golden_path)

    snapshot, golden, drift = load_and_validate(snapshot_dir, golden_path)
    odd = safe_doc_id("doc 2/b")
    assert report.doc_ids == {"d1": "d1", "doc 2/b": odd, "d3": "d3", "d4": "d4"}
    assert snapshot.passages["passage_id"].sort().to_list() == sorted(
        ["d1@v1#s1", f"{odd}@v1#s1", "d3@v1#s1", "d4@v1#s1"]
    )
    passages = {row["doc_id"]: row for row in snapshot.passages.iter_rows(named=True)}
    assert {row["status"] for row in passages.values()} == {"current"}
    assert {row["language"] for row in passages.values()} == {"en"}
    assert {str(row["effective_date"]) for row in passages.values()} == {"2026-01-01"}
    assert passages[odd]["title"] == "doc 2/b"  # no title: the source id
    assert passages["d3"]["text"] == "First line\n ## not a section\nlast"
    assert passages["d4"]["text"] == "Blank"  # no text: the title
    assert "source_id: doc 2/b" in (snapshot_dir / "documents" / f"{odd}@v1.md").read_text()

    # grades 0..2 in the source: 2 (top) -> 3, 1 -> 2, 0 -> 0; q4 is not in the test qrels.
    assert gold_of(golden) == {
        "q1": [("d1@v1#s1", 3), ("d3@v1#s1", 2)],
        "q2": [(f"{odd}@v1#s1", 3)],
        "q3": [("d4@v1#s1", 0)],
    }
    strata = dict(golden.items.select("item_id", "stratum").iter_rows())
    assert strata == {"q1": "answerable", "q2": "answerable", "q3": "out_of_scope"}
    assert set(golden.items["labelled_against"]) == {snapshot.corpus_digest}
    assert not drift["drifted"].any()
    assert (report.items, report.answerable, report.no_answer, report.skipped_queries) == (
        3,
        2,
        1,
        1,
    )
    assert report.corpus_digest == snapshot.corpus_digest

    [hits] = ReferenceSystem(snapshot.passages).retrieve_batch(
        [Query("q", "how cold are vaccines kept")], 1
    )
    assert hits[0].passage_id == "d1@v1#s1"


def test_import_refuses_to_overwrite(beir_folder, tmp_path):
    snapshot_dir = tmp_path / "snap"
    import_beir(beir_folder, snapshot_dir, tmp_path / "golden.jsonl")
    before = (snapshot_dir / "manifest.json").read_text()
    with pytest.raises(FormatError, match="already exists; an import never overwrites"):
        import_beir(beir_folder, snapshot_dir, tmp_path / "other.jsonl")
    assert (snapshot_dir / "manifest.json").read_text() == before
    assert not (tmp_path / "other.jsonl").exists()


def test_failed_import_names_the_problem_and_leaves_nothing(beir_folder, tmp_path):
    qrels = write(tmp_path / "bad.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tnot-there\t1\n")
    out = tmp_path / "out"
    with pytest.raises(
        FormatError,
        match=rf"^{re.escape(str(qrels))}:3: document 'not-there' is judged but not in the corpus$",
    ):
        import_beir(beir_folder, out / "snap", out / "golden.jsonl", qrels_path=qrels)
    assert not out.exists() or list(out.iterdir()) == []


def test_bad_grade_map_is_refused(beir_folder, tmp_path):
    with pytest.raises(FormatError, match="grade_map sends 2 to 5; grades are 0 to 3"):
        import_beir(beir_folder, tmp_path / "s", tmp_path / "g.jsonl", grade_map={0: 0, 1: 2, 2: 5})
    with pytest.raises(
        FormatError, match=r"qrels/test\.tsv:2: no golden grade given for source grade 2$"
    ):
        import_beir(beir_folder, tmp_path / "s", tmp_path / "g.jsonl", grade_map={0: 0, 1: 3})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beir"]


def test_import_failing_after_staging_leaves_no_temporary_files(beir_folder, tmp_path, monkeypatch):
    def refuse(path):
        raise GoldenSetError(f"{path}: refused by the test")

    monkeypatch.setattr(formats, "load_golden_set", refuse)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(GoldenSetError, match="refused by the test"):
        import_beir(beir_folder, out / "snap", out / "g.jsonl")
    assert list(out.iterdir()) == []


def test_trec_import_with_cranfield_style_grades(tmp_path):
    docs = write_jsonl(
        tmp_path / "docs.jsonl",
        [
            {"id": "1", "title": "wing slipstream", "text": "lift increase in a slipstream"},
            {"id": "2", "title": "heat", "text": "heat conduction in composite slabs"},
            {"id": "3", "title": "", "text": ""},
        ],
    )
    queries = write_jsonl(
        tmp_path / "queries.jsonl",
        [{"id": "1", "text": "slipstream lift"}, {"id": "2", "text": "composite slabs"}],
    )
    qrels = write(tmp_path / "qrels.trec", "1 0 1 4\n1 0 2 1\n1 0 3 -1\n2 0 2 3\n")
    report = import_trec(docs, queries, qrels, tmp_path / "cran", tmp_path / "cran.jsonl")
    snapshot, golden, _ = load_and_validate(tmp_path / "cran", tmp_path / "cran.jsonl")
    # Top grade 4 -> 3, every other positive grade -> 2, the -1 (unjudged) row is dropped.
    assert gold_of(golden) == {"1": [("1@v1#s1", 3), ("2@v1#s1", 2)], "2": [("2@v1#s1", 2)]}
    empty = snapshot.passages.filter(pl.col("doc_id") == "3").row(0, named=True)
    assert (empty["title"], empty["text"]) == ("3", "[empty in the source collection]")
    assert report.documents == 3

    tsv = write(tmp_path / "qrels.tsv", "qid\tdocid\tgrade\n1\t1\t1\n")
    import_trec(docs, queries, tsv, tmp_path / "bin", tmp_path / "bin.jsonl", "pinned-by-hand")
    _, binary, _ = load_and_validate(tmp_path / "bin", tmp_path / "bin.jsonl")
    assert gold_of(binary) == {"1": [("1@v1#s1", 3)]}
    assert binary.items["labelled_against"].to_list() == ["pinned-by-hand"]


def test_trec_import_names_a_judged_query_missing_from_the_queries(tmp_path):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "1", "text": "text"}])
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"id": "1", "text": "text"}])
    qrels = write(tmp_path / "qrels.trec", "1 0 1 1\n9 0 1 1\n")
    with pytest.raises(
        FormatError,
        match=rf"^{re.escape(str(qrels))}:2: query '9' is judged but not in the queries file$",
    ):
        import_trec(docs, queries, qrels, tmp_path / "s", tmp_path / "g.jsonl")


def test_jsonl_errors_name_file_and_line(tmp_path):
    docs = write(tmp_path / "docs.jsonl", '{"id": "1", "text": "a"}\n{"id": "2", "text": \n')
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"id": "1", "text": "a"}])
    qrels = write(tmp_path / "qrels.trec", "1 0 1 1\n")
    with pytest.raises(FormatError, match=rf"^{re.escape(str(docs))}:2: malformed JSON"):
        import_trec(docs, queries, qrels, tmp_path / "s", tmp_path / "g.jsonl")
    write_jsonl(docs, [{"id": "1", "text": "a"}, {"text": "b"}])
    with pytest.raises(
        FormatError, match=rf"^{re.escape(str(docs))}:2: record is missing the field 'id'"
    ):
        import_trec(docs, queries, qrels, tmp_path / "s", tmp_path / "g.jsonl")
    write_jsonl(docs, [{"id": "1", "text": "a"}, {"id": "1", "text": "b"}])
    with pytest.raises(
        FormatError, match=rf"^{re.escape(str(docs))}:2: id '1' already used on line 1"
    ):
        import_trec(docs, queries, qrels, tmp_path / "s", tmp_path / "g.jsonl")


def test_a_truncated_jsonl_line_gets_the_whole_message_and_the_parsers_column(tmp_path):
    """The message ends with the column the parser names (where the cut-off string opens, not
    where the line ends), worded as for golden sets."""
    cut = '{"id": "2", "text": "cut off in the midd'
    docs = write(tmp_path / "docs.jsonl", '{"id": "1", "text": "a"}\n' + cut + "\n")
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"id": "1", "text": "a"}])
    qrels = write(tmp_path / "qrels.trec", "1 0 1 1\n")
    with pytest.raises(FormatError) as error:
        import_trec(docs, queries, qrels, tmp_path / "s", tmp_path / "g.jsonl")
    column = cut.index('"cut') + 1
    assert str(error.value) == (
        f"{docs}:2: malformed JSON: Unterminated string starting at column {column}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "docs.jsonl",
        "qrels.trec",
        "queries.jsonl",
    ]


def test_a_query_with_a_line_separator_is_imported_as_one_golden_line(beir_folder, tmp_path):
    """``json.dumps(..., ensure_ascii=False)`` writes U+2028 and U+0085 as they are: the source
    reader and the golden set that the import writes and checks read them inside one line."""
    queries = beir_folder / "queries.jsonl"
    records = [json.loads(line) for line in queries.read_text(encoding="utf-8").split("\n") if line]
    records[1]["text"] = "return\u2028window\x85please"
    write(queries, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    import_beir(beir_folder, tmp_path / "snap", tmp_path / "golden.jsonl")
    golden = load_golden_set(tmp_path / "golden.jsonl")
    assert dict(golden.items.select("item_id", "question").iter_rows())["q2"] == (
        "return\u2028window\x85please"
    )
    assert golden.items.sort("line")["line"].to_list() == [1, 2, 3]


def test_malformed_squad_json_names_the_line_and_the_whole_message(tmp_path):
    """A line end inside a string of a SQuAD file: the line and column of the line end."""
    second = ' "data": [{"title": "Norm'
    source = write(tmp_path / "dev.json", '{"version": "v2.0",\n' + second + '\nans"}]}\n')
    with pytest.raises(FormatError) as error:
        import_squad(source, tmp_path / "squad", tmp_path / "squad.jsonl")
    assert str(error.value) == (
        f"{source}:2: malformed JSON: Invalid control character at column {len(second) + 1}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.json"]


def squad_document() -> dict:
    return {
        "version": "v2.0",
        "data": [
            {
                "title": "Normans",
                "paragraphs": [
                    {
                        "context": "The Normans gave their name to Normandy, a region in France.",
                        "qas": [
                            {
                                "id": "a1",
                                "question": "In what country is Normandy located?",
                                "answers": [
                                    {"text": "France", "answer_start": 54},
                                    {"text": "France", "answer_start": 54},
                                    {"text": "a region in France", "answer_start": 42},
                                ],
                                "is_impossible": False,
                            },
                            {
                                "id": "n1",
                                "question": "What is France a region of?",
                                "answers": [],
                                "plausible_answers": [{"text": "Normandy", "answer_start": 31}],
                                "is_impossible": True,
                            },
                        ],
                    }
                ],
            },
            {
                "title": "Fresno,_California",
                "paragraphs": [
                    {"context": "Fresno is in the San Joaquin Valley.", "qas": []},
                    {
                        "context": "Fresno has a hot semi-arid climate.",
                        "qas": [
                            {
                                "id": "a2",
                                "question": "What climate does Fresno have?",
                                "answers": [{"text": "hot semi-arid", "answer_start": 13}],
                                "is_impossible": False,
                            }
                        ],
                    },
                ],
            },
        ],
    }


def test_squad_import_maps_answerable_and_impossible_questions(tmp_path):
    source = write(tmp_path / "dev.json", json.dumps(squad_document()))
    report = import_squad(source, tmp_path / "squad", tmp_path / "squad.jsonl")
    snapshot, golden, drift = load_and_validate(tmp_path / "squad", tmp_path / "squad.jsonl")

    fresno = safe_doc_id("Fresno,_California_1")
    assert snapshot.passages["passage_id"].sort().to_list() == sorted(
        ["Normans_0@v1#s1", f"{safe_doc_id('Fresno,_California_0')}@v1#s1", f"{fresno}@v1#s1"]
    )
    assert gold_of(golden) == {
        "a1": [("Normans_0@v1#s1", 3)],
        "n1": [("Normans_0@v1#s1", 0)],
        "a2": [(f"{fresno}@v1#s1", 3)],
    }
    items = {row["item_id"]: row for row in golden.items.iter_rows(named=True)}
    assert items["a1"]["stratum"] == "answerable"
    assert items["a1"]["reference_answers"] == ["France", "a region in France"]
    assert items["n1"]["stratum"] == "near_miss"
    assert items["n1"]["reference_answers"] == []
    assert all(row["must_mention"] == [] for row in items.values())
    title = snapshot.passages.filter(pl.col("doc_id") == fresno)["title"].item()
    assert title == "Fresno, California"
    assert not drift["drifted"].any()
    assert (report.documents, report.items, report.answerable, report.no_answer) == (3, 3, 2, 1)


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (
            lambda d: d["data"][0].pop("paragraphs"),
            r"data\[0\]: expected a list under 'paragraphs'",
        ),
        (
            lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(answers=[]),
            r"data\[0\].paragraphs\[0\].qas\[0\]: answerable question 'a1' has no answers",
        ),
        (
            lambda d: d["data"][1]["paragraphs"][1]["qas"][0].update(id="a1"),
            r"data\[1\].paragraphs\[1\].qas\[0\]: question id 'a1' also at "
            r"data\[0\].paragraphs\[0\].qas\[0\]",
        ),
        (
            lambda d: d["data"][0]["paragraphs"][0].update(context="  "),
            r"data\[0\].paragraphs\[0\]: 'context' must be a non-empty string",
        ),
    ],
)
def test_bad_squad_names_file_and_location(tmp_path, break_it, message):
    document = squad_document()
    break_it(document)
    source = write(tmp_path / "dev.json", json.dumps(document))
    with pytest.raises(FormatError, match=rf"^{re.escape(str(source))}: {message}"):
        import_squad(source, tmp_path / "squad", tmp_path / "squad.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.json"]


# --- the public collections (skipped unless RAG_EVAL_DATASETS is set) -------------------------

DATASETS = os.environ.get("RAG_EVAL_DATASETS")
needs_datasets = pytest.mark.skipif(
    not DATASETS, reason="RAG_EVAL_DATASETS is not set: point it at the shared datasets folder"
)


@needs_datasets
@pytest.mark.datasets
def test_import_cranfield(tmp_path):
    folder = Path(DATASETS) / "cranfield"
    report = import_trec(
        folder / "docs.jsonl",
        folder / "queries.jsonl",
        folder / "qrels.trec",
        tmp_path / "cranfield",
        tmp_path / "cranfield.jsonl",
    )
    snapshot, golden, drift = load_and_validate(
        tmp_path / "cranfield", tmp_path / "cranfield.jsonl"
    )
    assert (report.documents, snapshot.passages.height) == (1400, 1400)
    assert (report.items, report.answerable) == (225, 225)
    # 1,612 graded qrels: grade 4 (128 rows) -> 3, grades 1-3 -> 2.
    assert golden.gold["grade"].value_counts().sort("grade").rows() == [(2, 1484), (3, 128)]
    assert not drift["drifted"].any()


@needs_datasets
@pytest.mark.datasets
def test_import_squad2_dev(tmp_path):
    source = Path(DATASETS) / "squad2-dev" / "dev-v2.0.rebuilt.json"
    report = import_squad(source, tmp_path / "squad", tmp_path / "squad.jsonl")
    snapshot, golden, drift = load_and_validate(tmp_path / "squad", tmp_path / "squad.jsonl")
    assert snapshot.passages.height == 1204
    assert (report.items, report.no_answer) == (11873, 5945)
    strata = golden.items["stratum"].value_counts().sort("stratum").rows()
    assert strata == [("answerable", 5928), ("near_miss", 5945)]
    # The rebuilt questions.jsonl names the same paragraph for every question.
    expected = pl.read_ndjson(Path(DATASETS) / "squad2-dev" / "questions.jsonl")
    mapped = expected.with_columns(
        pl.col("passage_id").map_elements(safe_doc_id, return_dtype=pl.String) + "@v1#s1"
    )
    ours = golden.gold.join(golden.items.select("item_id", "reference_answers"), on="item_id")
    joined = ours.join(mapped, left_on="item_id", right_on="id")
    assert joined.height == 11873
    assert (joined["passage_id"] == joined["passage_id_right"]).all()
    # Same answer texts, duplicates removed (the rebuilt file orders them differently).
    same_answers = joined["reference_answers"].list.sort() == joined["answers"].list.sort()
    assert same_answers.all()
    assert not drift["drifted"].any()


def test_a_byte_order_mark_does_not_glue_itself_to_the_first_query_id(tmp_path):
    bom = "\ufeff".encode()
    run = tmp_path / "run.txt"
    run.write_bytes(bom + b"q1 Q0 d1 1 2.5 tag\nq1 Q0 d2 2 1.5 tag\nq2 Q0 d1 1 0.5 tag\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_bytes(bom + b"q1 0 d1 1\nq2 0 d1 0\n")
    assert read_trec_run(run)["query_id"].to_list() == ["q1", "q1", "q2"]
    assert read_trec_qrels(qrels)["query_id"].to_list() == ["q1", "q2"]
    # The same with tabs and blank lines, which take the line-by-line reader.
    run.write_bytes(bom + b"q1\tQ0\td1\t1\t2.5\ttag\n\nq2 Q0 d1 1 0.5 tag\n")
    qrels.write_bytes(bom + b"q1 0 d1 1\n\nq2 0 d1 0\n")
    assert read_trec_run(run)["query_id"].to_list() == ["q1", "q2"]
    assert read_trec_qrels(qrels)["query_id"].to_list() == ["q1", "q2"]


@pytest.mark.parametrize(
    "text",
    [
        b"q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.5 t\n",
        b"q1\tQ0\td1\t1\t2.5\tt\nq1 Q0  d2 2 1.5 t\n",
        b"q1 Q0 d1 1 2.5 t\r\nq1 Q0 d2 2 1.5 t\r\n",
        b"\nq1 Q0 d1 1 2.5 t\n\n\nq1 Q0 d2 2 1.5 t\n\n",
        b"q1 Q0 d1 1 2.5 t \nq1 Q0 d2 2 1.5\n",
        b"q1  Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.5\n",
        b" q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.5\n",
        b"q1 Q0 d1 1 2.5\n",
        b"q1 Q0 d1 1 2.5 t x\n",
        b"q1 Q0 d1 1 nan t\n",
        b"q1 Q0 d1 1 2.5 t\nq1 Q0 d1 2 1.5 t\n",
        b"q1 Q0 d1 1 2.5 t",
        "q1\u00a0Q0 d1 1 2.5 t x\n".encode(),
        "q\u00e9 Q0 d1 1 2.5 t\n".encode(),
        b"q1 Q0 d\xff 1 2.5 t\n",
        b"",
    ],
)
def test_the_fast_run_reader_agrees_with_the_line_by_line_reader(tmp_path, text, monkeypatch):
    """Polars' CSV reader takes well-formed files; anything else is read line by line, so the
    result, or the error naming the line, is the same either way."""
    from rag_eval_pipeline.lib.inputs import formats

    path = tmp_path / "run.txt"
    path.write_bytes(text)

    def outcome():
        try:
            return read_trec_run(path).rows()
        except FormatError as error:
            return str(error)

    fast = outcome()
    monkeypatch.setattr(formats, "_whitespace_table", lambda *args, **kwargs: None)
    assert fast == outcome()


def run_lines(queries: int, docs: int) -> list[str]:
    return [
        f"q{query} Q0 d{doc} {doc + 1} {docs - doc}.25 tag"
        for query in range(queries)
        for doc in range(docs)
    ]


def fast_run_table(path: Path) -> pl.DataFrame | None:
    """What the fast run reader makes of the file (None: it leaves it to the line reader)."""
    return formats._whitespace_table(
        path, formats.RUN_COLUMNS, ("query_id", "doc_id", "score"), {"score": pl.Float64}
    )


@pytest.mark.parametrize("piece_bytes", [1, 20, 100, 1 << 20])
@pytest.mark.parametrize(
    ("line_end", "final_line_end"),
    [("\n", "\n"), ("\r\n", "\r\n"), ("\n", ""), ("\r\n", "")],
)
def test_a_run_read_in_pieces_is_the_run_read_whole(
    tmp_path, monkeypatch, piece_bytes, line_end, final_line_end
):
    """The fast reader takes the file in line-aligned pieces: lines cut across a piece
    boundary, CRLF line ends, a BOM and a missing final line end read as they do in one piece,
    and the fast reader (not the line-by-line one) takes them."""
    lines = run_lines(3, 7)
    lines[5] = lines[5].replace(" ", "\t")
    path = tmp_path / "run.txt"
    path.write_bytes(b"\xef\xbb\xbf" + (line_end.join(lines) + final_line_end).encode())
    monkeypatch.setattr(formats, "PIECE_BYTES", piece_bytes)
    expected = [(f"q{q}", f"d{d}", 7 - d + 0.25) for q in range(3) for d in range(7)]
    assert read_trec_run(path).rows() == expected
    assert fast_run_table(path) is not None


@pytest.mark.parametrize(
    ("line", "bad", "message"),
    [
        (30, "q9 Q0 d9 1 2.5", ":30: found 5 fields, expected 6 (qid Q0 docno rank score tag)"),
        (31, "q9 Q0 d9 1 high tag", ":31: score 'high' is not a finite number"),
        (32, "q9 Q0 d9 1 inf tag", ":32: score 'inf' is not a finite number"),
        (
            33,
            "q0 Q0 d1 9 0.5 tag",
            ":33: duplicate document for query (q0, d1), first given on line 2",
        ),
    ],
)
def test_an_error_in_a_later_piece_names_its_line_in_the_file(
    tmp_path, monkeypatch, line, bad, message
):
    lines = run_lines(5, 8)
    lines[line - 1] = bad
    path = write(tmp_path / "run.txt", "\n".join(lines) + "\n")
    monkeypatch.setattr(formats, "PIECE_BYTES", 64)
    assert fast_run_table(path) is None
    with pytest.raises(FormatError) as error:
        read_trec_run(path)
    assert str(error.value) == f"{path}{message}"


def test_qrels_read_in_pieces_keep_their_line_numbers(tmp_path, monkeypatch):
    judgements = [f"q{n // 4} 0 d{n % 4} {n % 3}" for n in range(40)]
    path = write(tmp_path / "qrels.txt", "\r\n".join(judgements))
    monkeypatch.setattr(formats, "PIECE_BYTES", 30)
    assert read_trec_qrels(path).rows() == [(f"q{n // 4}", f"d{n % 4}", n % 3) for n in range(40)]
    assert formats._trec_qrels_lines(path)["line"].to_list() == list(range(1, 41))
    judgements[36] = "q0 0 d2 1"
    write(path, "\n".join(judgements) + "\n")
    with pytest.raises(FormatError) as error:
        read_trec_qrels(path)
    assert str(error.value) == (
        f"{path}:37: duplicate judgement for query and document (q0, d2), first given on line 3"
    )
    judgements[36] = "q9 0 d2 1.5"
    write(path, "\n".join(judgements) + "\n")
    with pytest.raises(FormatError, match=r":37: grade '1.5' is not an integer$"):
        read_trec_qrels(path)


def test_colliding_pair_hashes_are_settled_by_the_pairs(tmp_path, monkeypatch):
    """Distinct pairs whose hashes collide are still read by the fast reader; a repeated pair
    among them is still refused."""
    lines = run_lines(2, 3)
    path = write(tmp_path / "run.txt", "\n".join(lines) + "\n")
    monkeypatch.setattr(formats, "_PAIR_HASH", pl.repeat(7, pl.len(), dtype=pl.UInt64))
    monkeypatch.setattr(formats, "PIECE_BYTES", 40)
    assert fast_run_table(path).height == 6
    write(path, "\n".join([*lines, lines[0]]) + "\n")
    assert fast_run_table(path) is None
