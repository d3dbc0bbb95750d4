/* The plan's DAG and timeline: layout by dagre (vendored), drawn as SVG.
 *
 * A node is a subtask (status colour AND icon AND word, agent, duration, tokens, cost,
 * its sub-agents listed inside it); an edge is a dependency. Big plans stay usable:
 * a wide layer is drawn as one "layer" node until expanded (a click, a search match or
 * "expand layers"), and the view zooms and pans. Live changes repaint nodes in place;
 * the layout is only recomputed when what is drawn changes (a layer opens or closes).
 */
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const ICONS = {
    pending: "○", running: "▶", completed: "✓", failed: "✗", skipped: "↷",
    cancelled: "⊘", paused: "‖", terminated: "✗", timed_out: "⌛", unknown: "?",
  };
  const NODE_W = 220;
  const NODE_H = 70;
  const SUB_ROW = 15;
  const MAX_SUB_ROWS = 3;
  // A plan bigger than this starts with its wide layers collapsed.
  const COLLAPSE_TOTAL = 150;
  const COLLAPSE_LAYER = 12;

  function icon(status) { return ICONS[status] || "?"; }

  function fmtDuration(s) {
    if (s === null || s === undefined || isNaN(s)) return "–";
    if (s < 60) return s.toFixed(1) + "s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
  }
  /* Whether the plan's workflow still runs: a status of running or paused, or a failed
   * plan whose other subtasks still run (it fails once they end; until then it can be
   * cancelled, its budget raised, its calls decided, and its clock runs). */
  function planOpen(report) {
    if (!report) return false;
    const c = report.counts || {};
    return report.status === "running" || report.status === "paused" ||
      Boolean(c.pending || c.running || c.paused);
  }
  function fmtTokens(n) { return n ? n.toLocaleString("en-US") + " tok" : "0 tok"; }
  function fmtCost(c) { return "$" + (c || 0).toFixed(4); }

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }

  // A node's text starts this far in from its box's left edge (and keeps as much room on
  // the right); a line this short fits any box, so only longer ones are measured.
  const TEXT_X = 8;
  const FITS_CHARS = 24;
  // A line as it fits its box (font|room|text → what is shown).
  const FITTED = new Map();
  const FONTS = new Map(); // a text class → the CSS font it is drawn in
  let ruler = null; // a canvas context: measures text without laying the page out

  /* ``line.text`` as it fits ``room`` pixels in ``t``'s font: whole, or cut with "…".
   * Measured on a canvas in the font the page's style gives the line's class, so painting
   * a thousand nodes never lays the page out once per line; the node's tooltip has it
   * whole. */
  function fitted(t, line, room) {
    const cls = line.cls || "";
    if (!FONTS.has(cls)) {
      const cs = getComputedStyle(t);
      FONTS.set(cls, `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`);
    }
    const font = FONTS.get(cls);
    const key = `${font}|${room}|${line.text}`;
    let shown = FITTED.get(key);
    if (shown === undefined) {
      ruler = ruler || document.createElement("canvas").getContext("2d");
      ruler.font = font;
      const full = line.text;
      shown = full;
      if (room > 0 && ruler.measureText(full).width > room) {
        let lo = 0;
        let hi = full.length;
        while (lo < hi) { // the longest cut that fits
          const mid = Math.ceil((lo + hi) / 2);
          if (ruler.measureText(full.slice(0, mid) + "…").width <= room) lo = mid; else hi = mid - 1;
        }
        shown = full.slice(0, lo) + "…";
      }
      FITTED.set(key, shown);
    }
    return shown;
  }

  /* Layers: the longest chain of dependencies before each subtask. */
  function layersOf(subtasks) {
    const byId = new Map(subtasks.map((s) => [s.id, s]));
    const depth = new Map();
    const visit = (id, seen) => {
      if (depth.has(id)) return depth.get(id);
      if (seen.has(id)) return 0; // a cycle cannot run; never loop on one
      seen.add(id);
      const s = byId.get(id);
      let d = 0;
      for (const dep of (s ? s.depends_on : [])) if (byId.has(dep)) d = Math.max(d, visit(dep, seen) + 1);
      depth.set(id, d);
      return d;
    };
    subtasks.forEach((s) => visit(s.id, new Set()));
    return depth;
  }

  /* The critical path: the chain of dependencies that decided when the plan ended, read
   * from the runs' real times. It ends at the subtask that ended last (still running: now)
   * and goes back, each time through the dependency that ended last (the one it waited
   * for, queueing included), to a subtask that waited for none; its length is the time
   * from that first start to that last end. An ended plan's times do not change, so
   * neither does its path. Before anything ran: the chain with the most subtasks. */
  function criticalPath(subtasks, spanOf, ran = () => false) {
    const spans = new Map();
    const went = new Set(); // subtasks that ran, timed or not (visibility lags a little)
    for (const s of subtasks) {
      const span = spanOf(s.id);
      if (span) spans.set(s.id, span);
      if (span || ran(s.id)) went.add(s.id);
    }
    if (!went.size) return longestChain(subtasks);
    // One that ran but is not timed yet ended after every timed one.
    const endOf = (id) => (spans.has(id) ? spans.get(id).end : Infinity);
    const byId = new Map(subtasks.map((s) => [s.id, s]));
    const followed = new Set();
    for (const s of subtasks) {
      if (went.has(s.id)) for (const dep of s.depends_on) followed.add(dep);
    }
    let last = null;
    for (const s of subtasks) { // a last one: nothing that ran after it depends on it
      if (!went.has(s.id) || followed.has(s.id)) continue;
      if (last === null || endOf(s.id) > endOf(last)) last = s.id; // ties: plan order
    }
    const nodes = new Set();
    const edges = new Set();
    let id = last;
    let first = last;
    while (id !== null) {
      nodes.add(id);
      first = id;
      let from = null;
      for (const dep of byId.get(id).depends_on) {
        if (went.has(dep) && (from === null || endOf(dep) > endOf(from))) from = dep;
      }
      if (from !== null) edges.add(from + ">" + id);
      id = from;
    }
    const timed = spans.has(last) && spans.has(first);
    return { nodes, edges, length: timed ? (spans.get(last).end - spans.get(first).start) / 1000 : 0 };
  }

  /* The chain of dependencies with the most subtasks (ties: the deeper end). */
  function longestChain(subtasks) {
    const depth = layersOf(subtasks);
    const order = subtasks.slice().sort((a, b) => depth.get(a.id) - depth.get(b.id));
    const dist = new Map();
    const prev = new Map();
    let end = null;
    for (const s of order) {
      let best = 0;
      let from = null;
      for (const dep of s.depends_on) {
        if (dist.has(dep) && dist.get(dep) > best) { best = dist.get(dep); from = dep; }
      }
      dist.set(s.id, best + 1);
      prev.set(s.id, from);
      if (end === null || dist.get(s.id) >= dist.get(end)) end = s.id;
    }
    const nodes = new Set();
    const edges = new Set();
    for (let id = end; id !== null && id !== undefined; id = prev.get(id)) {
      nodes.add(id);
      const p = prev.get(id);
      if (p !== null && p !== undefined) edges.add(p + ">" + id);
    }
    return { nodes, edges, length: 0 };
  }

  /* Up to DAGRE_MAX_NODES drawn nodes, dagre lays the graph out (network simplex ranking
   * and its crossing reduction for small graphs, the faster longest-path ranking without
   * the extra ordering pass above DAGRE_FAST_NODES). Above that, dagre takes seconds to
   * minutes, so the nodes go in rows by layer, ordered by a few barycenter sweeps. */
  const DAGRE_MAX_NODES = 400;
  // A drawn layer wider than this (an expanded one) goes in rows of this many, in the
  // layered layout: dagre would put it in one row, a strip nobody can read once fitted.
  const WRAP_LAYER = 12;
  const DAGRE_FAST_NODES = 120;
  const GAP_X = 22;
  const GAP_Y = 46;
  const MARGIN = 20;

  function dagreLayout(nodes, edges) {
    const fast = nodes.length > DAGRE_FAST_NODES;
    const opts = { rankdir: "TB", nodesep: GAP_X, ranksep: GAP_Y, marginx: MARGIN, marginy: MARGIN };
    if (fast) Object.assign(opts, { ranker: "longest-path", disableOptimalOrderHeuristic: true });
    const g = new dagre.graphlib.Graph();
    g.setGraph(opts);
    g.setDefaultEdgeLabel(() => ({}));
    for (const n of nodes) g.setNode(n.id, { width: n.width, height: n.height });
    for (const e of edges) g.setEdge(e.a, e.b);
    dagre.layout(g, fast ? { disableOptimalOrderHeuristic: true } : undefined);
    const placed = new Map(nodes.map((n) => [n.id, g.node(n.id)]));
    const routes = new Map(edges.map((e) => [e.a + ">" + e.b, ranked(placed, e, g.edge(e.a, e.b).points)]));
    return { nodes: placed, edges: routes, width: g.graph().width, height: g.graph().height };
  }

  /* An edge leaves its node's bottom and enters the other's top, crossing between ranks
   * only in the gap between them. dagre's own route starts where the straight line to its
   * next point leaves the box, which for a node far to the side is the box's side: the
   * edge then runs along its rank, under the nodes beside it. Between neighbouring ranks
   * the edge goes down, across the gap and down; a longer one keeps dagre's points
   * through the ranks it crosses (its reserved slots) and only its ends change. */
  function ranked(placed, e, points) {
    const a = placed.get(e.a);
    const b = placed.get(e.b);
    const bands = rankBands(placed);
    const ia = bands.findIndex((band) => band.y === a.y);
    const ib = bands.findIndex((band) => band.y === b.y);
    const from = { x: a.x, y: a.y + a.height / 2 };
    const to = { x: b.x, y: b.y - b.height / 2 };
    if (ia < 0 || ib !== ia + 1) {
      const inner = points.slice(1, -1);
      if (ia < 0 || ib <= ia || !inner.length) return points;
      const below = (bands[ia].bottom + bands[ia + 1].top) / 2;
      const above = (bands[ib - 1].bottom + bands[ib].top) / 2;
      return [from, { x: a.x, y: below }, { x: inner[0].x, y: below }, ...inner,
        { x: inner[inner.length - 1].x, y: above }, { x: b.x, y: above }, to];
    }
    const gap = (bands[ia].bottom + bands[ib].top) / 2;
    return [from, { x: a.x, y: gap }, { x: b.x, y: gap }, to];
  }

  /* The ranks of a dagre layout top to bottom: each rank's centre line and the extent of
   * its tallest box (dagre centres a rank's boxes on one line). Kept per layout. */
  let bandsOf = { placed: null, bands: [] };
  function rankBands(placed) {
    if (bandsOf.placed === placed) return bandsOf.bands;
    const byY = new Map();
    for (const n of placed.values()) {
      const band = byY.get(n.y) || { y: n.y, top: Infinity, bottom: -Infinity };
      band.top = Math.min(band.top, n.y - n.height / 2);
      band.bottom = Math.max(band.bottom, n.y + n.height / 2);
      byY.set(n.y, band);
    }
    bandsOf = { placed, bands: [...byY.values()].sort((p, q) => p.y - q.y) };
    return bandsOf.bands;
  }

  function layeredLayout(nodes, edges) {
    const rows = new Map();
    for (const n of nodes) {
      if (!rows.has(n.rank)) rows.set(n.rank, []);
      rows.get(n.rank).push(n);
    }
    const ranks = [...rows.keys()].sort((a, b) => a - b);
    const ups = new Map(nodes.map((n) => [n.id, []]));
    const downs = new Map(nodes.map((n) => [n.id, []]));
    for (const e of edges) { downs.get(e.a).push(e.b); ups.get(e.b).push(e.a); }
    const pos = new Map();
    const number = (row) => row.forEach((n, i) => pos.set(n.id, i));
    ranks.forEach((r) => number(rows.get(r)));
    const sweep = (order, neighbours) => {
      for (const r of order) {
        const row = rows.get(r);
        const score = new Map(row.map((n) => {
          const near = neighbours.get(n.id);
          return [n.id, near.length ? near.reduce((a, id) => a + pos.get(id), 0) / near.length : pos.get(n.id)];
        }));
        row.sort((a, b) => score.get(a.id) - score.get(b.id));
        number(row);
      }
    };
    for (let i = 0; i < 2; i++) { sweep(ranks.slice(1), ups); sweep(ranks.slice(0, -1).reverse(), downs); }
    // Every row on one grid of equal cells, a layer wider than WRAP_LAYER wrapped into
    // several rows: the gaps between columns line up from top to bottom, so an edge that
    // has rows to cross goes down a gap and never passes under a node.
    const cellW = Math.max(...nodes.map((n) => n.width)) + GAP_X;
    const lines = [];
    for (const r of ranks) {
      const row = rows.get(r);
      for (let i = 0; i < row.length; i += WRAP_LAYER) lines.push(row.slice(i, i + WRAP_LAYER));
    }
    const columns = Math.max(...lines.map((line) => line.length));
    const placed = new Map();
    const lineOf = new Map();
    const tops = [];
    let y = MARGIN;
    lines.forEach((line, li) => {
      const tall = Math.max(...line.map((n) => n.height));
      const first = Math.floor((columns - line.length) / 2); // centred, on the grid
      line.forEach((n, i) => {
        const cx = MARGIN + (first + i) * cellW + (cellW - GAP_X) / 2;
        placed.set(n.id, { x: cx, y: y + n.height / 2, width: n.width, height: n.height });
        lineOf.set(n.id, li);
      });
      tops.push(y);
      y += tall + GAP_Y;
    });
    const gapAbove = (li) => tops[li] - GAP_Y / 2;
    const routes = new Map();
    for (const e of edges) {
      const a = placed.get(e.a);
      const b = placed.get(e.b);
      const from = { x: a.x, y: a.y + a.height / 2 };
      const to = { x: b.x, y: b.y - b.height / 2 };
      const below = gapAbove(lineOf.get(e.a) + 1);
      if (lineOf.get(e.b) === lineOf.get(e.a) + 1) {
        // The next row: down a's own cell to the gap, then across it to b.
        routes.set(e.a + ">" + e.b, [from, { x: a.x, y: below - GAP_Y / 2 }, to]);
        continue;
      }
      // Down into the gap below a's row, along it to the gap right of a's column, down
      // that to the gap above b's row, along it to above b.
      const above = gapAbove(lineOf.get(e.b));
      const gutter = a.x + (cellW - GAP_X) / 2 + GAP_X / 2;
      routes.set(e.a + ">" + e.b, [
        from, { x: a.x, y: below }, { x: gutter, y: below },
        { x: gutter, y: above }, { x: b.x, y: above }, to,
      ]);
    }
    return { nodes: placed, edges: routes, width: columns * cellW + 2 * MARGIN, height: y + MARGIN };
  }

  class PlanGraph {
    constructor(svg, { onSelect }) {
      this.svg = svg;
      this.viewport = svg.querySelector("#viewport");
      this.onSelect = onSelect;
      this.subtasks = [];
      this.results = new Map();
      this.runs = [];
      this.expanded = new Set();
      this.collapsedByDefault = false;
      this.query = "";
      this.selected = null;
      this.critical = { nodes: new Set(), edges: new Set(), length: 0 };
      this.view = { k: 1, x: 0, y: 0 };
      this.drawnKey = "";
      this.nodeEls = new Map();
      this.lastLayoutMs = 0;
      this.installPanZoom();
    }

    /* ---------------------------------------------------------------- data */

    setPlan(subtasks) {
      this.subtasks = subtasks;
      this.depth = layersOf(subtasks);
      const perLayer = new Map();
      for (const s of subtasks) perLayer.set(this.depth.get(s.id), (perLayer.get(this.depth.get(s.id)) || 0) + 1);
      this.layerSize = perLayer;
      this.collapsedByDefault = subtasks.length > COLLAPSE_TOTAL;
    }
    setResult(result) { this.results.set(result.id, result); }

    /* Who added each subtask a revision added (the report's ``revisions``). */
    setRevisions(revisions) {
      this.addedBy = new Map();
      for (const rev of revisions) for (const id of rev.added) this.addedBy.set(id, rev.by || "an operator");
    }

    /* The subtasks with a tool call waiting for a person; true when that changed. */
    setWaiting(ids) {
      const next = new Set(ids);
      const was = this.waiting || new Set();
      this.waiting = next;
      return next.size !== was.size || [...next].some((id) => !was.has(id));
    }
    setRuns(runs) {
      this.runs = runs || [];
      this.own = new Map();
      this.subs = new Map();
      for (const r of this.runs) {
        const into = r.path.length === 1 ? this.own : this.subs;
        if (!into.has(r.subtask)) into.set(r.subtask, []);
        into.get(r.subtask).push(r);
      }
    }

    runsOf(id) { return (this.own && this.own.get(id)) || []; }
    subagentsOf(id) { return (this.subs && this.subs.get(id)) || []; }

    /* Whether the report says a subtask ran (or runs): its timeline may not have it yet. */
    ran(id) {
      const r = this.results.get(id);
      return Boolean(r) && ["running", "completed", "failed", "paused"].includes(r.status);
    }

    /* When a subtask ran, first start to last end (ms; a run still going ends now). */
    spanOf(id) {
      const runs = this.runsOf(id);
      if (!runs.length) return null;
      let start = Infinity;
      let end = -Infinity;
      for (const r of runs) {
        start = Math.min(start, Date.parse(r.started));
        end = Math.max(end, r.closed ? Date.parse(r.closed) : Date.now());
      }
      return Number.isFinite(start) && Number.isFinite(end) ? { start, end } : null;
    }

    durationOf(id) {
      const runs = this.runsOf(id);
      if (!runs.length) return 0;
      let total = 0;
      for (const r of runs) {
        const start = Date.parse(r.started);
        const end = r.closed ? Date.parse(r.closed) : Date.now();
        total += Math.max(0, (end - start) / 1000);
      }
      return total;
    }

    matches(s) {
      if (!this.query) return false;
      const q = this.query.toLowerCase();
      return s.id.toLowerCase().includes(q) || s.agent.toLowerCase().includes(q) ||
        (s.description || "").toLowerCase().includes(q);
    }

    collapsedLayers() {
      const out = new Set();
      if (!this.collapsedByDefault) return out;
      for (const [layer, size] of this.layerSize) {
        if (size > COLLAPSE_LAYER && !this.expanded.has(layer)) out.add(layer);
      }
      for (const s of this.subtasks) {
        const d = this.depth.get(s.id);
        if (out.has(d) && (this.matches(s) || s.id === this.selected)) out.delete(d);
      }
      return out;
    }

    /* ---------------------------------------------------------------- drawing */

    render() {
      const started = performance.now();
      this.critical = criticalPath(this.subtasks, (id) => this.spanOf(id), (id) => this.ran(id));
      const collapsed = this.collapsedLayers();
      const subRows = (id) => Math.min(this.subagentsOf(id).length, MAX_SUB_ROWS + 1);
      const key = [...collapsed].sort().join(",") + "|" +
        this.subtasks.map((s) => subRows(s.id)).join("");
      if (key !== this.drawnKey) {
        this.layout(collapsed, subRows);
        this.drawnKey = key;
        this.lastLayoutMs = performance.now() - started;
      }
      for (const s of this.subtasks) this.paintNode(s.id);
      for (const layer of collapsed) this.paintGroup(layer);
      this.paintEdges();
      return performance.now() - started;
    }

    layout(collapsed, subRows) {
      const drawnId = (id) => {
        const d = this.depth.get(id);
        return collapsed.has(d) ? "layer:" + d : id;
      };
      const groups = new Map();
      const nodes = [];
      for (const s of this.subtasks) {
        const d = this.depth.get(s.id);
        if (collapsed.has(d)) {
          if (!groups.has(d)) groups.set(d, []);
          groups.get(d).push(s.id);
        } else {
          nodes.push({ id: s.id, rank: d, width: NODE_W, height: NODE_H + SUB_ROW * subRows(s.id) });
        }
      }
      for (const [d] of groups) nodes.push({ id: "layer:" + d, rank: d, width: NODE_W + 40, height: NODE_H });
      this.edgeList = [];
      const seen = new Set();
      for (const s of this.subtasks) {
        for (const dep of s.depends_on) {
          const a = drawnId(dep);
          const b = drawnId(s.id);
          if (a === b || seen.has(a + ">" + b)) continue;
          seen.add(a + ">" + b);
          this.edgeList.push({ a, b, real: !a.startsWith("layer:") && !b.startsWith("layer:") });
        }
      }
      const perRank = new Map();
      for (const n of nodes) perRank.set(n.rank, (perRank.get(n.rank) || 0) + 1);
      const layered = nodes.length > DAGRE_MAX_NODES || Math.max(0, ...perRank.values()) > WRAP_LAYER;
      const placed = layered ? layeredLayout(nodes, this.edgeList) : dagreLayout(nodes, this.edgeList);
      this.layoutEngine = layered ? "layers" : "dagre";
      this.groups = groups;
      this.viewport.replaceChildren();
      this.nodeEls = new Map();
      this.edgeEls = [];
      const edgeLayer = el("g", { class: "edges" });
      const nodeLayer = el("g", { class: "nodes" });
      this.viewport.append(edgeLayer, nodeLayer);
      for (const e of this.edgeList) {
        const pts = placed.edges.get(e.a + ">" + e.b);
        const d = pts.map((p, i) => (i ? "L" : "M") + p.x.toFixed(1) + " " + p.y.toFixed(1)).join(" ");
        const path = el("path", { class: "edge", d, "marker-end": "url(#arrow)", "data-from": e.a, "data-to": e.b });
        edgeLayer.append(path);
        this.edgeEls.push({ path, e });
      }
      for (const node of nodes) {
        const id = node.id;
        const n = placed.nodes.get(id);
        const group = el("g", { class: "node", "data-id": id, transform: `translate(${n.x - node.width / 2},${n.y - node.height / 2})` });
        group.append(el("rect", { class: "box", width: node.width, height: node.height, rx: 6 }));
        const title = el("title");
        group.append(title);
        for (let i = 0; i < 3 + (id.startsWith("layer:") ? 0 : MAX_SUB_ROWS + 1); i++) {
          group.append(el("text", { x: TEXT_X, y: 17 + i * 17 - (i > 2 ? (i - 3) * 2 : 0) }));
        }
        group.addEventListener("click", (ev) => { ev.stopPropagation(); this.clicked(id); });
        nodeLayer.append(group);
        this.nodeEls.set(id, group);
      }
      this.width = placed.width || 1;
      this.height = placed.height || 1;
    }

    setTexts(group, lines) {
      const texts = group.querySelectorAll("text");
      const room = Number(group.querySelector("rect.box").getAttribute("width")) - 2 * TEXT_X;
      texts.forEach((t, i) => {
        const line = lines[i];
        t.textContent = line ? line.text : "";
        t.setAttribute("class", line ? line.cls || "" : "");
        if (line && line.text.length > FITS_CHARS) t.textContent = fitted(t, line, room);
      });
    }

    paintNode(id) {
      const group = this.nodeEls.get(id);
      if (!group) return;
      const s = this.subtasks.find((x) => x.id === id);
      const r = this.results.get(id) || { status: "pending", agent: s.agent, usage: { tokens: 0, cost_usd: 0 } };
      const status = r.status;
      const cls = ["node", "s-" + status];
      if (this.critical.nodes.has(id)) cls.push("critical");
      if (this.selected === id) cls.push("selected");
      if (this.query) cls.push(this.matches(s) ? "match" : "dim");
      group.setAttribute("data-status", status);
      const waiting = status === "running" && this.waiting && this.waiting.has(id);
      if (waiting) cls.push("waiting");
      group.setAttribute("class", cls.join(" "));
      group.setAttribute("data-waiting", waiting ? "true" : "false");
      const addedBy = this.addedBy && this.addedBy.get(id);
      if (addedBy) {
        cls.push("added");
        group.setAttribute("class", cls.join(" "));
        group.setAttribute("data-added-by", addedBy);
      }
      const secs = this.durationOf(id);
      const state = waiting ? "… waiting for a person" : `${icon(status)} ${status}`;
      const lines = [
        { text: clip(id, 28), cls: "title" },
        { text: `${state}${r.retries ? " (retry " + r.retries + ")" : ""} · ${r.agent || s.agent}`, cls: "state" },
        { text: `${secs ? fmtDuration(secs) : "–"} · ${fmtTokens(r.usage.tokens)} · ${fmtCost(r.usage.cost_usd)}` },
      ];
      const subs = this.subagentsOf(id);
      subs.slice(0, MAX_SUB_ROWS).forEach((sub) => {
        const end = sub.closed ? Date.parse(sub.closed) : Date.now();
        const dur = (end - Date.parse(sub.started)) / 1000;
        lines.push({ text: `↳ ${clip(sub.path.slice(1).join("/"), 18)} ${icon(sub.status)} ${sub.status} ${fmtDuration(dur)}`, cls: "sub" });
      });
      if (subs.length > MAX_SUB_ROWS) lines.push({ text: `↳ … ${subs.length - MAX_SUB_ROWS} more sub-agents`, cls: "sub" });
      this.setTexts(group, lines);
      group.querySelector("title").textContent =
        `${id}: ${status}${addedBy ? " (added by " + addedBy + ")" : ""}\n${s.description}`;
    }

    paintGroup(layer) {
      const group = this.nodeEls.get("layer:" + layer);
      if (!group) return;
      const ids = this.groups.get(layer) || [];
      const counts = {};
      let tokens = 0;
      let cost = 0;
      for (const id of ids) {
        const r = this.results.get(id);
        const st = r ? r.status : "pending";
        counts[st] = (counts[st] || 0) + 1;
        if (r) { tokens += r.usage.tokens; cost += r.usage.cost_usd; }
      }
      const summary = Object.entries(counts).map(([st, n]) => `${icon(st)}${n} ${st}`).join(" ");
      const worst = ["failed", "paused", "running", "pending", "cancelled", "skipped", "completed"].find((s) => counts[s]) || "pending";
      const cls = ["node", "group", "s-" + worst];
      if (ids.some((id) => this.critical.nodes.has(id))) cls.push("critical");
      group.setAttribute("class", cls.join(" "));
      this.setTexts(group, [
        { text: `▸ layer ${layer + 1} · ${ids.length} subtasks`, cls: "title" },
        { text: summary, cls: "state" },
        { text: `${fmtTokens(tokens)} · ${fmtCost(cost)}` },
      ]);
      group.querySelector("title").textContent = `layer ${layer + 1} (click to expand): ${summary}\n` +
        ids.slice(0, 40).join(", ") + (ids.length > 40 ? " …" : "");
    }

    paintEdges() {
      for (const { path, e } of this.edgeEls) {
        const critical = e.real && this.critical.edges.has(e.a + ">" + e.b);
        path.setAttribute("class", critical ? "edge critical" : "edge");
        path.setAttribute("marker-end", critical ? "url(#arrow-critical)" : "url(#arrow)");
      }
    }

    clicked(id) {
      if (id.startsWith("layer:")) {
        this.expanded.add(Number(id.slice(6)));
        this.render();
        return;
      }
      this.onSelect(id);
    }

    select(id) {
      this.selected = id;
      this.render();
    }

    search(text) {
      this.query = text.trim();
      this.render();
      return this.query ? this.subtasks.filter((s) => this.matches(s)).map((s) => s.id) : [];
    }

    expandAll(open) {
      this.expanded = open ? new Set(this.layerSize.keys()) : new Set();
      this.render();
    }

    /* ---------------------------------------------------------------- zoom, pan */

    apply() {
      const { k, x, y } = this.view;
      this.viewport.setAttribute("transform", `translate(${x},${y}) scale(${k})`);
    }

    fit() {
      const box = this.svg.getBoundingClientRect();
      // Nothing laid out yet, or a hidden canvas: no scale to fit to.
      if (!(this.width > 0 && this.height > 0 && box.width > 0 && box.height > 0)) return;
      const k = Math.min(box.width / this.width, box.height / this.height, 1.2);
      this.view = { k, x: (box.width - this.width * k) / 2, y: 8 };
      this.apply();
    }

    zoom(factor, cx, cy) {
      const box = this.svg.getBoundingClientRect();
      const px = cx === undefined ? box.width / 2 : cx;
      const py = cy === undefined ? box.height / 2 : cy;
      const k = Math.max(0.05, Math.min(4, this.view.k * factor));
      const f = k / this.view.k;
      this.view = { k, x: px - (px - this.view.x) * f, y: py - (py - this.view.y) * f };
      this.apply();
    }

    focus(id) {
      const group = this.nodeEls.get(id);
      if (!group) return;
      const box = this.svg.getBoundingClientRect();
      const m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(group.getAttribute("transform"));
      const k = Math.max(this.view.k, 0.8);
      this.view = { k, x: box.width / 2 - (Number(m[1]) + NODE_W / 2) * k, y: box.height / 3 - Number(m[2]) * k };
      this.apply();
    }

    /* The page replaced: its listeners go (the SVG stays for the next plan's graph). */
    destroy() { this.listening.abort(); }

    installPanZoom() {
      let drag = null;
      this.listening = new AbortController();
      const signal = this.listening.signal;
      this.svg.addEventListener("wheel", (ev) => {
        ev.preventDefault();
        const box = this.svg.getBoundingClientRect();
        this.zoom(ev.deltaY < 0 ? 1.15 : 1 / 1.15, ev.clientX - box.left, ev.clientY - box.top);
      }, { passive: false, signal });
      this.svg.addEventListener("mousedown", (ev) => {
        drag = { x: ev.clientX, y: ev.clientY, vx: this.view.x, vy: this.view.y };
        this.svg.classList.add("panning");
      }, { signal });
      window.addEventListener("mousemove", (ev) => {
        if (!drag) return;
        this.view.x = drag.vx + ev.clientX - drag.x;
        this.view.y = drag.vy + ev.clientY - drag.y;
        this.apply();
      }, { signal });
      window.addEventListener("mouseup", () => { drag = null; this.svg.classList.remove("panning"); }, { signal });
    }

    /* ---------------------------------------------------------------- timeline */

    renderTimeline(container) {
      const rows = this.runs.filter((r) => r.started);
      container.replaceChildren();
      if (!rows.length) {
        const p = document.createElement("p");
        p.className = "note";
        p.textContent = "nothing has run yet";
        container.append(p);
        return;
      }
      const t0 = Math.min(...rows.map((r) => Date.parse(r.started)));
      const t1 = Math.max(...rows.map((r) => (r.closed ? Date.parse(r.closed) : Date.now())));
      const span = Math.max(t1 - t0, 1);
      const axis = document.createElement("div");
      axis.className = "tl-axis";
      for (let i = 0; i <= 4; i++) {
        const tick = document.createElement("span");
        tick.textContent = fmtDuration((span * i) / 4 / 1000);
        axis.append(tick);
      }
      container.append(axis);
      for (const r of rows) {
        const row = document.createElement("div");
        row.className = "tl-row";
        row.dataset.subtask = r.subtask;
        const label = document.createElement("span");
        label.className = "tl-label" + (r.path.length > 1 ? " subagent" : "");
        const start = Date.parse(r.started);
        const end = r.closed ? Date.parse(r.closed) : Date.now();
        label.textContent = `${icon(r.status)} ${r.path.length > 1 ? "↳ " + r.path.slice(1).join("/") : r.subtask} · ${r.status} · ${fmtDuration((end - start) / 1000)}`;
        const track = document.createElement("span");
        track.className = "tl-track";
        const bar = document.createElement("span");
        bar.className = "tl-bar s-" + r.status + (r.path.length === 1 && this.critical.nodes.has(r.subtask) ? " critical" : "");
        bar.style.left = ((start - t0) / span) * 100 + "%";
        bar.style.width = Math.max(((end - start) / span) * 100, 0.2) + "%";
        bar.title = `${r.workflow_id}: ${new Date(start).toISOString()} → ${r.closed || "running"}`;
        track.append(bar);
        row.append(label, track);
        row.addEventListener("click", () => this.onSelect(r.subtask));
        container.append(row);
      }
    }
  }

  window.DplanGraph = { PlanGraph, icon, planOpen, fmtDuration, fmtTokens, fmtCost, criticalPath, layersOf };
})();
