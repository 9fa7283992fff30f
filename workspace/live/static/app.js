// The workspace page: the list comes from GET /v1/workspaces, then every
// change arrives over SSE (/events); buttons call the main HTTP API (the
// same /v1 endpoints, validation and hints as the CLI) and let the stream
// show the result. No framework, no build step. Without a session the page
// shows only the login form (POST /v1/session sets an HttpOnly cookie);
// the server gives this session only its owner's workspaces.
"use strict";

const rows = new Map(); // id → workspace
const tbody = document.getElementById("rows");
const msg = document.getElementById("msg");
const conn = document.getElementById("conn");

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  if (!res.ok) {
    let text = res.statusText;
    try { text = (await res.json()).error || text; } catch (e) {}
    const err = new Error(text);
    err.status = res.status;
    throw err;
  }
  return res.status === 204 ? null : res.json();
}

function act(fn) {
  return async () => {
    msg.textContent = "";
    try { await fn(); } catch (e) { msg.textContent = e.message; }
  };
}

function button(label, title, fn) {
  const b = document.createElement("button");
  b.textContent = label;
  b.title = title;
  b.dataset.action = label;
  b.addEventListener("click", act(fn));
  return b;
}

// The stream may bring thousands of events at once (its first part is the
// whole state): draw at most once a frame.
let drawQueued = false;
function scheduleRender() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => { drawQueued = false; render(); });
}

function render() {
  tbody.textContent = "";
  const list = [...rows.values()].sort((a, b) => a.name.localeCompare(b.name));
  if (list.length === 0) {
    tbody.innerHTML = '<tr class="empty"><td colspan="6">no workspaces yet</td></tr>';
    return;
  }
  for (const w of list) {
    const tr = document.createElement("tr");
    tr.dataset.id = w.id;
    tr.dataset.name = w.name;
    const name = document.createElement("td");
    name.textContent = w.name;
    const status = document.createElement("td");
    const badge = document.createElement("span");
    badge.className = "status " + w.observed_status;
    badge.textContent = w.observed_status;
    status.appendChild(badge);
    if (w.error_info) {
      const info = document.createElement("div");
      info.className = "error-info";
      const e = w.error_info;
      info.textContent = `${e.reason}${e.is_terminal ? " (terminal)" : ""} during ${e.operation}, ` +
        `${e.error_count} error(s)${e.last_error ? ": " + e.last_error : ""}`;
      status.appendChild(info);
    }
    const desired = document.createElement("td");
    desired.textContent = w.desired_state;
    const op = document.createElement("td");
    op.textContent = w.operation === "NONE" ? "" : w.operation;
    const actions = document.createElement("td");
    actions.className = "actions";
    const ws = `/v1/workspaces/${encodeURIComponent(w.id)}`;
    const set = (s) => () => api("PUT", `${ws}/desired`, { desired_state: s });
    actions.append(
      button("up", "run it (desired RUNNING)", set("RUNNING")),
      button("down", "stop it, keep the volume (desired STANDBY)", set("STANDBY")),
      button("archive", "archive it and free the volume (desired PENDING)", set("PENDING")),
      button("recover", "clear the error and retry", () => api("POST", `${ws}/recover`)),
      button("delete", "delete it with its archives", () => {
        if (confirm(`Delete ${w.name}?`)) return api("DELETE", ws);
      }),
    );
    tr.append(name, status, desired, op, appsCell(w), actions);
    tbody.appendChild(tr);
  }
}

// The apps of each running workspace, from GET /v1/workspaces/{id} (the
// stream's rows carry no URLs): fetched again when the row changes. Each
// app with a URL gets an "open" link to its own origin.
const appLinks = new Map(); // id → { at: updated_at, apps: [...] }
function appsCell(w) {
  const td = document.createElement("td");
  td.className = "apps";
  if (w.observed_status !== "RUNNING") return td;
  let known = appLinks.get(w.id);
  if (!known || known.at !== w.updated_at) {
    known = { at: w.updated_at, apps: known ? known.apps : [] };
    appLinks.set(w.id, known);
    api("GET", `/v1/workspaces/${encodeURIComponent(w.id)}`).then((full) => {
      if (appLinks.get(w.id) === known) {
        known.apps = full.apps || [];
        scheduleRender();
      }
    }).catch(() => {});
  }
  for (const a of known.apps) {
    if (!a.url) continue;
    const link = document.createElement("a");
    link.href = a.url;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    link.className = "open-app";
    link.dataset.app = a.name;
    link.textContent = a.name === "main" ? "open" : `open ${a.name}`;
    link.title = `${a.url} (share: ${a.share})`;
    td.append(link, " ");
  }
  return td;
}

document.getElementById("create").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const name = document.getElementById("name");
  const command = document.getElementById("command");
  act(async () => {
    const w = await api("POST", "/v1/workspaces", { name: name.value, command: command.value || undefined });
    // The stream may already have delivered newer states of this row
    // than the POST's answer: never let the answer overwrite them.
    const seen = rows.get(w.id);
    if (!seen || Date.parse(w.updated_at) > Date.parse(seen.updated_at)) rows.set(w.id, w);
    render();
    name.value = "";
    command.value = "";
  })();
});

// Each (re)connection first sends every workspace ("state" events), then
// "synced": a row the page had when the stream opened and that this first
// part did not name was deleted meanwhile.
function connect() {
  const es = new EventSource("/events");
  let unseen = null; // ids not yet named since the stream (re)opened
  es.onopen = () => {
    conn.textContent = "live"; conn.className = "conn on";
    unseen = new Set(rows.keys());
  };
  es.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "conn off"; };
  es.addEventListener("state", (ev) => {
    window.__events = (window.__events || 0) + 1;
    const e = JSON.parse(ev.data);
    if (unseen) unseen.delete(e.id);
    rows.set(e.id, e.workspace);
    scheduleRender();
  });
  es.addEventListener("synced", () => {
    if (unseen) for (const id of unseen) { rows.delete(id); appLinks.delete(id); }
    unseen = null;
    scheduleRender();
  });
  es.addEventListener("deleted", (ev) => {
    const id = JSON.parse(ev.data).id;
    rows.delete(id);
    appLinks.delete(id);
    scheduleRender();
  });
}

function start() {
  api("GET", "/v1/workspaces").then((list) => {
    for (const w of list) if (!rows.has(w.id)) rows.set(w.id, w);
    render();
  }).catch((e) => { msg.textContent = e.message; }).finally(connect);
}

document.getElementById("logout").addEventListener("click", async () => {
  try { await api("POST", "/v1/session/logout"); } catch (e) {}
  location.reload();
});

api("GET", "/v1/whoami").then((me) => {
  const who = document.getElementById("who");
  who.textContent = me.owner + (me.admin ? " (admin)" : "");
  who.hidden = false;
  document.getElementById("logout").hidden = false;
  document.getElementById("app").hidden = false;
  start();
}).catch((e) => {
  conn.textContent = "";
  document.getElementById("login").hidden = false;
  if (e.status !== 401) document.getElementById("login-msg").textContent = e.message;
});
