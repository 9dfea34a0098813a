// The topology drawn as inline SVG: components in layers (spouts first, each bolt one
// layer after its deepest input), subscriptions as curves labelled with throughput.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const BOX_W = 210, BOX_H = 58, GAP_X = 90, GAP_Y = 26, PAD = 16;

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Layer of each component: longest path from a component without inputs (cycles cut).
  function layers(components) {
    const byId = new Map(components.map(c => [c.id, c]));
    const memo = new Map();
    function depth(id, seen) {
      if (memo.has(id)) return memo.get(id);
      const c = byId.get(id);
      let d = 0;
      for (const input of (c && c.inputs) || []) {
        if (!byId.has(input.component) || seen.has(input.component)) continue;
        seen.add(id);
        d = Math.max(d, depth(input.component, seen) + 1);
        seen.delete(id);
      }
      memo.set(id, d);
      return d;
    }
    components.forEach(c => depth(c.id, new Set()));
    return memo;
  }

  function formatRate(r) {
    if (r === null || r === undefined || !isFinite(r)) return "–/s";
    if (r >= 1e6) return (r / 1e6).toFixed(1) + "M/s";
    if (r >= 1e3) return (r / 1e3).toFixed(1) + "k/s";
    return r.toFixed(r < 10 ? 1 : 0) + "/s";
  }

  function compact(n) {
    if (n >= 1e9) return (n / 1e9).toFixed(2) + "G";
    if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
    if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
    return String(n);
  }

  // components: the status JSON's user components; rate(componentId, stream) -> tuples/s or null
  function draw(components, rate) {
    const depthOf = layers(components);
    const columns = [];
    for (const c of components) {
      const d = depthOf.get(c.id) || 0;
      (columns[d] = columns[d] || []).push(c);
    }
    const pos = new Map();
    columns.forEach((col, x) => (col || []).forEach((c, y) => {
      pos.set(c.id, {x: PAD + x * (BOX_W + GAP_X), y: PAD + 18 + y * (BOX_H + GAP_Y)});
    }));
    const rows = Math.max(1, ...columns.map(col => (col || []).length));
    const width = PAD * 2 + columns.length * BOX_W + Math.max(0, columns.length - 1) * GAP_X;
    const height = PAD * 2 + 18 + rows * BOX_H + (rows - 1) * GAP_Y;
    const svg = el("svg", {class: "graph", viewBox: `0 0 ${width} ${height}`, height: height,
                           role: "img", "aria-label": "topology graph"});
    const edges = el("g", {class: "edges"});
    const nodes = el("g", {class: "nodes"});
    svg.append(edges, nodes);
    for (const c of components) {
      const to = pos.get(c.id);
      (c.inputs || []).forEach((input, i) => {
        const from = pos.get(input.component);
        if (!from) return;
        const x1 = from.x + BOX_W, y1 = from.y + BOX_H / 2, x2 = to.x, y2 = to.y + BOX_H / 2 + i * 6;
        const mx = (x1 + x2) / 2;
        const g = el("g", {class: "edge", "data-from": input.component, "data-to": c.id,
                           "data-stream": input.stream});
        g.append(el("path", {d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 4},${y2}`}));
        g.append(el("path", {d: `M${x2 - 9},${y2 - 4} L${x2 - 3},${y2} L${x2 - 9},${y2 + 4}`}));
        const r = rate(input.component, input.stream);
        const label = (input.stream === "default" ? "" : input.stream + " ") + formatRate(r) +
                      " · " + input.grouping;
        g.append(el("text", {class: "edge", x: mx, y: (y1 + y2) / 2 - 5, "text-anchor": "middle",
                             "data-rate": r === null ? "" : r}, label));
        edges.append(g);
      });
    }
    for (const c of components) {
      const p = pos.get(c.id);
      const g = el("g", {class: "node", "data-component": c.id});
      g.append(el("rect", {class: c.kind || "", x: p.x, y: p.y, width: BOX_W, height: BOX_H}));
      g.append(el("text", {class: "title", x: p.x + 10, y: p.y + 18}, `${c.id} (${c.kind || "?"})`));
      g.append(el("text", {x: p.x + 10, y: p.y + 35},
                  `${c.executors.length} executors, ${c.tasks} tasks`));
      const cap = c.capacity === null || c.capacity === undefined ? "" : ` · cap ${c.capacity.toFixed(2)}`;
      const count = c.kind === "spout" ? `emitted ${compact(c.emitted)}` : `executed ${compact(c.executed)}`;
      g.append(el("text", {x: p.x + 10, y: p.y + 51}, count + cap));
      nodes.append(g);
    }
    return svg;
  }

  window.squallGraph = {draw, formatRate};
})();
