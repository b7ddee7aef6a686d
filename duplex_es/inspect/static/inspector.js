/* duplex_es inspector: the single-page UI (docs/inspector.md). Vanilla JS, no network assets.
 *
 * Data comes from the inspector's HTTP API (duplex-es inspect, or serve under /inspect), or, in
 * an exported file, from window.INSPECTOR_EXPORT: the same answers, inlined. Only `api` and
 * `audioUrl` / `imageUrl` know the difference. */
"use strict";

const EXPORT = window.INSPECTOR_EXPORT || null;
const KEY_SLOT = "duplex_es.inspector.key";
const LANE_H = { axis: 20, user: 96, assistant: 96, ticks: 48, events: 30, errors: 28, chunks: 60 };
const USER_WINDOW_MS = 120000; // user audio loaded per request (play from any point: a window)

const $ = (id) => document.getElementById(id);
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const kid of kids) e.append(kid);
  return e;
};

class AuthNeeded extends Error {}

/* ------------------------------------------------------------------------------ data source */

function exportAnswer(path, params) {
  const m = path.match(/^sessions\/([^/]+)\/(\w+)/);
  if (path === "config") return { auth: false, export: true };
  if (path === "sessions") return { sessions: [EXPORT.row] };
  if (!m || m[1] !== EXPORT.overview.session_id) throw new Error("not in this export: " + path);
  const what = m[2];
  if (what === "overview") return EXPORT.overview;
  if (what === "audit") return EXPORT.audit;
  if (what === "peaks") {
    const p = EXPORT.peaks[params.lane];
    if (!p) throw new Error("no peaks for " + params.lane);
    return p;
  }
  if (what === "events") {
    const from = Math.max(1, +params.from_seq || 1), limit = +params.limit || 100;
    const rows = EXPORT.events.filter((r) => r.seq >= from).slice(0, limit);
    return { session_id: EXPORT.overview.session_id, head: EXPORT.overview.head, from_seq: from, rows };
  }
  if (what === "state") {
    let seq = params.seq !== undefined ? +params.seq : seqAtMs(+params.ms);
    const have = EXPORT.state_seqs.filter((s) => s <= seq);
    const at = have.length ? have[have.length - 1] : EXPORT.state_seqs[0];
    return { ...EXPORT.states[at], requested_seq: seq };
  }
  throw new Error("not in this export: " + path);
}

async function api(path, params) {
  params = params || {};
  if (EXPORT) return exportAnswer(path, params);
  const qs = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null)).toString();
  const headers = {};
  const key = sessionStorage.getItem(KEY_SLOT);
  if (key) headers.Authorization = "Bearer " + key;
  const r = await fetch("api/" + path + (qs ? "?" + qs : ""), { headers });
  if (r.status === 401) throw new AuthNeeded();
  const body = await r.json();
  if (!r.ok) throw new Error(body.error ? body.error.code + ": " + body.error.message : "HTTP " + r.status);
  return body;
}

async function blobUrl(path, params) {
  const qs = new URLSearchParams(params).toString();
  const headers = {};
  const key = sessionStorage.getItem(KEY_SLOT);
  if (key) headers.Authorization = "Bearer " + key;
  const r = await fetch("api/" + path + "?" + qs, { headers });
  if (r.status === 401) throw new AuthNeeded();
  if (!r.ok) throw new Error("HTTP " + r.status + " for " + path);
  return URL.createObjectURL(await r.blob());
}

/** A URL the <audio> element can play: lane audio from fromMs (a window for the user lane). */
async function audioUrl(sid, lane, fromMs, toMs) {
  if (EXPORT) return EXPORT.audio[lane] ? { url: EXPORT.audio[lane].url, from: EXPORT.audio[lane].from_ms } : null;
  const params = { lane };
  if (fromMs) params.from_ms = fromMs;
  if (toMs !== undefined && toMs !== null) params.to_ms = toMs;
  return { url: await blobUrl("sessions/" + encodeURIComponent(sid) + "/audio.wav", params), from: fromMs || 0 };
}

async function imageUrl(sid, seq, index) {
  if (EXPORT) return (EXPORT.frames[seq] || [])[index] || "";
  return blobUrl("sessions/" + encodeURIComponent(sid) + "/frame", { seq, index });
}

/* ---------------------------------------------------------------------------------- helpers */

const fmtMs = (ms) => {
  if (ms === null || ms === undefined) return "";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
  const m = Math.floor(s / 60);
  return m + ":" + String(Math.floor(s % 60)).padStart(2, "0");
};
const fmtTime = (us) => (us ? new Date(us / 1000).toISOString().replace("T", " ").slice(0, 19) : "");
const notice = (text) => { $("notice").textContent = text || ""; };
const show = (id) => { for (const s of ["login", "list", "session"]) $(s).hidden = s !== id; };

/* ------------------------------------------------------------------------------------ login */

function askKey(then) {
  show("login");
  $("login-form").onsubmit = (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY_SLOT, $("login-key").value.trim());
    $("login-error").textContent = "";
    then();
  };
}

async function guarded(fn) {
  try {
    await fn();
  } catch (err) {
    if (err instanceof AuthNeeded) {
      if (sessionStorage.getItem(KEY_SLOT)) $("login-error").textContent = "That key was refused.";
      sessionStorage.removeItem(KEY_SLOT);
      askKey(() => guarded(route));
    } else {
      notice(String(err.message || err));
      console.warn(err);
    }
  }
}

/* ------------------------------------------------------------------------------ session list */

let listTimer = null;
async function showList() {
  show("list");
  $("where").textContent = "sessions";
  const params = { kind: $("f-kind").value, status: $("f-status").value, q: $("f-text").value, errors: $("f-errors").checked ? "1" : "" };
  const { sessions } = await api("sessions", params);
  const body = $("sessions").tBodies[0];
  body.replaceChildren();
  for (const s of sessions) {
    const audit = el("td", { class: "audit" }, auditText(s.audit));
    const tr = el("tr", { "data-session": s.id, onclick: () => { location.hash = "#/s/" + encodeURIComponent(s.id); } },
      el("td", { class: "mono", text: s.id }), el("td", { text: s.kind ?? "" }),
      // An archived session's counts are known once its file was opened (docs/inspector.md).
      el("td", s.archived ? { text: s.status, title: "events in " + s.archived.location } : { text: s.status }),
      el("td", { text: fmtTime(s.started_at_us) }), el("td", { class: "num", text: fmtMs(s.duration_ms) }),
      el("td", { class: "num", text: s.events }), el("td", { class: "num", text: s.kind === "world" ? s.chunks + " chunks" : s.responses }),
      el("td", { class: "num" + (s.errors ? " bad" : ""), text: s.errors }), audit);
    body.append(tr);
  }
  notice(sessions.length + " session(s)");
  // Audits are costly: computed one by one for the first rows, after the list is shown.
  for (const s of sessions.slice(0, 50)) {
    if (s.audit || EXPORT) continue;
    try {
      const a = await api("sessions/" + encodeURIComponent(s.id) + "/audit");
      const cell = body.querySelector(`tr[data-session="${CSS.escape(s.id)}"] td.audit`);
      if (cell) cell.replaceChildren(auditText(a));
    } catch (err) { if (err instanceof AuthNeeded) throw err; }
  }
}

function auditText(a) {
  if (!a) return el("span", { class: "muted", text: "…" });
  return a.ok ? el("span", { class: "ok", text: "ok" }) : el("span", { class: "bad", text: "failed: " + a.failed_check });
}

for (const id of ["f-kind", "f-status", "f-errors"]) $(id).addEventListener("change", () => guarded(showList));
$("f-text").addEventListener("input", () => { clearTimeout(listTimer); listTimer = setTimeout(() => guarded(showList), 250); });

/* ------------------------------------------------------------------------------ session page */

const S = {
  sid: null, ov: null, view: { from: 0, to: 1 }, peaks: new Map(), hits: [], cursor: null, selectedSeq: null,
  userAudio: null, evFrom: 1, evRows: [], drawPending: false, gen: 0,
};

async function showSession(sid) {
  // Another session (or none, if it cannot be read) replaces everything of the last one at
  // once: nothing of it stays on screen, and answers still coming for it are dropped (gen).
  const gen = ++S.gen;
  show("session");
  $("where").textContent = sid;
  notice(EXPORT && EXPORT.note ? EXPORT.note : "");
  S.sid = sid;
  S.ov = null;
  S.peaks.clear();
  S.violations = [];
  S.cursor = null;
  S.selectedSeq = null;
  S.hits = [];
  for (const id of ["summary", "audit", "side-event", "filmstrip"]) $(id).replaceChildren();
  $("events").querySelector("tbody").replaceChildren();
  $("side-title").textContent = "Click the timeline or an event";
  $("side-json").textContent = "";
  $("response-pick").replaceChildren();
  $("audio-user").removeAttribute("src");
  $("audio-assistant").removeAttribute("src");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const ov = await api("sessions/" + encodeURIComponent(sid) + "/overview");
  if (gen !== S.gen) return;
  S.ov = ov;
  S.view = { from: 0, to: Math.max(ov.duration_ms, 1000) };
  S.cursor = null;
  renderSummary();
  resizeCanvas();
  scheduleDraw();
  $("audit").replaceChildren(el("span", { class: "muted", text: "audit…" }));
  await setupPlayers();
  if (gen !== S.gen) return;
  renderFilmstrip();
  await loadEvents(1);
  if (gen !== S.gen) return;
  await loadAudit(); // last: it reads the whole session again, and what is shown comes first
}

function renderSummary() {
  const ov = S.ov;
  const bits = [
    el("b", { text: ov.session_id }), " ", el("span", { class: "badge", text: ov.kind }), el("span", { class: "badge", text: ov.status || "" }),
    ` ${ov.head} events · clock: ${ov.clock} · ${fmtMs(ov.duration_ms)} · started ${fmtTime(ov.started_at_us)} UTC`,
  ];
  if (ov.kind === "speech") bits.push(` · user audio ${fmtMs(ov.user.audio_ms)} · ${ov.responses.length} response(s) · ${ov.errors.length} error(s)`);
  // Sealed content this server could not open (docs/privacy.md): say so, and why if erased.
  if (ov.archived) bits.push(" ", el("span", { class: "badge", title: ov.archived.location, text: `archived ${fmtTime(ov.archived.archived_at_us)} UTC, read from its file` }));
  if (ov.archived && ov.archived.mismatches.length) bits.push(" ", el("span", { class: "badge erased", text: "the file is not the one archived: " + ov.archived.mismatches.join("; ") }));
  const c = ov.content || {};
  if (c.erased) bits.push(" ", el("span", { class: "badge erased", text: `content erased ${fmtTime(c.erased.at_us)} UTC by ${c.erased.by}` }));
  else if (c.withheld_events) bits.push(" ", el("span", { class: "badge erased", text: `content of ${c.withheld_events} event(s) sealed: no master key here` }));
  $("summary").replaceChildren(...bits);
}

async function loadAudit() {
  const box = $("audit"), sid = S.sid;
  const a = await api("sessions/" + encodeURIComponent(sid) + "/audit");
  if (sid !== S.sid) return; // another session is shown now
  S.violations = a.violations;
  scheduleDraw();
  const kids = [el("span", { class: "badge " + (a.ok ? "passed" : "failed"), text: a.ok ? "audit ok" : "audit failed: " + a.failed_check })];
  for (const [name, verdict] of Object.entries(a.checks)) {
    kids.push(el("span", { class: "badge check " + (verdict === "failed" ? "failed" : ""), "data-check": name, text: name + " " + (verdict === "failed" ? "✗" : "✓") }));
  }
  for (const v of a.violations.slice(0, 20)) {
    kids.push(el("div", { class: "violation", onclick: () => showState(v.seq) }, `${v.check} @ seq ${v.seq}: ${v.message}`));
  }
  box.replaceChildren(...kids);
}

/* --------------------------------------------------------------------------------- timeline */

const canvas = $("timeline");
const ctx = canvas.getContext("2d");

function lanes() {
  const ov = S.ov;
  const out = [{ id: "axis", h: LANE_H.axis }];
  if (ov.kind === "world") out.push({ id: "chunks", h: LANE_H.chunks, label: "chunks" });
  else out.push({ id: "user", h: LANE_H.user, label: "user" }, { id: "assistant", h: LANE_H.assistant, label: "assistant" });
  out.push({ id: "ticks", h: LANE_H.ticks, label: "ticks" }, { id: "events", h: LANE_H.events, label: "events" }, { id: "errors", h: LANE_H.errors, label: "errors" });
  let y = 0;
  for (const l of out) { l.y = y; y += l.h; }
  return out;
}

function resizeCanvas() {
  const total = lanes().reduce((a, l) => a + l.h, 0);
  const w = canvas.parentElement.clientWidth || 800;
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.floor(w * dpr);
  canvas.height = Math.floor(total * dpr);
  canvas.style.height = total + "px";
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
}

const W = () => canvas.width / (window.devicePixelRatio || 1);
const xOf = (ms) => ((ms - S.view.from) / (S.view.to - S.view.from)) * W();
const msOf = (x) => S.view.from + (x / W()) * (S.view.to - S.view.from);

function scheduleDraw() {
  if (S.drawPending) return;
  S.drawPending = true;
  requestAnimationFrame(() => { S.drawPending = false; draw(); });
}

/** Peaks of a lane for [a, b) ms of its own clock, fetched once per (lane, range, width). */
function peaksFor(lane, a, b, px) {
  const buckets = Math.max(1, Math.min(4000, Math.ceil(px)));
  const key = EXPORT ? lane : `${lane}|${Math.floor(a)}|${Math.ceil(b)}|${buckets}`;
  const have = S.peaks.get(key);
  if (have) return have === "loading" ? null : have;
  S.peaks.set(key, "loading");
  api("sessions/" + encodeURIComponent(S.sid) + "/peaks", { lane, from_ms: Math.floor(a), to_ms: Math.ceil(b), buckets })
    .then((p) => { S.peaks.set(key, p); scheduleDraw(); })
    .catch((err) => { S.peaks.delete(key); notice(String(err.message || err)); });
  return null;
}

function drawWave(p, offsetMs, y, h, color) {
  if (!p || !p.buckets) return;
  const mid = y + h / 2, span = (p.to_ms - p.from_ms) / p.buckets;
  ctx.strokeStyle = color;
  ctx.beginPath();
  for (let j = 0; j < p.buckets; j++) {
    const x = xOf(offsetMs + p.from_ms + (j + 0.5) * span);
    if (x < -1 || x > W() + 1) continue;
    const lo = (p.min[j] / 32768) * (h / 2 - 4), hi = (p.max[j] / 32768) * (h / 2 - 4);
    ctx.moveTo(x, mid - hi);
    ctx.lineTo(x, mid - lo + 0.5);
  }
  ctx.stroke();
}

function marker(x, y0, y1, color, width) {
  ctx.strokeStyle = color;
  ctx.lineWidth = width || 1;
  ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y1); ctx.stroke();
  ctx.lineWidth = 1;
}

function label(text, x, y, color) {
  ctx.fillStyle = color || "#1d1d1f";
  ctx.fillText(text, x, y);
}

function draw() {
  const ov = S.ov;
  if (!ov) return;
  const w = W();
  S.hits = [];
  ctx.clearRect(0, 0, w, canvas.height);
  ctx.font = "11px system-ui, sans-serif";
  const L = lanes();
  for (const l of L) {
    ctx.fillStyle = l.id === "axis" ? "#f6f6f4" : "#ffffff";
    ctx.fillRect(0, l.y, w, l.h);
    marker(0, l.y + l.h - 0.5, l.y + l.h - 0.5, "#ddd");
    ctx.strokeStyle = "#e4e4e8"; ctx.beginPath(); ctx.moveTo(0, l.y + l.h - 0.5); ctx.lineTo(w, l.y + l.h - 0.5); ctx.stroke();
    const fn = DRAW[l.id];
    if (fn) fn(l);
    if (l.label) label(l.label, 4, l.y + 12, "#6b6b70");
  }
  if (S.cursor !== null) marker(xOf(S.cursor), 0, canvas.height, "#111", 1.5);
  const playing = playbackMs();
  if (playing !== null) marker(xOf(playing), 0, canvas.height, "#0a7", 2);
  $("view-range").textContent = `${fmtMs(S.view.from)} – ${fmtMs(S.view.to)}`;
  const span = S.view.to - S.view.from, total = Math.max(ov.duration_ms, span);
  $("scroll").value = total > span ? Math.round((S.view.from / (total - span)) * 1000) : 0;
}

const DRAW = {
  axis(l) {
    const span = S.view.to - S.view.from;
    const steps = [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 120000, 300000, 600000, 1800000];
    const step = steps.find((s) => (s / span) * W() >= 70) || 3600000;
    for (let t = Math.ceil(S.view.from / step) * step; t <= S.view.to; t += step) {
      const x = xOf(t);
      marker(x, l.y + l.h - 6, l.y + l.h, "#999");
      label(fmtMs(t), x + 2, l.y + 12, "#6b6b70");
    }
  },
  user(l) {
    const u = S.ov.user;
    for (const v of u.vad) { // server VAD speech: start..stop (open-ended while speaking)
      const x0 = xOf(v.start_ms), x1 = xOf(v.end_ms === null ? u.audio_ms : v.end_ms);
      ctx.fillStyle = "rgba(52, 168, 83, 0.16)";
      ctx.fillRect(x0, l.y + 14, Math.max(1, x1 - x0), l.h - 16);
      marker(x0, l.y + 14, l.y + l.h, "#34a853");
      S.hits.push({ x0: x0 - 3, x1: x0 + 3, y0: l.y, y1: l.y + l.h, seq: v.seq, what: `speech_started ${v.item_id} at ${v.start_ms} ms` });
      if (v.end_ms !== null) {
        marker(x1, l.y + 14, l.y + l.h, "#34a853");
        S.hits.push({ x0: x1 - 3, x1: x1 + 3, y0: l.y, y1: l.y + l.h, seq: v.stop_seq, what: `speech_stopped ${v.item_id} at ${v.end_ms} ms` });
      }
    }
    const a = Math.max(0, S.view.from), b = Math.min(u.audio_ms, S.view.to);
    if (b > a) drawWave(peaksFor("user", a, b, xOf(b) - xOf(a)), 0, l.y + 12, l.h - 12, "#2f6fce");
    for (const c of u.commits) {
      if (c.end_ms === null) continue;
      const x = xOf(c.end_ms);
      marker(x, l.y, l.y + l.h, "#1a3f7a", 2);
      label("commit", x + 3, l.y + l.h - 4, "#1a3f7a");
      S.hits.push({ x0: x - 4, x1: x + 4, y0: l.y, y1: l.y + l.h, seq: c.seq, what: `commit ${c.item_id}: ${c.audio_ms} ms of audio` });
    }
  },
  assistant(l) {
    for (const r of S.ov.responses) {
      const start = r.start_ms, end = r.start_ms + r.audio_ms;
      if (end < S.view.from || start > S.view.to) continue;
      const x0 = xOf(start), x1 = xOf(end);
      ctx.fillStyle = r.status === "completed" ? "rgba(200, 85, 61, 0.07)" : "rgba(120, 120, 120, 0.08)";
      ctx.fillRect(x0, l.y + 14, Math.max(1, x1 - x0), l.h - 16);
      S.hits.push({ x0, x1: Math.max(x0 + 4, x1), y0: l.y + 14, y1: l.y + l.h, seq: r.seq, response: r.id,
        what: `${r.id} ${r.status}${r.reason ? " (" + r.reason + ")" : ""}: ${r.audio_ms} ms generated, played ${r.played_ms} ms` });
      const a = Math.max(0, S.view.from - start), b = Math.min(r.audio_ms, S.view.to - start);
      if (b > a) drawWave(peaksFor("response:" + r.id, a, b, xOf(start + b) - xOf(start + a)), start, l.y + 12, l.h - 12, "#c8553d");
      label(`${r.status}${r.reason ? " · " + r.reason : ""}`, x0 + 3, l.y + 24, "#8a3a28");
      for (const it of r.items) { // word marks: where each piece of the transcript is spoken
        const base = start + it.offset_ms;
        let prev = 0;
        for (const [chars, ms] of it.marks) {
          const x = xOf(base + ms);
          marker(x, l.y + l.h - 10, l.y + l.h, "#c8553d");
          const word = it.text.slice(prev, chars).trim();
          prev = chars;
          if (word) S.hits.push({ x0: x - 3, x1: x + 3, y0: l.y + l.h - 12, y1: l.y + l.h, seq: r.seq, what: `mark at ${ms} ms: …${word}` });
        }
      }
      if (r.played_ms) { // the client's played cursor
        const x = xOf(start + r.played_ms);
        marker(x, l.y + 12, l.y + l.h, "#0a7", 2);
        label("played " + r.played_ms + " ms", x + 3, l.y + 52, "#0a7");
      }
      for (const it of r.items) { // the truncation cut, over the played cursor
        const base = start + it.offset_ms;
        if (it.truncated_ms !== null && it.truncated_ms !== undefined) {
          const x = xOf(base + it.truncated_ms);
          ctx.setLineDash([4, 3]);
          marker(x, l.y + 10, l.y + l.h, "#c62828", 2);
          ctx.setLineDash([]);
          label("cut " + it.truncated_ms + " ms", x + 3, l.y + 38, "#c62828");
          S.hits.push({ x0: x - 4, x1: x + 4, y0: l.y, y1: l.y + l.h, seq: r.seq, cut: true, what: `truncated ${it.id} at ${it.truncated_ms} ms: heard "${it.transcript}"` });
        }
      }
    }
  },
  ticks(l) {
    for (const t of S.ov.ticks) {
      const ans = t.answers.length ? t.answers[t.answers.length - 1] : null;
      const x0 = xOf(t.at_ms), x1 = ans ? xOf(ans.at_ms) : x0;
      if (x1 < -5 || x0 > W() + 5) continue;
      const ok = !ans || ans.verdict === "accepted";
      const y = l.y + 18 + (t.kind === "transcription" ? 14 : 0);
      ctx.fillStyle = ok ? "#7b4ab8" : "#c62828";
      ctx.fillRect(x0 - 2, y - 4, 4, 8);
      if (ans) { marker(x1, y - 6, y + 6, ok ? "#7b4ab8" : "#c62828"); ctx.strokeStyle = "#b9a3d9"; ctx.beginPath(); ctx.moveTo(x0, y); ctx.lineTo(x1, y); ctx.stroke(); }
      S.hits.push({ x0: x0 - 4, x1: Math.max(x1, x0) + 4, y0: l.y, y1: l.y + l.h, seq: t.seq, tick: t,
        what: `${t.kind} ${t.request_id} chunk ${t.chunk}: applied ${t.applied.length} event(s), ${t.answers.length} answer(s)` });
    }
  },
  events(l) {
    let last = -10;
    for (const [seq, ms, type, verdict] of S.ov.markers) {
      const x = xOf(ms);
      if (x < -2 || x > W() + 2) continue;
      const bad = verdict.startsWith("rejected") || verdict.startsWith("discarded");
      if (Math.abs(x - last) >= 2 || bad) marker(x, l.y + 14, l.y + l.h - 2, bad ? "#c62828" : "#888");
      last = x;
      S.hits.push({ x0: x - 2, x1: x + 2, y0: l.y, y1: l.y + l.h, seq, what: `#${seq} ${type} (${verdict})` });
    }
    for (const e of S.ov.lifecycle) {
      if (/detached|resumed|expired|closed|overlap/.test(e.type)) label(e.type.split(".").pop(), xOf(e.at_ms) + 2, l.y + 12, "#555");
    }
  },
  errors(l) {
    for (const v of S.violations || []) { // the audit's findings, where they are on the clock
      const m = S.ov.markers.find((mk) => mk[0] >= v.seq);
      const x = xOf(m ? m[1] : S.ov.duration_ms);
      label("✗ " + v.check, x - 4, l.y + l.h - 4, "#c62828");
      S.hits.push({ x0: x - 6, x1: x + 40, y0: l.y, y1: l.y + l.h, seq: v.seq, what: `audit ${v.check} @ seq ${v.seq}: ${v.message}` });
    }
    for (const e of S.ov.errors) {
      const x = xOf(e.at_ms);
      ctx.fillStyle = "#c62828";
      ctx.beginPath(); ctx.arc(x, l.y + l.h / 2 + 4, 4, 0, 7); ctx.fill();
      S.hits.push({ x0: x - 5, x1: x + 5, y0: l.y, y1: l.y + l.h, seq: e.seq, what: `${e.type} ${e.code || ""} ${e.verdict}: ${e.summary}` });
    }
  },
  chunks(l) {
    for (const c of S.ov.world.chunks) {
      const x = xOf(c.at_ms);
      ctx.fillStyle = c.verdict === "accepted" ? "#2f6fce" : "#aaa";
      ctx.fillRect(x - 3, l.y + 16, 6, 20);
      if (c.applied.length) { ctx.fillStyle = "#c8553d"; ctx.fillRect(x - 3, l.y + 40, 6, 6); }
      S.hits.push({ x0: x - 4, x1: x + 4, y0: l.y, y1: l.y + l.h, seq: c.seq,
        what: `chunk ${c.chunk} epoch ${c.epoch} (${c.verdict}): ${c.frames} frames, ${c.applied.length} interaction(s)` });
    }
  },
};

function hitAt(x, y) {
  let best = null;
  for (const h of S.hits) if (x >= h.x0 && x <= h.x1 && y >= h.y0 && y <= h.y1) best = h;
  return best;
}

canvas.addEventListener("mousemove", (e) => {
  const r = canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
  const h = hitAt(x, y), tip = $("hover");
  tip.style.display = "block";
  tip.style.left = Math.min(x + 12, W() - 200) + "px";
  tip.style.top = y + 14 + "px";
  tip.textContent = (h ? h.what + "\n" : "") + fmtMs(msOf(x));
});
canvas.addEventListener("mouseleave", () => { $("hover").style.display = "none"; });

let drag = null;
canvas.addEventListener("mousedown", (e) => { drag = { x: e.clientX, from: S.view.from, to: S.view.to, moved: false }; });
window.addEventListener("mousemove", (e) => {
  if (!drag) return;
  const dx = e.clientX - drag.x;
  if (Math.abs(dx) > 3) drag.moved = true;
  if (!drag.moved) return;
  const dms = (dx / W()) * (drag.to - drag.from);
  setView(drag.from - dms, drag.to - dms);
});
window.addEventListener("mouseup", (e) => {
  const d = drag;
  drag = null;
  if (!d || d.moved || e.target !== canvas) return;
  const r = canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
  const h = hitAt(x, y);
  S.cursor = msOf(x);
  $("cursor-at").textContent = "cursor " + fmtMs(S.cursor);
  if (h && h.tick) guarded(() => showTick(h.tick));
  else if (h) guarded(() => showState(h.seq));
  else guarded(() => showStateAtMs(S.cursor));
  scheduleDraw();
});
canvas.addEventListener("wheel", (e) => {
  if (!e.ctrlKey && !e.metaKey && Math.abs(e.deltaX) <= Math.abs(e.deltaY)) return; // let the page scroll
  e.preventDefault();
  const r = canvas.getBoundingClientRect();
  if (e.ctrlKey || e.metaKey) zoom(e.deltaY > 0 ? 1.25 : 0.8, msOf(e.clientX - r.left));
  else { const d = (e.deltaX / W()) * (S.view.to - S.view.from); setView(S.view.from + d, S.view.to + d); }
}, { passive: false });

function setView(from, to) {
  const total = Math.max(S.ov.duration_ms, 1000), span = Math.min(Math.max(to - from, 20), total * 1.05);
  from = Math.max(0, Math.min(from, total - span + total * 0.025));
  S.view = { from, to: from + span };
  scheduleDraw();
}
function zoom(factor, at) {
  at = at === undefined ? (S.view.from + S.view.to) / 2 : at;
  setView(at - (at - S.view.from) * factor, at + (S.view.to - at) * factor);
}
$("zoom-in").onclick = () => zoom(0.5, S.cursor === null ? undefined : S.cursor);
$("zoom-out").onclick = () => zoom(2, S.cursor === null ? undefined : S.cursor);
$("zoom-fit").onclick = () => setView(0, Math.max(S.ov.duration_ms, 1000));
$("scroll").oninput = () => {
  const span = S.view.to - S.view.from, total = Math.max(S.ov.duration_ms, span);
  const from = (($("scroll").value / 1000) * (total - span));
  setView(from, from + span);
};
window.addEventListener("resize", () => { if (S.ov) { resizeCanvas(); scheduleDraw(); } });

/* ----------------------------------------------------------------------------- side panel */

function eventLine(row) {
  return `#${row.seq}  ${row.type}  [${row.verdict}]  at ${fmtMs(row.at_ms)}\n${row.summary}`;
}

async function showState(seq) {
  const sid = S.sid;
  const st = await api("sessions/" + encodeURIComponent(sid) + "/state", { seq });
  if (sid === S.sid) renderState(st);
}

async function showStateAtMs(ms) {
  const sid = S.sid;
  const st = await api("sessions/" + encodeURIComponent(sid) + "/state", { ms: Math.max(0, Math.round(ms)) });
  if (sid === S.sid) renderState(st);
}

function renderState(st) {
  S.selectedSeq = st.seq;
  const note = st.requested_seq !== undefined && st.requested_seq !== st.seq ? ` (nearest exported state to #${st.requested_seq})` : "";
  $("side-title").textContent = `State after event #${st.seq}${note}`;
  $("side-event").textContent = eventLine(st.event);
  $("side-json").textContent = JSON.stringify(st.state, null, 1);
  markSelectedRow();
}

async function showTick(t) {
  $("side-title").textContent = `${t.kind} tick ${t.request_id}`;
  const lines = [`issued #${t.seq} at ${fmtMs(t.at_ms)}: ${t.summary}`, "", `applied events (${t.applied.length}):`];
  $("side-event").replaceChildren(
    ...lines.map((s) => el("div", { text: s })),
    ...t.applied.slice(0, 200).map((seq) => el("div", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); guarded(() => showState(seq)); } }, "#" + seq))),
    el("div", { text: `answers (${t.answers.length}):` }),
    ...t.answers.map((a) => el("div", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); guarded(() => showState(a.seq)); } }, `#${a.seq}`), ` ${a.type} [${a.verdict}] ${a.summary}`)),
  );
  const st = await api("sessions/" + encodeURIComponent(S.sid) + "/state", { seq: t.seq });
  S.selectedSeq = st.seq;
  $("side-json").textContent = JSON.stringify(st.state, null, 1);
  markSelectedRow();
}

/* ---------------------------------------------------------------------------------- players */

function playbackMs() {
  const u = $("audio-user");
  if (S.userAudio && !u.paused) return S.userAudio.from + u.currentTime * 1000;
  const a = $("audio-assistant"), r = S.ov && S.ov.responses.find((x) => x.id === $("response-pick").value);
  if (r && !a.paused) return r.start_ms + a.currentTime * 1000;
  return null;
}

async function loadUser(fromMs) {
  const u = S.ov.user;
  if (!u.audio_ms) return;
  fromMs = Math.max(0, Math.min(fromMs, u.audio_ms - 1));
  const to = u.audio_ms - fromMs <= USER_WINDOW_MS ? null : fromMs + USER_WINDOW_MS;
  const got = await audioUrl(S.sid, "user", fromMs, to);
  if (!got) return;
  S.userAudio = { from: got.from, to: to === null ? u.audio_ms : to };
  $("audio-user").src = got.url;
}

async function loadResponse(id) {
  const got = await audioUrl(S.sid, "response:" + id);
  $("audio-assistant").src = got ? got.url : "";
}

async function setupPlayers() {
  const speech = S.ov.kind === "speech";
  $("players").hidden = !speech;
  const pick = $("response-pick");
  pick.replaceChildren(...S.ov.responses.filter((r) => r.audio_ms > 0).map((r) => el("option", { value: r.id, text: `${r.id} (${fmtMs(r.audio_ms)}, ${r.status})` })));
  S.userAudio = null;
  $("audio-user").removeAttribute("src");
  $("audio-assistant").removeAttribute("src");
  if (!speech) return;
  await loadUser(0);
  if (pick.value) await loadResponse(pick.value);
}
$("response-pick").onchange = () => guarded(() => loadResponse($("response-pick").value));

$("play").onclick = () => guarded(async () => {
  const at = S.cursor === null ? 0 : S.cursor;
  const u = $("audio-user");
  if (S.userAudio && (at < S.userAudio.from || at >= S.userAudio.to) && !EXPORT) await loadUser(at);
  if (S.userAudio) { u.currentTime = Math.max(0, (at - S.userAudio.from) / 1000); u.play().catch(() => {}); }
  const r = S.ov.responses.find((x) => at >= x.start_ms && at < x.start_ms + x.audio_ms);
  if (r) {
    if ($("response-pick").value !== r.id) { $("response-pick").value = r.id; await loadResponse(r.id); }
    const a = $("audio-assistant");
    a.currentTime = (at - r.start_ms) / 1000;
    a.play().catch(() => {});
  }
  tickPlayback();
});

function tickPlayback() {
  scheduleDraw();
  if (playbackMs() !== null) requestAnimationFrame(tickPlayback);
}
for (const id of ["audio-user", "audio-assistant"]) $(id).addEventListener("play", tickPlayback);

/* -------------------------------------------------------------------------------- filmstrip */

async function renderFilmstrip() {
  const strip = $("filmstrip");
  strip.hidden = S.ov.kind !== "world";
  strip.replaceChildren();
  if (S.ov.kind !== "world") return;
  const chunks = S.ov.world.chunks.slice(0, 300);
  for (const c of chunks) {
    const img = el("img", { alt: `chunk ${c.chunk}` });
    const inter = c.applied.map((i) => `#${i.event_id}${i.prompt ? " “" + i.prompt + "”" : ""}${(i.controls || []).map((k) => " " + k.track + "=" + JSON.stringify(k.data)).join("")}`);
    const card = el("div", { class: "chunk " + c.verdict, onclick: () => guarded(() => showState(c.seq)) }, img,
      el("div", { text: `chunk ${c.chunk} · epoch ${c.epoch} · ${c.frames} frames` }),
      el("div", { class: c.verdict === "accepted" ? "" : "bad", text: c.verdict }),
      ...inter.map((t) => el("div", { class: "mono", text: t })));
    strip.append(card);
  }
  if (S.ov.world.chunks.length > chunks.length) strip.append(el("div", { class: "muted", text: `${S.ov.world.chunks.length - chunks.length} more chunks: see the events` }));
  for (const [i, c] of chunks.entries()) { // thumbnails after the cards, one by one
    if (!c.frames) continue;
    const url = await imageUrl(S.sid, c.seq, 0);
    if (url) strip.children[i].querySelector("img").src = url;
  }
}

/* ----------------------------------------------------------------------------------- events */

const PAGE = 100;
async function loadEvents(from) {
  from = Math.max(1, Math.min(from, S.ov.head));
  const sid = S.sid;
  const page = await api("sessions/" + encodeURIComponent(sid) + "/events", { from_seq: from, limit: PAGE });
  if (sid !== S.sid) return; // another session is shown now
  S.evFrom = from;
  S.evRows = page.rows;
  $("ev-from").value = from;
  const last = page.rows.length ? page.rows[page.rows.length - 1].seq : from;
  $("ev-range").textContent = `#${from}–#${last} of ${page.head}`;
  $("events").tBodies[0].replaceChildren(...page.rows.map((r) => el("tr", { "data-seq": r.seq, onclick: () => guarded(() => showState(r.seq)) },
    el("td", { class: "num", text: r.seq }), el("td", { class: "num", text: fmtMs(r.at_ms) }), el("td", { text: r.type }),
    el("td", { class: /^(rejected|discarded)/.test(r.verdict) ? "verdict-bad" : "", text: r.verdict }), el("td", { text: r.summary }))));
  markSelectedRow();
}
function markSelectedRow() {
  for (const tr of $("events").tBodies[0].rows) tr.classList.toggle("selected", +tr.dataset.seq === S.selectedSeq);
}
$("ev-prev").onclick = () => guarded(() => loadEvents(S.evFrom - PAGE));
$("ev-next").onclick = () => guarded(() => loadEvents(S.evFrom + PAGE));
$("ev-from").onchange = () => guarded(() => loadEvents(+$("ev-from").value));

function seqAtMs(ms) { // export: the last marker (non-append event) at or before ms
  let best = 1;
  for (const [seq, at] of S.ov.markers) if (at <= ms) best = seq;
  return best;
}

/* ------------------------------------------------------------------------------------ route */

async function route() {
  const m = location.hash.match(/^#\/s\/(.+)$/);
  if (EXPORT && !m) { location.hash = "#/s/" + encodeURIComponent(EXPORT.overview.session_id); return; }
  const cfg = await api("config");
  if (cfg.auth && !sessionStorage.getItem(KEY_SLOT)) { askKey(() => guarded(route)); return; }
  if (m) await showSession(decodeURIComponent(m[1]));
  else await showList();
}
window.addEventListener("hashchange", () => guarded(route));
if (EXPORT && EXPORT.note) notice(EXPORT.note);
guarded(route);
