// Rasa's status page: polls /v1/stats every two seconds, keeps the samples it gets and
// draws them with uPlot (vendored). No framework, no build step.
"use strict";

const POLL_MS = 2000;
const TIMEOUT_MS = 5000;
const TOKEN_KEY = "rasa-token";
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];

const state = { samples: [], charts: {}, lastT: 0, timer: null };
const $ = (sel) => document.querySelector(sel);

// Script errors are shown and counted (tests read data-errors), never swallowed.
document.body.dataset.errors = "0";
window.addEventListener("error", (e) => noteError(e.message));
window.addEventListener("unhandledrejection", (e) => noteError(String(e.reason)));
function noteError(msg) {
  document.body.dataset.errors = String(Number(document.body.dataset.errors) + 1);
  setStatus("page error: " + msg, "bad");
}

function setStatus(text, kind) {
  const el = $("#status");
  el.textContent = text;
  el.className = "status " + (kind || "");
}

// ---- formatting ----
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
function fmtBytes(n) {
  if (!Number.isFinite(n)) return "–";
  let i = 0;
  while (Math.abs(n) >= 1024 && i < UNITS.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + " " + UNITS[i];
}
function fmtCount(n) {
  return Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "–";
}
function fmtRate(n) {
  if (!Number.isFinite(n)) return "–";
  return n >= 100 ? fmtCount(n) : n.toFixed(n >= 10 ? 1 : 2);
}
function fmtPct(r) {
  return Number.isFinite(r) ? (100 * r).toFixed(1) + " %" : "–";
}
function fmtClock(t) {
  return new Date(t * 1000).toLocaleTimeString("en-GB", { hour12: false });
}
function fmtDuration(s) {
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  return d ? `${d} d ${h} h` : h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
}

// ---- figures derived from samples ----
function totalRequests(s) {
  return s.requests.reduce((a, r) => a + r.ok + r.redirect + r.client_error + r.server_error, 0);
}
function ratio(a, b) { return b > 0 ? a / b : NaN; }
function derived(now, prev) {
  const dt = prev ? (now.t_ms - prev.t_ms) / 1000 : 0;
  return {
    requests_per_s: dt > 0 ? (totalRequests(now) - totalRequests(prev)) / dt : NaN,
    hit_ratio: ratio(now.cache.hits, now.cache.hits + now.cache.misses),
    fast_path_share: ratio(now.traffic.one_sided_bytes,
      now.traffic.one_sided_bytes + now.traffic.http_bytes + now.traffic.s3_bytes),
    origin_mean_ms: ratio(1000 * now.origin.fetch_seconds_sum, now.origin.fetch_count),
  };
}
function pick(obj, path) {
  return path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
}

// Every element with data-stat shows one figure; data-value keeps the raw number.
function renderTiles(now, prev) {
  const view = Object.assign({}, now, { derived: derived(now, prev) });
  for (const el of document.querySelectorAll("[data-stat]")) {
    const path = el.dataset.stat;
    const v = pick(view, path);
    el.dataset.value = Number.isFinite(v) ? String(v) : "";
    let text;
    if (el.dataset.format === "bytes") text = fmtBytes(v);
    else if (path === "derived.hit_ratio" || path === "derived.fast_path_share") text = fmtPct(v);
    else if (path === "derived.requests_per_s") text = fmtRate(v);
    else if (path === "derived.origin_mean_ms") text = Number.isFinite(v) ? v.toFixed(1) : "–";
    else text = fmtCount(v);
    el.textContent = text;
  }
}

const TOTALS = [
  ["cache.hits", "Hits"], ["cache.misses", "Misses"], ["cache.negative_hits", "Negative hits (remembered origin 404s)"],
  ["cache.stale_served", "Stale versions served (origin down)"], ["cache.versions_stored", "Versions stored"],
  ["cache.bytes_stored", "Bytes stored", "bytes"], ["origin.fetches", "Origin fetches"], ["origin.errors", "Origin errors"],
  ["origin.bytes", "Bytes fetched from the origin", "bytes"], ["origin.in_flight", "Origin fetches in flight"],
  ["memory.evictions", "Evictions"], ["memory.arenas_open", "Arenas open"], ["memory.arenas_sealed", "Arenas sealed"],
  ["memory.arenas_draining", "Arenas draining"], ["memory.arenas_free", "Arenas free"], ["memory.arenas_leased", "Arenas under a lease"],
  ["traffic.http_bytes", "Bytes served over HTTP", "bytes"], ["traffic.s3_bytes", "Bytes served by the S3 listener", "bytes"],
  ["traffic.one_sided_bytes", "Bytes advertised one-sided", "bytes"],
  ["fast_path.leases_granted", "Leases granted"], ["fast_path.keys_rotated", "Remote keys rotated"],
  ["fast_path.keys_revoked", "Remote keys revoked"],
  ["disk.values", "Values on disk"], ["disk.bytes", "Bytes on disk", "bytes"], ["disk.budget_bytes", "Disk size (--disk-size)", "bytes"],
  ["disk.index_bytes", "Disk index memory", "bytes"], ["disk.hits", "Disk hits"], ["disk.spills", "Spills to disk"],
  ["disk.promotions", "Promotions from disk"], ["disk.evictions", "Evicted from disk"], ["disk.recovery_ms", "Disk recovery at start (ms)"],
];
function buildTotals() {
  const dl = $("#totals");
  for (const [path, label, format] of TOTALS) {
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.dataset.stat = path;
    if (format) dd.dataset.format = format;
    dd.textContent = "–";
    dl.append(dt, dd);
  }
}

function renderCluster(c, thisNode) {
  $("#cluster-none").hidden = c.enabled;
  $("#cluster").hidden = !c.enabled;
  if (!c.enabled) return;
  const body = $("#cluster tbody");
  body.replaceChildren();
  for (const m of c.members) {
    const tr = document.createElement("tr");
    const node = document.createElement("a");
    node.href = m.url.replace(/\/$/, "") + "/ui";
    node.textContent = m.node_id + (m.node_id === thisNode ? " (this page)" : "");
    const cells = [node, m.state, m.url, String(m.weight), m.fabric && m.fabric.enabled ? m.fabric.provider : "off"];
    for (const v of cells) {
      const td = document.createElement("td");
      td.append(v);
      tr.append(td);
    }
    tr.className = m.state;
    body.append(tr);
  }
}

// Shown only with named namespaces (a gateway run with --namespaces).
function renderNamespaces(list) {
  const named = (list || []).length > 1;
  $("#namespaces-section").hidden = !named;
  if (!named) return;
  const body = $("#namespaces tbody");
  body.replaceChildren();
  for (const ns of list) {
    const tr = document.createElement("tr");
    const cells = [ns.name, fmtBytes(ns.quota_bytes), fmtBytes(ns.allocated_bytes),
      fmtBytes(ns.live_bytes), String(ns.evictions)];
    for (const v of cells) {
      const td = document.createElement("td");
      td.append(v);
      tr.append(td);
    }
    body.append(tr);
  }
}

// ---- charts ----
function rates(samples, f) {
  const out = [null];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].t_ms - samples[i - 1].t_ms) / 1000;
    out.push(dt > 0 ? Math.max(0, f(samples[i]) - f(samples[i - 1])) / dt : null);
  }
  return out;
}
function intervalRatio(samples, num, den) {
  const out = [null];
  for (let i = 1; i < samples.length; i++) {
    const d = den(samples[i]) - den(samples[i - 1]);
    out.push(d > 0 ? (100 * (num(samples[i]) - num(samples[i - 1]))) / d : null);
  }
  return out;
}
const CLASSES = [["ok", "2xx"], ["redirect", "3xx"], ["client_error", "4xx"], ["server_error", "5xx"]];
function routeKey(r) { return r.method + " " + r.route; }
function routeTotal(s, key) {
  const r = s.requests.find((x) => routeKey(x) === key);
  return r ? r.ok + r.redirect + r.client_error + r.server_error : 0;
}

// Each chart: its series (names, scale) and how to compute them from the samples.
function chartSpecs(samples) {
  const routes = [...new Set(samples.flatMap((s) => s.requests.map(routeKey)))].sort();
  return {
    "c-classes": { unit: "rate", series: CLASSES.map(([k, label]) => [label, rates(samples, (s) => s.requests.reduce((a, r) => a + r[k], 0))]) },
    "c-routes": { unit: "rate", series: routes.map((key) => [key, rates(samples, (s) => routeTotal(s, key))]) },
    "c-hits": { unit: "rate", series: [
      ["hit ratio %", intervalRatio(samples, (s) => s.cache.hits, (s) => s.cache.hits + s.cache.misses)],
      ["origin fetches/s", rates(samples, (s) => s.origin.fetches)],
    ] },
    "c-origin": { unit: "ms", series: [
      ["mean ms", samples.map((s, i) => {
        if (i === 0) return null;
        const n = s.origin.fetch_count - samples[i - 1].origin.fetch_count;
        return n > 0 ? (1000 * (s.origin.fetch_seconds_sum - samples[i - 1].origin.fetch_seconds_sum)) / n : null;
      })],
    ] },
    "c-memory": { unit: "bytes", series: [
      ["budget", samples.map((s) => s.memory.budget_bytes)],
      ["allocated", samples.map((s) => s.memory.allocated_bytes)],
      ["live", samples.map((s) => s.memory.live_bytes)],
    ] },
    "c-arenas": { unit: "count", series: [
      ["open", samples.map((s) => s.memory.arenas_open)],
      ["sealed", samples.map((s) => s.memory.arenas_sealed)],
      ["draining", samples.map((s) => s.memory.arenas_draining)],
      ["free", samples.map((s) => s.memory.arenas_free)],
      ["evictions/s", rates(samples, (s) => s.memory.evictions)],
    ] },
    "c-bytes": { unit: "bytes", series: [
      ["one-sided", rates(samples, (s) => s.traffic.one_sided_bytes)],
      ["HTTP", rates(samples, (s) => s.traffic.http_bytes)],
      ["S3 listener", rates(samples, (s) => s.traffic.s3_bytes)],
    ] },
    "c-keys": { unit: "rate", series: [
      ["descriptors/s", rates(samples, (s) => s.fast_path.descriptors)],
      ["keys rotated/s", rates(samples, (s) => s.fast_path.keys_rotated)],
      ["keys revoked/s", rates(samples, (s) => s.fast_path.keys_revoked)],
    ] },
  };
}

const AXIS_FORMAT = {
  bytes: (u, vals) => vals.map(fmtBytes),
  rate: (u, vals) => vals.map(fmtRate),
  ms: (u, vals) => vals.map((v) => v.toFixed(1)),
  count: (u, vals) => vals.map((v) => (Number.isInteger(v) ? fmtCount(v) : v.toFixed(1))),
};
function chartWidth(el) { return Math.max(240, el.clientWidth || el.parentElement.clientWidth || 400); }

function drawChart(id, spec, xs) {
  const el = document.getElementById(id);
  const names = spec.series.map(([n]) => n).join("\n");
  let c = state.charts[id];
  const data = [xs, ...spec.series.map(([, ys]) => ys)];
  if (c && c.names === names) {
    c.plot.setData(data);
    return;
  }
  if (c) c.plot.destroy();
  const opts = {
    width: chartWidth(el),
    height: 180,
    scales: { x: { time: true } },
    axes: [{ values: (u, vals) => vals.map(fmtClock) }, { values: AXIS_FORMAT[spec.unit], size: 80 }],
    series: [{}, ...spec.series.map(([label], i) => ({
      label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false,
      value: (u, v) => (v == null ? "–" : AXIS_FORMAT[spec.unit](u, [v])[0]),
    }))],
    legend: { live: true },
  };
  state.charts[id] = { names, plot: new uPlot(opts, data, el) };
}

function drawCharts() {
  const samples = state.samples;
  const xs = samples.map((s) => s.t_ms / 1000);
  const specs = chartSpecs(samples);
  for (const id of Object.keys(specs)) drawChart(id, specs[id], xs);
}

window.addEventListener("resize", () => {
  for (const id of Object.keys(state.charts)) {
    const el = document.getElementById(id);
    state.charts[id].plot.setSize({ width: chartWidth(el), height: 180 });
  }
});

// ---- polling ----
// A token in the address's fragment (`/ui#token=…`, never sent to the server) is kept for
// this tab and removed from the address bar and history.
function tokenFromFragment() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
}

function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

function askForToken(why) {
  $("#main").hidden = true;
  $("#login").hidden = false;
  $("#login-why").textContent = why;
  setStatus("needs a token", "warn");
  $("#token").focus();
}

async function poll() {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  try {
    const url = "/v1/stats" + (state.lastT ? "?since=" + state.lastT : "");
    const resp = await fetch(url, { headers: headers(), signal: ctl.signal, cache: "no-store" });
    if (resp.status === 401) {
      return askForToken("This gateway needs a token with the admin scope to show its figures.");
    }
    if (resp.status === 403) {
      return askForToken("That token lacks the admin scope the figures need; use another.");
    }
    if (!resp.ok) throw new Error(`/v1/stats answered ${resp.status}`);
    show(await resp.json());
    schedule();
  } catch (e) {
    const what = e.name === "AbortError" ? `no answer from /v1/stats within ${TIMEOUT_MS / 1000} s` : e.message;
    setStatus(what + "; retrying", "bad");
    schedule();
  } finally {
    clearTimeout(timer);
  }
}

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(poll, POLL_MS);
}

function show(stats) {
  const keep = stats.history_len;
  for (const s of stats.history) state.samples.push(s);
  if (state.samples.length > keep) state.samples.splice(0, state.samples.length - keep);
  if (stats.history.length) state.lastT = stats.history[stats.history.length - 1].t_ms;
  const prev = state.samples[state.samples.length - 1];
  $("#login").hidden = true;
  $("#main").hidden = false;
  const c = stats.cluster;
  $("#node").textContent = (c.enabled ? `${c.this_node} in ${c.name} · ` : "") +
    `v${stats.version} · up ${fmtDuration(stats.uptime_seconds)}`;
  renderTiles(stats.now, prev && prev.t_ms < stats.now.t_ms ? prev : undefined);
  renderCluster(c, c.this_node);
  renderNamespaces(stats.namespaces);
  drawCharts();
  setStatus("live · " + new Date(stats.now.t_ms).toLocaleTimeString(), "ok");
  document.body.dataset.shown = String(stats.now.t_ms);
}

$("#login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
  $("#token").value = "";
  setStatus("connecting…");
  poll();
});

tokenFromFragment();
buildTotals();
if (document.documentElement.dataset.auth === "token" && !sessionStorage.getItem(TOKEN_KEY)) {
  askForToken("This gateway needs a token with the admin scope to show its figures.");
} else {
  poll();
}
