// The hipq dashboard: plain JS over the HTTP API; no build step, no dependencies.
// Views (by URL hash): #/ queues, #/queue/NAME, #/job/QUEUE/ID, #/finished/QUEUE/STATUS,
// #/search/ID[/QUEUE], #/morgue, #/unmatched, #/partners, #/partner/ID (docs/dashboard.md).
// Times are shown in UTC.
"use strict";

const REFRESH_MS = 2000;
const AUTH = document.documentElement.dataset.auth === "true";  // set by the daemon
const PAGE = 20;
const ROLES = { reader: 1, producer: 2, admin: 3 };
const state = { role: null, timer: null, flash: "", cursors: {} };

const $ = (sel) => document.querySelector(sel);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const enc = encodeURIComponent;
const may = (role) => (ROLES[state.role] || 0) >= ROLES[role];
const when = (iso) => (iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "-");
const badge = (text) => `<span class="badge ${esc(text)}">${esc(text)}</span>`;

function token() { return sessionStorage.getItem("hipq-token") || ""; }

// The API's error message, with the fields a validation error names
function errorText(status, body) {
  const e = body?.error;
  if (!e) return `HTTP ${status}`;
  const details = Array.isArray(e.details)
    ? e.details.filter((d) => d && d.msg).map((d) => `${(d.loc || []).join(".")}: ${d.msg}`) : [];
  return details.length ? `${e.message}: ${details.join("; ")}` : e.message;
}

class ApiError extends Error {
  constructor(status, body) {
    super(errorText(status, body));
    this.status = status;
  }
}

async function api(method, path, opts = {}) {
  const headers = {};
  if (token()) headers.Authorization = "Bearer " + token();
  const init = { method, headers };
  if (opts.body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(opts.body);
  }
  const answer = await fetch(path, init);
  if (opts.text) {
    if (!answer.ok) throw new ApiError(answer.status, null);
    return answer.text();
  }
  const body = await answer.json().catch(() => null);
  if (!answer.ok) throw new ApiError(answer.status, body);
  // opts.warning: the body and the API's warning header (e.g. a queue declared in YAML)
  return opts.warning ? { body, warning: answer.headers.get("Hipq-Warning") } : body;
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
    const me = await api("GET", "/v1/whoami");
    state.role = me.role;
    state.traceUrl = me.trace_url || null; // dashboard.trace_url (docs/traces.md)
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
  const gen = state.gen = (state.gen || 0) + 1;  // a tick of an earlier route stops at its end
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.view === ({ partner: "partners" }[parts[0]] || parts[0] || "queues"));
  }
  const view = { queue: queueView, job: jobView, morgue: morgueView, unmatched: unmatchedView,
    finished: finishedView, search: searchView, partners: partnersView, partner: partnerView }[parts[0]] || queuesView;
  const tick = async () => {
    if (state.timer && editing()) { state.timer = setTimeout(tick, REFRESH_MS); return; }
    try {
      await view(...parts.slice(1));
      $("#updated").textContent = `updated ${new Date().toISOString().slice(11, 19)} UTC`;
    } catch (err) {
      if (err.status === 401) { sessionStorage.removeItem("hipq-token"); showLogin(err.message); return; }
      $("#view").innerHTML = `<section><p class="error">${esc(err.message)}</p></section>`;
    }
    if (view.live && gen === state.gen) state.timer = setTimeout(tick, REFRESH_MS);
  };
  await tick();
}

// a live view is not redrawn while someone types in one of its forms
function editing() { return Boolean(document.activeElement?.closest("#view form")); }

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
  const [stats, list, outcomes] = await Promise.all([api("GET", "/v1/stats"),
    api("GET", "/v1/jobs"), api("GET", "/v1/outcomes")]);
  const queues = Object.fromEntries(list.queues.map((q) => [q.id, q]));
  const rows = stats.queues.map((q) => `<tr data-queue="${esc(q.queue)}">
    <td><a href="#/queue/${enc(q.queue)}">${esc(q.queue)}</a> ${q.paused ? badge("paused") : ""}</td>
    <td class="num">${q.queued}${q.intake ? ` <span class="intake" data-intake="${q.intake}"
      title="enqueued from SQL, not ingested yet">+${q.intake} from SQL</span>` : ""}</td>
    <td class="num">${q.due}</td>
    <td class="num">${q.running}</td>
    <td class="num">${q.running_weight}/${q.concurrency ?? "&infin;"}</td>
    <td class="num">${q.oldest_due_age_seconds == null ? "-" : q.oldest_due_age_seconds.toFixed(1) + " s"}</td>
    <td class="hour">${hourWords(outcomes.queues[q.queue])}</td>
    <td class="why">${whyWords(queues[q.queue])}</td>
    <td>${may("admin") ? `<button class="toggle" data-queue="${esc(q.queue)}"
      data-paused="${q.paused}">${q.paused ? "resume" : "pause"}</button>` : ""}</td></tr>`);
  const r = stats.responses;
  const intake = stats.intake || { pending: 0, rejected: 0 };
  $("#view").innerHTML = `${takeFlash()}<div class="grid"><section><h2>Queues</h2>
    <table id="queues"><thead><tr><th>queue</th><th class="num">queued</th><th class="num">due</th>
    <th class="num">running</th><th class="num">weight/capacity</th><th class="num">lag</th>
    <th>last hour</th><th>waiting on</th><th></th>
    </tr></thead><tbody>${rows.join("") || '<tr><td colspan="9" class="muted">no queues</td></tr>'}
    </tbody></table>${intake.pending || intake.rejected ? `<p id="intake" class="muted">Enqueued
    from SQL: <span data-count="pending">${intake.pending}</span> waiting to be ingested,
    <span data-count="rejected">${intake.rejected}</span> rejected (listed by
    <code>GET /v1/intake?status=rejected</code> and <code>hipq intake --rejected</code>).</p>` : ""}
    </section>
    <section><h2>Outcomes per minute, last hour</h2>${outcomeChart(outcomes, "chart")}</section></div>
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

// -- outcomes of the last hour (GET /v1/outcomes: kept by the daemon, per minute) -----

const OUTCOME_GROUPS = [  // [css class, words, outcomes], stacked from the bottom
  ["ok", "succeeded", ["succeeded"]],
  ["bad", "failed, timed out or lost", ["failed", "timeout", "lost"]],
  ["retry", "retried or throttled", ["retried", "throttled"]],
  ["gone", "expired or cancelled", ["expired", "cancelled"]],
];
const hhmm = (iso) => new Date(iso).toISOString().slice(11, 16);
const countOf = (counts, keys) => keys.reduce((sum, k) => sum + ((counts || {})[k] || 0), 0);

function outcomeWords(counts) {
  return Object.entries(counts || {}).filter(([, n]) => n > 0).map(([k, n]) => `${n} ${k}`).join(", ");
}

function outcomeBars(minutes, w, base, top) {
  const bw = w / minutes.length;
  return minutes.map((m, i) => {
    let y = base;
    const rects = OUTCOME_GROUPS.map(([cls, , keys]) => {
      const n = countOf(m.counts, keys);
      if (!n) return "";
      const height = n / top * (base - 4);
      y -= height;
      return `<rect class="${cls}" x="${(i * bw + 0.5).toFixed(1)}" y="${y.toFixed(1)}" width="${Math.max(bw - 1, 1).toFixed(1)}" height="${height.toFixed(1)}"/>`;
    }).join("");
    const words = outcomeWords(m.counts) || "nothing";
    return rects ? `<g data-minute="${esc(m.at)}"><title>${esc(`${hhmm(m.at)} UTC: ${words}`)}</title>${rects}</g>` : "";
  }).join("");
}

// stacked bars, one per minute; the hover title of a bar says what it counts
function outcomeChart(history, id) {
  const w = 480, base = 120, minutes = history.minutes;
  const top = Math.max(1, ...minutes.map((m) => countOf(m.counts, OUTCOME_GROUPS.flatMap((g) => g[2]))));
  const total = {};
  for (const m of minutes) for (const [k, n] of Object.entries(m.counts)) total[k] = (total[k] || 0) + n;
  const since = history.recorded_since;
  const empty = Object.keys(total).length ? "" : `<p class="empty muted">${
    since ? `no job ended since ${esc(hhmm(since))} UTC` : "this daemon keeps no outcomes"}</p>`;
  const legend = OUTCOME_GROUPS.map(([cls, words]) => `<span class="key ${cls}">&#9632;</span> ${words}`).join(" ");
  const kept = since && new Date(since) > new Date(history.since)
    ? ` Kept by this daemon since its start at ${esc(hhmm(since))} UTC (in memory).` : "";
  // the bars stretch to the box (no text inside the SVG, so none is stretched)
  return `<div class="chartbox"><div class="axis"><span>${top}/min</span></div>
    <svg class="bars" id="${id}" viewBox="0 0 ${w} ${base}" preserveAspectRatio="none" role="img"
      aria-label="outcomes per minute"><line x1="0" y1="${base - 0.5}" x2="${w}" y2="${base - 0.5}" stroke="#d0d5dd"/>
    ${outcomeBars(minutes, w, base, top)}</svg>${empty}
    <div class="axis"><span>${esc(hhmm(history.since))} UTC</span><span>now</span></div></div>
    <p class="muted legend">${legend}</p>
    <p class="muted" id="${id}-total">Last hour: ${esc(outcomeWords(total) || "nothing ended")}.${kept}</p>`;
}

function hourWords(counts) {
  if (!counts) return '<span class="muted">-</span>';
  const ok = countOf(counts, ["succeeded"]), bad = countOf(counts, ["failed", "timeout", "lost"]);
  return `<span title="${esc(outcomeWords(counts))}"><span class="ok">${ok} ok</span>${
    bad ? ` <span class="bad">${bad} failed</span>` : ""}</span>`;
}

// the queues page's one line on why a queue's jobs wait (the queue page says more)
function whyWords(queue) {
  if (!queue) return "";
  const words = [];
  if (queue.paused) words.push("paused");
  const pauses = queue.backoff || [];
  if (pauses.length) words.push(`partner's pause until ${utc(pauses[0].until)}`);
  for (const [reason, n] of Object.entries(queue.held || {})) if (n > 0) words.push(`${n} held (${reason})`);
  return words.length ? `<span class="warn">${esc(words.join("; "))}</span>` : "";
}

// -- one queue ------------------------------------------------------------------------

function jobRows(jobs, opts) {
  if (!jobs.length) return `<tr><td colspan="6" class="muted">none</td></tr>`;
  return jobs.map((j) => `<tr data-job="${esc(j.id)}">
    ${opts.select ? `<td><input type="checkbox" class="pick" data-queue="${esc(j.queue)}" data-id="${esc(j.id)}"></td>` : ""}
    <td><a href="#/job/${enc(j.queue)}/${enc(j.id)}">${esc(j.id)}</a>${opts.queue ? ` <span class="muted">${esc(j.queue)}</span>` : ""}</td>
    <td>${badge(j.status)}</td><td class="num">${j.attempt}/${j.max_attempts}</td>
    <td class="time">${when(j[opts.time])}</td>
    <td class="error">${j.error ? esc(errorLine(j.error)) : ""}</td>
    ${opts.cancel && may("producer") ? `<td><button class="cancel danger" data-queue="${esc(j.queue)}" data-id="${esc(j.id)}">cancel</button></td>` : ""}
    ${opts.replay && may("producer") ? `<td><button class="replay" data-queue="${esc(j.queue)}" data-id="${esc(j.id)}">replay</button></td>` : ""}
  </tr>`).join("");
}

const ERROR_LINE_CHARS = 300;  // of an error in a table; the job page shows all of it

function errorLine(error) {
  const text = typeof error === "object" ? `${error.kind || ""}: ${error.detail ?? ""}` : String(error);
  return text.length > ERROR_LINE_CHARS ? text.slice(0, ERROR_LINE_CHARS) + "\u2026" : text;
}

// replay a finished job (POST .../replay): a new job, queued now, with the same data
function bindReplay() {
  for (const b of document.querySelectorAll("button.replay")) {
    b.addEventListener("click", async () => {
      try {
        const made = await api("POST", `/v1/jobs/${enc(b.dataset.queue)}/${enc(b.dataset.id)}/replay`);
        flash(`replayed ${b.dataset.id} as ${made.id}`);
      } catch (err) { flash(`replay of ${b.dataset.id} failed: ${err.message}`); }
      await route();
    });
  }
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

// -- the partner's word (docs/throttling.md): its pauses, the adaptive limit, why due jobs wait --

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

// -- a queue's settings, and its concurrency set by an admin (POST /v1/jobs) ------------

function flat(value, prefix, out) {
  if (value && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
    for (const [k, v] of Object.entries(value)) flat(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out.push([prefix, value]);
  }
  return out;
}

const shown = (v) => (typeof v === "string" ? v : JSON.stringify(v));
const unset = (v) => v == null || (typeof v === "object" && Object.keys(v).length === 0);

// every setting that is set, as the API shows it (secrets as "***")
function settingsTable(config) {
  const rows = flat(config, "", []).filter(([k, v]) => k !== "id" && !unset(v));
  return `<table class="settings">${rows.map(([k, v]) =>
    `<tr data-setting="${esc(k)}"><th>${esc(k)}</th><td><code>${esc(shown(v))}</code></td></tr>`).join("")}</table>`;
}

function concurrencyForm(queue) {
  if (!may("admin")) return "";
  return `<form id="concurrency-form" class="inline" novalidate>
    <label>concurrency <input id="concurrency" type="number" inputmode="numeric"
      value="${esc(queue.config.concurrency ?? "")}" placeholder="no limit"></label>
    <button type="submit">set</button>
    <span class="muted">empty: no limit</span></form>`;
}

function bindConcurrency(queue) {
  const form = $("#concurrency-form");
  if (!form) return;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = $("#concurrency");
    if (input.validity.badInput) { flash("concurrency not changed: that is not a number"); await route(); return; }
    const value = input.value.trim() === "" ? null : Number(input.value);
    try {
      const { warning } = await api("POST", "/v1/jobs", { body: { ...queue.config, concurrency: value }, warning: true });
      flash(`concurrency of ${queue.id} set to ${value ?? "no limit"}${warning ? ` (${warning})` : ""}`);
    } catch (err) {
      flash(`concurrency not changed: ${err.message}`);
    }
    input.blur();
    await route();
  });
}

// why the queue's next job waits (GET of the job: its "waiting", docs/throttling.md)
async function nextWaits(name, queued, first) {
  if (!first || !queued.jobs.length) return "";
  const head = queued.jobs[0];
  const job = await api("GET", `/v1/jobs/${enc(name)}/${enc(head.id)}`).catch(() => null);
  const w = job?.waiting;
  if (!w) return "";
  return `<p id="next-waits">Next in line, <a href="#/job/${enc(name)}/${enc(head.id)}">${esc(head.id)}</a>,
    waits: <b>${esc(w.reason)}</b>: ${esc(w.detail)}${w.until ? ` (until ${esc(when(w.until))})` : ""}</p>`;
}

async function queueView(name) {
  const page = async (path, key) => {
    const cursor = cursorOf(key);
    return api("GET", path + (cursor ? `&cursor=${enc(cursor)}` : ""));
  };
  const base = `name=${enc(name)}&limit=${PAGE}`;
  const [queue, queued, running, failed, outcomes] = await Promise.all([
    api("GET", `/v1/jobs/${enc(name)}`),
    page(`/v1/queued-jobs?${base}&state=queued`, `q:${name}`),
    page(`/v1/queued-jobs?${base}&state=running`, `r:${name}`),
    api("GET", `/v1/archived-jobs?name=${enc(name)}&status=failed&limit=10`),
    api("GET", `/v1/outcomes?name=${enc(name)}`)]);
  const waits = await nextWaits(name, queued, !cursorOf(`q:${name}`));
  const s = queue.stats || {};
  const cancel = may("producer") ? "<th></th>" : "";
  $("#view").innerHTML = `${takeFlash()}<section><h2>${esc(name)} ${queue.paused ? badge("paused") : ""}</h2>
    <p>${s.queued ?? 0} queued, ${s.due ?? 0} due, ${s.running ?? 0} running
    (weight ${s.running_weight ?? 0}/${queue.config.concurrency ?? "&infin;"}${adaptiveWords(queue)}),
    lag ${s.oldest_due_age_seconds == null ? "-" : s.oldest_due_age_seconds.toFixed(1) + " s"}
    ${may("admin") ? `<button class="toggle" id="toggle">${queue.paused ? "resume" : "pause"}</button>` : ""}
    &middot; <a id="finished-link" href="#/finished/${enc(name)}/">finished jobs</a>${queue.config.partner
      ? ` &middot; partner <a id="partner-link" href="#/partner/${enc(queue.config.partner)}">${esc(queue.config.partner)}</a>` : ""}</p>
    ${queue.paused ? '<p id="paused-words" class="warn">Paused by an operator: no job of this queue launches until it is resumed (running jobs finish).</p>' : ""}
    ${partnerWords(queue)}${waits}</section>
    <div class="grid"><section id="queue-outcomes"><h2>Outcomes per minute, last hour</h2>${outcomeChart(outcomes, "queue-chart")}</section>
    <section id="settings"><h2>Settings</h2>${concurrencyForm(queue)}${settingsTable(queue.config)}</section></div>
    <section id="running"><h2>Running (by launch time)</h2><table><thead><tr><th>job</th><th>status</th>
    <th class="num">try</th><th>launched</th><th>last error</th>${cancel}</tr></thead>
    <tbody>${jobRows(running.jobs, { time: "launched_at", cancel: true })}</tbody></table>
    ${pager(`r:${name}`, running.next_cursor)}</section>
    <section id="queued"><h2>Queued (in queue order)</h2><table><thead><tr><th>job</th><th>status</th>
    <th class="num">try</th><th>run at</th><th>last error</th>${cancel}</tr></thead>
    <tbody>${jobRows(queued.jobs, { time: "run_at", cancel: true })}</tbody></table>
    ${pager(`q:${name}`, queued.next_cursor)}</section>
    <section id="failures"><h2>Recent failures <a class="more" href="#/finished/${enc(name)}/failed">all failed jobs</a></h2>
    <table><thead><tr><th>job</th><th>status</th>
    <th class="num">try</th><th>finished</th><th>error</th>${cancel}</tr></thead>
    <tbody>${jobRows(failed.jobs, { time: "finished_at", replay: true })}</tbody></table></section>`;
  bindCancel();
  bindReplay();
  bindPager();
  bindConcurrency(queue);
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

// An error as text to read: its kind and detail, then its other fields, multi-line
// text (a Python traceback, a response body) preformatted as it was written.
function errorBlock(error) {
  if (error == null) return "";
  if (typeof error !== "object" || Array.isArray(error)) return `<pre class="error">${esc(shown(error))}</pre>`;
  const { kind, detail, ...rest } = error;
  const head = `<div class="err-head">${kind ? `<b>${esc(kind)}</b>` : ""}${
    detail == null ? "" : `${kind ? ": " : ""}${esc(shown(detail))}`}</div>`;
  const same = (k, v) => (k.endsWith(".kind") && v === kind) || (k.endsWith(".detail") && v === detail);
  const fields = flat(rest, "", []).filter(([k, v]) => !unset(v) && !same(k, v)).map(([k, v]) =>
    typeof v === "string" && v.includes("\n")
      ? `<div class="err-field" data-field="${esc(k)}"><span class="muted">${esc(k)}</span><pre class="trace">${esc(v)}</pre></div>`
      : `<div class="err-field" data-field="${esc(k)}"><span class="muted">${esc(k)}:</span> <code>${esc(shown(v))}</code></div>`);
  return `<div class="err">${head}${fields.join("")}</div>`;
}

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
  const history = job.history.map((h) => `<tr><td class="num">${h.attempt}</td><td class="time">${when(h.launched_at)}</td>
    <td class="time">${when(h.finished_at)}</td><td>${badge(h.outcome)}</td>
    <td>${errorBlock(h.error)}</td></tr>`);
  const w = job.waiting;
  const waits = w ? `<p id="waiting">waits: ${esc(w.reason)}: ${esc(w.detail)}${
    w.until ? ` (until ${esc(when(w.until))})` : ""}</p>` : "";
  const trace = !job.trace_id ? "" : `<p id="trace">trace: ${state.traceUrl
    ? `<a href="${esc(state.traceUrl.replaceAll("{trace_id}", enc(job.trace_id)))}" target="_blank" rel="noopener noreferrer"><code>${esc(job.trace_id)}</code></a>`
    : `<code>${esc(job.trace_id)}</code>`}</p>`;
  $("#view").innerHTML = `${takeFlash()}<section><h2><a href="#/queue/${enc(queue)}">${esc(queue)}</a> / ${esc(id)}
    ${badge(job.status)}</h2>${waits}${trace}<p>
    ${live && may("producer") ? '<button class="danger" id="cancel">cancel</button>' : ""}
    ${!live && may("producer") ? '<button id="replay">replay</button>' : ""}</p>
    <dl>${fields.map((f) => `<dt>${f}</dt><dd>${esc(f.endsWith("_at") ? when(job[f]) : job[f] ?? "-")}</dd>`).join("")}</dl></section>
    <section id="history"><h2>Tries${shownOf(job)}</h2><table><thead><tr><th class="num">try</th><th>launched</th>
    <th>finished</th><th>outcome</th><th>error</th></tr></thead>
    <tbody>${history.join("") || '<tr><td colspan="5" class="muted">not launched yet</td></tr>'}</tbody></table></section>
    <div class="grid"><section><h2>Data</h2><pre id="data">${esc(JSON.stringify(job.data, null, 2))}</pre></section>
    <section id="outcome"><h2>Result</h2><pre id="result">${esc(job.result == null ? "-"
      : typeof job.result === "string" ? job.result : JSON.stringify(job.result, null, 2))}</pre></section></div>
    ${job.error ? `<section><h2>Error</h2><div id="error">${errorBlock(job.error)}</div></section>` : ""}`;
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

// -- finished jobs: a queue's (or every queue's) archive, newest first -------------------

const FINISHED = ["succeeded", "failed", "expired", "cancelled"];

async function finishedView(queue = "", status = "") {
  if (status && !FINISHED.includes(status)) status = "";
  const key = `f:${queue}:${status}`;
  const query = new URLSearchParams({ limit: PAGE });
  if (queue) query.set("name", queue);
  if (status) query.set("status", status);
  if (cursorOf(key)) query.set("cursor", cursorOf(key));
  const [page, stats] = await Promise.all([api("GET", `/v1/archived-jobs?${query}`), api("GET", "/v1/stats")]);
  const names = stats.queues.map((q) => q.queue);
  if (queue && !names.includes(queue)) names.unshift(queue);
  const options = [["", "every queue"], ...names.map((n) => [n, n])].map(([v, label]) =>
    `<option value="${esc(v)}" ${v === queue ? "selected" : ""}>${esc(label)}</option>`).join("");
  const tabs = [["", "all"], ...FINISHED.map((f) => [f, f])].map(([v, label]) =>
    `<a class="tab ${v === status ? "active" : ""}" data-status="${v}" href="#/finished/${enc(queue)}/${v}">${label}</a>`).join("");
  const replay = may("producer") ? "<th></th>" : "";
  $("#view").innerHTML = `${takeFlash()}<section id="finished"><h2>Finished jobs</h2>
    <p class="tabs"><label>queue <select id="finished-queue">${options}</select></label> ${tabs}
    <button id="refresh">refresh</button></p>
    <p class="muted">Newest first (finished time). Archived jobs are kept for <code>archive.retention_days</code>.</p>
    <table><thead><tr><th>job</th><th>status</th><th class="num">try</th><th>finished</th><th>error</th>${replay}</tr></thead>
    <tbody>${jobRows(page.jobs, { time: "finished_at", queue: !queue, replay: true })}</tbody></table>
    ${pager(key, page.next_cursor)}</section>`;
  bindPager();
  bindReplay();
  $("#finished-queue").addEventListener("change", (ev) => { location.hash = `#/finished/${enc(ev.target.value)}/${status}`; });
  $("#refresh").addEventListener("click", () => { state.cursors[key] = [null]; route(); });
}

// -- find a job by id (the search box): GET /v1/job-search ------------------------------

const JOB_ID = /^[A-Za-z0-9_.:-]{1,200}$/;

// "queue/id", "queue id" or an id alone
function searchTarget(text) {
  const parts = text.trim().split(/[\s/]+/).filter(Boolean);
  return parts.length === 2 ? { queue: parts[0], id: parts[1] } : { queue: "", id: parts.join(" ") };
}

async function searchView(id = "", queue = "") {
  if (!JOB_ID.test(id) || (queue && !JOB_ID.test(queue))) {
    $("#view").innerHTML = `<section id="search-result"><h2>Find a job</h2><p class="error">${esc(id || "nothing")}
      is not a job id: ids are 1 to 200 of the characters A-Z a-z 0-9 _ . : - (type <code>queue/id</code> or an id).</p></section>`;
    return;
  }
  const query = new URLSearchParams({ id });
  if (queue) query.set("name", queue);
  const found = await api("GET", `/v1/job-search?${query}`);
  if (found.jobs.length === 1) {
    const job = found.jobs[0];
    location.replace(`#/job/${enc(job.queue)}/${enc(job.id)}`);
    return;
  }
  const where = queue ? `queue ${queue}` : `the ${found.searched} queue${found.searched === 1 ? "" : "s"} searched`;
  const more = found.complete ? "" : `<p class="warn">There are more queues than one search asks: type <code>queue/${esc(id)}</code>.</p>`;
  $("#view").innerHTML = `<section id="search-result"><h2>Find a job: ${esc(id)}</h2>${more}
    ${found.jobs.length ? `<p class="muted">${found.jobs.length} queues have a job with this id.</p>
    <table><thead><tr><th>job</th><th>status</th><th class="num">try</th><th>updated</th><th>error</th></tr></thead>
    <tbody>${jobRows(found.jobs, { time: "updated_at", queue: true })}</tbody></table>`
    : `<p id="not-found">No job ${esc(id)} in ${esc(where)}.</p>`}</section>`;
}

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

// -- partners (GET /v1/partners[/ID]: what the owner of their queues wrote, every second) --

const num = (n) => (n == null ? "-" : Number.isInteger(n) ? String(n)
  : n.toFixed(Math.abs(n) < 10 ? 2 : 1).replace(/\.?0+$/, ""));

// a bucket in a list: its name, a bar of used of limit, the numbers
const miniBucket = (b) => `<div class="mini" data-bucket="${esc(b.name)}"><code>${esc(b.name)}</code>
  ${b.limit == null ? "" : meter(b.used, b.limit)} <span class="muted">${b.limit == null
    ? `${num(b.remaining)} left` : `${num(b.used)}/${num(b.limit)}`}</span></div>`;

// a bar: used of limit (full: red, over 80%: amber)
function meter(used, limit) {
  const share = limit > 0 ? Math.min(Math.max(used / limit, 0), 1) : 0;
  const cls = share >= 1 ? "full" : share >= 0.8 ? "high" : "";
  return `<svg class="meter" viewBox="0 0 100 10" preserveAspectRatio="none" role="img"
    aria-label="${esc(`${num(used)} of ${num(limit)}`)}"><rect class="track" width="100" height="10"/>
    <rect class="used ${cls}" width="${(share * 100).toFixed(1)}" height="10"/></svg>`;
}

// when a bucket has room again: "now", or its time
function roomWords(bucket, updatedAt) {
  if (!bucket.room_at || !updatedAt || new Date(bucket.room_at) <= new Date(updatedAt)) return "room now";
  return `room at ${utc(bucket.room_at)}`;
}

function bucketRows(partner) {
  if (!partner.buckets.length) return '<tr><td colspan="5" class="muted">no buckets (no limits declared)</td></tr>';
  return partner.buckets.map((b) => `<tr data-bucket="${esc(b.name)}">
    <td><code>${esc(b.name)}</code> <span class="muted">${esc(b.source)}</span></td>
    <td class="meter-cell">${b.limit == null ? "" : meter(b.used, b.limit)}</td>
    <td class="num used">${b.limit == null ? `${esc(b.unit)}: limit not reported`
      : `${num(b.used)} of ${num(b.limit)} ${esc(b.unit)}`}</td>
    <td class="num">${num(b.remaining)} left</td>
    <td class="time room">${esc(roomWords(b, partner.updated_at))}</td></tr>`).join("");
}

function flightWords(p) {
  return `${p.in_flight} of ${p.concurrency ?? "&infin;"} in flight`;
}

function learnedWords(p) {
  return p.learned_rate == null ? '<span class="muted">nothing learned</span>'
    : `<span class="warn">${num(p.learned_rate)}/s learned</span>`;
}

function ownerWords(p) {
  return p.owner ? `written by <code>${esc(p.owner)}</code> at ${esc(utc(p.updated_at))}`
    : "no daemon holds its queues yet: its limits as declared";
}

async function partnersView() {
  const { partners } = await api("GET", "/v1/partners");
  const rows = partners.map((p) => `<tr data-partner="${esc(p.id)}">
    <td><a href="#/partner/${enc(p.id)}">${esc(p.id)}</a></td>
    <td>${p.buckets.map(miniBucket).join("") || '<span class="muted">no limits</span>'}</td>
    <td class="num flight">${flightWords(p)}</td><td>${learnedWords(p)}</td>
    <td class="num">${p.accepted_total}</td><td class="num">${p.refused_total}</td>
    <td class="muted owner">${ownerWords(p)}</td></tr>`);
  $("#view").innerHTML = `${takeFlash()}<section id="partners"><h2>Partners</h2>
    <table><thead><tr><th>partner</th><th>buckets (used of limit)</th><th class="num">concurrency</th>
    <th>learned rate</th><th class="num">accepted</th><th class="num">refused</th><th>as seen</th></tr></thead>
    <tbody>${rows.join("") || '<tr><td colspan="7" class="muted">no partners declared (<code>partners:</code> in the settings)</td></tr>'}
    </tbody></table><p class="muted">Every queue that names a partner takes from its buckets.
    Accepted and refused: counted by the daemon that holds its queues now.</p></section>`;
}
partnersView.live = true;

// accepted (green) and refused (red) per minute, stacked
function partnerChart(minutes, id) {
  const w = 480, base = 120, bw = w / Math.max(minutes.length, 1);
  const top = Math.max(1, ...minutes.map((m) => m.accepted + m.refused));
  const bars = minutes.map((m, i) => {
    if (!m.accepted && !m.refused) return "";
    const ok = m.accepted / top * (base - 4), bad = m.refused / top * (base - 4);
    const x = (i * bw + 0.5).toFixed(1), bwidth = Math.max(bw - 1, 1).toFixed(1);
    return `<g data-minute="${esc(m.minute)}"><title>${esc(`${hhmm(m.minute)} UTC: ${m.accepted} accepted, ${m.refused} refused`)}</title>
      <rect class="ok" x="${x}" y="${(base - ok).toFixed(1)}" width="${bwidth}" height="${ok.toFixed(1)}"/>
      ${bad ? `<rect class="bad" x="${x}" y="${(base - ok - bad).toFixed(1)}" width="${bwidth}" height="${bad.toFixed(1)}"/>` : ""}</g>`;
  }).join("");
  const accepted = minutes.reduce((s, m) => s + m.accepted, 0), refused = minutes.reduce((s, m) => s + m.refused, 0);
  const empty = accepted + refused ? "" : '<p class="empty muted">nothing launched in the last hour</p>';
  return `<div class="chartbox"><div class="axis"><span>${top}/min</span></div>
    <svg class="bars" id="${id}" viewBox="0 0 ${w} ${base}" preserveAspectRatio="none" role="img"
      aria-label="accepted and refused per minute"><line x1="0" y1="${base - 0.5}" x2="${w}" y2="${base - 0.5}" stroke="#d0d5dd"/>
    ${bars}</svg>${empty}
    <div class="axis"><span>${minutes.length ? esc(hhmm(minutes[0].minute)) + " UTC" : ""}</span><span>now</span></div></div>
    <p class="muted legend"><span class="key ok">&#9632;</span> accepted <span class="key bad">&#9632;</span> refused</p>
    <p class="muted" id="${id}-total">Last hour: ${accepted} accepted, ${refused} refused.</p>`;
}

function keyRows(p) {
  return p.keys.map((k) => `<tr data-key="${esc(k.key)}"><td><code>${esc(k.key)}</code></td>
    <td class="num">${k.in_flight}</td><td>${learnedWords(k)}</td>
    <td>${k.buckets.map(miniBucket).join("")}</td>
    <td class="num">${k.accepted_total}</td><td class="num">${k.refused_total}</td></tr>`).join("");
}

async function partnerView(id) {
  const p = await api("GET", `/v1/partners/${enc(id)}`);
  const keys = p.by ? `<section id="keys"><h2>Busiest keys <span class="muted">(by <code>${esc(p.by)}</code>:
    ${p.key_count} kept)</span></h2><table><thead><tr><th>key</th><th class="num">in flight</th><th>learned rate</th>
    <th>buckets</th><th class="num">accepted</th><th class="num">refused</th></tr></thead>
    <tbody>${keyRows(p) || '<tr><td colspan="6" class="muted">none yet</td></tr>'}</tbody></table></section>` : "";
  $("#view").innerHTML = `${takeFlash()}<section id="partner-page"><h2><a href="#/partners">Partners</a> / ${esc(p.id)}</h2>
    <p class="muted" id="seen">${ownerWords(p)}</p>
    <p id="concurrency">${p.concurrency == null ? "" : meter(p.in_flight, p.concurrency)}
      <span>${flightWords(p)}</span> &middot; <span id="learned">${learnedWords(p)}</span>
      &middot; ${p.accepted_total} accepted, ${p.refused_total} refused in all</p>
    <table id="buckets"><thead><tr><th>bucket</th><th>use</th><th class="num">used</th><th class="num">left</th><th>room</th></tr></thead>
    <tbody>${bucketRows(p)}</tbody></table></section>
    <section id="partner-minutes"><h2>Accepted and refused per minute, last hour</h2>${partnerChart(p.minutes, "partner-chart")}</section>
    ${keys}`;
}
partnerView.live = true;

// -- start ------------------------------------------------------------------------------

window.addEventListener("hashchange", route);
$("#search").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const { queue, id } = searchTarget($("#search-id").value);
  const hash = `#/search/${enc(id)}${queue ? `/${enc(queue)}` : ""}`;
  $("#search-id").blur();
  if (location.hash === hash) route(); else location.hash = hash;
});
$("#signout").addEventListener("click", () => { sessionStorage.removeItem("hipq-token"); state.role = null; showLogin(); });
start();
