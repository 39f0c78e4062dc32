"""The Dagster UI shows the lineage and the audit metadata of a real nightly run.

One module-scoped fixture runs ``rag-eval nightly`` into a temporary DAGSTER_HOME and warehouse
(first a night interrupted with SIGTERM once its retrieval metrics are materialized, then a whole
night), then serves them with ``dagster-webserver``. The GraphQL test checks the asset graph and the latest
materialization metadata; the browser test drives Debian's Chromium through Playwright and saves a
full-page screenshot of each view under ``test-artifacts/ui/``.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.browser

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
NIGHT = "2026-10-15"
INTERRUPTED_NIGHT = "2026-10-14"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO_ROOT / "test-artifacts" / "ui"
STARTUP_TIMEOUT_S = 90.0
PAGE_TIMEOUT_MS = 60_000

GROUPS = {
    "corpus_snapshot": "inputs",
    "golden_set": "inputs",
    "retrieval_run": "system_runs",
    "generation_run": "system_runs",
    "judge_sample": "judging",
    "judge_calibration": "judging",
    "claim_diagnostics": "judging",
    "retrieval_metrics": "metrics",
    "generation_metrics": "metrics",
    "eval_summary": "metrics",
    "run_comparison": "comparison",
}
EDGES = {
    ("corpus_snapshot", "golden_set"),
    ("corpus_snapshot", "retrieval_run"),
    ("golden_set", "retrieval_run"),
    ("retrieval_run", "generation_run"),
    ("generation_run", "judge_sample"),
    ("judge_sample", "judge_calibration"),
    ("judge_sample", "claim_diagnostics"),
    ("retrieval_run", "retrieval_metrics"),
    ("generation_run", "generation_metrics"),
    ("judge_sample", "generation_metrics"),
    ("retrieval_metrics", "eval_summary"),
    ("generation_metrics", "eval_summary"),
    ("judge_calibration", "eval_summary"),
    ("claim_diagnostics", "eval_summary"),
    ("eval_summary", "run_comparison"),
}
CHECKS = {
    "corpus_snapshot": {"has_current_passages"},
    "golden_set": {"no_drifted_items", "no_answer_share"},
    "generation_run": {"answers_cite_retrieved_passages"},
}

ASSET_NODES_QUERY = """
{
  assetNodes {
    assetKey { path }
    groupName
    dependencyKeys { path }
    dependedByKeys { path }
    assetChecksOrError { ... on AssetChecks { checks { name blocking } } }
  }
}
"""

LATEST_METADATA_QUERY = """
query Latest($path: [String!]!) {
  assetOrError(assetKey: {path: $path}) {
    __typename
    ... on Asset {
      assetMaterializations(limit: 1) {
        partition
        metadataEntries {
          __typename
          label
          ... on TextMetadataEntry { text }
          ... on IntMetadataEntry { intValue }
          ... on MarkdownMetadataEntry { mdStr }
          ... on TableSchemaMetadataEntry { schema { columns { name type } } }
        }
      }
    }
  }
}
"""

CHECK_EXECUTIONS_QUERY = """
query Checks($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      assetChecksOrError {
        ... on AssetChecks { checks { name executionForLatestMaterialization { status } } }
      }
    }
  }
}
"""

CHECK_HISTORY_QUERY = """
query History($path: [String!]!, $name: String!) {
  assetCheckExecutions(assetKey: {path: $path}, checkName: $name, limit: 10) {
    status
    partition
  }
}
"""

PUBLISHED_QUERY = """
query Published($path: [String!]!) {
  assetCheckExecutions(assetKey: {path: $path}, checkName: "published", limit: 10) {
    status
    partition
    evaluation { success description }
    run { status tags { key value } }
  }
}
"""

NIGHT_RUNS_QUERY = """
{
  runsOrError(filter: {pipelineName: "nightly_eval"}) {
    ... on Runs {
      results {
        runId
        status
        tags { key value }
        repositoryOrigin { repositoryLocationName repositoryName }
      }
    }
  }
}
"""

WORKSPACE_QUERY = """
{
  workspaceOrError {
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError {
          ... on RepositoryLocation { repositories { name pipelines { name } } }
        }
      }
    }
  }
}
"""

REEXECUTE_MUTATION = """
mutation Reexecute($parentRunId: String!, $strategy: ReexecutionStrategy!) {
  launchPipelineReexecution(
    reexecutionParams: {parentRunId: $parentRunId, strategy: $strategy}
  ) {
    __typename
    ... on LaunchRunSuccess { run { runId parentRunId status } }
    ... on PythonError { message }
  }
}
"""

DELETE_RUN_MUTATION = """
mutation Delete($runId: String!) { deletePipelineRun(runId: $runId) { __typename } }
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """Stop the process we started, by its own id."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _graphql(base_url: str, query: str, **variables) -> dict:
    response = httpx.post(
        f"{base_url}/graphql", json={"query": query, "variables": variables}, timeout=60
    )
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body.get("errors")
    return body["data"]


def _interrupted_night(env: dict) -> None:
    """A night stopped with SIGTERM after its ``retrieval_metrics`` step ended (the step's
    line is printed when it ends), before its summary published anything."""
    process = subprocess.Popen(
        [str(VENV_BIN / "rag-eval"), "nightly", "--partition", INTERRUPTED_NIGHT, "--no-summary"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    try:
        for line in process.stderr:
            seen.append(line)
            if line.strip().startswith("retrieval_metrics "):
                process.send_signal(signal.SIGTERM)
                break
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM, "".join(seen)[-4000:]


@pytest.fixture(scope="module")
def webserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a dagster-webserver over one materialized night."""
    root = tmp_path_factory.mktemp("ui")
    dagster_home = root / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "RAG_EVAL_WAREHOUSE": str(root / "rag_eval.duckdb"),
        "PYTHONUNBUFFERED": "1",
    }

    _interrupted_night(env)
    nightly = subprocess.run(
        [str(VENV_BIN / "rag-eval"), "nightly", "--partition", NIGHT, "--no-summary"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert nightly.returncode == 0, (nightly.stdout + nightly.stderr)[-4000:]

    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    log_path = root / "webserver.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [
                str(VENV_BIN / "dagster-webserver"),
                "-w",
                "workspace.yaml",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        ready = False
        while time.monotonic() < deadline:
            if server.poll() is not None:
                pytest.fail(f"dagster-webserver exited early:\n{log_path.read_text()[-4000:]}")
            try:
                if httpx.get(f"{base_url}/server_info", timeout=5).status_code == 200:
                    # /server_info answers before the code location has loaded.
                    nodes = _graphql(base_url, "{ assetNodes { id } }")["assetNodes"]
                    if len(nodes) >= len(GROUPS):
                        ready = True
                        break
            except (httpx.HTTPError, AssertionError):
                pass
            time.sleep(1)
        if not ready:
            pytest.fail(
                f"dagster-webserver not ready in {STARTUP_TIMEOUT_S:.0f} s:\n"
                f"{log_path.read_text()[-4000:]}"
            )
        yield base_url
    finally:
        _stop(server)


def _metadata(base_url: str, asset: str) -> dict[str, dict]:
    data = _graphql(base_url, LATEST_METADATA_QUERY, path=[asset])["assetOrError"]
    assert data["__typename"] == "Asset", data
    materializations = data["assetMaterializations"]
    assert len(materializations) == 1, f"{asset}: no materialization"
    assert materializations[0]["partition"] == f"{NIGHT}|procedures"
    return {entry["label"]: entry for entry in materializations[0]["metadataEntries"]}


def test_graphql_lineage_and_metadata(webserver: str) -> None:
    nodes = _graphql(webserver, ASSET_NODES_QUERY)["assetNodes"]
    by_name = {"/".join(node["assetKey"]["path"]): node for node in nodes}
    assert set(GROUPS) <= set(by_name), sorted(by_name)

    assert {name: by_name[name]["groupName"] for name in GROUPS} == GROUPS
    edges = {
        ("/".join(dep["path"]), name)
        for name, node in by_name.items()
        for dep in node["dependencyKeys"]
        if name in GROUPS
    }
    assert edges >= EDGES, sorted(EDGES - edges)
    assert {e for e in edges if e[0] in GROUPS} == EDGES, sorted(edges - EDGES)
    reverse = {
        (name, "/".join(child["path"]))
        for name, node in by_name.items()
        for child in node["dependedByKeys"]
        if name in GROUPS
    }
    assert reverse >= EDGES

    for asset, names in CHECKS.items():
        checks = by_name[asset]["assetChecksOrError"]["checks"]
        assert {check["name"] for check in checks} >= names
        executions = _graphql(webserver, CHECK_EXECUTIONS_QUERY, path=[asset])
        latest = {
            check["name"]: (check["executionForLatestMaterialization"] or {}).get("status")
            for check in executions["assetNodeOrError"]["assetChecksOrError"]["checks"]
        }
        assert {name: latest[name] for name in names} == dict.fromkeys(names, "SUCCEEDED")

    corpus = _metadata(webserver, "corpus_snapshot")
    assert re.fullmatch(r"[0-9a-f]{64}", corpus["corpus_digest"]["text"])

    metrics = _metadata(webserver, "retrieval_metrics")
    assert metrics["dagster/row_count"]["__typename"] == "IntMetadataEntry"
    assert metrics["dagster/row_count"]["intValue"] > 0
    columns = [c["name"] for c in metrics["dagster/column_schema"]["schema"]["columns"]]
    assert {"measure", "k", "value", "n", "ci_low", "ci_high", "eval_run_id"} <= set(columns)
    assert metrics["eval_run_id"]["text"].startswith(NIGHT)
    assert metrics["corpus_digest"]["text"] == corpus["corpus_digest"]["text"]
    assert metrics["sql"]["__typename"] == "MarkdownMetadataEntry"
    assert "SELECT" in metrics["sql"]["mdStr"]

    summary = _metadata(webserver, "eval_summary")
    assert summary["summary"]["__typename"] == "MarkdownMetadataEntry"
    assert metrics["eval_run_id"]["text"] in summary["summary"]["mdStr"]


def _published_by_night(base_url: str, asset: str) -> dict[str, tuple[str, str]]:
    """``published`` executions of ``asset`` by night: (the run's status, the check's). The
    check is partitioned as the asset is: each execution belongs to its run's partition."""
    executions = _graphql(base_url, PUBLISHED_QUERY, path=[asset])["assetCheckExecutions"]
    by_night = {}
    for execution in executions:
        tags = {tag["key"]: tag["value"] for tag in execution["run"]["tags"]}
        assert execution["partition"] == tags["dagster/partition"]
        night = execution["partition"].split("|")[0]
        by_night[night] = (execution["run"]["status"], execution["status"])
    return by_night


def test_every_check_of_the_whole_night_passed_on_its_partition(webserver: str) -> None:
    """Each asset check is partitioned as its asset is: the whole night's executions all
    succeeded and belong to its partition."""
    for asset, names in CHECKS.items():
        for name in names:
            executions = _graphql(webserver, CHECK_HISTORY_QUERY, path=[asset], name=name)[
                "assetCheckExecutions"
            ]
            whole = [e for e in executions if e["partition"].startswith(f"{NIGHT}|")]
            assert [e["status"] for e in whole] == ["SUCCEEDED"], (asset, name, executions)


def test_an_interrupted_night_never_reads_as_published(webserver: str) -> None:
    """The interrupted night materialized ``retrieval_metrics`` (Dagster records that when the
    step ends), but its ``published`` check never ran: the UI resolves it as failed, while
    the whole night's passed with the record it names."""
    assert _published_by_night(webserver, "retrieval_metrics") == {
        INTERRUPTED_NIGHT: ("FAILURE", "EXECUTION_FAILED"),
        NIGHT: ("SUCCESS", "SUCCEEDED"),
    }
    executions = _graphql(webserver, PUBLISHED_QUERY, path=["generation_metrics"])
    passed = [e for e in executions["assetCheckExecutions"] if e["status"] == "SUCCEEDED"]
    [whole] = passed
    assert whole["evaluation"]["success"] is True
    assert whole["evaluation"]["description"].startswith(f"{NIGHT}-")
    assert "published, completed at" in whole["evaluation"]["description"]


@pytest.fixture(scope="module")
def page(webserver: str):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=PAGE_TIMEOUT_MS
        )
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            yield context.new_page()
        finally:
            browser.close()


def _open(page, url: str, *texts: str, state: str = "visible") -> None:
    """Go to ``url`` and wait until every text is on the page (``attached`` for names the UI
    middle-truncates: the full name then sits in a hidden measuring element)."""
    page.goto(url, wait_until="networkidle", timeout=PAGE_TIMEOUT_MS)
    for text in texts:
        page.get_by_text(text, exact=True).first.wait_for(state=state)


def _tall(page) -> None:
    """Asset pages scroll inside their own panel, so a full-page screenshot only shows the
    viewport: make the viewport tall enough for the columns and metadata tables."""
    page.set_viewport_size({"width": 1600, "height": 2600})


def _shoot(page, name: str) -> None:
    page.wait_for_timeout(1000)  # let the graph layout and fonts settle
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_browser_views(webserver: str, page) -> None:
    # Global asset lineage: groups start collapsed; the graph's context menu expands them.
    _open(page, f"{webserver}/asset-groups", "inputs", "metrics")
    canvas = page.get_by_text("metrics", exact=True).last.bounding_box()
    page.mouse.click(canvas["x"], canvas["y"] + 300, button="right")
    page.get_by_role("menuitem", name="Expand all groups").click()
    for asset in GROUPS:
        page.get_by_text(asset, exact=True).first.wait_for(state="visible")
    page.wait_for_timeout(1000)
    # Every edge of the graph is drawn as one lineage-edge path between two asset nodes.
    drawn = page.locator("svg path[stroke='var(--color-lineage-edge)']").count()
    assert drawn == len(EDGES), drawn
    _shoot(page, "asset_lineage")

    # corpus_snapshot: the content digest in the latest materialization's metadata.
    digest = _graphql(webserver, LATEST_METADATA_QUERY, path=["corpus_snapshot"])
    digest = next(
        entry["text"]
        for entry in digest["assetOrError"]["assetMaterializations"][0]["metadataEntries"]
        if entry["label"] == "corpus_digest"
    )
    _tall(page)
    _open(page, f"{webserver}/assets/corpus_snapshot", "corpus_digest", digest)
    _shoot(page, "corpus_snapshot")

    # retrieval_metrics: row count and column schema.
    _open(page, f"{webserver}/assets/retrieval_metrics", "Row count", "Columns", "eval_run_id")
    for column in ("measure", "ci_low", "ci_high", "interval_method"):
        page.get_by_text(column, exact=True).first.wait_for(state="visible")
    body = page.inner_text("body")
    assert re.search(r"Row count\s+\d+", body), body[:2000]
    _shoot(page, "retrieval_metrics")

    # eval_summary: the markdown summary opens in a dialog.
    _open(page, f"{webserver}/assets/eval_summary", "summary")
    _shoot(page, "eval_summary")
    page.set_viewport_size({"width": 1600, "height": 1300})
    page.locator("tr", has_text="summary").get_by_text("[Show Markdown]").click()
    page.get_by_text("Judge calibration", exact=False).first.wait_for(state="visible")
    _shoot(page, "eval_summary_markdown")
    page.keyboard.press("Escape")

    # Asset checks tab: every check's name, and the latest execution (the whole night's)
    # passed, on its partition. (The list's status is that of the worst night: a check of a
    # step the interrupted night never finished reads "Failed" there.)
    page.set_viewport_size({"width": 1600, "height": 1000})
    for asset, names in CHECKS.items():
        _open(page, f"{webserver}/assets/{asset}?view=checks", *sorted(names), state="attached")
        page.get_by_text("Passed", exact=True).first.wait_for(state="visible")
        page.get_by_text(f"{NIGHT}|procedures", exact=True).first.wait_for(state="visible")
        _shoot(page, f"checks_{asset}")

    # The published check's history on a metric table: the interrupted night's execution
    # failed, the whole night's succeeded.
    _open(
        page,
        f"{webserver}/assets/retrieval_metrics?view=checks&checkDetail=published",
        "published",
        state="attached",
    )
    page.get_by_text("Execution history", exact=True).first.click()
    page.get_by_text("Execution failed", exact=True).first.wait_for(state="visible")
    page.get_by_text("Passed", exact=True).first.wait_for(state="visible")
    _shoot(page, "checks_retrieval_metrics_published")
    # The check is partitioned as the table is: a row per night, the interrupted one not
    # published.
    page.get_by_text("Partition", exact=True).first.wait_for(state="visible")
    page.get_by_text("Partitions", exact=True).last.click()
    for status in ("Execution Failed (1)", "Passed (1)"):
        page.get_by_text(status, exact=True).first.wait_for(state="visible")
    page.get_by_text("procedures", exact=True).first.wait_for(state="visible")
    _shoot(page, "checks_retrieval_metrics_published_partitions")


def test_the_ui_re_executes_the_nights_rag_eval_nightly_ran(webserver: str) -> None:
    """A night run by ``rag-eval nightly`` names the job of the code location the webserver
    loads from ``workspace.yaml`` as its origin, so the UI's "Re-execute from failure" (the
    interrupted night) and "Re-execute all" (the whole night) launch (docs/AUDITORS.md §4);
    a run without one was refused with ``CheckError: Expected non-None value``. The
    re-executions queue for the daemon, which this fixture does not run: they are deleted. Last
    in the module: a queued run leaves its planned check executions behind, which the browser
    test would see."""
    [entry] = _graphql(webserver, WORKSPACE_QUERY)["workspaceOrError"]["locationEntries"]
    jobs = {
        (entry["name"], repository["name"], job["name"])
        for repository in entry["locationOrLoadError"]["repositories"]
        for job in repository["pipelines"]
    }
    runs = _graphql(webserver, NIGHT_RUNS_QUERY)["runsOrError"]["results"]
    by_night = {
        {tag["key"]: tag["value"] for tag in run["tags"]}["dagster/partition/night"]: run
        for run in runs
    }
    for night, status, strategy in (
        (INTERRUPTED_NIGHT, "FAILURE", "FROM_FAILURE"),
        (NIGHT, "SUCCESS", "ALL_STEPS"),
    ):
        parent = by_night[night]
        assert parent["status"] == status
        origin = parent["repositoryOrigin"]
        assert origin is not None, f"run {parent['runId']} of {night} has no origin"
        named = (origin["repositoryLocationName"], origin["repositoryName"], "nightly_eval")
        assert named in jobs, (named, jobs)
        launched = _graphql(
            webserver, REEXECUTE_MUTATION, parentRunId=parent["runId"], strategy=strategy
        )["launchPipelineReexecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        assert launched["run"]["parentRunId"] == parent["runId"]
        assert launched["run"]["status"] == "QUEUED"
        deleted = _graphql(webserver, DELETE_RUN_MUTATION, runId=launched["run"]["runId"])
        assert deleted["deletePipelineRun"]["__typename"] == "DeletePipelineRunSuccess"
