// Loom inspector: a page over the HTTP API (/loom/v1/inspect/...), hash-routed:
//   #/sessions   #/session/ID   #/session/ID/call/N
// Everything from the store is written with textContent or as SVG/canvas drawing: never parsed
// as HTML. The key (with --auth keys) stays in this tab's sessionStorage.
"use strict";

const KEY = "loom-key";
const POLL_MS = 3000;
const ROW = 25; // px per timeline row (24 + border), as app.css draws it
const FATES = ["verbatim", "stubbed", "elided", "thinned", "diffed", "grouped", "summarized", "dropped", "replaced"];
const TIERS = ["system", "tools", "pins", "summary", "dialogue", "tool_results", "injected", "overhead"];
const TIER_NAMES = {
  system: "system", tools: "tools", pins: "pins", summary: "summary and compact block",
  dialogue: "verbatim dialogue", tool_results: "tool calls and results (verbatim, stubs, diffs)",
  injected: "injections", overhead: "framing overhead",
};
// The budget bar's segments: the receipt's tiers, with `summary` and `tool_results` split by the
// receipt's `parts` (receipts written before parts existed keep the two tiers whole).
const PARTS = {
  summary: [["summary", "summary", "summary"], ["compact", "compact block", "compact"]],
  tool_results: [
    ["turns", "assistant turns and calls", "turns"], ["verbatim", "tool results, verbatim", "verbatim"],
    ["stubbed", "stubs", "stubbed"], ["elided", "elided results", "elided"], ["diffed", "diffs", "diffed"],
  ],
};
const PART_KEYS = { summary: "summary", compact: "compact_block", turns: "turns", verbatim: "results_verbatim",
  stubbed: "stubs", elided: "elided", diffed: "diffs" };

// The bar's segments for `receipt`: [key, label, tokens, colour] in the order drawn.
function budgetSegments(receipt) {
  const tiers = receipt.tiers || {};
  const parts = receipt.parts;
  const segs = [];
  for (const t of TIERS) {
    const tokens = tiers[t] || 0;
    if (parts && PARTS[t]) {
      for (const [part, label, c] of PARTS[t]) segs.push({ key: PART_KEYS[part], label, tokens: parts[part] || 0, c });
    } else {
      segs.push({ key: t, label: TIER_NAMES[t], tokens, c: t });
    }
  }
  return segs;
}

const $ = (sel, root) => (root || document).querySelector(sel);
const main = $("#main");
const css = getComputedStyle(document.documentElement);
const color = (name) => css.getPropertyValue("--" + name).trim() || "#999";
window.__loomTimings = [];

// ---------------------------------------------------------------- DOM helpers

// el("div.a.b", {title: "x", onclick: f}, child, "text", ...): text children are text nodes.
function el(spec, attrs, ...kids) {
  const [tag, ...classes] = spec.split(".");
  const e = document.createElement(tag || "div");
  if (classes.length) e.className = classes.join(" ");
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}
const SVGNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const kid of kids.flat()) if (kid) e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return e;
}
const fmt = new Intl.NumberFormat("en-US");
const n0 = (v) => (v === null || v === undefined ? "–" : fmt.format(Math.round(v)));
const pct = (v) => (v === null || v === undefined || !isFinite(v) ? "–" : (v * 100).toFixed(1) + "%");
function short(v) {
  if (v === null || v === undefined) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return String(Math.round(v));
}
function when(ms) {
  if (!ms) return "–";
  const d = new Date(ms);
  return isNaN(d) ? "–" : d.toISOString().replace("T", " ").slice(0, 19);
}
const enc = encodeURIComponent;

// ---------------------------------------------------------------- API

class Unauthorized extends Error {}

async function api(path, raw) {
  const headers = {};
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = "Bearer " + key;
  const r = await fetch(path, { headers, cache: "no-store" });
  if (r.status === 401) throw new Unauthorized("the key was refused");
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { msg = (await r.json()).error.message || msg; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return raw ? r.arrayBuffer() : r.json();
}

// ---------------------------------------------------------------- routing

let current = null; // the view on screen: {stop()}

function route() {
  if (current && current.stop) current.stop();
  current = null;
  const h = location.hash || "#/sessions";
  const m = h.match(/^#\/session\/([^/]+)(?:\/call\/(\d+))?$/);
  main.replaceChildren();
  document.body.dataset.ready = "";
  const started = performance.now();
  let view;
  if (m && m[2]) view = callView(decodeURIComponent(m[1]), Number(m[2]));
  else if (m) view = sessionView(decodeURIComponent(m[1]));
  else view = sessionsView();
  current = view;
  view.loaded.then((name) => {
    window.__loomTimings.push({ view: name, ms: performance.now() - started, since_navigation: performance.now() });
    document.body.dataset.ready = name;
  }).catch(fail);
}

function fail(e) {
  if (e instanceof Unauthorized) return login(sessionStorage.getItem(KEY) ? e.message : "");
  main.replaceChildren(el("p.error", { text: String(e && e.message ? e.message : e) }));
  document.body.dataset.ready = "error";
}

function crumbs(...parts) {
  const nav = $("#crumbs");
  nav.replaceChildren();
  parts.forEach((p, i) => {
    if (i) nav.append(el("span.sep", { text: "/" }));
    nav.append(p.href ? el("a", { href: p.href, text: p.text }) : el("span", { text: p.text }));
  });
}

function login(message) {
  if (current && current.stop) current.stop();
  current = null;
  crumbs();
  main.replaceChildren($("#login").content.cloneNode(true));
  $("#keyerror").textContent = message || "";
  $("#key").focus();
  $("#keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $("#key").value.trim());
    $("#forget").hidden = false;
    route();
  });
  document.body.dataset.ready = "login";
}

$("#forget").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  $("#forget").hidden = true;
  login("");
});
$("#forget").hidden = !sessionStorage.getItem(KEY);
window.addEventListener("hashchange", route);

// A poller that runs while its view is on screen and the tab is visible.
function poller(fn, ms) {
  let timer = null, stopped = false;
  const tick = async () => {
    if (stopped) return;
    if (!document.hidden) {
      try { await fn(); } catch (e) { if (e instanceof Unauthorized) { stopped = true; return fail(e); } }
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  timer = setTimeout(tick, ms);
  return () => { stopped = true; clearTimeout(timer); };
}

function status(text) { $("#status").textContent = text; }

// ---------------------------------------------------------------- charts (inline SVG)

// A line chart: series [{name, cls, values}], xs the x labels; onpick(i) when a point is picked.
function lineChart(title, series, xs, opts) {
  opts = opts || {};
  const W = 600, H = 150, L = 44, R = 8, T = 8, B = 18;
  const max = Math.max(1, ...series.flatMap((s) => s.values.filter((v) => v !== null && isFinite(v))));
  const top = opts.max || max;
  const n = xs.length;
  const x = (i) => L + (n <= 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (n - 1));
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": title });
  root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  const yl = opts.percent ? (v) => (v * 100).toFixed(0) + "%" : short;
  root.append(svg("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, yl(top)));
  root.append(svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, "0"));
  if (n) {
    root.append(svg("text", { x: L, y: H - 4 }, xs[0]));
    root.append(svg("text", { x: W - R, y: H - 4, "text-anchor": "end" }, xs[n - 1]));
  }
  for (const m of opts.marks || []) {
    root.append(svg("line", { class: "point", x1: x(m), y1: T, x2: x(m), y2: H - B },
      svg("title", {}, "compaction point at " + xs[m])));
  }
  for (const s of series) {
    if (s.bars) {
      // One path of every bar: a chart of hundreds of calls stays a handful of elements.
      const bw = Math.max(1, (W - L - R) / Math.max(1, n) - 1);
      const d = [];
      s.values.forEach((v, i) => {
        if (v === null || !isFinite(v)) return;
        const bx = n <= 1 ? x(i) - bw / 2 : L + (i * (W - L - R - bw)) / (n - 1);
        d.push(`M${bx.toFixed(1)} ${(H - B).toFixed(1)}V${y(v).toFixed(1)}h${bw.toFixed(1)}V${(H - B).toFixed(1)}Z`);
      });
      root.append(svg("path", { class: "bar " + (s.cls || ""), d: d.join("") }));
      continue;
    }
    const pts = s.values.map((v, i) => (v === null || !isFinite(v) ? null : `${x(i).toFixed(1)},${y(v).toFixed(1)}`)).filter(Boolean);
    if (pts.length === 1) pts.push(pts[0]);
    root.append(svg("polyline", { class: s.cls, points: pts.join(" ") }));
  }
  if (opts.onpick && n) {
    // One target over the plot: the point under the pointer is worked out from its position,
    // and the tooltip written when it moves there.
    const step = (W - L - R) / Math.max(1, n);
    const title = svg("title", {}, "");
    const hit = svg("rect", { class: "hit", x: L, y: T, width: W - L - R, height: H - T - B }, title);
    const at = (ev) => {
      const box = root.getBoundingClientRect();
      const vx = ((ev.clientX - box.left) / Math.max(1, box.width)) * W;
      return Math.max(0, Math.min(n - 1, Math.floor((vx - L) / step)));
    };
    let shown = -1;
    hit.addEventListener("mousemove", (ev) => {
      const i = at(ev);
      if (i === shown) return;
      shown = i;
      title.textContent = xs[i] + ": " + series.map((s) => s.name + " " + (opts.percent ? pct(s.values[i]) : n0(s.values[i]))).join(", ");
    });
    hit.addEventListener("click", (ev) => opts.onpick(at(ev)));
    root.append(hit);
  }
  const legend = el("div.legend", {}, series.map((s) =>
    el("span", {}, el("span.sw", { style: null, dataset: { c: s.cls } }), s.name)));
  legend.querySelectorAll(".sw").forEach((sw) => { sw.style.background = color(sw.dataset.c === "sent" ? "dialogue" : sw.dataset.c === "full" ? "dropped" : sw.dataset.c === "calls" ? "grouped" : "summarized"); });
  return el("div.chart", {}, el("h3", { text: title }), root, legend);
}

// ---------------------------------------------------------------- sessions

function sessionsView() {
  crumbs({ text: "sessions" });
  const state = { rows: [], sort: "last_ms", dir: -1, filter: "" };
  const filter = el("input", { type: "search", id: "filter", placeholder: "filter: id, agent…", "aria-label": "filter sessions" });
  const updated = el("span.muted");
  const cards = el("div.cards");
  const charts = el("div.charts");
  const cols = [
    ["id", "session"], ["agent", "agent"], ["event_count", "events", 1], ["model_calls", "model calls", 1],
    ["input_tokens", "input sent", 1], ["full_tokens", "full history", 1], ["saved", "saved", 1],
    ["cached_share", "cached", 1], ["cost", "est. cost", 1], ["last_ms", "last activity"],
  ];
  const thead = el("tr", {}, cols.map(([k, label, num]) =>
    el("th" + (num ? ".num" : ""), { dataset: { k }, text: label, onclick: () => {
      if (state.sort === k) state.dir = -state.dir; else { state.sort = k; state.dir = num || k === "last_ms" ? -1 : 1; }
      draw();
    } })));
  const tbody = el("tbody");
  const table = el("table", { id: "sessions" }, el("thead", {}, thead), tbody);
  main.append(el("h1", { text: "Sessions" }), cards, charts,
    el("div.toolbar", {}, filter, updated), table,
    el("p.muted", { text: "est. cost: input in uncached-token equivalents (cached tokens at the model's cached-read price); full history: the log sent whole on every call (estimated)." }));
  filter.addEventListener("input", () => { state.filter = filter.value.toLowerCase(); draw(); });

  function draw() {
    for (const th of thead.children) th.removeAttribute("aria-sort");
    const th = thead.querySelector(`[data-k="${state.sort}"]`);
    if (th) th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
    const f = state.filter;
    const rows = state.rows.filter((s) => !f || s.id.toLowerCase().includes(f) || s.agent.toLowerCase().includes(f));
    const k = state.sort;
    rows.sort((a, b) => {
      const x = a[k], y = b[k];
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * state.dir;
    });
    tbody.replaceChildren(...rows.map((s) => el("tr", { dataset: { id: s.id } },
      el("td.id", {}, el("a", { href: "#/session/" + enc(s.id), text: s.id, title: s.id })),
      el("td", { text: s.agent }),
      el("td.num", { text: n0(s.event_count) }),
      el("td.num", { text: n0(s.model_calls) }),
      el("td.num", { text: n0(s.input_tokens) }),
      el("td.num", { text: n0(s.full_tokens) }),
      el("td.num", { text: s.full_tokens ? pct(s.saved) : "–" }),
      el("td.num", { text: pct(s.cached_share) }),
      el("td.num", { text: n0(s.cost) }),
      el("td", { text: when(s.last_ms) }))));
    if (!rows.length) tbody.append(el("tr", {}, el("td.muted", { colspan: cols.length, text: state.rows.length ? "no session matches the filter" : "no sessions yet" })));
  }

  async function load() {
    const data = await api("/loom/v1/inspect/sessions");
    state.rows = data.sessions.map((s) => Object.assign(s, { saved: s.full_tokens ? 1 - s.input_tokens / s.full_tokens : null }));
    const sum = (k) => state.rows.reduce((a, s) => a + (s[k] || 0), 0);
    cards.replaceChildren(
      el("div.card", {}, el("b", { text: n0(state.rows.length) }), el("span", { text: "sessions" })),
      el("div.card", {}, el("b", { text: n0(sum("model_calls")) }), el("span", { text: "model calls" })),
      el("div.card", {}, el("b", { text: short(sum("input_tokens")) }), el("span", { text: "input tokens sent" })),
      el("div.card", {}, el("b", { text: short(sum("full_tokens")) }), el("span", { text: "as full histories" })),
      el("div.card", {}, el("b", { text: short(sum("cost")) }), el("span", { text: "est. cost (token equivalents)" })));
    updated.textContent = "updated " + new Date().toLocaleTimeString() + " · refreshes every " + POLL_MS / 1000 + " s";
    draw();
  }
  async function loadUsage() {
    const u = await api("/loom/v1/inspect/usage");
    const xs = u.buckets.map((b) => when(b.start_ms).slice(5, 16));
    charts.replaceChildren(
      lineChart("Input tokens over time (per " + span(u.bucket_ms) + ")", [
        { name: "sent", cls: "sent", values: u.buckets.map((b) => b.input_tokens) },
        { name: "full history", cls: "full", values: u.buckets.map((b) => b.full_tokens) }], xs),
      lineChart("Model calls and est. cost over time", [
        { name: "calls", cls: "calls", bars: true, values: u.buckets.map((b) => b.calls) },
        { name: "cost (scaled)", cls: "cost", values: scaled(u.buckets.map((b) => b.cost), u.buckets.map((b) => b.calls)) }], xs));
  }
  const loaded = Promise.all([load(), loadUsage()]).then(() => "sessions");
  const stops = [poller(load, POLL_MS), poller(loadUsage, POLL_MS * 5)];
  return { loaded, stop: () => stops.forEach((s) => s()) };
}

function span(ms) {
  if (ms % 86400000 === 0) return ms / 86400000 + " d";
  if (ms % 3600000 === 0) return ms / 3600000 + " h";
  if (ms % 60000 === 0) return ms / 60000 + " min";
  return ms / 1000 + " s";
}
// `values` rescaled to the range of `to`, so two units share one axis (the tooltip is exact).
function scaled(values, to) {
  const mv = Math.max(1e-9, ...values), mt = Math.max(1, ...to);
  return values.map((v) => (v * mt) / mv);
}

// ---------------------------------------------------------------- one session

function fateCodes(calls, from, to) {
  // codes[c][seq - from]: 0 not yet in the log, 1 + FATES index otherwise.
  const n = Math.max(0, to - from + 1);
  return calls.map((c) => {
    const a = new Uint8Array(n);
    FATES.forEach((name, fi) => {
      for (const [a0, b0] of c.fates[name] || []) {
        const lo = Math.max(a0, from), hi = Math.min(b0, to);
        for (let s = lo; s <= hi; s++) a[s - from] = fi + 1;
      }
    });
    return a;
  });
}

function sessionView(id) {
  crumbs({ text: "sessions", href: "#/sessions" }, { text: id });
  let from = 1;
  const PAGE = 1000;
  let data = null, codes = [], selected = null;
  const head = el("div");
  const charts = el("div.charts");
  const pager = el("div.pager");
  const stripHead = el("canvas.strip-head", { title: "model calls: click one to open it" });
  const tlHead = el("div.tl-head", {}, el("span", { text: "seq" }), el("span", { text: "kind" }), el("span", { text: "event" }), stripHead);
  const tl = el("div.tl", { id: "timeline", tabindex: 0 });
  const rows = el("div.tl-rows");
  const spacer = el("div");
  const canvas = el("canvas.strip");
  tl.append(spacer, rows, canvas);
  const detail = el("div.detail", { id: "event-detail", hidden: true });
  const callsTable = el("div.calls-wrap");
  const legend = el("div.fates", {}, FATES.map((f) => el("span", {}, el("span.sw", { dataset: { f } }), f)),
    el("span", {}, el("span.sw", { dataset: { f: "point" } }), "compaction point"));
  legend.querySelectorAll(".sw").forEach((sw) => { sw.style.background = color(sw.dataset.f === "point" ? "dropped" : sw.dataset.f); });
  main.append(head, charts, el("h2", { text: "Timeline: each event's fate in every model call (columns, oldest first)" }),
    legend, pager, tlHead, tl, detail, el("h2", { text: "Model calls" }), callsTable);

  // The timeline's box, measured when the layout is clean (before a load draws, on resize and
  // scroll), so drawing never forces a layout of the whole page half-way.
  let box = { width: 0, height: 0, top: 0 };
  const measure = () => { box = { width: tl.clientWidth, height: tl.clientHeight, top: tl.scrollTop }; };

  function stripWidth() {
    const avail = Math.max(200, Math.min(600, box.width * 0.45));
    const n = data ? data.calls.length : 1;
    const cw = Math.max(1, Math.min(14, Math.floor(avail / Math.max(1, n))));
    return { cw, w: Math.max(cw * n, 40) };
  }

  function drawRows() {
    if (!data) return;
    const n = data.events.length;
    const first = Math.max(0, Math.floor(box.top / ROW) - 5);
    const last = Math.min(n, first + Math.ceil(box.height / ROW) + 10);
    rows.style.top = first * ROW + "px";
    const cuts = new Set(data.calls.filter((c) => c.compaction_at).map((c) => c.compaction_at));
    const kids = [];
    for (let i = first; i < last; i++) {
      const e = data.events[i];
      const text = e.kind === "tool_result"
        ? (e.tool_name + " → " + (e.observation || e.text || "") + (e.ref ? "  [" + e.ref + "]" : ""))
        : e.kind === "assistant" && e.tool_calls.length
          ? (e.text ? e.text + "  " : "") + e.tool_calls.map((c) => c.name + "(" + c.arguments + ")").join(", ")
          : e.kind === "direct_message" ? e.source + " → " + e.target + ": " + e.text
            : e.kind === "spawn" ? "spawn " + e.target + ": " + e.text : e.text;
      const kind = el("span.kind." + e.kind + (e.is_error ? ".err" : ""), { text: e.kind.replace("_", " ") });
      kids.push(el("div.tl-row" + (cuts.has(e.seq) ? ".cut" : "") + (selected === e.seq ? ".sel" : ""),
        { dataset: { seq: e.seq, kind: e.kind }, title: cuts.has(e.seq) ? "a compaction point cut here" : null,
          onclick: () => pick(e) },
        el("span.mono", { text: e.seq }), el("span", {}, kind), el("span.text", { text: text }), el("span")));
    }
    rows.replaceChildren(...kids);
    drawStrip(first, last);
  }

  function drawStrip(first, last) {
    const { cw, w } = stripWidth();
    const h = (last - first) * ROW;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = w * dpr; canvas.height = Math.max(1, h) * dpr;
    canvas.style.width = w + "px"; canvas.style.height = h + "px"; canvas.style.top = first * ROW + "px";
    const g = canvas.getContext("2d");
    g.scale(dpr, dpr);
    const palette = [null, ...FATES.map(color)];
    for (let c = 0; c < codes.length; c++) {
      const col = codes[c];
      for (let i = first; i < last; i++) {
        const f = col[i];
        if (!f) continue;
        g.fillStyle = palette[f];
        g.fillRect(c * cw, (i - first) * ROW + 3, Math.max(1, cw - (cw > 3 ? 1 : 0)), ROW - 7);
      }
    }
    g.fillStyle = color("dropped");
    data.calls.forEach((c, ci) => { if (c.compaction) g.fillRect(ci * cw, 0, 1, h); });
  }

  function drawStripHead() {
    const { cw, w } = stripWidth();
    if (document.documentElement.style.getPropertyValue("--strip-w") !== w + "px") document.documentElement.style.setProperty("--strip-w", w + "px");
    const dpr = window.devicePixelRatio || 1;
    stripHead.width = w * dpr; stripHead.height = 18 * dpr;
    stripHead.style.width = w + "px"; stripHead.style.height = "18px";
    const g = stripHead.getContext("2d");
    g.scale(dpr, dpr);
    g.font = "10px system-ui, sans-serif";
    g.fillStyle = color("muted");
    const every = Math.max(1, Math.ceil(40 / cw));
    data.calls.forEach((c, i) => {
      if (c.compaction) { g.fillStyle = color("dropped"); g.fillRect(i * cw, 10, Math.max(2, cw), 8); g.fillStyle = color("muted"); }
      if (i % every === 0) g.fillText(String(c.id), i * cw, 9);
    });
    stripHead.onclick = (ev) => {
      const i = Math.floor(ev.offsetX / cw);
      if (data.calls[i]) location.hash = "#/session/" + enc(id) + "/call/" + data.calls[i].id;
    };
  }

  async function pick(e) {
    selected = e.seq;
    drawRows();
    detail.hidden = false;
    const runs = [];
    data.calls.forEach((c, ci) => {
      const f = codes[ci][e.seq - data.from];
      const name = f ? FATES[f - 1] : null;
      if (!name) return;
      const last = runs[runs.length - 1];
      if (last && last.name === name && last.to === ci - 1) last.to = ci; else runs.push({ name, from: ci, to: ci });
    });
    const fates = runs.map((r) => {
      const a = data.calls[r.from].id, b = data.calls[r.to].id;
      return r.name + " in call" + (a === b ? " " + a : "s " + a + "–" + b);
    }).join("; ") || "in no model call yet";
    const body = el("pre", { id: "event-json", text: "loading…" });
    const original = el("div");
    detail.replaceChildren(el("h2", { text: "Event " + e.seq + " (" + e.kind + ")" }),
      el("p", { id: "event-fates", text: fates }), original, body);
    if (e.ref) {
      const out = el("pre", { id: "original", hidden: true });
      const btn = el("button", { id: "open-original", type: "button", text: "Open original bytes (" + n0(e.bytes) + " bytes, " + e.ref + ")",
        onclick: async () => {
          btn.disabled = true;
          try {
            const bytes = await api("/loom/v1/sessions/" + enc(id) + "/recall?ref=" + enc(e.ref), true);
            out.textContent = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
            out.dataset.bytes = bytes.byteLength;
            out.hidden = false;
            document.body.dataset.original = "shown";
          } catch (err) { out.hidden = false; out.textContent = String(err.message || err); }
        } });
      original.append(el("p", {}, btn), out);
    }
    try {
      const ev = await api("/loom/v1/sessions/" + enc(id) + "/events?from=" + e.seq + "&to=" + e.seq);
      body.textContent = JSON.stringify(ev.events[0], null, 2);
    } catch (err) { body.textContent = String(err.message || err); }
  }

  function drawHead() {
    const c = data.calls;
    const sent = c.reduce((a, x) => a + x.sent, 0), full = c.reduce((a, x) => a + x.full, 0);
    const reported = c.filter((x) => x.cached !== null && x.cached !== undefined);
    const cached = reported.reduce((a, x) => a + x.cached, 0);
    const points = c.filter((x) => x.compaction).length;
    head.replaceChildren(el("h1", { text: "Session " + data.session.id }),
      el("div.cards", {},
        el("div.card", {}, el("b", { text: data.session.agent }), el("span", { text: "agent" })),
        el("div.card", {}, el("b", { text: n0(data.session.event_count) }), el("span", { text: "events" })),
        el("div.card", {}, el("b", { text: n0(c.length) }), el("span", { text: "model calls" })),
        el("div.card", {}, el("b", { text: short(sent) }), el("span", { text: "input tokens sent" })),
        el("div.card", {}, el("b", { text: short(full) }), el("span", { text: "as full history" })),
        el("div.card", {}, el("b", { text: full ? pct(1 - sent / full) : "–" }), el("span", { text: "saved" })),
        el("div.card", {}, el("b", { text: reported.length ? pct(cached / Math.max(1, reported.reduce((a, x) => a + x.sent, 0))) : "–" }), el("span", { text: "cached share" })),
        el("div.card", {}, el("b", { text: n0(points) }), el("span", { text: "compaction points" }))));
    const xs = c.map((x) => "call " + x.id);
    const marks = c.map((x, i) => (x.compaction ? i : -1)).filter((i) => i >= 0);
    const open = (i) => { location.hash = "#/session/" + enc(id) + "/call/" + c[i].id; };
    charts.replaceChildren(
      lineChart("Input tokens per call: Loom vs full history", [
        { name: "Loom sent", cls: "sent", values: c.map((x) => x.sent) },
        { name: "full history", cls: "full", values: c.map((x) => x.full) }], xs, { marks, onpick: open }),
      lineChart("Cached share per call (reported)", [
        { name: "cached", cls: "cached", bars: true, values: c.map((x) => (x.cached === null || x.cached === undefined || !x.sent ? null : x.cached / x.sent)) }],
      xs, { percent: true, max: 1, marks, onpick: open }));
    pager.replaceChildren(
      el("button", { type: "button", text: "◀ earlier", disabled: data.from <= 1, onclick: () => { from = Math.max(1, data.from - PAGE); load(); } }),
      el("span.muted", { text: "events " + data.from + "–" + data.to + " of " + data.session.event_count }),
      el("button", { type: "button", text: "later ▶", disabled: data.to >= data.session.event_count, onclick: () => { from = data.to + 1; load(); } }));
  }

  // The table of calls (hundreds of rows, below the timeline) is built when it comes near the
  // screen, as the timeline draws only the rows in view.
  let callsNear = false, callsDrawn = false;
  const nearCalls = new IntersectionObserver((entries) => {
    callsNear = entries.some((e) => e.isIntersecting);
    if (callsNear && data && !callsDrawn) drawCalls();
  }, { rootMargin: "400px" });
  nearCalls.observe(callsTable);

  function drawCalls() {
    callsDrawn = true;
    const c = data.calls;
    callsTable.replaceChildren(el("table", { id: "calls" },
      el("thead", {}, el("tr", {}, ["call", "at seq", "model", "estimate", "reported", "full history", "cached", "compaction"].map((t, i) => el("th" + (i && i !== 2 && i !== 7 ? ".num" : ""), { text: t })))),
      el("tbody", {}, c.map((x) => el("tr", {},
        el("td", {}, el("a", { href: "#/session/" + enc(id) + "/call/" + x.id, text: "call " + x.id })),
        el("td.num", { text: x.at_seq }), el("td", { text: x.model || "observe" }),
        el("td.num", { text: n0(x.estimate) }), el("td.num", { text: x.sent !== x.estimate ? n0(x.sent) : "–" }),
        el("td.num", { text: n0(x.full) }), el("td.num", { text: x.cached === null || x.cached === undefined ? "–" : n0(x.cached) }),
        el("td", { text: x.compaction ? "point " + x.points + " (cut at " + x.compaction_at + ")" : "" }))))));
  }

  async function load(quiet) {
    const d = await api("/loom/v1/inspect/sessions/" + enc(id) + "?from=" + from + "&limit=" + PAGE);
    const grew = !data || d.calls.length !== data.calls.length || d.events.length !== data.events.length || d.session.event_count !== data.session.event_count;
    if (quiet && !grew) return;
    measure();
    data = d;
    codes = fateCodes(data.calls, data.from, data.to);
    spacer.style.height = data.events.length * ROW + "px";
    drawHead();
    drawStripHead();
    drawRows();
    callsDrawn = false;
    if (callsNear) drawCalls();
    status("updated " + new Date().toLocaleTimeString());
  }
  let raf = 0;
  tl.addEventListener("scroll", () => { if (!raf) raf = requestAnimationFrame(() => { raf = 0; measure(); drawRows(); }); });
  const onResize = () => { if (data) { measure(); drawStripHead(); drawRows(); } };
  window.addEventListener("resize", onResize);
  const loaded = load().then(() => "session");
  const stop = poller(() => load(true), POLL_MS);
  return { loaded, stop: () => { stop(); nearCalls.disconnect(); window.removeEventListener("resize", onResize); } };
}

// ---------------------------------------------------------------- one model call

function budgetBar(receipt) {
  const b = receipt.budget || {};
  const window_ = b.context_window || 0;
  const segs = budgetSegments(receipt);
  const used = segs.reduce((a, s) => a + s.tokens, 0);
  segs.push({ key: "headroom", label: "headroom (hard budget − estimate)", tokens: Math.max(0, (b.hard_total || 0) - receipt.estimate), c: "headroom" });
  segs.push({ key: "reserve", label: "response reserve", tokens: b.response_reserve || 0, c: "reserve" });
  const total = Math.max(1, window_, segs.reduce((a, s) => a + s.tokens, 0));
  const bar = el("div.budget", { id: "budget", role: "img", "aria-label": "budget" });
  const legend = el("div.budget-legend", { id: "budget-legend" });
  for (const s of segs) {
    const d = el("div", { title: s.label + ": " + n0(s.tokens) + " tokens", dataset: { tier: s.key, tokens: s.tokens } });
    d.style.width = (100 * s.tokens) / total + "%";
    d.style.background = color(s.c);
    bar.append(d);
    const sw = el("span.sw");
    sw.style.background = color(s.c);
    legend.append(el("div", { dataset: { tier: s.key } }, sw, s.label, el("span.n", { text: n0(s.tokens) })));
  }
  return el("div", {}, bar, legend,
    el("p.muted", { text: "estimate " + n0(receipt.estimate) + " = sum of the tiers (" + n0(used) + "); hard budget " + n0(b.hard_total) +
      " = window " + n0(window_) + " − response reserve; compaction fires above " + n0(b.high) + " and cuts to " + n0(b.low) +
      "; injection reserve " + n0(b.injection_reserve) + "." }));
}

// Text with every match of `q` wrapped in <mark> (built as nodes, never as HTML).
function highlight(pre, text, q) {
  if (!q) { pre.textContent = text; return []; }
  const frag = document.createDocumentFragment();
  const lower = text.toLowerCase(), ql = q.toLowerCase();
  const marks = [];
  let i = 0;
  for (;;) {
    const j = lower.indexOf(ql, i);
    if (j < 0 || marks.length >= 5000) break;
    frag.append(document.createTextNode(text.slice(i, j)));
    const m = el("mark", { text: text.slice(j, j + q.length) });
    marks.push(m);
    frag.append(m);
    i = j + q.length;
  }
  frag.append(document.createTextNode(text.slice(i)));
  pre.replaceChildren(frag);
  return marks;
}

function callView(id, n) {
  crumbs({ text: "sessions", href: "#/sessions" }, { text: id, href: "#/session/" + enc(id) }, { text: "call " + n });
  const loaded = api("/loom/v1/inspect/sessions/" + enc(id) + "/calls/" + n).then((d) => {
    const call = d.call, r = call.receipt;
    const u = call.usage;
    const nav = el("div.toolbar", {},
      n > 1 ? el("a", { href: "#/session/" + enc(id) + "/call/" + (n - 1), text: "◀ call " + (n - 1) }) : null,
      el("a", { href: "#/session/" + enc(id) + "/call/" + (n + 1), text: "call " + (n + 1) + " ▶" }));
    main.append(el("h1", { text: "Model call " + n + " of session " + id }), nav);
    if (!r) {
      if (!d.request.as_sent) main.append(el("p.note.warn", { text: d.request.note }));
    } else {
      const est = r.estimate;
      const rep = u ? u.input_tokens : null;
      const cached = u && u.cached_input_tokens !== undefined && u.cached_input_tokens !== null ? u.cached_input_tokens : null;
      main.append(el("div.cards", { id: "call-cards" },
        el("div.card", {}, el("b", { text: r.model }), el("span", { text: r.format + " · " + r.tokenizer })),
        el("div.card", {}, el("b", { text: n0(r.at_seq) }), el("span", { text: "rendered at seq" })),
        el("div.card", {}, el("b", { id: "estimate", text: n0(est) }), el("span", { text: "Loom's estimate" })),
        el("div.card", {}, el("b", { id: "reported", text: n0(rep) }), el("span", { text: rep === null ? "provider's count (not reported)" : "provider's count (" + (rep >= est ? "+" : "") + pct((rep - est) / Math.max(1, est)) + ")" })),
        el("div.card", {}, el("b", { id: "cache-hit", text: cached === null ? "–" : cached > 0 ? "hit" : "miss" }), el("span", { text: cached === null ? "cache (not reported)" : n0(cached) + " cached tokens (" + pct(cached / Math.max(1, rep)) + ")" })),
        el("div.card", {}, el("b", { text: u && u.output_tokens !== undefined && u.output_tokens !== null ? n0(u.output_tokens) : "–" }), el("span", { text: "output tokens" })),
        el("div.card", {}, el("b", { text: r.compaction ? "fired" : "–" }), el("span", { text: r.compaction ? "compaction point " + r.points + ": " + (r.compaction.reason || "") + ", " + n0(r.compaction.before) + " → " + n0(r.compaction.after) : "no compaction point (" + r.points + " so far)" }))));
      main.append(el("h2", { text: "Budget" }), budgetBar(r));
      const counts = FATES.map((f) => [f, (r[f] || []).reduce((a, x) => a + x.to - x.from + 1, 0)]).filter(([, c]) => c);
      const chips = el("div.fates", { id: "call-fates" }, counts.map(([f, c]) => {
        const sw = el("span.sw"); sw.style.background = color(f);
        return el("span", {}, sw, f + " " + n0(c));
      }));
      main.append(el("h2", { text: "Events by fate (seqs of the log up to " + r.at_seq + ")" }), chips);
    }
    // The bytes sent when the server holds them (pretty-printed; as sent when not JSON), else
    // the request rebuilt from the log.
    const req = d.request;
    let parsed = req.body;
    if (req.as_sent) {
      try { parsed = JSON.parse(req.sent); } catch (_) { parsed = undefined; }
    }
    if (req.as_sent || req.body) {
      const text = parsed === undefined ? req.sent : JSON.stringify(parsed, null, 2);
      const pre = el("pre", { id: "request", text, dataset: { source: req.as_sent ? "sent" : "rebuilt" } });
      const q = el("input", { type: "search", id: "search", placeholder: "search the request…", "aria-label": "search the request" });
      const count = el("span.muted", { id: "matches" });
      let marks = [], at = -1;
      const go = (dir) => {
        if (!marks.length) return;
        if (at >= 0) marks[at].classList.remove("cur");
        at = (at + dir + marks.length) % marks.length;
        marks[at].classList.add("cur");
        marks[at].scrollIntoView({ block: "center" });
        count.textContent = (at + 1) + " of " + marks.length + (marks.length >= 5000 ? "+" : "") + " matches";
      };
      let t = 0;
      q.addEventListener("input", () => {
        clearTimeout(t);
        t = setTimeout(() => {
          marks = highlight(pre, text, q.value); at = -1;
          count.textContent = q.value ? marks.length + (marks.length >= 5000 ? "+" : "") + " matches" : "";
          if (marks.length) go(1);
        }, 120);
      });
      q.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); go(ev.shiftKey ? -1 : 1); } });
      const title = req.as_sent
        ? "The request as sent (" + n0(new TextEncoder().encode(req.sent).length) + " bytes, pretty-printed)"
        : "The request, rebuilt from the log (" + n0(text.length) + " characters)";
      main.append(el("h2", { id: "request-title", text: title }),
        el("p.note" + (req.as_sent || req.matches_receipt ? "" : ".warn"), { id: "request-note", text: req.note }),
        el("div.toolbar", {}, q, el("button", { type: "button", text: "▲", onclick: () => go(-1) }), el("button", { type: "button", text: "▼", onclick: () => go(1) }), count),
        pre);
    }
    main.append(el("h2", { text: "The receipt" }), el("pre", { id: "receipt", text: JSON.stringify(r, null, 2) }));
    return "call";
  });
  return { loaded };
}

route();
