// Catalog page: client-side column sort (the server sorts too, via ?sort=) and the price chart.
(function () {
  "use strict";
  // Plotly renders a subset of HTML in names, text and hover labels (links, styles): stored
  // strings (instance type names from a catalog CSV, agent-reported values) go in as text.
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const table = document.getElementById("catalog-table");
  if (table) {
    table.querySelectorAll("thead th[data-key]").forEach((th, col) => {
      th.querySelector("a").addEventListener("click", (ev) => {
        ev.preventDefault();
        const asc = th.getAttribute("aria-sort") !== "ascending";
        table.querySelectorAll("thead th").forEach((h) => h.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        const numeric = th.dataset.numeric === "1";
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort((a, b) => {
          const x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
          if (x === "" && y !== "") return 1;   // unknown prices last, whatever the direction
          if (y === "" && x !== "") return -1;
          const c = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
          return asc ? c : -c;
        });
        rows.forEach((r) => body.appendChild(r));
        const url = new URL(window.location);
        url.searchParams.set("sort", (asc ? "" : "-") + th.dataset.key);
        history.replaceState(null, "", url);
      });
    });
  }
  const dataEl = document.getElementById("history-data");
  const chart = document.getElementById("history-chart");
  const data = dataEl ? JSON.parse(dataEl.textContent) : null;
  if (!data || !chart || typeof Plotly === "undefined") return;
  const traces = Object.entries(data.series).map(([name, s]) => ({
    name: esc(name), x: s.x, y: s.y, type: "scatter", mode: s.x.length > 1 ? "lines+markers" : "markers",
    line: { shape: "hv", dash: s.market === "on-demand" ? "dash" : "solid" },
  }));
  // One observation per series (the bundled snapshot) would give Plotly a zero-width time axis:
  // show a week around it instead, so the points read as "prices on that day".
  const times = traces.flatMap((t) => t.x.map((x) => Date.parse(x)));
  const lo = Math.min(...times), hi = Math.max(...times), day = 86400000;
  const xaxis = { title: { text: "observed" }, type: "date" };
  if (hi - lo < day) xaxis.range = [new Date(lo - 3 * day).toISOString(), new Date(hi + 3 * day).toISOString()];
  Plotly.newPlot(chart, traces, {
    margin: { t: 10, r: 10 }, yaxis: { title: { text: "USD / hour" }, rangemode: "tozero" },
    xaxis, legend: { orientation: "h", y: -0.25 },
  }, { responsive: true, displaylogo: false });
})();
