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

  // Latency per step, one trace per batch size (compute) or message size (comm): x is the
  // iteration's index within its batch, live (the agent's `iteration`) and from the stored samples
  // (frontend/profiling.py latency_series), so a reload keeps the axis. The chart is made at its
  // first point: until then the card says it waits for the first measurements.
  const traces = {}, seen = {};
  let latencyDrawn = false;
  function latencyChart() {
    if (latencyDrawn) return;
    latencyDrawn = true;
    $("latency-chart").hidden = false;
    if ($("latency-waiting")) $("latency-waiting").hidden = true;
    const [x, y] = kind === "compute" ? ["iteration within its batch", "ms per step"]
      : ["repeat within its message size", "ms per all-reduce"];
    // the legend (one entry per batch) sits below the axis title, not over it
    Plotly.newPlot("latency-chart", [], layout(x, y, { margin: { t: 10, r: 10, b: 90 },
      legend: { orientation: "h", y: -0.28, yanchor: "top" } }), cfg);
  }
  function addPoint(key, x, y) {
    latencyChart();
    if (!(key in traces)) {
      traces[key] = Object.keys(traces).length;
      seen[key] = new Set();
      Plotly.addTraces("latency-chart", { name: esc(key), x: [], y: [], mode: "lines+markers", type: "scatter" });
    }
    if (typeof x !== "number") x = seen[key].size;  // an event without its index: the next one
    if (seen[key].has(x)) return;  // stored and replayed: drawn once
    seen[key].add(x);
    Plotly.extendTraces("latency-chart", { x: [[x]], y: [[y]] }, [traces[key]], 2000);
  }

  // Distribution per phase: small multiples, one panel per phase, batch on a log axis; every
  // timed iteration as a point (red where the server flagged it noisy) and the medians as a line.
  const PHASE_ORDER = ["forward", "backward", "optimizer"];
  function phasePanels(samples) {
    const byPhase = new Map();
    samples.forEach((s) => { if (!byPhase.has(s.phase)) byPhase.set(s.phase, []); byPhase.get(s.phase).push(s); });
    const rank = (p) => (PHASE_ORDER.indexOf(p) < 0 ? PHASE_ORDER.length : PHASE_ORDER.indexOf(p));
    const phases = [...byPhase.keys()].sort((a, b) => rank(a) - rank(b));
    const box = $("phase-chart");
    // Every panel goes into the grid before any is drawn: Plotly sizes a plot to its container
    // when drawn, and a panel drawn while it was the grid's only one kept the full width (its
    // right part, with the larger batches, then cut off by the narrower column).
    const plots = phases.map((phase, i) => {
      const panel = document.createElement("figure");
      panel.className = "phase-panel";
      panel.style.margin = "0";
      const title = document.createElement("figcaption");
      title.textContent = phase;  // a stored string: text, never markup
      title.style.fontWeight = "600";
      const plot = document.createElement("div");
      plot.id = `phase-panel-${i}`;
      panel.append(title, plot);
      box.append(panel);
      return plot;
    });
    phases.forEach((phase, i) => {
      const rows = byPhase.get(phase).slice().sort((a, b) => a.batch_size - b.batch_size);
      const points = rows.map((s) => ({ type: "scatter", mode: "markers", name: esc(`${s.phase} @${s.batch_size}`),
        x: s.times_ms.map(() => s.batch_size), y: s.times_ms, showlegend: false,
        marker: { size: 6, opacity: 0.6, color: s.noisy.length ? "#c62828" : "#1f5fa8" },
        text: s.times_ms.map(() => esc(s.noisy.length ? `noisy: ${s.noisy.join("; ")}; use more iterations` : `CV ${s.cv.toFixed(3)}`)),
        hovertemplate: "batch %{x}: %{y:.3f} ms<br>%{text}<extra>%{fullData.name}</extra>" }));
      points.push({ type: "scatter", mode: "lines", name: "median", showlegend: false, x: rows.map((s) => s.batch_size),
        y: rows.map((s) => s.median_ms), line: { color: "#5a6470", width: 1.5 } });
      Plotly.newPlot(plots[i].id, points, layout("batch size (log)", "ms", {
        height: 260, margin: { t: 8, r: 8, b: 44, l: 52 }, showlegend: false,
        xaxis: { type: "log", title: { text: "batch size (log)" }, tickvals: rows.map((s) => s.batch_size) },
        yaxis: { title: { text: "ms" }, rangemode: "tozero" } }), cfg);
    });
  }

  function drawStored() {
    (stored.latency || []).forEach((series) => series.times_ms.forEach((t, i) => addPoint(series.key, i, t)));
    if (kind === "compute" && $("phase-chart") && stored.compute.length) phasePanels(stored.compute);
    if (kind === "comm" && $("comm-chart") && stored.comm.length) {
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

  // Stored-profile charts (frontend/profile_charts.py computes the data, the page embeds it).
  function drawProfileCharts() {
    const el = $("chart-data");
    const charts = el ? JSON.parse(el.textContent) : {};
    const t = charts.throughput;
    if (t && $("throughput-chart")) {
      const m = t.measured;
      const traces = [
        { name: "measured", x: m.map((p) => p.batch), y: m.map((p) => p.samples_per_s), mode: "markers", type: "scatter",
          marker: { size: 9 }, error_y: { type: "data", symmetric: false, array: m.map((p) => p.err_plus),
          arrayminus: m.map((p) => p.err_minus) },
          text: m.map((p) => `${p.iteration_ms.toFixed(1)} ms ±${p.sd_ms.toFixed(1)} over ${p.iterations} iterations`) },
        { name: "fitted (piecewise linear)", x: t.fit.batch, y: t.fit.samples_per_s, mode: "lines", type: "scatter",
          line: { width: 2 } },
      ];
      if (t.knees.length) {
        traces.push({ name: "knee", x: t.knees.map((k) => k.batch), y: t.knees.map((k) => k.samples_per_s),
          mode: "markers+text", type: "scatter", marker: { symbol: "diamond", size: 12, color: "#b26a00" },
          text: t.knees.map((k) => esc(`knee at ${k.batch} (${k.phase})`)), textposition: "top right" });
      }
      const shapes = [], annotations = [];
      if (t.max_batch) {
        shapes.push({ type: "line", xref: "x", yref: "paper", x0: t.max_batch.batch, x1: t.max_batch.batch, y0: 0, y1: 1,
          line: { color: "#c62828", dash: "dash" } });
        annotations.push({ xref: "x", yref: "paper", x: t.max_batch.batch, y: 1, yanchor: "bottom", xanchor: "right", showarrow: false,
          text: `largest batch that fits: ${t.max_batch.batch}${t.max_batch.capped ? "+" : ""}`, font: { color: "#c62828" } });
      }
      const xs = m.map((p) => p.batch).concat(t.fit.batch, t.max_batch ? [t.max_batch.batch] : []);
      const ys = m.map((p) => p.samples_per_s + p.err_plus).concat(t.fit.samples_per_s);
      Plotly.newPlot("throughput-chart", traces, layout("per-worker batch size", esc(t.unit), {
        shapes, annotations, margin: { t: 30, r: 10 },
        xaxis: { title: { text: "per-worker batch size" }, range: [0, Math.max(...xs) * 1.08] },
        yaxis: { title: { text: esc(t.unit) }, range: [0, Math.max(...ys) * 1.12] },
        legend: { orientation: "h", y: -0.2 } }), cfg);
    }
    if (charts.buckets && charts.buckets.length && $("buckets-chart")) {
      const traces = charts.buckets.map((g) => ({
        type: "bar", orientation: "h", name: `batch ${g.batch}`,
        y: g.buckets.map((b) => `bucket ${b.index}`), x: g.buckets.map((b) => b.ready_ms),
        text: g.buckets.map((b) => `${b.size_mib.toFixed(2)} MiB, ${b.num_params} params, ${(100 * b.ready_fraction).toFixed(0)} % of backward`),
        hovertemplate: "%{y}: ready at %{x:.1f} ms<br>%{text}<extra>%{fullData.name}</extra>", textposition: "none",
      }));
      const shapes = charts.buckets.map((g) => ({ type: "line", xref: "x", yref: "paper", x0: g.backward_ms,
        x1: g.backward_ms, y0: 0, y1: 1, line: { dash: "dot", color: "#5a6470" } }));
      Plotly.newPlot("buckets-chart", traces, layout("ms after the backward pass started", "", {
        barmode: "group", shapes, yaxis: { autorange: "reversed" }, legend: { orientation: "h", y: -0.2 } }), cfg);
    }
    if (charts.jobs && charts.jobs.length && $("jobs-chart")) {
      const j = charts.jobs.filter((r) => r.observed_median_s !== null);
      const names = charts.jobs.map((r) => `job ${r.job}`);
      Plotly.newPlot("jobs-chart", [
        { type: "bar", name: "predicted p50", x: names, y: charts.jobs.map((r) => r.predicted_iter_s),
          error_y: { type: "data", symmetric: false, array: charts.jobs.map((r) => r.predicted_iter_p90_s - r.predicted_iter_s),
                     arrayminus: charts.jobs.map(() => 0) } },
        { type: "bar", name: "measured median", x: j.map((r) => `job ${r.job}`), y: j.map((r) => r.observed_median_s) },
      ], layout("job", "s per iteration", { barmode: "group" }), cfg);
    }
    const a = charts.allreduce;
    if (a && $("allreduce-chart")) {
      const m = a.measured;
      const traces = [{ name: "measured (median, p10–p90)", x: m.map((p) => p.size_bytes), y: m.map((p) => p.median_us),
        mode: "markers", type: "scatter", marker: { size: 8 },
        error_y: { type: "data", symmetric: false, array: m.map((p) => p.p90_us - p.median_us),
                   arrayminus: m.map((p) => p.median_us - p.p10_us) } }];
      if (a.model) {
        traces.push({ name: esc(a.model.label), x: a.model.size_bytes, y: a.model.p50_us, mode: "lines", type: "scatter" });
        if (a.model.p90_us) {
          traces.push({ name: "model p90", x: a.model.size_bytes, y: a.model.p90_us, mode: "lines", type: "scatter",
            line: { dash: "dot" } });
        }
      }
      Plotly.newPlot("allreduce-chart", traces, layout("message bytes", "µs per all-reduce", {
        xaxis: { type: "log", title: { text: "message bytes" } }, yaxis: { type: "log", title: { text: "µs per all-reduce" } },
        legend: { orientation: "h", y: -0.25 } }), cfg);
    }
  }
  drawProfileCharts();

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
        addPoint(key, msg.iteration, msg.time_ms);
      }
    }
  }
  function onStatus(msg) {
    $("status").textContent = msg.status;
    $("progress").value = Math.max($("progress").value, msg.progress || 0);
    if (msg.error) { $("error").hidden = false; $("error-text").textContent = msg.error; }
    if (["failed", "cancelled"].includes(msg.status) && !latencyDrawn && $("latency-waiting")) {
      $("latency-waiting").textContent = "No measurements were stored: the run ended before it timed an iteration.";
    }
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
