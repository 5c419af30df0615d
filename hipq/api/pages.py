"""The dashboard page and the Prometheus text: minimal, read-only views of ``stats``."""

from __future__ import annotations

from aiohttp import web

from hipq.api.stats_cache import STATS

DASHBOARD = """<!doctype html>
<html><head><meta charset="utf-8"><title>hipq</title>
<style>body{font:14px sans-serif;margin:2em}td,th{padding:4px 10px;text-align:right}</style>
</head><body><h1>hipq</h1>
<p><label>API token <input id="token" type="password"></label>
<button onclick="load()">load</button></p>
<table><thead><tr><th>queue</th><th>queued</th><th>due</th><th>running</th>
<th>weight</th><th>lag (s)</th></tr></thead><tbody id="rows"></tbody></table>
<p id="responses"></p>
<script>
async function load() {
  const token = document.getElementById("token").value;
  const r = await fetch("/v1/stats", {headers: token ? {Authorization: "Bearer " + token} : {}});
  const body = await r.json();
  if (!r.ok) { document.getElementById("responses").textContent = body.error.message; return; }
  document.getElementById("rows").innerHTML = body.queues.map(q =>
    `<tr><td>${q.queue}${q.paused ? " (paused)" : ""}</td><td>${q.queued}</td><td>${q.due}</td>
     <td>${q.running}</td><td>${q.running_weight}/${q.concurrency ?? "inf"}</td>
     <td>${q.oldest_due_age_seconds?.toFixed(1) ?? "-"}</td></tr>`).join("");
  document.getElementById("responses").textContent =
    "responses: " + JSON.stringify(body.responses);
}
load();
</script></body></html>
"""


async def dashboard(request: web.Request) -> web.Response:
    return web.Response(text=DASHBOARD, content_type="text/html")


async def metrics(request: web.Request) -> web.Response:
    snapshot = await request.app[STATS].get()
    lines = []
    gauges = {"hipq_queue_queued": "queued", "hipq_queue_due": "due",
              "hipq_queue_running": "running", "hipq_queue_running_weight": "running_weight"}
    stats = snapshot.queues
    for name, attr in gauges.items():
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f'{name}{{queue="{s.queue}"}} {getattr(s, attr)}' for s in stats)
    lines.append("# TYPE hipq_queue_lag_seconds gauge")
    lines.extend(f'hipq_queue_lag_seconds{{queue="{s.queue}"}} {s.oldest_due_age_seconds or 0}'
                 for s in stats)
    lines.append("# TYPE hipq_responses gauge")
    for outcome, count in sorted(snapshot.responses.items()):
        lines.append(f'hipq_responses{{outcome="{outcome}"}} {count}')
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
