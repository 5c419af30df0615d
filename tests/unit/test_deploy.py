"""The files under deploy/ parse, the example config validates, and every metric the
alert rules and the Grafana dashboard query is one hipq exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from hipq.config import ApiConfig, load_config
from hipq.metrics import Metrics
from hipq.metrics_export import registry_of

DEPLOY = Path(__file__).parents[2] / "deploy"
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def _exported() -> set[str]:
    metrics = Metrics(monotonic=lambda: 0.0)
    names = {m.name for m in registry_of(metrics).collect()}
    return names | {n + s for n in names for s in SUFFIXES}


def _queried(text: str) -> set[str]:
    return set(re.findall(r"\bhipq_[a-z_]+", text))


def test_alert_rules_and_dashboard_use_exported_metrics() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus-alerts.yaml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"HipqQueueLagging", "HipqHighFailureRate", "HipqUnmatchedResponses",
            "HipqNoTick"} <= names
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = set().union(*(_queried(e) for e in exprs))
    assert queried
    assert queried <= _exported(), queried - _exported()


def test_compose_and_example_config() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert set(compose["services"]) == {"postgres", "hipq"}
    env = {"HIPQ_PUBLIC_URL": "http://hipq:8080", "HIPQ_ADMIN_TOKEN": "admin-token-123",
           "HIPQ_READER_TOKEN": "reader-token-123", "HIPQ_SIGNING_KEY": "k" * 32}
    settings = load_config(DEPLOY / "hipq.yaml", env=env)
    assert settings.api.tokens
    assert "ExecStart=" in (DEPLOY / "hipq.service").read_text()
    assert "ENTRYPOINT" in (DEPLOY / "Dockerfile").read_text()


def test_the_unit_raises_the_open_file_limit() -> None:
    """Each API connection is an open file: the unit's limit leaves room for
    ``api.max_connections`` and the rest (issue 46, finding 6)."""
    unit = (DEPLOY / "hipq.service").read_text()
    limits = re.findall(r"^LimitNOFILE=(\d+)$", unit, flags=re.MULTILINE)
    assert limits, "deploy/hipq.service sets no LimitNOFILE"
    assert int(limits[0]) >= 4 * ApiConfig().max_connections
