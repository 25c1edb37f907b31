// Plan page: the cost/time scatter of every evaluated configuration, Pareto frontier,
// ranked plans, baselines, and the deadline / budget lines. The table below works without JS.
(function () {
  "use strict";
  // Plotly renders a subset of HTML in names, text and hover labels (links, styles): stored
  // strings (instance type names from a catalog CSV, agent-reported values) go in as text.
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const el = document.getElementById("chart-data");
  if (!el || typeof Plotly === "undefined") return;
  const d = JSON.parse(el.textContent);
  const hover = (p) => `${esc(p.label)}<br>$${p.total_usd.toFixed(2)} · ${p.time_h.toFixed(2)} h` +
    (p.hourly_usd !== undefined ? ` · $${p.hourly_usd.toFixed(2)}/h · ${Math.round(p.throughput_sps)} samples/s` : "");
  const feasible = d.points.filter((p) => p.feasible), other = d.points.filter((p) => !p.feasible);
  const scatter = (pts, name, marker) => ({ type: "scattergl", mode: "markers", name, x: pts.map((p) => p.total_usd),
    y: pts.map((p) => p.time_h), text: pts.map(hover), hoverinfo: "text", marker });
  const traces = [
    scatter(other, "violates a constraint", { size: 4, color: "rgba(150,150,150,0.35)" }),
    scatter(feasible, "feasible", { size: 5, color: "rgba(31,111,235,0.55)" }),
    { type: "scatter", mode: "lines+markers", name: "Pareto frontier", x: d.pareto.map((p) => p.total_usd),
      y: d.pareto.map((p) => p.time_h), text: d.pareto.map(hover), hoverinfo: "text",
      line: { color: "#2e7d32", shape: "hv" }, marker: { size: 7 } },
    { type: "scatter", mode: "markers+text", name: "ranked plans", x: d.plans.map((p) => p.total_usd),
      y: d.plans.map((p) => p.time_h), text: d.plans.map((p) => (p.rank === 1 ? "#1" : "")), textposition: "top center",
      hovertext: d.plans.map(hover), hoverinfo: "text", marker: { size: 11, color: "#f59e0b", symbol: "star" } },
    { type: "scatter", mode: "markers", name: "baselines", x: d.baselines.map((b) => b.total_usd),
      y: d.baselines.map((b) => b.time_h), text: d.baselines.map((b) => `${esc(b.name)}: ${hover(b)}`), hoverinfo: "text",
      marker: { size: 11, color: "#c62828", symbol: "diamond" } },
  ];
  // Log axes labelled with their units at 1-2-5 steps ("$50", "30 min", "2 h"): Plotly's own
  // log labels abbreviate 0.5 as "5", which reads as five hours.
  const ticks = (values, label) => {
    const v = values.filter((x) => x > 0 && Number.isFinite(x));
    if (!v.length) return {};
    const lo = Math.min(...v), hi = Math.max(...v), vals = [];
    for (let e = Math.floor(Math.log10(lo)) - 1; e <= Math.ceil(Math.log10(hi)) + 1; e++) {
      for (const m of [1, 2, 5]) {
        const x = m * Math.pow(10, e);
        if (x >= lo / 2.5 && x <= hi * 2.5) vals.push(x);
      }
    }
    return { tickvals: vals, ticktext: vals.map(label) };
  };
  const usd = (x) => (x >= 1 ? `$${x.toLocaleString("en-US", { maximumFractionDigits: 0 })}` : `$${x}`);
  const hrs = (x) => (x < 1 ? `${Math.round(x * 60)} min` : `${x} h`);
  const all = d.points.concat(d.plans, d.baselines);
  const shapes = [];
  if (d.deadline_hours) shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: d.deadline_hours,
    y1: d.deadline_hours, line: { dash: "dash", color: "#c62828" } });
  if (d.budget_usd) shapes.push({ type: "line", yref: "paper", y0: 0, y1: 1, x0: d.budget_usd, x1: d.budget_usd,
    line: { dash: "dash", color: "#c62828" } });
  Plotly.newPlot("tradeoff-chart", traces, {
    margin: { t: 10, r: 10 }, shapes, legend: { orientation: "h", y: -0.2 },
    xaxis: { title: { text: "total cost (USD)" }, type: "log", ...ticks(all.map((p) => p.total_usd).concat([d.budget_usd || 0]), usd) },
    yaxis: { title: { text: "time to finish" }, type: "log", ...ticks(all.map((p) => p.time_h).concat([d.deadline_hours || 0]), hrs) },
  }, { responsive: true, displaylogo: false });
})();
