// Run page: follows the run's websocket; updates the progress bar and the live charts.
// Tables are rendered by the server; without JavaScript the page still shows everything stored.
(function () {
  "use strict";
  // Plotly renders a subset of HTML in names, text and hover labels (links, styles): stored
  // strings (instance type names from a catalog CSV, agent-reported values) go in as text.
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const state = document.getElementById("run-state");
  if (!state || typeof Plotly === "undefined") return;
  const runId = state.dataset.run, kind = state.dataset.kind;
  const stored = JSON.parse(document.getElementById("samples-data").textContent);
  const $ = (id) => document.getElementById(id);
  const layout = (x, y, extra) => Object.assign({ margin: { t: 10, r: 10 }, xaxis: { title: { text: x } },
    yaxis: { title: { text: y } }, legend: { orientation: "h" } }, extra || {});
  const cfg = { responsive: true, displaylogo: false };

  // Latency per step, one trace per batch size (compute) or message size (comm).
  const traces = {};
  function addPoint(key, x, y) {
    if (!(key in traces)) {
      traces[key] = Object.keys(traces).length;
      Plotly.addTraces("latency-chart", { name: esc(key), x: [], y: [], mode: "lines+markers", type: "scatter" });
    }
    Plotly.extendTraces("latency-chart", { x: [[x]], y: [[y]] }, [traces[key]], 2000);
  }
  Plotly.newPlot("latency-chart", [], layout("event #", "ms per step"), cfg);

  function drawStored() {
    if (kind === "compute" && $("phase-chart")) {
      const box = stored.compute.map((s) => ({ type: "box", name: esc(`${s.phase} @${s.batch_size}`), y: s.times_ms,
        boxpoints: "all", jitter: 0.3 }));
      Plotly.react("phase-chart", box, layout("phase @ batch", "ms", { legend: { orientation: "h", y: -0.3 } }), cfg);
      if (!Object.keys(traces).length) {
        stored.compute.filter((s) => s.phase === "forward").forEach((s) =>
          s.times_ms.forEach((t, i) => addPoint(`batch ${s.batch_size}`, i, t)));
      }
    }
    if (kind === "comm" && $("comm-chart")) {
      const x = stored.comm.map((s) => s.size_bytes), bw = stored.comm.map((s) => s.busbw_gbps);
      const lo = stored.comm.map((s) => s.busbw_gbps * (s.median_ms / Math.max(...s.times_ms)));
      const hi = stored.comm.map((s) => s.busbw_gbps * (s.median_ms / Math.min(...s.times_ms)));
      Plotly.react("comm-chart", [{ x, y: bw, name: "bus bandwidth (median)", mode: "lines+markers",
        error_y: { type: "data", symmetric: false, array: hi.map((h, i) => h - bw[i]),
                   arrayminus: bw.map((b, i) => b - lo[i]) } }],
        layout("message bytes", "Gb/s", { xaxis: { type: "log", title: { text: "message bytes" } } }), cfg);
    }
  }
  drawStored();

  let lastMessage = Date.now();
  function onMessage(msg) {
    lastMessage = Date.now();
    if (msg.type === "snapshot") { (msg.events || []).forEach(onMessage); onStatus(msg); return; }
    if (msg.type === "status") { onStatus(msg); return; }
    if (msg.type === "progress") {
      if (typeof msg.fraction === "number") $("progress").value = Math.max($("progress").value, msg.fraction);
      if (msg.phase) $("phase").textContent = msg.phase;
      if (typeof msg.time_ms === "number") {
        const key = msg.batch_size !== undefined ? `batch ${msg.batch_size}` : `${msg.size_bytes} B`;
        addPoint(key, msg.seq, msg.time_ms);
      }
    }
  }
  function onStatus(msg) {
    $("status").textContent = msg.status;
    $("progress").value = Math.max($("progress").value, msg.progress || 0);
    if (msg.error) { $("error").hidden = false; $("error-text").textContent = msg.error; }
    if (["succeeded", "failed", "cancelled"].includes(msg.status) && state.dataset.status !== msg.status) {
      state.dataset.status = msg.status;
      if (msg.status === "succeeded") setTimeout(() => window.location.reload(), 800);  // show stored samples
    }
  }
  if (["succeeded", "failed", "cancelled"].includes(state.dataset.status)) return;
  let delay = 500;
  function connect() {
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/profiling-runs/${runId}/`);
    // one message, or several gathered into an array when they came fast (srifty_web/live.py)
    ws.onmessage = (ev) => {
      const data = JSON.parse(ev.data);
      (Array.isArray(data) ? data : [data]).forEach(onMessage);
    };
    ws.onopen = () => { delay = 500; };
    ws.onclose = () => {
      if (!["succeeded", "failed", "cancelled"].includes(state.dataset.status)) {
        setTimeout(connect, delay); delay = Math.min(delay * 2, 10000);  // reconnect with backoff
      }
    };
  }
  connect();
  // Starting and watching a run happen in the background worker, another process: with the
  // in-process channel layer (./run's default) those changes reach this page only by polling.
  setInterval(async () => {
    if (["succeeded", "failed", "cancelled"].includes(state.dataset.status) || Date.now() - lastMessage < 5000) return;
    try {
      const resp = await fetch(`/api/v1/profiling-runs/${runId}/`, { headers: { Accept: "application/json" } });
      if (resp.ok) onStatus(await resp.json());
    } catch (err) { /* try again next tick */ }
  }, 5000);
})();
