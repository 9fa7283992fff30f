// taskq dashboard: renders /api/events (SSE) and drives the inspector.
"use strict";
const $ = (id) => document.getElementById(id);
const state = { stream: null, cursor: "", queues: [], listed: false, pages: 0, refreshed: 0, wf: null };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "onclick") e.addEventListener("click", v);
    else e[k] = v;
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}
const num = (n) => el("td", { class: "n" }, n ?? 0);
const msg = (t) => { $("msg").textContent = t || ""; };

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json", "X-Taskq-UI": "1" }, body: JSON.stringify(body),
  };
  const r = await fetch(path, init);
  if (r.status === 401) { showLogin(); throw new Error("log in first"); }
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
}

function showLogin() {
  if (state.stream) { state.stream.close(); state.stream = null; }
  $("app").hidden = true; $("logout").hidden = true; $("login").hidden = false;
  setConn(false);
}

function setConn(on) {
  $("conn").className = "conn " + (on ? "on" : "off");
  $("conn").textContent = on ? "live" : "offline";
}

async function login(token) {
  const r = await fetch("/api/login", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token }) });
  if (!r.ok) { msg("wrong token"); showLogin(); return; }
  msg("");
  start();
}

function start() {
  $("login").hidden = true; $("app").hidden = false; $("logout").hidden = false;
  if (state.stream) state.stream.close();
  const es = new EventSource("/api/events");
  state.stream = es;
  es.addEventListener("open", () => setConn(true));
  es.addEventListener("overview", (e) => {
    setConn(true);
    try { render(JSON.parse(e.data)); } catch (err) { msg("cannot show the update: " + err); }
    // The first page of the task list follows along (states, progress).
    if (state.listed && state.pages === 1 && Date.now() - state.refreshed > 2000) loadTasks(false);
    // So does the open workflow's graph.
    if (state.wf && state.wf.live && Date.now() - state.wf.refreshed > 2000) showWorkflow(state.wf.queue, state.wf.id);
  });
  es.addEventListener("error", () => {
    setConn(false);
    // A 401 closes the stream: find out whether the session ended.
    if (es.readyState === EventSource.CLOSED) fetch("/api/overview").then((r) => { if (r.status === 401) showLogin(); });
  });
}

function limitText(l) {
  if (!l) return "";
  const parts = [];
  if (l.rate_per_sec) parts.push(`${+l.rate_per_sec.toFixed(3)}/s burst ${l.burst || 1}`);
  if (l.max_active) parts.push(`max-active ${l.max_active}`);
  return parts.join(", ");
}

function badges(v) {
  const out = [];
  if (v.paused_until) out.push(el("span", { class: "badge paused" }, "paused"));
  if (v.limit && v.limit.throttled_until) out.push(el("span", { class: "badge throttled" }, "throttled"));
  return out;
}

function pauseButton(queue, tenant, paused) {
  return el("button", { "data-action": paused ? "resume" : "pause", onclick: () => act(`/api/queue/${paused ? "resume" : "pause"}`, { queue, tenant }) }, paused ? "resume" : "pause");
}

async function act(path, body) {
  try { await api(path, body); msg(""); } catch (e) { msg(e.message); }
  if (path.startsWith("/api/task/") || path.endsWith("requeue-dead")) loadTasks(false);
}

function render(o) {
  $("updated").textContent = "updated " + new Date(o.at).toLocaleTimeString();
  const rows = [];
  for (const q of o.queues || []) {
    rows.push(el("tr", { class: "queue", "data-queue": q.name },
      el("td", {}, q.name, ...badges(q)), el("td"), el("td"),
      num(q.pending), num(q.active), num(q.scheduled), num(q.retry), num(q.dead), num(q.completed),
      num(q.rate.toFixed(1)), el("td", {}, q.limit ? el("span", { class: "badge limit" }, limitText(q.limit)) : ""),
      el("td", { class: "actions" }, pauseButton(q.name, "", !!q.paused_until))));
    for (const t of q.tenant_list || []) {
      rows.push(el("tr", { class: "tenant", "data-queue": q.name, "data-tenant": t.name },
        el("td", {}, t.name, ...badges(t)), num(t.weight), num(t.share ? t.share.toFixed(0) + "%" : "–"),
        num(t.pending), num(t.active), el("td"), el("td"), el("td"), num(t.completed), num(t.rate.toFixed(1)),
        el("td", {}, t.limit && limitText(t.limit) ? el("span", { class: "badge limit" }, limitText(t.limit)) : ""),
        el("td", { class: "actions" }, pauseButton(q.name, t.name, !!t.paused_until))));
    }
  }
  if (!rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colSpan: 12 }, "no queues yet")));
  $("queue-rows").replaceChildren(...rows);

  const names = (o.queues || []).map((q) => q.name);
  if (names.join() !== state.queues.join()) {
    state.queues = names;
    for (const sel of [$("f-queue"), $("wf-queue")]) {
      const cur = sel.value;
      sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
      if (names.includes(cur)) sel.value = cur;
    }
  }

  const cron = (o.cron || []).map((c) => el("tr", { "data-cron": c.name },
    el("td", {}, c.name), el("td", {}, c.spec + (c.tz ? ` (${c.tz})` : "")), el("td", {}, c.queue), el("td", {}, c.type),
    el("td", {}, c.tenant || ""), el("td", {}, c.last ? new Date(c.last).toLocaleTimeString() : "–"),
    el("td", {}, c.next ? new Date(c.next).toLocaleString() : "–")));
  if (!cron.length) cron.push(el("tr", { class: "empty" }, el("td", { colSpan: 7 }, "no cron entries")));
  $("cron-rows").replaceChildren(...cron);

  const ws = (o.workers || []).map((w) => el("tr", {},
    el("td", {}, w.id), el("td", {}, w.state), el("td", {}, (w.queues || []).join(", ")), num(w.active), num(w.processed),
    num(w.failed), num((w.rate_per_sec || 0).toFixed(0)), el("td", {}, new Date(w.heartbeat).toLocaleTimeString())));
  if (!ws.length) ws.push(el("tr", { class: "empty" }, el("td", { colSpan: 8 }, "no workers")));
  $("worker-rows").replaceChildren(...ws);
}

async function loadTasks(more) {
  const queue = $("f-queue").value, st = $("f-state").value;
  if (!queue) return;
  $("requeue-dead").hidden = st !== "dead";
  if (!more) { state.cursor = ""; state.pages = 0; }
  state.listed = true; state.refreshed = Date.now();
  const p = new URLSearchParams({ queue, state: st, tenant: $("f-tenant").value.trim(), cursor: state.cursor });
  let page;
  try { page = await api("/api/tasks?" + p); msg(""); } catch (e) { msg(e.message); return; }
  const rows = (page.tasks || []).map((t) => taskRow(t));
  if (!more) $("task-rows").replaceChildren();
  if (!more && !rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colSpan: 8 }, `no ${st} tasks`)));
  $("task-rows").append(...rows);
  state.cursor = page.next || "";
  state.pages++;
  $("more").hidden = !state.cursor;
}

function taskRow(t) {
  const q = t.queue, id = t.id;
  const btn = (op) => el("button", { "data-action": op, onclick: () => act(`/api/task/${op}`, { queue: q, id }) }, op);
  const ops = [];
  if (["pending", "scheduled", "retry", "active"].includes(t.state)) ops.push(btn("cancel"));
  if (["scheduled", "retry", "dead", "cancelled"].includes(t.state)) ops.push(btn("run"));
  if (t.state !== "active") ops.push(btn("delete"));
  let pr = "";
  if (t.progress) {
    const fill = el("i");
    fill.style.width = t.progress.percent + "%"; // CSSOM: allowed by the page's CSP
    pr = el("span", { title: t.progress.note || "" }, el("span", { class: "bar" }, fill), ` ${t.progress.percent.toFixed(0)}% ${t.progress.note || ""}`);
  }
  return el("tr", { "data-id": id },
    el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); showTask(q, id); } }, id)),
    el("td", {}, t.tenant), el("td", {}, t.type || ""), el("td", { class: "state" }, t.state),
    num(`${t.starts}/${t.max_retries + 1}`), el("td", {}, pr), el("td", { class: "err" }, t.last_error || ""),
    el("td", { class: "actions" }, ...ops));
}

async function showTask(queue, id, where = "detail") {
  try {
    const t = await api("/api/task?" + new URLSearchParams({ queue, id }));
    $(where).textContent = JSON.stringify(t, null, 2);
    $(where).hidden = false;
  } catch (e) { msg(e.message); }
}

// Workflows: a queue's list, and one workflow's graph as an SVG built with
// DOM calls, its nodes in columns by depth (parents to the left), each
// coloured by its state (style.css: .st-<state>).
const SVGNS = "http://www.w3.org/2000/svg";
const WF_STATES = ["waiting", "pending", "scheduled", "active", "retry", "completed", "dead", "cancelled", "gone"];
const ENDED = ["completed", "dead", "cancelled", "gone"];
const G = { w: 190, h: 30, gapX: 60, gapY: 8, pad: 8 };

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") e.addEventListener("click", v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}

const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + "…" : s);

function stateBadges(states) {
  if (!states) return [el("span", { class: "muted" }, "open it to see its states")];
  const rank = (s) => (WF_STATES.includes(s) ? WF_STATES.indexOf(s) : WF_STATES.length);
  return Object.keys(states).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
    .map((s) => el("span", { class: "badge st-" + s, "data-state": s }, `${s} ${states[s]}`));
}

async function loadWorkflows() {
  const queue = $("wf-queue").value;
  if (!queue) return;
  let j;
  try { j = await api("/api/workflows?" + new URLSearchParams({ queue })); msg(""); } catch (e) { msg(e.message); return; }
  const rows = (j.workflows || []).map((w) => el("tr", { "data-workflow": w.id },
    el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); showWorkflow(queue, w.id); } }, w.id)),
    num(w.nodes), el("td", {}, ...stateBadges(w.states))));
  if (!rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colSpan: 3 }, "no workflows")));
  $("wf-rows").replaceChildren(...rows);
}

async function showWorkflow(queue, id) {
  const wf = { queue, id, refreshed: Date.now() };
  state.wf = wf;
  let w;
  try { w = await api("/api/workflow?" + new URLSearchParams({ queue, id })); } catch (e) { msg(e.message); return; }
  if (state.wf !== wf) return; // another one opened meanwhile
  // It follows along (a read per node each time) while it runs, up to 500 nodes.
  wf.refreshed = Date.now();
  wf.live = w.nodes.length <= 500 && !w.nodes.every((n) => ENDED.includes(n.state));
  const counts = {};
  for (const n of w.nodes) counts[n.state] = (counts[n.state] || 0) + 1;
  $("wf-title").textContent = `workflow ${w.id} in ${w.queue}: ${w.nodes.length} node(s)`;
  $("wf-cancel").hidden = w.nodes.every((n) => ENDED.includes(n.state));
  $("wf-legend").replaceChildren(...stateBadges(counts));
  $("wf-graph").replaceChildren(workflowGraph(w));
  $("wf-detail").hidden = false;
}

// workflowGraph lays the nodes (parents before children, each with its
// depth) out in columns by depth, in their order down each column.
function workflowGraph(w) {
  const pos = {}, rows = [];
  for (const n of w.nodes) {
    const row = rows[n.depth] || 0;
    rows[n.depth] = row + 1;
    pos[n.name] = { x: G.pad + n.depth * (G.w + G.gapX), y: G.pad + row * (G.h + G.gapY) };
  }
  const cols = rows.length, most = rows.reduce((a, b) => Math.max(a, b || 0), 1);
  const width = 2 * G.pad + cols * G.w + (cols - 1) * G.gapX, height = 2 * G.pad + most * G.h + (most - 1) * G.gapY;
  const edges = [], nodes = [];
  for (const n of w.nodes) {
    const to = pos[n.name];
    for (const p of n.parents) {
      const from = pos[p];
      if (!from) continue;
      const x1 = from.x + G.w, y1 = from.y + G.h / 2, x2 = to.x, y2 = to.y + G.h / 2, mx = (x1 + x2) / 2;
      edges.push(svg("path", { class: "wf-edge", "data-from": p, "data-to": n.name, d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
    }
    nodes.push(svg("g", { class: "wf-node st-" + n.state, "data-node": n.name, "data-state": n.state, "data-depth": n.depth,
      transform: `translate(${to.x},${to.y})`, onclick: () => showTask(w.queue, n.id, "wf-node-detail") },
    svg("title", {}, `${n.name}: ${n.state} (${n.type}, ${n.id}, started ${n.starts}×)` + (n.last_error ? "\n" + n.last_error : "")),
    svg("rect", { width: G.w, height: G.h, rx: 5 }),
    svg("text", { x: 8, y: G.h / 2 + 4, class: "name" }, clip(n.name, 15)),
    svg("text", { x: G.w - 7, y: G.h / 2 + 4, class: "st", "text-anchor": "end" }, n.state)));
  }
  return svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `workflow ${w.id}` },
    svg("g", { class: "wf-edges" }, ...edges), svg("g", { class: "wf-nodes" }, ...nodes));
}

async function cancelWorkflow() {
  const wf = state.wf;
  if (!wf) return;
  try { await api("/api/workflow/cancel", { queue: wf.queue, id: wf.id }); msg(""); } catch (e) { msg(e.message); }
  showWorkflow(wf.queue, wf.id);
  if ($("wf-queue").value === wf.queue) loadWorkflows();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (e) => { e.preventDefault(); login($("token").value); });
  $("logout").addEventListener("click", async () => { await fetch("/api/logout", { method: "POST" }); showLogin(); });
  $("filter").addEventListener("submit", (e) => { e.preventDefault(); loadTasks(false); });
  $("more").addEventListener("click", () => loadTasks(true));
  $("requeue-dead").addEventListener("click", () => act("/api/queue/requeue-dead", { queue: $("f-queue").value }));
  $("wf-filter").addEventListener("submit", (e) => { e.preventDefault(); loadWorkflows(); });
  $("wf-queue").addEventListener("change", () => loadWorkflows());
  $("wf-cancel").addEventListener("click", () => cancelWorkflow());
  // A link printed by `gantry queue ui` carries the token in the fragment
  // (never sent to a server); trade it for the cookie and drop it.
  const m = location.hash.match(/token=([^&]+)/);
  if (m) { history.replaceState(null, "", location.pathname); login(decodeURIComponent(m[1])); return; }
  fetch("/api/overview").then((r) => (r.ok ? start() : showLogin()), () => showLogin());
});
