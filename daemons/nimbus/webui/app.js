// squall's web UI: a few pages over nimbus's JSON API (/api/v1), the same numbers that
// `squall status --json` prints. No build step, no outside assets. Pages (by URL hash):
//   #/                           cluster: nimbus leader and standbys, supervisors, topologies
//   #/topology/NAME              status, graph, history plot, components (over Storm's windows),
//                                executors, metrics, debug samples, profiles, errors, conf, actions
//   #/log/NAME/NODE/PORT         a worker's log (through nimbus, from its supervisor)
// A bearer token pasted into the header box is kept in sessionStorage and sent with every
// request as `Authorization: Bearer ...`.
"use strict";

(function () {
  const API = "/api/v1";
  const TOKEN_KEY = "squall.token";
  const REFRESH_MS = 5000;
  const RATE_WINDOW = 60;    // seconds of samples kept for the graph's edge rates
  const MIN_RATE_SPAN = 2;   // seconds between two samples before a rate is shown
  const main = document.getElementById("main");
  const banner = document.getElementById("banner");
  const refreshState = document.getElementById("refresh-state");
  let page = null;        // {key, refresh(): Promise}
  let busy = false;
  let renders = 0;

  // -- small DOM helpers (text always goes through textContent) -----------------------------
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const num = v => (v === null || v === undefined) ? "–" : Number(v).toLocaleString("en-US");
  const fixed = (v, d) => (v === null || v === undefined) ? "–" : Number(v).toFixed(d);
  const perSec = v => (v === null || v === undefined) ? "–" : (v < 10 ? Number(v).toFixed(1) : num(Math.round(v)));
  const WINDOWS = [["10m", "10 minutes"], ["3h", "3 hours"], ["1d", "1 day"], ["all", "all time"]];
  let windowChoice = "10m";  // the components table's window, kept across refreshes
  function duration(secs) {
    if (secs === null || secs === undefined) return "–";
    let s = Math.floor(secs);
    const d = Math.floor(s / 86400); s -= d * 86400;
    const hh = Math.floor(s / 3600); s -= hh * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) return `${d}d${hh}h${m}m`;
    if (hh) return `${hh}h${m}m${s}s`;
    if (m) return `${m}m${s}s`;
    return `${s}s`;
  }
  function when(t) {
    const d = new Date(t * 1000), p = n => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
           `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  // An error's last line: the exception itself, below its traceback.
  const lastLine = text => (String(text || "").trim().split("\n").pop() || "");
  const statusBadge = s => h("span", {class: `status status-${s}`, "data-col": "status"}, s);
  const enc = encodeURIComponent;

  function table(headers, rows, attrs) {
    return h("table", attrs || {},
      h("thead", {}, h("tr", {}, headers.map(([label, cls]) => h("th", {class: cls || null}, label)))),
      h("tbody", {}, rows));
  }
  const cell = (col, value, cls) => h("td", {"data-col": col, class: cls || null}, value);
  const numCell = (col, value) => cell(col, num(value), "num");

  // kind: "info", "error" or "load" (a failed refresh: cleared by the next good one)
  function showBanner(text, kind) {
    banner.dataset.kind = text ? (kind || "error") : "";
    if (!text) { banner.hidden = true; return; }
    banner.textContent = text;
    banner.className = "banner" + (kind === "info" ? " info" : "");
    banner.hidden = false;
  }

  // -- API ----------------------------------------------------------------------------------
  async function api(path, options) {
    const opts = Object.assign({method: "GET"}, options || {});
    const headers = {"Accept": "application/json"};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers["Authorization"] = "Bearer " + token;
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(opts.body);
    }
    opts.headers = headers;
    const resp = await fetch(API + path, opts);
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (!resp.ok) {
      const message = (body && body.error) || `${resp.status} ${resp.statusText}`;
      const err = new Error(resp.status === 401 || resp.status === 403
        ? `${message} (paste an API token in the box at the top)` : message);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  // -- confirmation dialog ------------------------------------------------------------------
  function confirmAction(text) {
    const box = document.getElementById("confirm");
    const ok = document.getElementById("confirm-ok");
    const cancel = document.getElementById("confirm-cancel");
    document.getElementById("confirm-text").textContent = text;
    box.hidden = false;
    return new Promise(resolve => {
      function done(answer) {
        box.hidden = true;
        ok.removeEventListener("click", yes);
        cancel.removeEventListener("click", no);
        resolve(answer);
      }
      const yes = () => done(true), no = () => done(false);
      ok.addEventListener("click", yes);
      cancel.addEventListener("click", no);
      ok.focus();
    });
  }

  async function act(name, action, body, question) {
    if (!(await confirmAction(question))) return;
    try {
      const reply = await api(`/topologies/${enc(name)}/${action}`, {method: "POST", body: body || {}});
      showBanner(`${action}: topology ${reply.name} ` + (reply.status ? `is ${reply.status}` :
                 `restarting ${reply.workers} worker(s)`) +
                 (reply.wait_secs !== undefined ? ` (wait ${reply.wait_secs}s)` : ""), "info");
    } catch (e) {
      showBanner(`${action} failed: ${e.message}`);
    }
    await refresh();
  }

  // What operate.js builds its sections with.
  const ui = {h, table, cell, numCell, enc, showBanner, api: (...a) => api(...a), refresh: () => refresh()};

  // -- cluster page -------------------------------------------------------------------------
  function clusterPage() {
    const nimbusBox = h("section", {id: "nimbus"});
    const supBox = h("section", {id: "supervisors"});
    const topoBox = h("section", {id: "topologies"});
    main.replaceChildren(h("h1", {}, "Cluster"), nimbusBox, supBox, topoBox);
    async function load() {
      const [cluster, topologies] = await Promise.all([api("/cluster"), api("/topologies")]);
      const nb = cluster.nimbus;
      const contenders = (nb.contenders && nb.contenders.length) ? nb.contenders : [nb.this];
      nimbusBox.replaceChildren(h("h2", {}, "Nimbus"), table(
        [["address"], ["role"], ["this one"]],
        contenders.map(addr => h("tr", {"data-row": `nimbus:${addr}`},
          cell("address", addr), cell("role", addr === nb.leader ? "leader" : "standby"),
          cell("this", addr === nb.this ? `yes (uptime ${duration(nb.uptime)})` : "")))));
      supBox.replaceChildren(
        h("h2", {}, `Supervisors (${cluster.slots.used} of ${cluster.slots.total} slots used, ` +
                    `${cluster.slots.free} free)`),
        cluster.supervisors.length ? table(
          [["id"], ["host"], ["slots", "num"], ["used", "num"], ["free", "num"], ["used ports"],
           ["unusable ports"], ["uptime"], ["heartbeat"]],
          cluster.supervisors.map(s => h("tr", {"data-row": `supervisor:${s.id}`},
            cell("id", h("code", {}, s.id)), cell("host", s.host), numCell("slots", s.slots),
            numCell("used", s.used), numCell("free", s.free), cell("used_ports", s.used_ports.join(", ")),
            cell("unusable", Object.entries(s.unusable || {}).map(([p, why]) => `${p}: ${why}`).join("; ")),
            cell("uptime", duration(s.uptime)), cell("heartbeat_age", `${fixed(s.heartbeat_age, 1)}s ago`))))
          : h("p", {class: "muted"}, "No supervisor is registered."));
      topoBox.replaceChildren(h("h2", {}, "Topologies"),
        topologies.topologies.length ? table(
          [["name"], ["id"], ["status"], ["workers", "num"], ["executors", "num"], ["uptime"]],
          topologies.topologies.map(t => h("tr", {"data-row": `topology:${t.name}`},
            cell("name", h("a", {href: `#/topology/${enc(t.name)}`}, t.name)), cell("id", h("code", {}, t.id)),
            h("td", {}, statusBadge(t.status)), numCell("workers", t.workers),
            numCell("executors", t.executors), cell("uptime", duration(t.uptime)))))
          : h("p", {class: "muted"}, "No topology is running."));
    }
    return {key: "cluster", crumbs: [], refresh: load};
  }

  // -- topology page ------------------------------------------------------------------------
  function topologyPage(name) {
    const summary = h("section", {id: "summary"});
    const graph = h("section", {id: "graph"});
    const historyBox = h("section", {id: "history"});
    const debugBox = h("section", {id: "debug"});
    const profilesBox = h("section", {id: "profiles"});
    // Their controls are made once: what an operator chose or typed there survives refreshes.
    const debug = window.squallOperate.debugSection(ui, name);
    const profiles = window.squallOperate.profileSection(ui, name);
    const comps = h("section", {id: "components"});
    const execs = h("section", {id: "executors"});
    const metricsBox = h("section", {id: "metrics"});
    const workers = h("section", {id: "workers"});
    const errors = h("section", {id: "errors"});
    const confBox = h("section", {id: "conf"});
    const workersIn = h("input", {id: "rebalance-workers", type: "number", min: 1, placeholder: "n"});
    const rebalanceWait = h("input", {id: "rebalance-wait", type: "number", min: 0, placeholder: "s"});
    const killWait = h("input", {id: "kill-wait", type: "number", min: 0, placeholder: "s"});
    const waitOf = input => input.value === "" ? undefined : Number(input.value);
    const actions = h("div", {class: "actions", id: "actions"},
      h("button", {id: "action-activate", type: "button", onclick: () =>
        act(name, "activate", {}, `Activate topology ${name}? Its spouts start emitting.`)}, "Activate"),
      h("button", {id: "action-deactivate", type: "button", onclick: () =>
        act(name, "deactivate", {}, `Deactivate topology ${name}? Its spouts stop emitting.`)}, "Deactivate"),
      h("label", {for: "rebalance-workers"}, "workers"), workersIn,
      h("label", {for: "rebalance-wait"}, "wait"), rebalanceWait,
      h("button", {id: "action-rebalance", type: "button", onclick: () => {
        const body = {};
        if (workersIn.value === "") {  // as `squall rebalance`: say what to change
          showBanner("Rebalance: give the number of workers to spread the topology over.");
          return;
        }
        body.num_workers = Number(workersIn.value);
        if (waitOf(rebalanceWait) !== undefined) body.wait_secs = waitOf(rebalanceWait);
        const n = body.num_workers;
        const what = n ? ` over ${n} worker${n === 1 ? "" : "s"}` : "";
        act(name, "rebalance", body, `Rebalance topology ${name}${what}? It is deactivated for the wait ` +
            `(${body.wait_secs !== undefined ? body.wait_secs + "s" : "its message timeout"}).`);
      }}, "Rebalance"),
      h("button", {id: "action-kill-workers", type: "button", onclick: () =>
        act(name, "kill-workers", {}, `Restart every worker of ${name}? Each ends and its supervisor starts it ` +
            "again; tuples in flight are replayed.")}, "Kill workers"),
      h("label", {for: "kill-wait"}, "wait"), killWait,
      h("button", {id: "action-kill", type: "button", class: "danger", onclick: () => {
        const wait = waitOf(killWait);
        act(name, "kill", wait === undefined ? {} : {wait_secs: wait},
            `Kill topology ${name}? Its spouts stop now and it is removed after ` +
            `${wait !== undefined ? wait + "s" : "its message timeout"}. This cannot be undone.`);
      }}, "Kill"));
    const summaryData = h("div", {class: "summary"});
    summary.append(summaryData, actions);
    main.replaceChildren(h("h1", {}, "Topology ", h("span", {id: "topology-name"}, name)),
                         summary, graph, historyBox, comps, execs, metricsBox, workers, debugBox, profilesBox,
                         errors, confBox);
    let samplesSeen = null;  // the last samples read; read again while sampling is on
    // Samples of per-stream emitted counts for the edge rates: the rate is taken against the
    // oldest sample of the last RATE_WINDOW seconds (stats reach nimbus every few seconds).
    let samples = [];  // [{id, at, streams: {component: {stream: count}}}]

    async function load() {
      let st, errs, conf, history, ops;
      try {
        [st, errs, conf, history, ops] = await Promise.all([api(`/topologies/${enc(name)}`),
          api(`/topologies/${enc(name)}/errors`), api(`/topologies/${enc(name)}/conf`),
          api(`/topologies/${enc(name)}/history`), api(`/topologies/${enc(name)}/operations`)]);
      } catch (e) {
        if (e.status === 404) {
          summaryData.replaceChildren(h("p", {id: "gone"}, `No topology named ${name} is running. `,
            h("a", {href: "#/"}, "Back to the cluster")));
          actions.hidden = true;
          [graph, historyBox, comps, execs, metricsBox, workers, debugBox, profilesBox, errors, confBox]
            .forEach(s => s.replaceChildren());
          return;
        }
        throw e;
      }
      actions.hidden = false;
      const now = Date.now() / 1000;
      const streams = {};
      st.components.forEach(c => { streams[c.id] = c.streams || {}; });
      samples = samples.filter(x => x.id === st.id && now - x.at <= RATE_WINDOW);
      const before = samples.length && now - samples[0].at >= MIN_RATE_SPAN ? samples[0] : null;
      const rate = (component, stream) => {
        if (!before) return null;
        const a = (before.streams[component] || {})[stream], b = (streams[component] || {})[stream];
        return a === undefined || b === undefined ? null : Math.max(0, b - a) / (now - before.at);
      };
      samples.push({id: st.id, at: now, streams});

      const item = (label, value, id) => h("div", {id}, h("span", {}, label), h("b", {}, value));
      summaryData.replaceChildren(
        item("status", statusBadge(st.status), "summary-status"), item("id", st.id, "summary-id"),
        item("uptime", duration(st.uptime), "summary-uptime"),
        item("workers", `${st.workers.length} (requested ${st.requested_workers})`, "summary-workers"),
        item("executors", num(st.executors), "summary-executors"));

      const user = st.components.filter(c => !c.id.startsWith("__"));
      graph.replaceChildren(h("h2", {}, "Graph ", h("span", {class: "muted"},
        "(edges: tuples/s emitted on the stream over the last minute)")),
        window.squallGraph.draw(user, rate));

      historyBox.replaceChildren(h("h2", {}, "Over time ", h("span", {class: "muted"},
        `(what the spouts saw, last ${duration(history.window_secs)}; kept by the leading nimbus)`)),
        h("div", {class: "charts"}, window.squallOperate.plots(history)));

      const windowSelect = h("select", {id: "window", onchange: ev => { windowChoice = ev.target.value; refresh(); }},
        WINDOWS.map(([key, label]) => h("option", {value: key, selected: key === windowChoice}, label)));
      const win = c => (c.windows || {})[windowChoice] || {};
      const rateOrCount = (c, key) => windowChoice === "all" ? num(win(c)[key]) : perSec(win(c)[`${key}_per_sec`]);
      comps.replaceChildren(h("h2", {}, "Components ", h("span", {class: "muted"}, "window "), windowSelect), table(
        [["component"], ["kind"], ["executors", "num"], ["tasks", "num"], ["emitted", "num"],
         ["executed", "num"], ["capacity", "num"], ["execute ms", "num"], ["complete ms", "num"],
         ["acked", "num"], ["failed", "num"],
         ...(windowChoice === "all" ? [] : [["emit/s", "num"], ["ack/s", "num"], ["fail/s", "num"]]),
         ["window exec ms", "num"], ["window complete ms", "num"], ["last error"]],
        st.components.map(c => h("tr", {"data-row": `component:${c.id}`},
          cell("id", c.id), cell("kind", c.kind || "?"), numCell("executors", c.executors.length),
          numCell("tasks", c.tasks), numCell("emitted", c.emitted), numCell("executed", c.executed),
          cell("capacity", fixed(c.capacity, 3), "num"),
          cell("execute_latency_ms", fixed(c.execute_latency_ms, 4), "num"),
          cell("complete_latency_ms", fixed(c.complete_latency_ms, 3), "num"),
          numCell("acked", c.acked), numCell("failed", c.failed),
          ...(windowChoice === "all" ? [] : [cell("window_emitted", rateOrCount(c, "emitted"), "num"),
            cell("window_acked", rateOrCount(c, "acked"), "num"), cell("window_failed", rateOrCount(c, "failed"), "num")]),
          cell("window_execute_ms", fixed(win(c).execute_latency_ms, 4), "num"),
          cell("window_complete_ms", fixed(win(c).complete_latency_ms, 3), "num"),
          cell("last_error", c.last_error ? h("span", {class: "error-text", title: c.last_error.error},
            `${when(c.last_error.time)} task ${c.last_error.task}: ${lastLine(c.last_error.error)}`) : "")))));

      const logLink = (node, host, port) => node && port !== null
        ? h("a", {href: `#/log/${enc(name)}/${enc(node)}/${port}`, class: "log-link"}, `${host}:${port}`)
        : "unassigned";
      execs.replaceChildren(h("h2", {}, "Executors"), table(
        [["component"], ["executor"], ["host:port (log)"], ["uptime"], ["emitted", "num"],
         ["executed", "num"], ["capacity", "num"], ["acked", "num"], ["failed", "num"]],
        st.components.flatMap(c => c.executors.map(ex => h("tr",
          {"data-row": `executor:${ex.executor[0]}-${ex.executor[1]}`},
          cell("component", c.id), cell("executor", `[${ex.executor[0]}-${ex.executor[1]}]`),
          cell("where", logLink(ex.node, ex.host, ex.port)), cell("uptime", duration(ex.uptime)),
          numCell("emitted", ex.emitted), numCell("executed", ex.executed),
          cell("capacity", fixed(ex.capacity, 3), "num"), numCell("acked", ex.acked),
          numCell("failed", ex.failed))))));

      // What components registered themselves (squall.metrics): a Kafka spout's lag per
      // partition, a KafkaBolt's records in flight and refusals, transactions aborted, ...
      const metricRows = st.components.flatMap(c => c.executors.flatMap(ex =>
        (ex.metrics || []).map(m => ({component: c.id, ...m}))));
      metricsBox.replaceChildren(h("h2", {}, "Metrics ", h("span", {class: "muted"},
        "(registered by the components; the last bucket's value)")), metricRows.length ? table(
        [["component"], ["task", "num"], ["metric"], ["key"], ["value", "num"]],
        metricRows.map(m => h("tr", {"data-row": `metric:${m.component}:${m.task}:${m.name}:${m.key ?? ""}`},
          cell("component", m.component), numCell("task", Number(m.task)), cell("metric", m.name),
          cell("key", m.key ?? ""), numCell("value", m.value))))
        : h("p", {class: "muted"}, "No component registered a metric."));

      const we = st.worker_error;  // the last worker a supervisor ended: over its memory, not started
      const workerError = we ? h("p", {id: "worker-error", class: "error-text"},
        `Last worker ended by its supervisor: ${we.host}:${we.port} at ${when(we.time)}: ${firstLine(we.error)}`) : "";
      const unusable = (st.unusable_slots || []).map(u => h("p", {class: "error-text", "data-row": `unusable:${u.host}:${u.port}`},
        `Slot ${u.host}:${u.port} (${u.node}) is unusable: ${u.reason}`));
      workers.replaceChildren(h("h2", {}, "Workers"), workerError, ...unusable, st.workers.length ? table(
        [["host:port (log)"], ["node"], ["executors", "num"], ["uptime"]],
        st.workers.map(w => h("tr", {"data-row": `worker:${w.host}:${w.port}`},
          cell("where", logLink(w.node, w.host, w.port)), cell("node", h("code", {}, w.node)),
          numCell("executors", w.executors), cell("uptime", duration(w.uptime)))))
        : h("p", {class: "muted"}, "No worker is assigned."));

      if (Object.keys(ops.debug || {}).length || samplesSeen === null) {
        samplesSeen = await api(`/topologies/${enc(name)}/debug?limit=50`);
      }
      if (!debugBox.firstChild) debugBox.append(...debug.nodes);  // again after a 404 emptied it
      if (!profilesBox.firstChild) profilesBox.append(...profiles.nodes);
      debug.update(st, ops, samplesSeen);
      profiles.update(st, ops);

      // Identical errors once, with how many times (nimbus groups them).
      const groups = errs.groups || errs.errors.map(e => ({...e, count: 1, first: e.time, last: e.time,
        tasks: [e.task], workers: [`${e.host}:${e.port}`]}));
      errors.replaceChildren(h("h2", {}, `Errors (${errs.errors.length}` +
        (groups.length !== errs.errors.length ? `, ${groups.length} different` : "") + ")"), groups.length ? table(
        [["last"], ["count", "num"], ["component"], ["tasks"], ["host:port"], ["error"]],
        groups.map(e => h("tr", {"data-row": "error"},
          cell("time", when(e.last)), cell("count", e.at_least ? `${num(e.count)}+` : num(e.count), "num"), cell("component", e.component),
          cell("tasks", e.tasks.join(", ")), cell("where", e.workers.join(", ")),
          cell("error", h("details", {}, h("summary", {}, lastLine(e.error)),
                           h("pre", {class: "error-text"}, e.error))))))
        : h("p", {class: "muted"}, "No errors reported."));

      confBox.replaceChildren(h("h2", {}, "Configuration"), table([["key"], ["value"]],
        Object.keys(conf.conf).sort().map(k => h("tr", {"data-row": `conf:${k}`},
          cell("key", h("code", {}, k)), cell("value", h("code", {}, JSON.stringify(conf.conf[k])))))));
    }
    return {key: `topology/${name}`, crumbs: [[name, `#/topology/${enc(name)}`]], refresh: load};
  }

  // -- worker log page ----------------------------------------------------------------------
  function logPage(name, node, port) {
    const linesIn = h("input", {id: "log-lines", type: "number", min: 1, max: 100000, value: 200});
    const follow = h("input", {id: "log-follow", type: "checkbox", checked: true});
    const pre = h("pre", {class: "log", id: "log-text"});
    const info = h("p", {class: "muted", id: "log-info"});
    let cursor = null;  // {offset, inode} of the last read, for follow
    const MAX_CHARS = 2000000;  // what the page keeps; older text is dropped
    async function reload() { cursor = null; pre.textContent = ""; await load(); }
    main.replaceChildren(h("h1", {}, "Worker log"),
      h("section", {},
        h("p", {}, "topology ", h("a", {href: `#/topology/${enc(name)}`}, name), ` · node `,
          h("code", {}, node), ` · port ${port}`),
        h("div", {class: "actions"}, h("label", {for: "log-lines"}, "last lines"), linesIn,
          h("button", {type: "button", id: "log-reload", onclick: () => { reload(); }}, "Reload"),
          h("label", {}, follow, " follow")),
        info, pre));
    async function load() {
      let reply;
      if (cursor === null) {
        reply = await api(`/topologies/${enc(name)}/logs/${enc(node)}/${port}?lines=${Number(linesIn.value) || 200}`);
        pre.textContent = reply.text;
      } else if (follow.checked) {
        reply = await api(`/topologies/${enc(name)}/logs/${enc(node)}/${port}` +
                          `?offset=${cursor.offset}&inode=${cursor.inode}`);
        if (reply.text) {
          const text = pre.textContent + reply.text;
          pre.textContent = text.length > MAX_CHARS ? text.slice(-MAX_CHARS) : text;
          pre.scrollTop = pre.scrollHeight;
        }
      } else {
        return;
      }
      cursor = {offset: reply.next_offset, inode: reply.inode};
      info.textContent = `worker ${reply.worker_id} on ${reply.host}:${reply.port}` +
                         (reply.truncated ? " (cut at the size limit)" : "");
    }
    return {key: `log/${name}/${node}/${port}`, crumbs: [[name, `#/topology/${enc(name)}`], [`log ${port}`, null]],
            refresh: load};
  }

  // -- routing and refresh ------------------------------------------------------------------
  function route() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    if (parts[0] === "topology" && parts[1]) return topologyPage(parts[1]);
    if (parts[0] === "log" && parts.length === 4 && /^\d+$/.test(parts[3])) {
      return logPage(parts[1], parts[2], Number(parts[3]));
    }
    return clusterPage();
  }

  async function refresh() {
    if (!page || busy) return;
    busy = true;
    try {
      await page.refresh();
      renders += 1;
      document.body.dataset.renders = String(renders);
      refreshState.textContent = "updated " + new Date().toLocaleTimeString();
      if (banner.dataset.kind === "load") showBanner("");
    } catch (e) {
      showBanner(`cannot load: ${e.message}`, "load");
    } finally {
      busy = false;
    }
  }

  function navigate() {
    page = route();
    showBanner("");
    const crumbs = document.getElementById("crumbs");
    crumbs.replaceChildren(...page.crumbs.flatMap(([label, href]) =>
      [" / ", href ? h("a", {href}, label) : h("span", {}, label)]));
    refresh();
  }

  document.getElementById("login").addEventListener("submit", ev => {
    ev.preventDefault();
    const input = document.getElementById("token");
    if (input.value.trim()) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    refresh();
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    refresh();
  });
  window.addEventListener("hashchange", navigate);
  setInterval(() => {
    if (document.getElementById("confirm").hidden) refresh();
  }, REFRESH_MS);
  navigate();
  // For scripts and tests: refresh now and wait for it.
  window.squallUI = {refresh: async () => { while (busy) await new Promise(r => setTimeout(r, 50)); await refresh(); },
                     get renders() { return renders; }};
})();
