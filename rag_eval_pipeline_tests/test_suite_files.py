"""Suite files as users write them: dates where folder names go, a bad file beside good ones,
the ``rag-eval`` help, and the command ``serve-reference`` prints to evaluate a suite."""

import argparse
import datetime as dt
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rag_eval_pipeline.cli import build_parser, main
from rag_eval_pipeline.cli.serve import evaluate_command
from rag_eval_pipeline.lib.inputs.suites import (
    NAMES_A_PATH,
    Suite,
    SuiteError,
    list_suites,
    load_suite,
    parse_suite,
    scan_suites,
    write_suite,
)
from rag_eval_pipeline.testing import write_suite_file

RAG_EVAL = str(Path(sys.executable).parent / "rag-eval")
GOOD = "golden_set: g.jsonl\ncorpus_root: c\n"


def test_a_bare_date_names_the_snapshot_folder(tmp_path):
    """``snapshot: 2026-11-20`` is a YAML date: it names the folder ``2026-11-20``."""
    suite = parse_suite("mine", GOOD + "snapshot: 2026-11-20\n", tmp_path / "mine.yaml")
    assert suite.snapshot == "2026-11-20"


@pytest.mark.parametrize("field", [f for f in NAMES_A_PATH if f != "snapshot"])
def test_a_bare_date_in_a_path_field_is_its_folder_name(tmp_path, field):
    document = {"golden_set": "g.jsonl", "corpus_root": "c", field: "2026-11-20"}
    text = "".join(f"{key}: {value}\n" for key, value in document.items())
    suite = parse_suite("mine", text, tmp_path / "mine.yaml")
    assert getattr(suite, field).name == "2026-11-20"


def test_a_dated_snapshot_is_written_and_read_back(tmp_path):
    registry = tmp_path / "suites"
    write_suite(
        registry,
        Suite(
            name="mine",
            golden_set=tmp_path / "g.jsonl",
            corpus_root=tmp_path,
            snapshot="2026-11-20",
        ),
    )
    assert load_suite(registry, "mine").snapshot == "2026-11-20"


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        # A time would be lost in the folder name: refused, not guessed.
        ("snapshot: 2026-11-20 02:00:00", "'snapshot' must be a folder or file name, got the"),
        ("snapshot: 20261120", "'snapshot' must be a str, got int 20261120 (quote it)"),
        ("nightly: 'yes'", "'nightly' must be a bool, got str 'yes'"),
    ],
)
def test_other_values_are_refused_naming_the_file_and_the_field(tmp_path, line, shown):
    source = tmp_path / "bad.yaml"
    with pytest.raises(SuiteError) as raised:
        parse_suite("bad", GOOD + line + "\n", source)
    assert str(raised.value).startswith(f"{source}: {shown}")


@pytest.fixture
def registry(tmp_path) -> Path:
    """Two good suites (their golden set and snapshot folders there) and three bad suite files."""
    folder = tmp_path / "suites"
    folder.mkdir()
    (tmp_path / "g.jsonl").write_text("")
    (tmp_path / "c" / "2026-11-20" / "documents").mkdir(parents=True)
    good = f"golden_set: {tmp_path / 'g.jsonl'}\ncorpus_root: {tmp_path / 'c'}\n"
    (folder / "alpha.yaml").write_text(good + "nightly: true\n")
    (folder / "beta.yaml").write_text(good + "snapshot: 2026-11-20\n")
    (folder / "broken.yaml").write_text("golden_set: [\n")
    (folder / "lacking.yaml").write_text("golden_set: g.jsonl\n")
    (folder / "Mine.yaml").write_text(GOOD)
    return folder


def test_scan_returns_the_good_suites_and_an_error_per_bad_file(registry):
    suites, problems = scan_suites(registry)
    assert [suite.name for suite in suites] == ["alpha", "beta"]
    messages = sorted(str(problem) for problem in problems)
    assert [message.split(":")[0] for message in messages] == [
        str(registry / "Mine.yaml"),
        str(registry / "broken.yaml"),
        str(registry / "lacking.yaml"),
    ]
    assert "not valid YAML" in messages[1]
    assert messages[2].endswith("'corpus_root' is required")
    assert "use lowercase letters" in messages[0]


def test_listing_all_suites_refuses_a_bad_file_naming_each(registry):
    with pytest.raises(SuiteError) as raised:
        list_suites(registry)
    for name in ("Mine.yaml", "broken.yaml", "lacking.yaml"):
        assert str(registry / name) in str(raised.value)


def test_an_unknown_suite_is_named_even_beside_a_bad_file(registry):
    with pytest.raises(SuiteError) as raised:
        load_suite(registry, "gamma")
    assert str(raised.value) == (
        f"{registry / 'gamma.yaml'}: no suite named 'gamma' (suites: alpha, beta, broken, lacking)"
    )


def test_rag_eval_suites_lists_the_good_ones_and_reports_each_bad_file(
    registry, monkeypatch, capsys
):
    monkeypatch.setenv("RAG_EVAL_SUITES", str(registry))
    assert main(["suites"]) == 2
    out, err = capsys.readouterr()
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["alpha", "nightly"],
        ["beta", "on"],
    ]
    errors = err.splitlines()
    assert len(errors) == 3 and all(line.startswith("error: ") for line in errors)
    assert {line.split(":")[1].strip() for line in errors} == {
        str(registry / name) for name in ("Mine.yaml", "broken.yaml", "lacking.yaml")
    }


def test_rag_eval_suites_succeeds_when_every_file_is_good(registry, monkeypatch, capsys):
    for name in ("broken.yaml", "lacking.yaml", "Mine.yaml"):
        (registry / name).unlink()
    monkeypatch.setenv("RAG_EVAL_SUITES", str(registry))
    assert main(["suites"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and err == ""


def test_rag_eval_suites_reports_what_a_good_suite_file_names_that_is_not_there(
    tmp_path, monkeypatch, capsys
):
    """A suite file that reads well but names a golden set, a corpus root, a snapshot or a
    trace store that is not there is an error line naming the file, the field and the path
    (status 2), as its nightly would fail on it."""
    folder = tmp_path / "suites"
    folder.mkdir()
    (tmp_path / "c" / "2026-11-20" / "documents").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "hollow" / "2026-11-20" / "documents").mkdir(parents=True)
    (tmp_path / "hollow" / "2026-11-21").mkdir()
    (tmp_path / "g.jsonl").write_text("")
    golden, corpus = tmp_path / "g.jsonl", tmp_path / "c"
    files = {
        "nogolden": f"golden_set: {tmp_path / 'nope.jsonl'}\ncorpus_root: {corpus}\n",
        "nocorpus": f"golden_set: {golden}\ncorpus_root: {tmp_path / 'gone'}\n",
        "nosnapshots": f"golden_set: {golden}\ncorpus_root: {tmp_path / 'empty'}\n",
        "nofolder": f"golden_set: {golden}\ncorpus_root: {corpus}\nsnapshot: 2026-12-01\n",
        "notraces": f"golden_set: {golden}\ncorpus_root: {corpus}\n"
        f"trace_store: {tmp_path / 't.jsonl'}\n",
        "hollow": f"golden_set: {golden}\ncorpus_root: {tmp_path / 'hollow'}\n",
        "fine": f"golden_set: {golden}\ncorpus_root: {corpus}\n",
    }
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text)
    monkeypatch.setenv("RAG_EVAL_SUITES", str(folder))
    assert main(["suites"]) == 2
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 7
    assert sorted(err.splitlines()) == sorted(
        [
            f"error: {folder / 'nogolden.yaml'}: golden_set {tmp_path / 'nope.jsonl'} does not exist",
            f"error: {folder / 'nocorpus.yaml'}: corpus_root {tmp_path / 'gone'} is not a folder",
            f"error: {folder / 'nosnapshots.yaml'}: corpus_root {tmp_path / 'empty'} holds no "
            "snapshot folder (<YYYY-MM-DD>/documents/)",
            f"error: {folder / 'nofolder.yaml'}: snapshot {corpus / '2026-12-01'} does not exist",
            f"error: {folder / 'notraces.yaml'}: trace_store {tmp_path / 't.jsonl'} does not exist",
            f"error: {folder / 'hollow.yaml'}: snapshot folder {tmp_path / 'hollow' / '2026-11-21'} "
            "holds neither documents/ nor manifest.json",
        ]
    )


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def test_the_top_level_help_is_plain_text():
    description = build_parser().description
    assert description.startswith("The rag-eval command line")
    assert "``" not in description


@pytest.mark.parametrize(
    "command",
    [
        "freeze",
        "import",
        "export-run",
        "evaluate-run",
        "serve-reference",
        "judge-plan",
        "nightly",
        "rebaseline",
        "summary",
        "history",
        "compare",
        "accept-baseline",
        "suites",
    ],
)
def test_every_argument_has_help(command):
    parser = subcommands()[command]
    missing = [
        action.dest
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("command", "option", "shown"),
    [
        ("import", "--golden", "default suites/<suite>/golden.jsonl"),
        ("evaluate-run", "--rel-level", "default 1"),
        ("evaluate-run", "--measure", "default nDCG@5, nDCG@10, P@5, R@5, RR, AP"),
    ],
)
def test_help_states_the_defaults(command, option, shown):
    [action] = [a for a in subcommands()[command]._actions if option in a.option_strings]
    assert shown in action.help


def dated_root(tmp_path: Path, *nights: str) -> Path:
    root = tmp_path / "corpus"
    for night in nights:
        (root / night).mkdir(parents=True)
    return root


def test_the_printed_command_names_the_suite(tmp_path, monkeypatch):
    monkeypatch.delenv("RAG_EVAL_SUITES", raising=False)
    root = dated_root(tmp_path, "2026-10-01", "2026-11-01")
    suite = Suite(name="mine", golden_set=tmp_path / "g.jsonl", corpus_root=root)
    command = evaluate_command(
        suite, root / "2026-11-01", "http://127.0.0.1:9", dt.date(2026, 12, 1)
    )
    assert command == (
        "RAG_EVAL_SYSTEM=http RAG_EVAL_SYSTEM_URL=http://127.0.0.1:9 make nightly SUITE=mine"
    )


def test_an_older_snapshot_is_evaluated_on_its_own_night(tmp_path, monkeypatch):
    """Tonight evaluates the newest snapshot; the run refuses a service serving another, so the
    command names the night whose snapshot is served."""
    monkeypatch.setenv("RAG_EVAL_SUITES", str(tmp_path / "my suites"))
    root = dated_root(tmp_path, "2026-10-01", "2026-11-01")
    suite = Suite(name="mine", golden_set=tmp_path / "g.jsonl", corpus_root=root)
    command = evaluate_command(
        suite, root / "2026-10-01", "http://127.0.0.1:9", dt.date(2026, 12, 1)
    )
    assert command == (
        "RAG_EVAL_SYSTEM=http RAG_EVAL_SYSTEM_URL=http://127.0.0.1:9 "
        f"RAG_EVAL_SUITES='{tmp_path / 'my suites'}' make nightly SUITE=mine PARTITION=2026-10-01"
    )


def test_a_snapshot_no_night_evaluates_is_said(tmp_path):
    root = dated_root(tmp_path, "2026-10-01", "2026-11-01")
    suite = Suite(
        name="mine", golden_set=tmp_path / "g.jsonl", corpus_root=root, snapshot="2026-11-01"
    )
    command = evaluate_command(
        suite, root / "2026-10-01", "http://127.0.0.1:9", dt.date(2026, 12, 1)
    )
    assert command.endswith(
        "make nightly SUITE=mine  (note: no night of suite mine evaluates snapshot 2026-10-01; "
        "the suite's snapshot is 2026-11-01)"
    )


def test_serve_reference_prints_how_to_evaluate_that_suite(library, tmp_path):
    """The real command, stopped by its pid: the line on stderr names ``SUITE=mine``."""
    registry = tmp_path / "suites"
    write_suite_file(registry, "mine", golden_set=library / "golden.jsonl", corpus_root=library)
    process = subprocess.Popen(
        [RAG_EVAL, "serve-reference", "--suite", "mine", "--port", "0"],
        env={"PATH": "/usr/bin:/bin", "RAG_EVAL_SUITES": str(registry)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = process.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", first)
        assert url, f"no URL in {first!r}"
        hint = process.stderr.readline()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
    # The fixture's one snapshot is tonight's, unless the clock is before its date.
    tonight = dt.datetime.now(dt.UTC).date() >= dt.date(2026, 10, 1)
    assert hint.strip() == (
        f"evaluate it: RAG_EVAL_SYSTEM=http RAG_EVAL_SYSTEM_URL={url.group(0)} "
        f"RAG_EVAL_SUITES={registry} make nightly SUITE=mine"
        + ("" if tonight else " PARTITION=2026-10-01")
    )
    assert process.returncode == 0


def test_a_bad_suite_file_does_not_stop_the_other_suites_nights(tmp_path, capfd):
    """The 02:00 tick requests every good nightly suite and logs the bad file; with no good
    nightly suite left it fails naming the file."""
    import shutil

    import dagster as dg

    from rag_eval_pipeline.defs import build_definitions
    from rag_eval_pipeline.lib.deployment import Deployment

    registry = tmp_path / "suites"
    registry.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "suites" / "procedures.yaml", registry)
    (registry / "broken.yaml").write_text(GOOD + "nightly: maybe\n", encoding="utf-8")
    defs = build_definitions(Deployment(suites=str(registry)))
    schedule = defs.resolve_schedule_def("nightly_eval_schedule")

    def tick(instance, day: int):
        # As a context manager, so the tick's captured-log handler is closed with it.
        with dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=dt.datetime(2026, 11, day, 2, 0),
            repository_def=defs.get_repository_def(),
        ) as context:
            return schedule.evaluate_tick(context)

    with dg.instance_for_test() as instance:
        result = tick(instance, 29)
        assert [r.partition_key for r in result.run_requests] == ["2026-11-29|procedures"]
        logged = capfd.readouterr().err
        assert "suite file left out of the night 2026-11-29: " in logged
        assert "broken.yaml: 'nightly' must be a bool" in logged
        (registry / "procedures.yaml").unlink()
        with pytest.raises(Exception) as raised:
            tick(instance, 30)
        causes = [raised.value]
        while causes[-1].__cause__ is not None:
            causes.append(causes[-1].__cause__)
        assert any("broken.yaml: 'nightly' must be a bool" in str(c) for c in causes), causes


def test_a_date_the_calendar_does_not_have_is_an_error_of_its_file(tmp_path):
    registry = tmp_path / "suites"
    registry.mkdir()
    (registry / "good.yaml").write_text(GOOD, encoding="utf-8")
    (registry / "bad.yaml").write_text(GOOD + "snapshot: 2026-11-31\n", encoding="utf-8")
    suites, problems = scan_suites(registry)
    assert [suite.name for suite in suites] == ["good"]
    assert [str(problem) for problem in problems] == [
        f"{registry / 'bad.yaml'}: a value is not valid: day is out of range for month"
    ]


def test_a_golden_set_is_named_after_its_file_or_its_suite_folder(library, tmp_path):
    """``golden_sets/<name>.jsonl`` is ``<name>``; ``suites/<suite>/golden.jsonl`` (what an import
    writes) is ``<suite>``, not "golden" for every suite. The name is not part of the identity."""
    import shutil

    from rag_eval_pipeline.lib.inputs.golden import load_golden_set

    layouts = {
        "golden_sets/ward.jsonl": "ward",
        "suites/cranfield/golden.jsonl": "cranfield",
        "golden_sets/golden.jsonl": "golden",
    }
    digests = set()
    for relative, name in layouts.items():
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library / "golden.jsonl", target)
        golden = load_golden_set(target)
        assert golden.name == name
        digests.add(golden.golden_digest)
    assert len(digests) == 1
