"""The example plugins at the repository root (``plugins/``): each does what its
docstring says, and loads by ``plugins.<module>:<name>`` from a config run at the
repository root (``hipq check-config``) and over the API's default allowlist."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hipq.jobs import Job, JobError
from hipq.plugins import GiveUp, Retry, RetryContext, RunningUsage, ThrottleContext
from hipq.spec import QueueSpec
from plugins.example_correlations import invoice_key
from plugins.example_retries import TransientOnly
from plugins.example_throttlers import SlowStart

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)


def jobs(n: int, weight: int = 1) -> list[Job]:
    return [Job(queue="q", id=f"j{i}", run_at=NOW, created_at=NOW, updated_at=NOW,
                weight=weight) for i in range(n)]


def spec(concurrency: int | None) -> QueueSpec:
    return QueueSpec(id="q", concurrency=concurrency)


@pytest.mark.parametrize(("running", "concurrency", "launched"), [
    (0, None, 5), (5, None, 5), (0, 3, 3), (8, 10, 2), (10, 10, 0)])
def test_slow_start_grows_by_step_per_tick(running: int, concurrency: int | None,
                                           launched: int) -> None:
    ctx = ThrottleContext(queue=spec(concurrency), candidates=jobs(20), running=[], now=NOW,
                          usage=RunningUsage(normal_weight=running))
    assert len(SlowStart(step=5).select(ctx).launch) == launched


def test_slow_start_refuses_a_bad_step() -> None:
    for step in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="step"):
            SlowStart(step=step)  # type: ignore[arg-type]


def _retry(kind: str, **data: object) -> Retry | GiveUp:
    job = jobs(1)[0]
    return TransientOnly(delay_seconds=30).decide(RetryContext(
        job=job, error=JobError(kind=kind, detail="x", data=data or None), now=NOW))


def test_transient_only_retries_what_time_can_fix() -> None:
    for kind in ("timeout", "transport", "lost"):
        assert _retry(kind) == Retry(at=NOW + timedelta(seconds=30))
    assert _retry("http_status", status=503) == Retry(at=NOW + timedelta(seconds=30))
    assert _retry("http_status", status=429, retry_after=120) == Retry(
        at=NOW + timedelta(seconds=120))
    later = (NOW + timedelta(hours=1)).isoformat()
    assert _retry("http_status", status=503, retry_after=later) == Retry(
        at=NOW + timedelta(hours=1))
    for kind, data in (("http_status", {"status": 400}), ("response_failed", {}),
                       ("plugin", {})):
        assert isinstance(_retry(kind, **data), GiveUp)


def test_invoice_key_reads_every_spelling() -> None:
    assert invoice_key({"data": {"invoice": 7}}, side="request") == "invoice-7"
    assert invoice_key({"data": {}}, side="request") is None
    assert invoice_key({"body": {"invoiceNumber": 7}}, side="response") == "invoice-7"
    assert invoice_key({"value": {"invoice_number": "7"}}, side="response") == "invoice-7"
    assert invoice_key({"body": {}, "query": {"invoice": "7"}}, side="response") == "invoice-7"
    with pytest.raises(ValueError, match="no invoice"):
        invoice_key({"value": {"other": 1}}, side="response")


def test_the_plugins_load_from_a_config_run_at_the_repository_root(tmp_path: Path) -> None:
    config = tmp_path / "hipq.yaml"
    config.write_text(f"""
database: {{url: "sqlite+aiosqlite:///{tmp_path}/hipq.db"}}
queues:
  - id: partner
    target: {{kind: http, url: "http://127.0.0.1:9/jobs/{{id}}"}}
    throttler: {{plugin: "plugins.example_throttlers:SlowStart", options: {{step: 3}}}}
    retry: {{plugin: "plugins.example_retries:TransientOnly", options: {{delay_seconds: 5}}}}
    correlation: {{plugin: "plugins.example_correlations:invoice_key"}}
""", encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "hipq", "check-config", "-c", str(config)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "config OK: 1 queue(s)" in result.stdout


def test_plugins_is_not_installed_with_hipq() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'include = ["hipq*"]' in pyproject  # setuptools packages hipq only
