// The hipq dashboard: plain JS over the HTTP API; no build step, no dependencies.
// Views (by URL hash): #/ queues, #/queue/NAME, #/job/QUEUE/ID, #/morgue, #/unmatched.
"use strict";

const REFRESH_MS = 2000;
const AUTH = document.documentElement.dataset.auth === "true";  // set by the daemon
const PAGE = 20;
const CHART_POINTS = 60;
const ROLES = { reader: 1, producer: 2, admin: 3 };
const state = { role: null, timer: null, history: [], last: null, flash: "", cursors: {} };

const $ = (sel) => document.querySelector(sel);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const enc = encodeURIComponent;
const may = (role) => (ROLES[state.role] || 0) >= ROLES[role];
const when = (iso) => (iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 19) : "-");
const badge = (text) => `<span class="badge ${esc(text)}">${esc(text)}</span>`;

function token() { return sessionStorage.getItem("hipq-token") || ""; }

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
  }
}

async function api(method, path, opts = {}) {
  const headers = {};
  if (token()) headers.Authorization = "Bearer " + token();
  const answer = await fetch(path, { method, headers });
  if (opts.text) {
    if (!answer.ok) throw new ApiError(answer.status, null);
    return answer.text();
  }
  const body = await answer.json().catch(() => null);
  if (!answer.ok) throw new ApiError(answer.status, body);
  return body;
}

// -- login -------------------------------------------------------------------------

function showLogin(message) {
  stopRefresh();
  $("#view").innerHTML = `<section id="login"><h2>API token</h2>
    <p class="muted">This hipq needs a token (kept for this browser session only).</p>
    <form><input id="token" type="password" autocomplete="off" placeholder="token">
    <button type="submit">Sign in</button></form>
    <p class="error">${esc(message || "")}</p></section>`;
  $("#login form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("hipq-token", $("#token").value.trim());
    await start();
  });
}

async function start() {
  if (AUTH && !token()) { showLogin(); return; }
  try {
    state.role = (await api("GET", "/v1/whoami")).role;
  } catch (err) {
    sessionStorage.removeItem("hipq-token");
    showLogin(err.status === 401 ? "That token was not accepted." : err.message);
    return;
  }
  $("#who").textContent = AUTH ? `signed in as ${state.role}` : "no auth";
  $("#signout").hidden = !AUTH;
  await route();
}

// -- routing and refresh ------------------------------------------------------------

function stopRefresh() { if (state.timer) clearTimeout(state.timer); state.timer = null; }

async function route() {
  stopRefresh();
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.view === (parts[0] || "queues"));
  }
  const view = { queue: queueView, job: jobView, morgue: morgueView, unmatched: unmatchedView }[parts[0]]
    || queuesView;
  const tick = async () => {
    try {
      await view(...parts.slice(1));
      $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (err) {
      if (err.status === 401) { sessionStorage.removeItem("hipq-token"); showLogin(err.message); return; }
      $("#view").innerHTML = `<section><p class="error">${esc(err.message)}</p></section>`;
    }
    if (view.live) state.timer = setTimeout(tick, REFRESH_MS);
  };
  await tick();
}

function flash(message) { state.flash = message; }
function takeFlash() {
  const text = state.flash;
  state.flash = "";
  return text ? `<div class="flash" id="flash">${esc(text)}</div>` : "";
}

async function act(label, method, path, after) {
  try {
    await api(method, path);
    flash(label);
  } catch (err) {
    flash(`${label} failed: ${err.message}`);
  }
  if (after) after(); else await route();
}

// -- queues ---------------------------------------------------------------------------

async function queuesView() {
  const [stats, text] = await Promise.all([api("GET", "/v1/stats"),
    api("GET", "/metrics", { text: true }).catch(() => "")]);
  sample(text);
  const rows = stats.queues.map((q) => `<tr data-queue="${esc(q.queue)}">
    <td><a href="#/queue/${enc(q.queue)}">${esc(q.queue)}</a> ${q.paused ? badge("paused") : ""}</td>
    <td class="num">${q.queued}${q.intake ? ` <span class="intake" data-intake="${q.intake}"
      title="enqueued from SQL, not ingested yet">+${q.intake} from SQL</span>` : ""}</td>
    <td class="num">${q.due}</td>
    <td class="num">${q.running}</td>
    <td class="num">${q.running_weight}/${q.concurrency ?? "&infin;"}</td>
    <td class="num">${q.oldest_due_age_seconds == null ? "-" : q.oldest_due_age_seconds.toFixed(1) + " s"}</td>
    <td>${may("admin") ? `<button class="toggle" data-queue="${esc(q.queue)}"
      data-paused="${q.paused}">${q.paused ? "resume" : "pause"}</button>` : ""}</td></tr>`);
  const r = stats.responses;
  const intake = stats.intake || { pending: 0, rejected: 0 };
  $("#view").innerHTML = `${takeFlash()}<div class="grid"><section><h2>Queues</h2>
    <table id="queues"><thead><tr><th>queue</th><th class="num">queued</th><th class="num">due</th>
    <th class="num">running</th><th class="num">weight/capacity</th><th class="num">lag</th><th></th>
    </tr></thead><tbody>${rows.join("") || '<tr><td colspan="7" class="muted">no queues</td></tr>'}
    </tbody></table>${intake.pending || intake.rejected ? `<p id="intake" class="muted">Enqueued
    from SQL: <span data-count="pending">${intake.pending}</span> waiting to be ingested,
    <span data-count="rejected">${intake.rejected}</span> rejected (listed by
    <code>GET /v1/intake?status=rejected</code> and <code>hipq intake --rejected</code>).</p>` : ""}
    </section>
    <section><h2>Throughput (jobs/s)</h2>${chart()}
    <p class="muted"><span style="color:var(--ok)">&#9632;</span> succeeded
    <span style="color:var(--bad)">&#9632;</span> failed or retried</p></section></div>
    <section id="responses"><h2>Responses</h2><table><tr>
    ${["pending", "applied", "duplicate", "stale", "late", "unmatched"].map((k) =>
      `<th class="num">${k}</th>`).join("")}</tr><tr>
    ${["pending", "applied", "duplicate", "stale", "late", "unmatched"].map((k) =>
      `<td class="num" data-count="${k}">${k === "unmatched"
        ? `<a href="#/unmatched" title="list them">${r[k] ?? 0}</a>` : r[k] ?? 0}</td>`).join("")}</tr></table>
    <p class="muted"><a href="#/unmatched">Unmatched</a>: responses whose correlation key matched
    no job within <code>responses.buffer_seconds</code>.</p></section>`;
  for (const b of document.querySelectorAll("button.toggle")) {
    b.addEventListener("click", () => act(`${b.dataset.paused === "true" ? "resumed" : "paused"} ${b.dataset.queue}`,
      "POST", `/v1/jobs/${enc(b.dataset.queue)}/${b.dataset.paused === "true" ? "resume" : "pause"}`));
  }
}
queuesView.live = true;

function sample(text) {
  const now = Date.now() / 1000;
  let ok = 0, bad = 0;
  for (const line of text.split("\n")) {
    const m = line.match(/^hipq_job_outcomes_total\{([^}]*)\} ([0-9.e+]+)/);
    if (!m) continue;
    if (/outcome="succeeded"/.test(m[1])) ok += Number(m[2]);
    else if (!/outcome="cancelled"/.test(m[1])) bad += Number(m[2]);
  }
  if (state.last && now > state.last.at) {
    const dt = now - state.last.at;
    state.history.push({ ok: Math.max(ok - state.last.ok, 0) / dt, bad: Math.max(bad - state.last.bad, 0) / dt });
    state.history = state.history.slice(-CHART_POINTS);
  }
  state.last = { at: now, ok, bad };
}

function chart() {
  const w = 400, h = 150, points = state.history;
  const top = Math.max(1, ...points.map((p) => Math.max(p.ok, p.bad)));
  const line = (key) => points.map((p, i) =>
    `${(i * w / (CHART_POINTS - 1)).toFixed(1)},${(h - 14 - p[key] / top * (h - 24)).toFixed(1)}`).join(" ");
  return `<svg class="chart" id="chart" viewBox="0 0 ${w} ${h}" preserveAspectRatio="none">
    <line x1="0" y1="${h - 14}" x2="${w}" y2="${h - 14}" stroke="#e4e7ec"/>
    <text x="2" y="10">${top.toFixed(1)}/s</text><text x="2" y="${h - 2}">last ${CHART_POINTS * REFRESH_MS / 1000} s</text>
    <polyline class="ok" points="${line("ok")}"/><polyline class="bad" points="${line("bad")}"/></svg>`;
}

// -- one queue ------------------------------------------------------------------------

function jobRows(jobs, opts) {
  if (!jobs.length) return `<tr><td colspan="6" class="muted">none</td></tr>`;
  return jobs.map((j) => `<tr data-job="${esc(j.id)}">
    ${opts.select ? `<td><input type="checkbox" class="pick" data-queue="${esc(j.queue)}" data-id="${esc(j.id)}"></td>` : ""}
    <td><a href="#/job/${enc(j.queue)}/${enc(j.id)}">${esc(j.id)}</a>${opts.queue ? ` <span class="muted">${esc(j.queue)}</span>` : ""}</td>
    <td>${badge(j.status)}</td><td class="num">${j.attempt}/${j.max_attempts}</td>
    <td>${when(j[opts.time])}</td>
    <td class="error">${j.error ? esc(`${j.error.kind || ""}: ${j.error.detail || ""}`) : ""}</td>
    ${opts.cancel && may("producer") ? `<td><button class="cancel danger" data-queue="${esc(j.queue)}" data-id="${esc(j.id)}">cancel</button></td>` : ""}
  </tr>`).join("");
}

function bindCancel() {
  for (const b of document.querySelectorAll("button.cancel")) {
    b.addEventListener("click", () => act(`cancel requested for ${b.dataset.id}`, "DELETE",
      `/v1/jobs/${enc(b.dataset.queue)}/${enc(b.dataset.id)}`));
  }
}

function pager(key, next) {
  const stack = state.cursors[key] || [null];
  state.cursors[key] = stack;
  return `<div class="pager"><button class="prev" data-key="${esc(key)}" ${stack.length > 1 ? "" : "disabled"}>&larr; previous</button>
    <span class="muted">page ${stack.length}</span>
    <button class="next" data-key="${esc(key)}" data-cursor="${esc(next || "")}" ${next ? "" : "disabled"}>next &rarr;</button></div>`;
}

function bindPager() {
  for (const b of document.querySelectorAll("button.next")) {
    b.addEventListener("click", () => { state.cursors[b.dataset.key].push(b.dataset.cursor); route(); });
  }
  for (const b of document.querySelectorAll("button.prev")) {
    b.addEventListener("click", () => { state.cursors[b.dataset.key].pop(); route(); });
  }
}

function cursorOf(key) {
  const stack = state.cursors[key] || [null];
  return stack[stack.length - 1];
}

// -- the partner's word (SPEC 15): its pauses, the adaptive limit, why due jobs wait --

const PAUSES_LISTED = 10;
const HELD_WORDS = {  // reason -> [one job, several jobs]
  concurrency: ["job waits for a free slot", "jobs wait for a free slot"],
  quota: ["job waits for its group's share of the capacity", "jobs wait for their group's share of the capacity"],
  window: ["job waits for its window", "jobs wait for their window"],
  rate_limit: ["job waits for the rate limit", "jobs wait for the rate limit"],
  backoff: ["job waits for the partner's pause", "jobs wait for the partner's pause"],
  ordering_key: ["job waits for the job ahead of it (same ordering key)", "jobs wait for the jobs ahead of them (same ordering key)"],
  throttler: ["job is held back by the queue's throttler", "jobs are held back by the queue's throttler"],
};

// "12:00:05 UTC" today (UTC), else with its date
function utc(iso) {
  const text = new Date(iso).toISOString();
  const today = new Date().toISOString().slice(0, 10);
  return (text.slice(0, 10) === today ? text.slice(11, 19) : text.replace("T", " ").slice(0, 19)) + " UTC";
}

function pauseLine(b) {
  const scope = b.group == null ? "" : `group <code>${esc(b.group)}</code> `;
  return `<li data-group="${esc(b.group ?? "")}">${scope}paused by the partner until
    <span class="until">${esc(utc(b.until))}</span> (${esc(b.reason)})</li>`;
}

function heldLine(reason, n) {
  const [one, many] = HELD_WORDS[reason] || ["job is held back", "jobs are held back"];
  return `<li data-held="${esc(reason)}">${esc(reason)}: ${n} ${n === 1 ? one : many}</li>`;
}

function adaptiveWords(queue) {
  if (!queue.config.adaptive || queue.effective_concurrency == null) return "";
  return `, <span id="adaptive" title="the concurrency in force, lowered when the partner throttles">adaptive: ${queue.effective_concurrency} of ${queue.config.concurrency}</span>`;
}

function partnerWords(queue) {
  const pauses = queue.backoff || [];
  const order = [...Object.keys(HELD_WORDS), ...Object.keys(queue.held || {}).sort()];
  const held = [...new Set(order)].filter((r) => (queue.held || {})[r] > 0);
  const more = pauses.length > PAUSES_LISTED
    ? `<li class="muted">and ${pauses.length - PAUSES_LISTED} more${pauses.length >= 100 ? " (the 100 ending soonest are shown)" : ""}</li>` : "";
  const parts = [];
  if (pauses.length) {
    parts.push(`<ul id="pauses" class="pauses">${pauses.slice(0, PAUSES_LISTED).map(pauseLine).join("")}${more}</ul>
      ${may("admin") ? '<button id="end-pauses" title="POST resume: ends every pause of the partner">end the partner\'s pauses</button>' : ""}`);
  }
  if (held.length) {
    parts.push(`<p class="muted">Due jobs held back at the last tick:</p>
      <ul id="held">${held.map((r) => heldLine(r, queue.held[r])).join("")}</ul>`);
  }
  if (queue.throttled_total) {
    parts.push(`<p class="muted" id="throttled">${queue.throttled_total} throttled ${queue.throttled_total === 1 ? "try" : "tries"} in all (the partner said not now)</p>`);
  }
  return parts.length ? `<div id="partner">${parts.join("")}</div>` : "";
}

async function queueView(name) {
  const page = async (path, key) => {
    const cursor = cursorOf(key);
    return api("GET", path + (cursor ? `&cursor=${enc(cursor)}` : ""));
  };
  const base = `name=${enc(name)}&limit=${PAGE}`;
  const [queue, queued, running, failed] = await Promise.all([
    api("GET", `/v1/jobs/${enc(name)}`),
    page(`/v1/queued-jobs?${base}&state=queued`, `q:${name}`),
    page(`/v1/queued-jobs?${base}&state=running`, `r:${name}`),
    api("GET", `/v1/archived-jobs?name=${enc(name)}&status=failed&limit=10`)]);
  const s = queue.stats || {};
  const cancel = may("producer") ? "<th></th>" : "";
  $("#view").innerHTML = `${takeFlash()}<section><h2>${esc(name)} ${queue.paused ? badge("paused") : ""}</h2>
    <p>${s.queued ?? 0} queued, ${s.due ?? 0} due, ${s.running ?? 0} running
    (weight ${s.running_weight ?? 0}/${queue.config.concurrency ?? "&infin;"}${adaptiveWords(queue)}),
    lag ${s.oldest_due_age_seconds == null ? "-" : s.oldest_due_age_seconds.toFixed(1) + " s"}
    ${may("admin") ? `<button class="toggle" id="toggle">${queue.paused ? "resume" : "pause"}</button>` : ""}</p>
    ${partnerWords(queue)}</section>
    <section id="running"><h2>Running (by launch time)</h2><table><thead><tr><th>job</th><th>status</th>
    <th class="num">try</th><th>launched</th><th>last error</th>${cancel}</tr></thead>
    <tbody>${jobRows(running.jobs, { time: "launched_at", cancel: true })}</tbody></table>
    ${pager(`r:${name}`, running.next_cursor)}</section>
    <section id="queued"><h2>Queued (in queue order)</h2><table><thead><tr><th>job</th><th>status</th>
    <th class="num">try</th><th>run at</th><th>last error</th>${cancel}</tr></thead>
    <tbody>${jobRows(queued.jobs, { time: "run_at", cancel: true })}</tbody></table>
    ${pager(`q:${name}`, queued.next_cursor)}</section>
    <section id="failures"><h2>Recent failures</h2><table><thead><tr><th>job</th><th>status</th>
    <th class="num">try</th><th>finished</th><th>error</th></tr></thead>
    <tbody>${jobRows(failed.jobs, { time: "finished_at" })}</tbody></table></section>`;
  bindCancel();
  bindPager();
  const toggle = $("#toggle");
  if (toggle) {
    toggle.addEventListener("click", () => act(`${queue.paused ? "resumed" : "paused"} ${name}`,
      "POST", `/v1/jobs/${enc(name)}/${queue.paused ? "resume" : "pause"}`));
  }
  const endPauses = $("#end-pauses");
  if (endPauses) {
    endPauses.addEventListener("click", () => act(`resumed ${name}: the partner's pauses ended`,
      "POST", `/v1/jobs/${enc(name)}/resume`));
  }
}
queueView.live = true;

// -- one job --------------------------------------------------------------------------

// The API answers a job's last 50 history entries and how many it has: say so when cut.
function shownOf(job) {
  const total = job.history_count ?? job.history.length;
  return total > job.history.length
    ? ` <span class="muted" id="history-count">last ${job.history.length} of ${total}</span>` : "";
}

async function jobView(queue, id) {
  const job = await api("GET", `/v1/jobs/${enc(queue)}/${enc(id)}`);
  const live = job.status === "queued" || job.status === "running";
  const fields = ["status", "attempt", "max_attempts", "priority", "weight", "critical", "run_at",
    "launched_at", "finished_at", "expires_at", "correlation_key", "ordering_key", "replay_of",
    "created_at", "updated_at"];
  const history = job.history.map((h) => `<tr><td class="num">${h.attempt}</td><td>${when(h.launched_at)}</td>
    <td>${when(h.finished_at)}</td><td>${badge(h.outcome)}</td>
    <td>${h.error ? `<pre class="error">${esc(JSON.stringify(h.error, null, 2))}</pre>` : ""}</td></tr>`);
  const w = job.waiting;
  const waits = w ? `<p id="waiting">waits: ${esc(w.reason)}: ${esc(w.detail)}${
    w.until ? ` (until ${esc(when(w.until))} UTC)` : ""}</p>` : "";
  $("#view").innerHTML = `${takeFlash()}<section><h2><a href="#/queue/${enc(queue)}">${esc(queue)}</a> / ${esc(id)}
    ${badge(job.status)}</h2>${waits}<p>
    ${live && may("producer") ? '<button class="danger" id="cancel">cancel</button>' : ""}
    ${!live && may("producer") ? '<button id="replay">replay</button>' : ""}</p>
    <dl>${fields.map((f) => `<dt>${f}</dt><dd>${esc(f.endsWith("_at") ? when(job[f]) : job[f] ?? "-")}</dd>`).join("")}</dl></section>
    <section id="history"><h2>Tries${shownOf(job)}</h2><table><thead><tr><th class="num">try</th><th>launched</th>
    <th>finished</th><th>outcome</th><th>error</th></tr></thead>
    <tbody>${history.join("") || '<tr><td colspan="5" class="muted">not launched yet</td></tr>'}</tbody></table></section>
    <div class="grid"><section><h2>Data</h2><pre id="data">${esc(JSON.stringify(job.data, null, 2))}</pre></section>
    <section><h2>Result / error</h2><pre>${esc(JSON.stringify({ result: job.result, error: job.error }, null, 2))}</pre></section></div>`;
  const cancel = $("#cancel");
  if (cancel) cancel.addEventListener("click", () => act(`cancel requested for ${id}`, "DELETE", `/v1/jobs/${enc(queue)}/${enc(id)}`));
  const replay = $("#replay");
  if (replay) {
    replay.addEventListener("click", async () => {
      try {
        const made = await api("POST", `/v1/jobs/${enc(queue)}/${enc(id)}/replay`);
        flash(`replayed as ${made.id}`);
        location.hash = `#/job/${enc(made.queue)}/${enc(made.id)}`;
      } catch (err) { flash(`replay failed: ${err.message}`); await route(); }
    });
  }
}
jobView.live = true;

// -- the morgue -------------------------------------------------------------------------

async function morgueView() {
  const status = sessionStorage.getItem("hipq-morgue") || "failed";
  const key = `m:${status}`;
  const cursor = cursorOf(key);
  const page = await api("GET", `/v1/archived-jobs?status=${status}&limit=${PAGE}` + (cursor ? `&cursor=${enc(cursor)}` : ""));
  const select = may("producer");
  $("#view").innerHTML = `${takeFlash()}<section id="morgue"><h2>Morgue</h2>
    <p class="tabs">${["failed", "expired"].map((s) => `<button class="tab ${s === status ? "active" : ""}" data-status="${s}">${s}</button>`).join(" ")}
    ${select ? '<button id="replay-selected" disabled>replay selected</button>' : ""}</p>
    <table><thead><tr>${select ? '<th><input type="checkbox" id="pick-all"></th>' : ""}<th>job</th><th>status</th>
    <th class="num">try</th><th>finished</th><th>error</th></tr></thead>
    <tbody>${jobRows(page.jobs, { time: "finished_at", select, queue: true })}</tbody></table>
    ${pager(key, page.next_cursor)}</section>`;
  bindPager();
  for (const b of document.querySelectorAll("button.tab")) {
    b.addEventListener("click", () => { sessionStorage.setItem("hipq-morgue", b.dataset.status); route(); });
  }
  if (!select) return;
  const picks = () => [...document.querySelectorAll("input.pick:checked")];
  const button = $("#replay-selected");
  const update = () => { button.disabled = picks().length === 0; button.textContent = `replay selected (${picks().length})`; };
  for (const box of document.querySelectorAll("input.pick")) box.addEventListener("change", update);
  $("#pick-all").addEventListener("change", (ev) => {
    for (const box of document.querySelectorAll("input.pick")) box.checked = ev.target.checked;
    update();
  });
  button.addEventListener("click", async () => {
    let done = 0;
    const failures = [];
    for (const box of picks()) {
      try { await api("POST", `/v1/jobs/${enc(box.dataset.queue)}/${enc(box.dataset.id)}/replay`); done += 1; }
      catch (err) { failures.push(`${box.dataset.id}: ${err.message}`); }
    }
    flash(`replayed ${done} job(s)` + (failures.length ? `; failed: ${failures.join(", ")}` : ""));
    await route();
  });
}

// -- unmatched responses ----------------------------------------------------------------

const PREVIEW_CHARS = 300; // of a result or an error in the table (the API sends up to 4,096)

function preview(item, key) {
  const value = item[key];
  if (value == null) return "";
  const cut = (item.truncated || []).includes(key); // the API sent the start of its JSON text
  const text = cut ? String(value) : JSON.stringify(value);
  return text.length > PREVIEW_CHARS || cut ? text.slice(0, PREVIEW_CHARS) + "\u2026" : text;
}

function responseRows(items) {
  return items.map((r) => `<tr data-response="${esc(r.id)}">
    <td>${when(r.received_at)}</td><td><code>${esc(r.correlation_key)}</code></td>
    <td>${badge(r.status)}</td><td class="num">${esc(r.attempt ?? "-")}</td><td>${esc(r.source)}</td>
    <td>${when(r.recorded_at)}</td><td><pre>${esc(preview(r, "result"))}</pre></td>
    <td><pre class="error">${esc(preview(r, "error"))}</pre></td></tr>`).join("");
}

async function unmatchedView() {
  const path = `/v1/responses?outcome=unmatched&limit=${PAGE}`;
  const first = await api("GET", path);
  let next = first.next_cursor;
  $("#view").innerHTML = `${takeFlash()}<section id="unmatched"><h2>Unmatched responses</h2>
    <p class="muted">Responses whose correlation key matched no job within
    <code>responses.buffer_seconds</code>, newest first (received time).</p>
    <table><thead><tr><th>received</th><th>correlation key</th><th>status</th><th class="num">try</th>
    <th>source</th><th>recorded</th><th>result</th><th>error</th></tr></thead>
    <tbody>${responseRows(first.responses) || '<tr><td colspan="8" class="muted">none</td></tr>'}</tbody></table>
    <div class="pager"><button id="more" ${next ? "" : "hidden"}>more</button>
    <button id="refresh">refresh</button><span class="muted" id="shown">${first.responses.length} shown</span>
    <span class="error" id="more-error"></span></div></section>`;
  const more = $("#more");
  more.addEventListener("click", async () => {
    more.disabled = true;
    try {
      const page = await api("GET", `${path}&cursor=${enc(next)}`);
      const body = $("#unmatched tbody");
      if (!body) return; // the view changed meanwhile
      body.insertAdjacentHTML("beforeend", responseRows(page.responses));
      next = page.next_cursor;
      more.hidden = !next;
      $("#shown").textContent = `${body.querySelectorAll("tr[data-response]").length} shown`;
      $("#more-error").textContent = "";
    } catch (err) {
      $("#more-error").textContent = err.message;
    }
    more.disabled = false;
  });
  $("#refresh").addEventListener("click", () => route());
}

// -- start ------------------------------------------------------------------------------

window.addEventListener("hashchange", route);
$("#signout").addEventListener("click", () => { sessionStorage.removeItem("hipq-token"); state.role = null; showLogin(); });
start();
