"""How ``hipq run`` turns spans on (docs/traces.md): only when the ``OTEL_*`` variables
say where spans go; then through the exporters ``OTEL_TRACES_EXPORTER`` names. Each
case runs in a fresh interpreter (the tracer provider is process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json, os, sys
from hipq import tracing
from hipq.cli.commands import start_traces
from hipq.jobs import Job
from datetime import datetime, UTC
start_traces(os.environ)
tracer = tracing.tracer()
out = {"active": tracer.active,
       "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))[:1]}
if tracer.active:
    now = datetime.now(UTC)
    job = Job(id="j", queue="q", run_at=now, created_at=now, updated_at=now, attempt=1,
              trace="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    with tracer.launching(job):
        out["sent"] = tracing.current_traceparent()
    tracer.close()
print("RESULT " + json.dumps(out))
"""


def _run(**environ: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | environ
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, check=True, timeout=60)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    result: dict[str, object] = json.loads(line.removeprefix("RESULT "))
    result["stdout"] = done.stdout
    return result


def test_without_otel_variables_nothing_is_imported() -> None:
    result = _run()
    assert (result["active"], result["otel"]) == (False, [])


def test_a_console_exporter_prints_the_try_span_with_the_id_it_sent() -> None:
    result = _run(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="hipq-test")
    assert result["active"] is True
    sent = result["sent"]
    assert isinstance(sent, str)
    assert sent[3:35] == "4bf92f3577b34da6a3ce929d0e0e4736"
    stdout = str(result["stdout"])
    assert '"name": "hipq try"' in stdout
    assert f'"span_id": "0x{sent[36:52]}"' in stdout  # the span is the one the try sent
    assert '"hipq.outcome": "handed_over"' in stdout
    assert '"service.name": "hipq-test"' in stdout


def test_an_exporter_that_is_not_installed_leaves_spans_off() -> None:
    result = _run(OTEL_TRACES_EXPORTER="no-such-exporter")
    assert result["active"] is False
