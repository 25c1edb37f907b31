// Job page: live chart of observed iteration time (one trace per rank) against the predicted
// p50 and p90, plus status, spend and events from the job's websocket. The server renders the
// tables and events; without JavaScript the page still shows everything stored.
(function () {
  "use strict";
  // Plotly renders a subset of HTML in names, text and hover labels (links, styles): stored
  // strings (instance type names from a catalog CSV, agent-reported values) go in as text.
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const state = document.getElementById("job-state");
  if (!state || typeof Plotly === "undefined") return;
  const jobId = state.dataset.job;
  const data = JSON.parse(document.getElementById("chart-data").textContent);
  const $ = (id) => document.getElementById(id);
  const FINISHED = ["succeeded", "failed", "stopped"];
  const cfg = { responsive: true, displaylogo: false };
  const layout = { margin: { t: 10, r: 10 }, xaxis: { title: { text: "iteration" } },
    yaxis: { title: { text: "seconds per iteration" }, rangemode: "tozero" }, legend: { orientation: "h" } };

  // Trace 0: predicted p50, trace 1: predicted p90, then one trace per rank.
  let xmin = Infinity, xmax = -Infinity;
  const rankTrace = {};
  const predicted = (name, dash) => ({ name, x: [], y: [], mode: "lines", line: { dash, width: 2 }, hoverinfo: "name+y" });
  const base = [predicted("predicted p50", "solid"), predicted("predicted p90", "dash")];
  Plotly.newPlot("iter-chart", base, layout, cfg);

  function stretchPredicted() {
    if (!isFinite(xmin)) return;
    Plotly.restyle("iter-chart", { x: [[xmin, xmax], [xmin, xmax]],
      y: [[data.predicted_iter_s, data.predicted_iter_s], [data.predicted_iter_p90_s, data.predicted_iter_p90_s]] }, [0, 1]);
  }
  function addReports(reports) {
    const byRank = {};
    reports.forEach((r) => { (byRank[r.rank] = byRank[r.rank] || { x: [], y: [] }); byRank[r.rank].x.push(r.iteration); byRank[r.rank].y.push(r.iter_time_s);
      xmin = Math.min(xmin, r.iteration); xmax = Math.max(xmax, r.iteration); });
    Object.keys(byRank).forEach((rank) => {
      if (!(rank in rankTrace)) {
        rankTrace[rank] = 2 + Object.keys(rankTrace).length;
        Plotly.addTraces("iter-chart", { name: esc(`rank ${rank}`), x: [], y: [], mode: "markers", type: "scattergl", marker: { size: 4 } });
      }
      Plotly.extendTraces("iter-chart", { x: [byRank[rank].x], y: [byRank[rank].y] }, [rankTrace[rank]], 5000);
    });
    if (reports.length) { $("no-reports").hidden = true; stretchPredicted(); }
  }
  addReports(data.series || []);

  // Checkpoints, interruptions, their cost and the deadline guard: re-drawn from the job's API
  // whenever an event says one of them changed (textContent only: the values are stored strings).
  const RESILIENCE = ["checkpoint", "spot_interruption", "node_lost", "interruption_cost", "replacement", "resumed", "deadline_guard"];
  // As the server's |usd filter: two decimals with separators, "<$0.01" for a positive sliver.
  const usd = (v) => {
    const x = Number(v);
    if (x > 0 && x < 0.005) return "<$0.01";
    return `$${x.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
  };
  const when = (iso) => (iso || "").replace("T", " ").slice(0, 19);
  function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.append(td); return td; }
  function fillTable(id, rows, empty, cols) {
    const body = document.querySelector(`#${id} tbody`);
    body.replaceChildren();
    if (!rows.length) { const tr = document.createElement("tr"); const td = cell(tr, empty, "muted"); td.colSpan = cols; body.append(tr); return; }
    rows.forEach((row) => body.append(row));
  }
  function renderResilience(r) {
    if (!r || !$("resilience")) return;
    $("ckpt-interval").textContent = `${Number(r.checkpoint_interval_min).toFixed(1)} min`;
    $("ckpt-why").textContent = r.checkpoint_interval_why;
    $("guard").textContent = r.guard;
    $("interruptions-cost").textContent = usd(r.cost_usd);
    $("interruptions-lost").textContent = `${Number(r.lost_min).toFixed(1)} min`;
    fillTable("interruptions-table", r.interruptions.map((i) => {
      const tr = document.createElement("tr");
      cell(tr, when(i.at)); cell(tr, `${i.instance_id} ${i.instance_type} ${i.market}`); cell(tr, i.cause);
      cell(tr, i.checkpoint_iteration === null ? "start" : String(i.checkpoint_iteration), "num");
      cell(tr, i.lost_min.toFixed(1), "num"); cell(tr, i.restart_min.toFixed(1) + (i.restart_measured ? "" : " (assumed)"), "num");
      cell(tr, usd(i.cost_usd), "num");
      cell(tr, `${i.replacement_ids.join(", ") || "—"} ${i.replacement_market}${i.detail ? " · " + i.detail : ""}`);
      cell(tr, i.resumed_iteration === null ? "—" : `iteration ${i.resumed_iteration}`);
      return tr;
    }), "No interruptions.", 9);
    fillTable("checkpoints-table", r.checkpoints.map((c) => {
      const tr = document.createElement("tr");
      cell(tr, when(c.at)); cell(tr, String(c.iteration), "num"); cell(tr, c.samples === null ? "—" : String(c.samples), "num"); cell(tr, c.path || "—");
      return tr;
    }), "No checkpoint reported yet.", 4);
  }
  let refreshing = null;
  function refreshResilience() {
    if (refreshing) return;
    refreshing = setTimeout(async () => {
      refreshing = null;
      try {
        const resp = await fetch(`/api/v1/jobs/${jobId}/`, { headers: { Accept: "application/json" } });
        if (resp.ok) renderResilience((await resp.json()).resilience);
      } catch (err) { /* the next event tries again */ }
    }, 300);
  }

  function addEvent(ev) {
    const key = `${ev.kind}|${ev.message}`;
    if (shown.has(key)) return;
    shown.add(key);
    if (RESILIENCE.includes(ev.kind)) refreshResilience();
    const list = $("events"), none = $("no-events");
    if (none) none.remove();
    const li = document.createElement("li");
    li.className = `event-${ev.kind}`;
    li.dataset.key = key;
    const at = document.createElement("span"); at.className = "muted"; at.textContent = (ev.at || "").replace("T", " ").slice(0, 19);
    const kind = document.createElement("span"); kind.className = "badge"; kind.textContent = ev.kind;
    li.append(at, " ", kind, " ", ev.message);
    list.prepend(li);
  }
  function onStatus(msg) {
    $("status").textContent = msg.status;
    // spend_usd is a decimal string (the API's money rule), from the websocket and the REST poll alike
    const spend = msg.spend_usd === null || msg.spend_usd === undefined ? NaN : Number(msg.spend_usd);
    if (Number.isFinite(spend)) $("spend").textContent = `$${spend.toFixed(spend < 1 ? 4 : 2)}`;
    $("drift").style.display = msg.drift ? "" : "none";  // .badge sets display, so not the hidden attribute
    if (msg.reason) { $("reason").hidden = false; $("reason").textContent = msg.reason; }
    if (state.dataset.status !== msg.status) {
      const was = state.dataset.status;
      state.dataset.status = msg.status;
      if (was === "launching" || FINISHED.includes(msg.status)) setTimeout(() => window.location.reload(), 800);  // instances, buttons
    }
  }
  let lastMessage = Date.now();
  const shown = new Set(Array.from(document.querySelectorAll("#events li")).map((li) => li.dataset.key).filter(Boolean));
  function onMessage(msg) {
    lastMessage = Date.now();
    if (msg.type === "snapshot") { onStatus(msg); return; }  // reports and events are already on the page
    if (msg.type === "status") onStatus(msg);
    else if (msg.type === "report") addReports([msg]);
    else if (msg.type === "event") addEvent(msg);
  }
  if (FINISHED.includes(state.dataset.status)) return;
  let delay = 500;
  function connect() {
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/jobs/${jobId}/`);
    // one message, or several gathered into an array when they came fast (srifty_web/live.py)
    ws.onmessage = (ev) => {
      const data = JSON.parse(ev.data);
      (Array.isArray(data) ? data : [data]).forEach(onMessage);
    };
    ws.onopen = () => { delay = 500; };
    ws.onclose = () => {
      if (!FINISHED.includes(state.dataset.status)) { setTimeout(connect, delay); delay = Math.min(delay * 2, 10000); }
    };
  }
  connect();
  // The background worker is another process: with the in-process channel layer (./run's
  // default) its broadcasts cannot reach this page, so a quiet websocket is backed by polling.
  setInterval(async () => {
    if (FINISHED.includes(state.dataset.status) || Date.now() - lastMessage < 5000) return;
    try {
      const resp = await fetch(`/api/v1/jobs/${jobId}/`, { headers: { Accept: "application/json" } });
      if (!resp.ok) return;
      const job = await resp.json();
      (job.events || []).forEach(addEvent);
      renderResilience(job.resilience);
      onStatus({ status: job.status, spend_usd: job.spend_usd, drift: job.drift_since !== null,
                 reason: job.status_reason });
    } catch (err) { /* offline for a moment: try again next tick */ }
  }, 5000);
})();
