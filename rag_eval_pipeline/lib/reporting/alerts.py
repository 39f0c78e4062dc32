"""Alerts: a short JSON message to a webhook when a night needs a person.

The message is Slack-compatible (its ``text`` field is what a chat channel shows) and carries
the facts a receiver can route on: ``kind`` (``gate_failure``, ``regression``, ``run_failure``,
``not_comparable``: a completed night that cannot be compared with its baseline until someone
re-baselines),
the Dagster run, the job, the partition and the evaluation run. The webhook URL is a secret (a
Slack URL is its own key): it is never logged or put into an error message.
"""

from dataclasses import asdict, dataclass

GATE_FAILURE = "gate_failure"
REGRESSION = "regression"
RUN_FAILURE = "run_failure"
NOT_COMPARABLE = "not_comparable"


@dataclass(frozen=True)
class Alert:
    kind: str
    text: str
    dagster_run_id: str
    job: str
    partition: str | None
    eval_run_id: str | None

    def payload(self) -> dict:
        return asdict(self)


def alert_for(
    *,
    dagster_run_id: str,
    job: str,
    partition: str | None,
    eval_run_id: str | None,
    failed_checks: list[tuple[str, str]],
    failure_message: str,
) -> Alert:
    """The alert for a failed run: regressions first, then failed gates, else the failure."""
    where = f"{job} {partition or ''}".strip()
    regressions = [text for name, text in failed_checks if name == "gate_no_significant_regression"]
    gates = [f"{name}: {text}" for name, text in failed_checks if name.startswith("gate_")]
    run = f" (evaluation run {eval_run_id})" if eval_run_id else ""
    if regressions:
        return Alert(
            REGRESSION,
            f"rag_eval: {where}{run} regressed: {'; '.join(regressions)}",
            dagster_run_id,
            job,
            partition,
            eval_run_id,
        )
    if gates:
        return Alert(
            GATE_FAILURE,
            f"rag_eval: {where}{run} failed release gates: {'; '.join(gates)}",
            dagster_run_id,
            job,
            partition,
            eval_run_id,
        )
    return Alert(
        RUN_FAILURE,
        f"rag_eval: {where}{run} failed: {failure_message}",
        dagster_run_id,
        job,
        partition,
        eval_run_id,
    )


def not_comparable_alert(
    *, dagster_run_id: str, job: str, partition: str | None, eval_run_id: str, reason: str
) -> Alert:
    """The alert for a completed night the comparison guard skipped because it differs from its
    baseline (``reason`` names the digests and the re-baseline command)."""
    where = f"{job} {partition or ''}".strip()
    return Alert(
        NOT_COMPARABLE,
        f"rag_eval: {where} (evaluation run {eval_run_id}) was not compared: {reason}",
        dagster_run_id,
        job,
        partition,
        eval_run_id,
    )


def post_alert(url: str, alert: Alert, *, timeout_s: float = 10.0, attempts: int = 3) -> int:
    """POST the alert as JSON; returns the HTTP status. Retries connection errors and 5xx;
    raises ``RuntimeError`` (without the URL) when every attempt failed. httpx is imported
    here, by the one process that posts: every ``rag-eval`` command and code server loads this
    module with the run-status sensor, and importing httpx costs about 0.07 s."""
    import httpx

    last = "no attempt"
    for _ in range(attempts):
        try:
            response = httpx.post(url, json=alert.payload(), timeout=timeout_s)
        except httpx.HTTPError as exc:
            last = type(exc).__name__
            continue
        if response.status_code < 500:
            return response.status_code
        last = f"HTTP {response.status_code}"
    raise RuntimeError(f"alert webhook did not accept the {alert.kind} alert: {last}")
