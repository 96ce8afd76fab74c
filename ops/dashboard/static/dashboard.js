// The swarm dashboard: polls /api/state and draws `swarm plot`'s six panels (uPlot), the peers
// table and each node's config. Read-only; text from the runs is set as textContent, never as HTML.
"use strict";

const POLL_MS = 2000;
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf"];

// Each panel: per node, [column, label suffix, style] drawn from node.series (or node.held_out).
const PANELS = [
  {id: "reward", title: "mean reward, own completions (thin: per round, thick: EMA)",
   lines: [["reward", "", "thin"], ["reward_ema", " (EMA)", "thick"]]},
  {id: "accuracy", unit: true, title: "accuracy (reward ≥ 1), own completions (thin: per round, thick: EMA)",
   lines: [["accuracy", "", "thin"], ["accuracy_ema", " (EMA)", "thick"]]},
  {id: "held_out", unit: true, title: "held-out accuracy ± 1 s.e. (round −1: before training)", heldOut: true},
  {id: "loss", title: "training loss (thin: per step, thick: EMA)",
   lines: [["loss", "", "thin"], ["loss_ema", " (EMA)", "thick"]]},
  {id: "kl", title: "KL(μ ‖ π_θ) estimate: own tokens (—), peers' (- -)",
   lines: [["kl_own", " (own)", "points"], ["kl_peers", " (peers)", "dashed"]]},
  {id: "groups", title: "groups trained per round: own (—), peers' (- -)",
   lines: [["groups_own", " (own)", "points"], ["groups_peers", " (peers)", "dashed"]]},
];

const STYLES = {
  thin: c => ({stroke: c + "55", width: 1}),
  thick: c => ({stroke: c, width: 2}),
  points: c => ({stroke: c, width: 1.5, points: {show: true, size: 4}}),
  dashed: c => ({stroke: c, width: 1.5, dash: [6, 4], points: {show: true, size: 4}}),
  band: c => ({stroke: c + "88", width: 1, dash: [2, 3]}),
};

// What a test (or a curious user, in the console) can read: polls made, snapshots that changed the page.
window.dashboard = {polls: 0, changes: 0, error: null, panels: {}, lastRounds: {}, peers: 0, violations: [], errors: []};
document.addEventListener("securitypolicyviolation", e => window.dashboard.violations.push(e.violatedDirective));
window.addEventListener("error", e => window.dashboard.errors.push(String(e.message)));
const charts = {};  // panel id → {plot, key}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "color") e.style.background = v;  // through the CSSOM: the page's CSP allows no inline style attribute
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function panelData(panel, nodes) {
  // One table per node with data [x, y...], joined on x (uPlot.join), and the uPlot series config.
  const tables = [], series = [{label: "round"}], labels = [];
  nodes.forEach((node, k) => {
    const color = COLORS[k % COLORS.length];
    if (panel.heldOut) {
      const h = node.held_out;
      if (!h.round.length) return;
      const lo = h.acc.map((p, i) => p == null || h.se[i] == null ? null : p - h.se[i]);
      const hi = h.acc.map((p, i) => p == null || h.se[i] == null ? null : p + h.se[i]);
      tables.push([h.round, h.acc, lo, hi]);
      series.push({label: node.label, ...STYLES.points(color), spanGaps: true},
                  {label: node.label + " −1 s.e.", ...STYLES.band(color), spanGaps: true},
                  {label: node.label + " +1 s.e.", ...STYLES.band(color), spanGaps: true});
    } else {
      if (!node.series.round.length) return;
      tables.push([node.series.round, ...panel.lines.map(([col]) => node.series[col])]);
      for (const [, suffix, style] of panel.lines) {
        series.push({label: node.label + suffix, ...STYLES[style](color), spanGaps: true});
      }
    }
    labels.push(node.label);
  });
  return {data: tables.length ? uPlot.join(tables) : [[]], series, key: labels.join("|")};
}

function tick(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  return a < 1e-3 || a >= 1e5 ? v.toExponential(1) : String(+v.toPrecision(3));
}

function yRange(panel) {
  // accuracies on [0, 1] as in `swarm plot`; elsewhere the data's range, padded (a flat line gets ±0.5)
  if (panel.unit) return () => [-0.02, 1.02];
  return (u, lo, hi) => {
    if (lo == null || hi == null) return [0, 1];
    if (lo === hi) return [lo - 0.5, hi + 0.5];
    const pad = (hi - lo) * 0.05;
    return [panel.id === "groups" ? 0 : lo - pad, hi + pad];
  };
}

function points(data) {
  let n = 0;
  for (let s = 1; s < data.length; s++) for (const v of data[s]) if (v != null) n++;
  return n;
}

function drawPanel(panel, nodes) {
  const box = document.getElementById("chart-" + panel.id);
  const {data, series, key} = panelData(panel, nodes);
  const n = points(data);
  let c = charts[panel.id];
  if (!n) {
    if (c) { c.plot.destroy(); delete charts[panel.id]; }
    box.replaceChildren(el("div", {class: "empty"}, "no data yet"));
  } else if (c && c.key === key) {
    c.plot.setData(data);
  } else {
    if (c) c.plot.destroy();
    box.replaceChildren();
    const opts = {
      width: Math.max(300, box.clientWidth), height: 230, series,
      scales: {x: {time: false}, y: {range: yRange(panel)}},
      axes: [{label: "round", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]},
             {values: (u, splits) => splits.map(tick), size: 60}],
      legend: {show: false},  // one legend for every panel: the node swatches above them
      cursor: {drag: {x: false, y: false}},
    };
    c = charts[panel.id] = {plot: new uPlot(opts, data, box), key};
  }
  const xs = data[0];
  window.dashboard.panels[panel.id] = {points: n, maxRound: xs.length ? xs[xs.length - 1] : null,
    drawn: !!charts[panel.id] && charts[panel.id].plot.scales.x.max != null};
  box.parentElement.dataset.points = String(n);
}

function fmt(x, digits) { return x == null ? "–" : Number(x).toFixed(digits); }

function ago(t, now) {
  if (t == null) return "–";
  const s = Math.max(0, now - t);
  return s < 90 ? `${s.toFixed(0)} s ago` : s < 5400 ? `${(s / 60).toFixed(0)} min ago` : `${(s / 3600).toFixed(1)} h ago`;
}

function drawPeers(peers, now) {
  const body = document.querySelector("#peers tbody");
  const rows = peers.map(p => {
    const drops = Object.entries(p.drops).map(([r, n]) => `${r} ${n}`).join(", ") || "none";
    const who = el("td", {title: p.peer}, el("code", {}, p.peer.slice(0, 12) + "…"),
                   p.peer_name ? ` (${p.peer_name})` : "");
    return el("tr", {"data-peer": p.peer}, el("td", {}, p.node), who, el("td", {}, p.model || "–"),
              el("td", {}, ago(p.last_seen, now)),
              el("td", {class: "num"}, p.received == null ? "–" : String(p.received)),
              el("td", {class: "num"}, p.used == null ? "–" : String(p.used)),
              el("td", {class: "num"}, fmt(p.is_weight, 3)), el("td", {}, drops));
  });
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", {colspan: "8"}, "no peers heard from yet"))]));
  window.dashboard.peers = peers.length;
}

function distillText(d) {  // a student's teacher and headroom gate (ops/dashboard/state.py distill_state)
  if (!d) return "";
  const fmt = x => (x === null || x === undefined) ? "–" : Number(x).toFixed(3);
  let out = ` · teacher ${d.teacher || "none asked"} (round ${d.round}, KL ${fmt(d.kl)})`;
  if (d.gate) {
    const gates = Object.entries(d.gate.teachers || {}).map(([t, g]) =>
      `${t.slice(0, 12)} ${g.state} ${fmt(g.score)} (${g.groups} groups)`);
    out += ` · headroom gate: ours ${fmt(d.gate.student)}, margin ${fmt(d.gate.margin)}; ${gates.join("; ")}`;
  }
  return out;
}

function drawNodes(nodes) {
  const box = document.getElementById("nodes");
  const open = new Set([...box.querySelectorAll("details[open]")].map(d => d.dataset.node));
  box.replaceChildren(...nodes.map((n, k) => {
    const summary = el("summary", {}, el("span", {class: "swatch", color: COLORS[k % COLORS.length]}),
      `${n.label} · model ${n.model || "–"} · peer ${n.peer_id ? n.peer_id.slice(0, 12) + "…" : "– (no swarm)"} · ` +
      `${n.rounds} rounds · ${n.dir}` + distillText(n.distill));
    const d = el("details", {"data-node": n.label}, summary,
                 el("pre", {}, n.config ? JSON.stringify(n.config, null, 2) : "(no config.json in this run dir)"));
    if (open.has(n.label)) d.open = true;
    return d;
  }));
}

function drawLegend(nodes) {
  document.getElementById("legend").replaceChildren(...nodes.map((n, k) =>
    el("span", {class: "key"}, el("span", {class: "swatch", color: COLORS[k % COLORS.length]}), n.label)));
}

let lastSignature = "";

async function poll() {
  try {
    const r = await fetch("/api/state", {cache: "no-store"});
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const s = await r.json();
    window.dashboard.polls++;
    window.dashboard.error = null;
    const signature = s.nodes.map(n => `${n.label}:${n.last_round}:${n.rounds}`).join(",");
    if (signature !== lastSignature) window.dashboard.changes++;
    lastSignature = signature;
    document.getElementById("runs").textContent = s.dirs.join(" · ");
    const last = Math.max(-1, ...s.nodes.map(n => n.last_round ?? -1));
    const status = document.getElementById("status");
    status.textContent = `${s.nodes.length} node(s) · last round ${last < 0 ? "–" : last} · ` +
      `updated ${new Date(s.time * 1000).toLocaleTimeString()}`;
    status.classList.remove("stale");
    for (const n of s.nodes) window.dashboard.lastRounds[n.label] = n.last_round;
    for (const p of PANELS) drawPanel(p, s.nodes);
    drawLegend(s.nodes);
    drawPeers(s.peers, s.time);
    drawNodes(s.nodes);
  } catch (e) {
    window.dashboard.error = String(e);
    const status = document.getElementById("status");
    status.textContent = `not updating: ${e}`;
    status.classList.add("stale");
  }
  setTimeout(poll, POLL_MS);
}

const grid = document.getElementById("panels");
for (const p of PANELS) {
  grid.append(el("div", {class: "panel", id: "panel-" + p.id}, el("h3", {}, p.title), el("div", {id: "chart-" + p.id})));
}
window.addEventListener("resize", () => {
  for (const [id, c] of Object.entries(charts)) {
    c.plot.setSize({width: Math.max(300, document.getElementById("chart-" + id).clientWidth), height: 230});
  }
});
poll();
