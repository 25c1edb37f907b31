// Plan page while the plan is queued or running: the progress bar follows the plan's websocket
// and, when no message came for a while (no Redis: the worker's pushes stay in its own process),
// polls /api/v1/plans/<id>/progress/. A finished plan reloads the page, which then shows it.
(function () {
  "use strict";
  const box = document.getElementById("plan-progress");
  if (!box) return;
  const planId = box.dataset.plan;
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 2000;
  let finished = false, lastMessage = Date.now(), ws = null;

  function show(msg) {
    lastMessage = Date.now();
    if (finished || !msg || !msg.status) return;
    // A running plan whose worker stopped answering (planner/app/solving.py stale_notice): say so,
    // and what the workers' recovery will do, rather than "running" with a bar that never moves.
    $("plan-status").textContent = msg.stale ? `${msg.status} (stalled)` : msg.status;
    $("plan-stale-note").hidden = !msg.stale;
    $("plan-stale-text").textContent = msg.stale ? (msg.notice || "its worker stopped answering") : "";
    $("plan-phase").textContent = msg.phase || "—";
    if (typeof msg.fraction === "number") $("plan-bar").value = msg.fraction;
    // Before the search size is known there is no "0 of ~0": say what is happening instead.
    $("plan-counts").textContent = msg.estimated_total
      ? `${(msg.evaluated || 0).toLocaleString("en-US")} of ~${msg.estimated_total.toLocaleString("en-US")} cluster sizes evaluated (an instance type at one node count)`
      : "counting the cluster sizes to evaluate…";
    $("plan-queued-note").hidden = msg.status !== "queued";
    box.dataset.status = msg.status;
    if (msg.finished) {
      finished = true;
      if (ws) ws.close();
      const form = $("plan-cancel-form");
      if (form) form.hidden = true;
      setTimeout(() => window.location.reload(), 300);  // the server renders the result
    }
  }

  let delay = 500;
  function connect() {
    ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/plans/${planId}/`);
    // one message, or several gathered into an array when they came fast (srifty_web/live.py)
    ws.onmessage = (ev) => {
      const data = JSON.parse(ev.data);
      (Array.isArray(data) ? data : [data]).forEach(show);
    };
    ws.onopen = () => { delay = 500; };
    ws.onclose = () => {
      if (!finished) { setTimeout(connect, delay); delay = Math.min(delay * 2, 10000); }
    };
  }
  connect();

  const timer = setInterval(async () => {
    if (finished) { clearInterval(timer); return; }
    if (Date.now() - lastMessage < POLL_MS) return;
    try {
      const resp = await fetch(`/api/v1/plans/${planId}/progress/`, { headers: { Accept: "application/json" } });
      if (resp.ok) show(await resp.json());
    } catch (err) { /* try again next tick */ }
  }, POLL_MS);
})();
