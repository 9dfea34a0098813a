// The topology page's history plot and its operator sections (what `squall debug`,
// `squall profile` and `squall kill-workers` do), over nimbus's API. app.js builds the page
// and calls these; every text goes through textContent.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const W = 420, H = 150, PAD_L = 52, PAD_R = 10, PAD_T = 18, PAD_B = 22;
  const COLORS = ["#1f6feb", "#2e7d32", "#c62828", "#b26a00"];

  function svg(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function short(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return Math.abs(v) >= 10 ? v.toFixed(0) : v.toFixed(v === 0 ? 0 : 2);
  }
  function clock(t) {
    const d = new Date(t * 1000), p = n => String(n).padStart(2, "0");
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  // One small line chart: lines = [{label, key}] over points [{time, key: value}].
  function chart(id, title, unit, points, lines) {
    const box = svg("svg", {class: "chart", "data-chart": id, "data-points": points.length,
                            viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title});
    box.append(svg("text", {x: PAD_L, y: 12, class: "chart-title"}, `${title} (${unit})`));
    const values = points.flatMap(p => lines.map(l => p[l.key])).filter(v => v !== null && v !== undefined);
    if (points.length < 2 || !values.length) {
      box.append(svg("text", {x: PAD_L, y: H / 2, class: "muted"}, "not enough points yet"));
      return box;
    }
    const t0 = points[0].time, t1 = points[points.length - 1].time;
    const top = Math.max(...values, 0) || 1;
    const x = t => PAD_L + (W - PAD_L - PAD_R) * (t1 === t0 ? 1 : (t - t0) / (t1 - t0));
    const y = v => H - PAD_B - (H - PAD_T - PAD_B) * (v / top);
    box.append(svg("line", {x1: PAD_L, y1: H - PAD_B, x2: W - PAD_R, y2: H - PAD_B, class: "axis"}));
    box.append(svg("text", {x: PAD_L - 4, y: PAD_T + 4, class: "tick", "text-anchor": "end"}, short(top)));
    box.append(svg("text", {x: PAD_L - 4, y: H - PAD_B, class: "tick", "text-anchor": "end"}, "0"));
    box.append(svg("text", {x: PAD_L, y: H - 6, class: "tick"}, clock(t0)));
    box.append(svg("text", {x: W - PAD_R, y: H - 6, class: "tick", "text-anchor": "end"}, clock(t1)));
    lines.forEach((l, i) => {
      const pts = points.filter(p => p[l.key] !== null && p[l.key] !== undefined);
      if (!pts.length) return;
      const d = pts.map((p, j) => `${j ? "L" : "M"}${x(p.time).toFixed(1)},${y(p[l.key]).toFixed(1)}`).join("");
      box.append(svg("path", {d, stroke: COLORS[i % COLORS.length], class: "series", "data-series": l.key}));
      box.append(svg("text", {x: W - PAD_R - 110 * (lines.length - i), y: 12, fill: COLORS[i % COLORS.length],
                              class: "legend"}, `${l.label} ${short(pts[pts.length - 1][l.key])}`));
    });
    return box;
  }

  // The topology's throughput, latency and failures over time (what its spouts saw).
  function plots(history) {
    const pts = history.topology || [];
    return [
      chart("throughput", "throughput", "tuples/s", pts,
            [{label: "emitted", key: "emitted_per_sec"}, {label: "acked", key: "acked_per_sec"}]),
      chart("latency", "complete latency", "ms", pts, [{label: "mean", key: "complete_latency_ms"}]),
      chart("failures", "failures", "tuples/s", pts, [{label: "failed", key: "failed_per_sec"}]),
    ];
  }

  // Sampled tuples, oldest first.
  function samplesTable(ui, samples) {
    if (!samples.length) return ui.h("p", {class: "muted", id: "no-samples"}, "No tuple sampled yet.");
    return ui.table([["time"], ["component"], ["task", "num"], ["stream"], ["to task", "num"], ["anchors"], ["values"]],
      samples.map(s => ui.h("tr", {"data-row": "sample"},
        ui.cell("time", `${clock(s.time)}.${String(Math.floor(s.time * 1000) % 1000).padStart(3, "0")}`),
        ui.cell("component", s.component), ui.numCell("task", s.task), ui.cell("stream", s.stream),
        ui.numCell("target", s.target), ui.cell("anchors", h_code(ui, Object.keys(s.anchors || {}).join(", ") || "–")),
        ui.cell("values", h_code(ui, JSON.stringify(s.values))))));
  }
  const h_code = (ui, text) => ui.h("code", {}, text);

  // A select's options as [value, label] pairs, made again only when they change; what was
  // chosen stays chosen while it is still offered.
  function setOptions(ui, select, options) {
    const key = JSON.stringify(options);
    if (select.dataset.options === key) return;
    const chosen = select.value;
    select.replaceChildren(...options.map(([value, label]) => ui.h("option", {value}, label)));
    select.dataset.options = key;
    if (options.some(([value]) => value === chosen)) select.value = chosen;
  }

  // Debug: start or stop sampling, and the newest samples. The controls are made once per
  // page, so that what an operator chose or typed survives the page's refreshes; update()
  // brings the rest up to date.
  function debugSection(ui, name) {
    const select = ui.h("select", {id: "debug-component"});
    const percent = ui.h("input", {id: "debug-percent", type: "number", min: 0.01, max: 100, step: "any", value: 10});
    const state = ui.h("p", {id: "debug-state", class: "muted"}, "Nothing is sampled.");
    const samplesBox = ui.h("div", {});
    async function post(body, what) {
      try {
        await ui.api(`/topologies/${ui.enc(name)}/debug`, {method: "POST", body});
        ui.showBanner(what, "info");
      } catch (e) {
        ui.showBanner(`debug failed: ${e.message}`);
      }
      await ui.refresh();
    }
    const nodes = [ui.h("h2", {}, "Debug ", ui.h("span", {class: "muted"}, "(sampled emits: Storm's event logger)")),
      state,
      ui.h("div", {class: "actions"}, select, ui.h("label", {for: "debug-percent"}, "percent"), percent,
        ui.h("button", {id: "debug-start", type: "button", onclick: () => post(
          {component: select.value || null, percent: Number(percent.value)},
          `sampling ${percent.value}% of ${select.value || "every component"}`)}, "Sample"),
        ui.h("button", {id: "debug-stop", type: "button", onclick: () => post(
          {component: select.value || null, percent: 0}, "sampling stopped")}, "Stop")),
      samplesBox];
    function update(st, ops, samples) {
      setOptions(ui, select, [["", "every component"],
        ...st.components.filter(c => !c.id.startsWith("__")).map(c => [c.id, c.id])]);
      const on = Object.entries(ops.debug || {}).map(([c, d]) =>
        `${c === "*" ? "every component" : c}: ${d.percent}% until ${clock(d.until)}`);
      state.textContent = on.length ? `sampling ${on.join("; ")}` : "Nothing is sampled.";
      state.className = on.length ? "" : "muted";
      samplesBox.replaceChildren(samplesTable(ui, samples.samples || []));
    }
    return {nodes, update};
  }

  async function download(ui, name, profileId) {
    try {
      const reply = await ui.api(`/topologies/${ui.enc(name)}/profiles/${ui.enc(profileId)}`);
      const url = URL.createObjectURL(new Blob([reply.text], {type: "text/plain"}));
      const a = ui.h("a", {href: url, download: `${name}-${profileId}.txt`, id: "profile-download-link"});
      document.body.append(a);
      a.click();
      setTimeout(() => { URL.revokeObjectURL(url); a.remove(); }, 1000);
      window.squallLastProfile = reply;  // for scripts and tests: what was downloaded
    } catch (e) {
      ui.showBanner(`profile ${profileId}: ${e.message}`);
    }
  }

  // Profiles: ask one worker for one, and download those taken (controls made once, as Debug's).
  function profileSection(ui, name) {
    const workers = ui.h("select", {id: "profile-worker"});
    const kind = ui.h("select", {id: "profile-kind"}, ["stack", "record", "heap"].map(k => ui.h("option", {value: k}, k)));
    const secs = ui.h("input", {id: "profile-secs", type: "number", min: 1, max: 300, value: 5});
    const rowsBox = ui.h("div", {});
    async function ask() {
      const body = {worker: workers.value, kind: kind.value};
      if (kind.value !== "stack") body.secs = Number(secs.value);
      try {
        const reply = await ui.api(`/topologies/${ui.enc(name)}/profiles`, {method: "POST", body});
        ui.showBanner(`profile ${reply.profile.profile_id} asked of ${workers.value}`, "info");
      } catch (e) {
        ui.showBanner(`profile failed: ${e.message}`);
      }
      await ui.refresh();
    }
    const button = ui.h("button", {id: "profile-ask", type: "button", onclick: ask, disabled: true}, "Profile");
    const nodes = [ui.h("h2", {}, "Profiles ", ui.h("span", {class: "muted"}, "(stack dump, sampling profile, heap)")),
      ui.h("div", {class: "actions"}, ui.h("label", {for: "profile-worker"}, "worker"), workers,
        ui.h("label", {for: "profile-kind"}, "kind"), kind, ui.h("label", {for: "profile-secs"}, "secs"), secs, button),
      rowsBox];
    function update(st, ops) {
      setOptions(ui, workers, st.workers.map(w => [`${w.host}:${w.port}`, `${w.host}:${w.port}`]));
      button.disabled = !st.workers.length;
      const rows = (ops.profiles || []).map(p => ui.h("tr", {"data-row": `profile:${p.profile_id}`},
        ui.cell("profile_id", h_code(ui, p.profile_id)), ui.cell("kind", p.kind), ui.cell("where", `${p.host}:${p.port}`),
        ui.cell("at", clock(p.at)), ui.cell("download", ui.h("button", {type: "button", class: "profile-download",
          "data-profile": p.profile_id, onclick: () => download(ui, name, p.profile_id)}, "Download"))));
      rowsBox.replaceChildren(rows.length ? ui.table([["profile"], ["kind"], ["worker"], ["asked at"], [""]], rows)
        : ui.h("p", {class: "muted"}, "No profile asked for."));
    }
    return {nodes, update};
  }

  window.squallOperate = {plots, debugSection, profileSection};
})();
