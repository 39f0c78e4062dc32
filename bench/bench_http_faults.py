"""The HTTP system under test, fault by fault, on the bundled suite: what each fault costs.

For each fault a fresh ``FaultService`` (``rag_eval_pipeline.testing.fault_service``) serves the
reference system over the bundled 2026-10-01 snapshot on 127.0.0.1 and plays the fault on the
first three questions of the bundled golden set; the client asks all 266 questions with the
default settings but a 1 s per-request timeout (so a hang costs seconds, not minutes). It prints,
per fault: requests the service received, retries (requests beyond one per question), system
errors recorded, wall time of the live pass, and the error the first faulted item carries.

    .venv/bin/python bench/bench_http_faults.py
"""

import datetime as dt
import tempfile
import time
from pathlib import Path

from rag_eval_pipeline.lib.inputs.corpus import load_snapshot, snapshot_tables
from rag_eval_pipeline.lib.inputs.golden import load_golden_set
from rag_eval_pipeline.lib.systems.http import ClientSettings, HttpSystem
from rag_eval_pipeline.lib.systems.run import queries_of
from rag_eval_pipeline.lib.systems.service import ReferenceAnswers
from rag_eval_pipeline.testing.fault_service import FaultService

ROOT = Path(__file__).resolve().parents[1]
FAULTS = {
    "none": [],
    "429 with Retry-After: 1, twice": [("rate_limit", {"times": 2, "retry_after": "1"})],
    "500, twice (then a reply)": [("server_error", {"times": 2})],
    "500, every attempt": [("server_error", {"times": 10})],
    "hang past the 1 s timeout, every attempt": [("hang", {"times": 10, "seconds": 3.0})],
    "connection reset, once": [("reset", {})],
    "non-JSON body": [("not_json", {})],
    "trace missing 'answer'": [("missing_field", {"field": "answer"})],
    "retrieved id not in the snapshot": [("unknown_passage", {})],
    "answer citing outside its context": [("cite_outside_context", {})],
}


def main() -> None:
    snapshot = load_snapshot(ROOT / "corpus_snapshots" / "2026-10-01")
    passages = snapshot_tables(snapshot, loaded_at=dt.datetime(2026, 10, 15))["corpus_passages"]
    items = load_golden_set(ROOT / "golden_sets" / "procedures.jsonl").items.sort("line")
    queries = queries_of(items)
    answers = ReferenceAnswers(passages, snapshot.corpus_digest)
    faulted = [query.item_id for query in queries[:3]]
    print(f"{len(queries)} questions, faults on {', '.join(faulted)}; default client, timeout 1 s")
    print(f"{'fault':<42} {'requests':>8} {'retries':>7} {'errors':>6} {'wall s':>7}  first error")
    with tempfile.TemporaryDirectory() as scratch:
        for index, (name, faults) in enumerate(FAULTS.items()):
            service = FaultService(answers).start()
            try:
                for kind, details in faults:
                    for item_id in faulted:
                        service.fail(kind, item_id=item_id, **details)
                system = HttpSystem(
                    service.url,
                    passages,
                    capture=Path(scratch) / f"capture-{index}.parquet",
                    settings=ClientSettings(timeout_s=1.0),
                )
                started = time.perf_counter()
                system.retrieve_batch(queries, 20)
                wall = time.perf_counter() - started
                outcomes = system.call_outcomes(queries)
            finally:
                service.stop()
            requests = sum(service.requests_by_item.values())
            errors = [outcome for outcome in outcomes if outcome.failed]
            first = errors[0].error if errors else "-"
            print(
                f"{name:<42} {requests:>8} {requests - len(queries):>7} {len(errors):>6} "
                f"{wall:>7.2f}  {first}"
            )


if __name__ == "__main__":
    main()
