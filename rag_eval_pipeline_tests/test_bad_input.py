"""Bad input fails with the file, the line or document and the problem, and writes nothing."""

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from rag_eval_pipeline.lib.inputs.corpus import CorpusError, freeze_snapshot, load_snapshot
from rag_eval_pipeline.lib.inputs.golden import (
    GoldenSetError,
    check_labelled_against,
    load_golden_set,
)

from .conftest import materialize_night


def failure_message(result) -> str:
    failures = [event for event in result.all_events if event.is_step_failure]
    assert failures, "the run was expected to fail"
    error = failures[0].event_specific_data.error
    return "".join(part.message for part in (error, error.cause) if part is not None)


def table_count(path: Path, table: str) -> int:
    if not path.exists():
        return 0
    with duckdb.connect(str(path), read_only=True) as connection:
        return connection.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0]


def replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")  # as the readers split
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_malformed_golden_line_names_file_and_line(library, tmp_path):
    golden = library / "golden.jsonl"
    replace_line(golden, 3, '{"id": "q3", "question": "broken"')
    with pytest.raises(GoldenSetError, match=r"golden\.jsonl:3: malformed JSON"):
        load_golden_set(golden)
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    assert "golden.jsonl:3: malformed JSON" in failure_message(result)
    assert table_count(warehouse, "golden_items") == 0
    assert table_count(warehouse, "eval_runs") == 0


def test_a_golden_item_wrapped_over_lines_is_told_to_stay_on_one(library):
    """Pretty-printed items (one object over several lines): the first line is named, with
    the parser's message and what is wrong with the file."""
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text(encoding="utf-8").splitlines()[0])
    golden.write_text(json.dumps(item, indent=1) + "\n", encoding="utf-8")
    with pytest.raises(GoldenSetError) as raised:
        load_golden_set(golden)
    assert str(raised.value) == (
        f"{golden}:1: malformed JSON at column 2: Expecting property name enclosed in double "
        "quotes; the line ends before its JSON value does: each item must be whole on one line"
    )
    # Cut inside a string or followed by more: not said (the line is not merely wrapped).
    replace_line(golden, 1, '{"id": "q1"} {')
    with pytest.raises(GoldenSetError, match=r":1: malformed JSON at column 14: Extra data$"):
        load_golden_set(golden)


@pytest.mark.parametrize("kind", ["human labels", "production traces", "BEIR corpus"])
def test_every_json_lines_reader_tells_a_wrapped_record_to_stay_on_one_line(tmp_path, kind):
    """Human labels, production traces and the import formats read JSON Lines as golden sets
    do: a pretty-printed record names its file and first line, and says to keep it whole on
    one line."""
    from rag_eval_pipeline.lib.inputs.formats import read_beir
    from rag_eval_pipeline.lib.inputs.traces import load_traces
    from rag_eval_pipeline.lib.judges.calibration import load_human_labels

    name, record, read = {
        "human labels": (
            "labels.jsonl",
            {"item_id": "q1", "claim": "A claim.", "verdict": "supported"},
            load_human_labels,
        ),
        "production traces": ("traces.jsonl", {"trace_id": "t1", "question": "Q?"}, load_traces),
        "BEIR corpus": ("corpus.jsonl", {"_id": "d1", "title": "T", "text": "x"}, read_beir),
    }[kind]
    path = tmp_path / name
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    with pytest.raises(Exception) as raised:
        read(tmp_path if kind == "BEIR corpus" else path)  # a BEIR collection is a folder
    message = str(raised.value)
    assert message.startswith(f"{path}:1: malformed JSON"), message
    assert message.endswith("before its JSON value does: each item must be whole on one line")


def test_a_truncated_golden_line_gets_the_whole_message_and_the_parsers_column(library):
    """A line cut off inside a string: the message is the parser's whole sentence, with the
    column it names (where the unclosed string opens, not where the line ends)."""
    golden = library / "golden.jsonl"
    line = golden.read_text(encoding="utf-8").splitlines()[2]
    opening = line.index('"how long')  # the question's opening quote
    replace_line(golden, 3, line[: opening + 20])
    with pytest.raises(GoldenSetError) as raised:
        load_golden_set(golden)
    assert str(raised.value) == (
        f"{golden}:3: malformed JSON: Unterminated string starting at column {opening + 1}"
    )


@pytest.mark.parametrize("ending", ["\r\n", "\r"])
def test_a_golden_set_with_other_line_endings_reads_the_same(library, ending):
    golden = library / "golden.jsonl"
    expected = load_golden_set(golden)
    golden.write_bytes(golden.read_bytes().replace(b"\n", ending.encode()))
    again = load_golden_set(golden)
    assert again.items.equals(expected.items) and again.gold.equals(expected.gold)


def test_a_golden_set_that_is_not_utf8_names_the_line_and_the_byte(library):
    golden = library / "golden.jsonl"
    data = golden.read_bytes()
    second_line = data.index(b"\n") + 1
    golden.write_bytes(data[:second_line] + b"\xe9" + data[second_line:])
    with pytest.raises(
        GoldenSetError, match=rf"golden\.jsonl:2: not UTF-8 text \(.* {second_line}\)"
    ):
        load_golden_set(golden)


def test_a_line_separator_inside_a_golden_string_does_not_end_the_line(library):
    """JSON strings may hold U+2028, U+2029 and U+0085 as they are (``json.dumps`` with
    ``ensure_ascii=False`` writes them so): a golden line holding them is one line, and the lines
    after it keep their numbers."""
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text(encoding="utf-8").splitlines()[0])
    item["question"] += "\u2028and the\u2029spare\x85tubes"
    replace_line(golden, 1, json.dumps(item, ensure_ascii=False))
    assert load_golden_set(golden).items.sort("line")["question"][0] == item["question"]
    replace_line(golden, 3, '{"id": "q3"')
    with pytest.raises(GoldenSetError, match=r"golden\.jsonl:3: malformed JSON at column 12: "):
        load_golden_set(golden)


def test_golden_item_with_bad_grade_names_line(library):
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text().splitlines()[1])
    item["gold"][0]["grade"] = "high"
    replace_line(golden, 2, json.dumps(item))
    with pytest.raises(GoldenSetError, match=r"golden\.jsonl:2: item 'q2' gold .* grade 'high'"):
        load_golden_set(golden)


@pytest.mark.parametrize(
    ("language", "problem"),
    [("", "an empty language"), ("  ", "an empty language"), ("en ", "language 'en '")],
)
def test_a_golden_item_with_an_empty_language_names_the_line(library, language, problem):
    """Its figures would be reported under a language scope without a name (or, with spaces
    around it, beside the same language's)."""
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text().splitlines()[1])
    item["language"] = language
    replace_line(golden, 2, json.dumps(item))
    with pytest.raises(GoldenSetError) as raised:
        load_golden_set(golden)
    assert str(raised.value) == f"{golden}:2: item 'q2' has {problem}; write its code (en, de)"


def test_a_misspelt_golden_field_is_named_beside_the_missing_one(library):
    """``gold_passages`` for ``gold``: the error names the field it has as well as the one it
    lacks, so the typo is found without opening the README."""
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text().splitlines()[1])
    item["gold_passages"] = item.pop("gold")
    replace_line(golden, 2, json.dumps(item))
    with pytest.raises(
        GoldenSetError,
        match=r"golden\.jsonl:2: item is missing the field 'gold' "
        r"\(it has field\(s\) the format does not name: 'gold_passages'\)$",
    ):
        load_golden_set(golden)


def test_a_no_answer_item_with_an_answering_gold_passage_names_the_line(library):
    """A no-answer item whose gold holds a passage of grade 2 or 3 contradicts itself (it would
    be scored as refused-correctly while the library answers it): refused, naming the line."""
    golden = library / "golden.jsonl"
    lines = golden.read_text().splitlines()
    number, item = next(
        (n, json.loads(line))
        for n, line in enumerate(lines, 1)
        if json.loads(line)["stratum"] == "out_of_scope"
    )
    item["gold"] = [{"passage_id": "STORE-FRIDGE-001@v1#s1", "grade": 3}]
    replace_line(golden, number, json.dumps(item))
    with pytest.raises(
        GoldenSetError,
        match=rf"golden\.jsonl:{number}: no-answer item '{item['id']}' \(stratum out_of_scope\) "
        r"has gold passage 'STORE-FRIDGE-001@v1#s1' at grade 3",
    ):
        load_golden_set(golden)


@pytest.mark.parametrize(
    ("stratum", "field", "values"),
    [
        ("out_of_scope", "reference_answers", ["take two tablets"]),
        ("out_of_scope", "must_mention", ["500 mg"]),
        ("withdrawn_document", "must_mention", ["fax"]),
    ],
)
def test_a_no_answer_item_with_answers_to_check_names_the_line(
    library, tmp_path, stratum, field, values
):
    """A no-answer item is scored only on being refused, so reference answers or mentions on it
    would never be checked (the README has them empty): refused, naming the line and the item,
    and the night writes nothing."""
    golden = library / "golden.jsonl"
    lines = golden.read_text().splitlines()
    number, item = next(
        (n, json.loads(line))
        for n, line in enumerate(lines, 1)
        if json.loads(line)["stratum"] == stratum
    )
    item[field] = values
    replace_line(golden, number, json.dumps(item))
    expected = (
        f"golden.jsonl:{number}: no-answer item '{item['id']}' (stratum {stratum}) has "
        f"'{field}' {values!r}: "
    )
    with pytest.raises(GoldenSetError) as raised:
        load_golden_set(golden)
    assert expected in str(raised.value)
    assert str(raised.value).endswith(
        f"empty '{field}', or make the item answerable (stratum answerable, its answering "
        "passage in 'gold' at grade 2 or 3)"
    )
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    assert expected in failure_message(result)
    assert table_count(warehouse, "golden_items") == 0


def test_unknown_gold_passage_id_names_line_and_id(library, tmp_path):
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text().splitlines()[1])
    item["gold"][0]["passage_id"] = "STORE-FRIDGE-001@v9#s1"
    replace_line(golden, 2, json.dumps(item))
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    message = failure_message(result)
    assert "golden.jsonl:2: item 'q2' names gold passage 'STORE-FRIDGE-001@v9#s1'" in message
    assert "not in snapshot 2026-10-01" in message
    assert table_count(warehouse, "golden_items") == 0
    assert table_count(warehouse, "golden_gold") == 0


@pytest.mark.parametrize("label", ["2026-12-02", "yesterday"])
def test_an_item_labelled_against_no_snapshot_names_line_and_label(library, tmp_path, label):
    """A ``labelled_against`` naming no snapshot folder (nor a frozen digest) would leave the
    item's gold ids checked against nothing, so a typo in one (here a section that does not
    exist) would pass as a retrieval miss: the night fails naming the line and the label."""
    golden = library / "golden.jsonl"
    item = json.loads(golden.read_text().splitlines()[1])
    item["gold"][0]["passage_id"] = "STORE-FRIDGE-001@v2#s9"
    item["labelled_against"] = label
    replace_line(golden, 2, json.dumps(item))
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    message = failure_message(result)
    assert f"golden.jsonl:2: item 'q2' is labelled against '{label}', which names no snapshot" in (
        message
    )
    assert "snapshot folders: 2026-10-01;" in message
    assert table_count(warehouse, "golden_items") == 0


def earlier_snapshot(library: Path) -> str:
    """A frozen 2026-09-01 snapshot: a copy of the fixture's with one section edited."""
    earlier = library / "2026-09-01"
    shutil.copytree(library / "2026-10-01" / "documents", earlier / "documents")
    edited = earlier / "documents" / "STORE-FRIDGE-001@v1.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nOne more line.\n", encoding="utf-8")
    return freeze_snapshot(earlier)["corpus_digest"]


def test_an_item_labelled_against_an_earlier_snapshot_or_its_digest_is_accepted(library, tmp_path):
    """The labels a golden set may carry: a snapshot folder's name, or a frozen corpus digest
    (here of an earlier snapshot, a copy with one section edited)."""
    digest = earlier_snapshot(library)
    golden = library / "golden.jsonl"
    lines = golden.read_text().splitlines()
    for number, label in ((2, "2026-09-01"), (3, digest)):
        item = json.loads(lines[number - 1])
        item["labelled_against"] = label
        replace_line(golden, number, json.dumps(item))
    assert materialize_night(library, tmp_path / "w.duckdb").success


def fixture_digest(library: Path) -> str:
    manifest = library / "2026-10-01" / "manifest.json"
    return json.loads(manifest.read_text(encoding="utf-8"))["corpus_digest"]


def label_line(golden: Path, number: int, label: str, **changes) -> dict:
    item = json.loads(golden.read_text().splitlines()[number - 1])
    item.update(labelled_against=label, **changes)
    replace_line(golden, number, json.dumps(item))
    return item


def test_an_item_labelled_against_a_digest_prefix_is_checked_against_that_snapshot(
    library, tmp_path
):
    """The 12-character digest prefix the CLI prints names the snapshot frozen with it: a night
    on that snapshot accepts the label and checks the item's gold ids there, so an unknown one
    fails naming the line."""
    golden = library / "golden.jsonl"
    prefix = fixture_digest(library)[:12]
    label_line(golden, 3, prefix)
    label_line(golden, 1, fixture_digest(library)[:20])
    assert materialize_night(library, tmp_path / "ok.duckdb").success

    label_line(golden, 2, prefix, gold=[{"passage_id": "STORE-FRIDGE-001@v2#s9", "grade": 3}])
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    message = failure_message(result)
    assert "golden.jsonl:2: item 'q2' names gold passage 'STORE-FRIDGE-001@v2#s9'" in message
    assert "not in snapshot 2026-10-01" in message
    assert table_count(warehouse, "golden_items") == 0


@pytest.mark.parametrize("label", ["folder", "digest prefix"])
def test_a_gold_id_typo_fails_on_a_night_after_the_labelled_snapshot(library, tmp_path, label):
    """A night on a later snapshot than the one an item was labelled against still checks the
    item's gold ids against that snapshot (it is on disk): a typo fails naming the line and the
    snapshot, instead of passing as a passage that drifted away since labelling."""
    digest = earlier_snapshot(library)
    label_line(
        library / "golden.jsonl",
        2,
        "2026-09-01" if label == "folder" else digest[:12],
        gold=[{"passage_id": "STORE-FRIGDE-001@v1#s1", "grade": 3}],
    )
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    message = failure_message(result)
    assert (
        "golden.jsonl:2: item 'q2' names gold passage 'STORE-FRIGDE-001@v1#s1', which is not "
        "in snapshot 2026-09-01 (labelled against "
    ) in message, message
    assert table_count(warehouse, "golden_items") == 0


@pytest.mark.parametrize(
    ("passage", "status", "hint"),
    [
        ("LAB-LABEL-001@v1#s2", "superseded", "grade it 1 (a superseded version)"),
        ("XFER-FAX-001@v1#s1", "withdrawn", "is a withdrawn_document item"),
    ],
)
def test_grade_3_on_a_passage_not_current_where_it_was_labelled_fails(
    library, tmp_path, passage, status, hint
):
    """Grade 3 is the current answering section: given to a superseded or withdrawn passage of
    the snapshot the item is labelled against, the item can never be answered as labelled; it
    fails naming the line, the status and what to write instead. On a later snapshot the same
    passage only drifts (flagged for re-labelling, not an error)."""
    label_line(
        library / "golden.jsonl", 2, "2026-10-01", gold=[{"passage_id": passage, "grade": 3}]
    )
    result = materialize_night(library, tmp_path / "w.duckdb")
    assert not result.success
    message = failure_message(result)
    assert (
        f"golden.jsonl:2: item 'q2' gives grade 3 (the current answering section) to "
        f"'{passage}', which is {status} in snapshot 2026-10-01, the snapshot it is labelled "
        "against: "
    ) in message, message
    assert hint in message


def test_an_item_labelled_against_an_earlier_snapshots_digest_prefix_is_accepted(library, tmp_path):
    digest = earlier_snapshot(library)
    label_line(library / "golden.jsonl", 2, digest[:12])
    assert materialize_night(library, tmp_path / "w.duckdb").success


def check_labels(library: Path) -> None:
    check_labelled_against(
        load_golden_set(library / "golden.jsonl"),
        library,
        snapshot_id="2026-10-01",
        corpus_digest=fixture_digest(library),
        source="golden.jsonl",
    )


@pytest.mark.parametrize("length", [11, 12])
def test_a_digest_prefix_naming_no_snapshot_names_the_line(library, length):
    """Fewer than 12 characters of a real digest, or 12 that start no frozen digest: the label
    names no snapshot."""
    label = fixture_digest(library)[:length] if length < 12 else "0123456789ab"
    label_line(library / "golden.jsonl", 4, label)
    with pytest.raises(GoldenSetError) as raised:
        check_labels(library)
    assert str(raised.value).startswith(
        f"golden.jsonl:4: item 'q4' is labelled against '{label}', which names no snapshot of "
        f"{library} (snapshot folders: 2026-10-01; a frozen corpus digest, or its first 12 or more "
        "characters, also names one)"
    )


def test_an_ambiguous_digest_prefix_names_the_line_and_the_candidates(library):
    """A prefix two frozen digests start with names neither: the error lists both snapshots
    with their digests; one more character that only one of them has is accepted."""
    digest = fixture_digest(library)
    other = digest[:13] + ("0" if digest[13] != "0" else "1") + digest[14:]
    (library / "2026-09-01").mkdir()
    (library / "2026-09-01" / "manifest.json").write_text(json.dumps({"corpus_digest": other}))
    golden = library / "golden.jsonl"
    label_line(golden, 5, digest[:12])
    label_line(golden, 4, digest[:13])
    with pytest.raises(GoldenSetError) as raised:
        check_labels(library)
    assert str(raised.value) == (
        f"golden.jsonl:4: item 'q4' is labelled against '{digest[:13]}', which names 2 snapshots "
        f"of {library}: "
        + "; ".join(
            f"folder {folder} (corpus digest {frozen})"
            for folder, frozen in sorted(
                [("2026-10-01", digest), ("2026-09-01", other)], key=lambda pair: pair[1]
            )
        )
        + ": give as many characters of the corpus digest as name one of them (or its folder "
        "name)"
    )
    label_line(golden, 4, digest[:14])
    label_line(golden, 5, other[:14])
    check_labels(library)


def test_snapshot_that_no_longer_matches_its_manifest(library, tmp_path):
    document = library / "2026-10-01" / "documents" / "STORE-FRIDGE-001@v1.md"
    document.write_text(document.read_text().replace("8 °C", "10 °C"), encoding="utf-8")
    with pytest.raises(CorpusError) as raised:
        load_snapshot(library / "2026-10-01")
    message = str(raised.value)
    assert "manifest.json" in message
    assert "no longer match the manifest digest" in message
    assert "changed: STORE-FRIDGE-001@v1" in message
    assert message.endswith(
        f"changed: STORE-FRIDGE-001@v1. If the change is meant, freeze the snapshot again "
        f"(rag-eval freeze {library / '2026-10-01'}); otherwise put its frozen files back (a "
        "checkout of this snapshot)"
    )
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    assert "changed: STORE-FRIDGE-001@v1" in failure_message(result)
    assert table_count(warehouse, "corpus_passages") == 0
    assert table_count(warehouse, "corpus_snapshots") == 0


def test_a_manifest_digest_differing_past_its_prefix_is_shown_in_full(library):
    """A manifest whose corpus digest differs from the files' in its last characters: both
    digests are shown whole, never as two equal prefixes."""
    path = library / "2026-10-01" / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    digest = manifest["corpus_digest"]
    altered = digest[:-1] + ("0" if digest[-1] != "0" else "1")
    path.write_text(json.dumps({**manifest, "corpus_digest": altered}), encoding="utf-8")
    with pytest.raises(CorpusError) as raised:
        load_snapshot(library / "2026-10-01")
    assert f"manifest digest {altered} (now {digest}): " in str(raised.value)


def test_a_front_matter_key_given_twice_names_the_file_and_line(library):
    """``status: current`` then ``status: withdrawn``: the YAML parser would keep the last one
    silently; refused naming the second, in plain and in full YAML front matter alike."""
    documents = library / "2026-10-01" / "documents"
    plain = documents / "CLEAN-LOG-001@v1.md"
    text = plain.read_text(encoding="utf-8")
    plain.write_text(text.replace("status: ", "status: withdrawn\nstatus: ", 1), encoding="utf-8")
    line = (
        plain.read_text(encoding="utf-8")
        .splitlines()
        .index(
            next(
                x
                for x in plain.read_text(encoding="utf-8").splitlines()[1:]
                if x.startswith("status:")
            )
        )
        + 2
    )
    with pytest.raises(CorpusError) as raised:
        freeze_snapshot(library / "2026-10-01")
    assert str(raised.value) == (
        f"{plain}:{line}: front matter is not valid YAML: 'status' given twice (line {line}, "
        "column 1)"
    )
    plain.write_text(
        text.replace("title: ", "tags: [a, b]\ntags: [c]\ntitle: ", 1), encoding="utf-8"
    )
    with pytest.raises(CorpusError, match=r"'tags' given twice"):
        freeze_snapshot(library / "2026-10-01")


def test_a_missing_corpus_root_names_it(library, tmp_path):
    from rag_eval_pipeline.lib.inputs.corpus import choose_snapshot

    with pytest.raises(
        CorpusError, match=rf"^{tmp_path / 'nope'}: the corpus root is not a folder$"
    ):
        choose_snapshot(tmp_path / "nope", None)


def test_document_without_a_version_names_the_file(library, tmp_path):
    document = library / "2026-10-01" / "documents" / "CLEAN-LOG-001@v1.md"
    document.write_text(document.read_text().replace("version: 1\n", ""), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"CLEAN-LOG-001@v1\.md:1: document without a version"):
        load_snapshot(library / "2026-10-01", verify=False)
    warehouse = tmp_path / "w.duckdb"
    result = materialize_night(library, warehouse)
    assert not result.success
    assert "document without a version" in failure_message(result)
    assert table_count(warehouse, "corpus_passages") == 0


def test_text_before_first_section_names_the_line(library):
    document = library / "2026-10-01" / "documents" / "CLEAN-LOG-001@v1.md"
    text = document.read_text().replace("---\n## Cleaning", "---\nstray words\n## Cleaning")
    document.write_text(text, encoding="utf-8")
    with pytest.raises(CorpusError, match=r"CLEAN-LOG-001@v1\.md:10: text before the first"):
        load_snapshot(library / "2026-10-01", verify=False)


# --- the suite's judging inputs and the replayed trace file, refused before the system runs --


def production_trace(library: Path, **fields) -> dict:
    digest = json.loads((library / "2026-10-01" / "manifest.json").read_text())["corpus_digest"]
    return {
        "question": "fridge form?",
        "retrieved": [{"passage_id": "STORE-FRIDGE-001@v1#s1", "score": 4.0, "rank": 1}],
        "context_ids": ["STORE-FRIDGE-001@v1#s1"],
        "answer": "Form STR-04. [STORE-FRIDGE-001@v1#s1]",
        "cited_ids": ["STORE-FRIDGE-001@v1#s1"],
        "refused": False,
        "system_version": "ward-assistant 2.3.1",
        "corpus_digest": digest,
        **fields,
    }


def write_lines(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def failed_step(result) -> str:
    [failure] = [event for event in result.all_events if event.is_step_failure]
    return failure.step_key


def nothing_ran_after_the_golden_set(result, warehouse: Path) -> None:
    ran = {event.step_key for event in result.all_events if event.is_step_start}
    assert not any(step.startswith(("retrieval_run", "judge_sample")) for step in ran), ran
    assert table_count(warehouse, "eval_runs") == 0


@pytest.mark.parametrize("field", ["human_labels", "trace_store"])
def test_a_suite_file_naming_a_missing_labels_or_trace_file_stops_the_night(
    library, tmp_path, field
):
    missing = tmp_path / f"no_{field}.jsonl"
    warehouse = tmp_path / "rag_eval.duckdb"
    result = materialize_night(library, warehouse, **{field: str(missing)})
    assert not result.success
    assert failed_step(result) == "golden_set"
    suite_file = library.parent / "suites" / "golden.yaml"
    assert f"{suite_file}: {field} {missing} does not exist" in failure_message(result)
    nothing_ran_after_the_golden_set(result, warehouse)


def test_a_bad_human_label_stops_the_night_before_the_system_runs(library, tmp_path):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        '{"item_id": "q1", "claim": "a", "verdict": "ENTAILED"}\n'
        '{"item_id": "q1", "claim": "b", "verdict": "MAYBE"}\n',
        encoding="utf-8",
    )
    warehouse = tmp_path / "rag_eval.duckdb"
    result = materialize_night(library, warehouse, human_labels=str(labels))
    assert not result.success
    assert failed_step(result) == "golden_set"
    assert f"{labels}:2: verdict 'MAYBE' is not one of" in failure_message(result)
    nothing_ran_after_the_golden_set(result, warehouse)


def test_a_bad_production_trace_stops_the_night_before_the_system_runs(library, tmp_path):
    store = write_lines(
        tmp_path / "production.jsonl",
        [production_trace(library), production_trace(library, refused="no")],
    )
    warehouse = tmp_path / "rag_eval.duckdb"
    result = materialize_night(library, warehouse, trace_store=str(store))
    assert not result.success
    assert failed_step(result) == "golden_set"
    assert f"{store}:2: 'refused' must be true or false, got 'no'" in failure_message(result)
    nothing_ran_after_the_golden_set(result, warehouse)


def test_a_production_trace_on_an_unknown_corpus_state_is_refused_naming_its_line(
    library, tmp_path
):
    store = write_lines(
        tmp_path / "production.jsonl",
        [production_trace(library), production_trace(library, corpus_digest="0" * 64)],
    )
    warehouse = tmp_path / "rag_eval.duckdb"
    result = materialize_night(library, warehouse, trace_store=str(store))
    assert not result.success
    assert failed_step(result) == "golden_set"
    assert (
        f"{store}:2: trace recorded on corpus state {'0' * 64}, which is no snapshot of the "
        "suite's corpus root"
    ) in failure_message(result)
    nothing_ran_after_the_golden_set(result, warehouse)


def test_nightly_refuses_a_missing_replay_file_or_suite_file_before_anything_runs(
    library, tmp_path
):
    from .test_cli import nightly_env, rag_eval

    env = nightly_env(library, tmp_path)
    missing = tmp_path / "nope.jsonl"
    night = ("nightly", "--suite", "golden", "--partition", "2026-10-15")
    replay = rag_eval(
        *night, env=env | {"RAG_EVAL_SYSTEM": "replay", "RAG_EVAL_TRACES": str(missing)}
    )
    assert replay.returncode == 2, replay.stderr
    assert replay.stderr.splitlines()[-1] == (
        f"error: RAG_EVAL_TRACES={missing}: trace file does not exist (the replayed trace file)"
    )
    assert "nightly_eval:" not in replay.stderr  # no run started
    suites = Path(env["RAG_EVAL_SUITES"])
    suite_file = suites / "golden.yaml"
    text = suite_file.read_text(encoding="utf-8")
    assert "human_labels: ''" in text
    suite_file.write_text(text.replace("human_labels: ''", f"human_labels: {missing}"))
    labels = rag_eval(*night, env=env)
    assert labels.returncode == 2, labels.stderr
    assert labels.stderr.splitlines()[-1] == (
        f"error: {suite_file}: human_labels {missing} does not exist"
    )
    assert "nightly_eval:" not in labels.stderr


def test_a_warehouse_path_that_is_no_duckdb_file_stops_a_run_before_its_steps(library, tmp_path):
    """A run the daemon or the UI starts (no command line to check it first) with a warehouse
    path naming a YAML file: its resources refuse it, naming it, before any step runs (with an
    executor of a process per step, the first step fails so); the file is untouched."""
    from rag_eval_pipeline.defs.resources import WarehouseResource
    from rag_eval_pipeline.testing import materialize_suite

    from .conftest import SUITE, fixture_assets, fixture_resources

    wrong = tmp_path / "suite.yaml"
    wrong.write_text("golden_set: g.jsonl\n", encoding="utf-8")
    resources = {
        **fixture_resources(library, tmp_path / "w.duckdb"),
        "warehouse_db": WarehouseResource(path=str(wrong), store=str(tmp_path / "store")),
    }
    result = materialize_suite("2026-10-15", SUITE, resources, assets=fixture_assets())
    assert not result.success
    assert not [event for event in result.all_events if event.is_step_start]
    [failure] = [e for e in result.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE"]
    said = failure.event_specific_data.error.message
    assert f"warehouse {wrong}: exists and is not a DuckDB database" in said
    assert wrong.read_text(encoding="utf-8") == "golden_set: g.jsonl\n"
