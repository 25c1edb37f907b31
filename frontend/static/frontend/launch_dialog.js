// Plan page: the launch dialog. Pick an option, paste or upload a task file (and, when its
// workdir is a folder on the user's disk, that folder as a .tar.gz/.zip archive), then
// 1. POST /api/v1/jobs/precheck/  (credentials, quotas, offerings, subnets; each failure with its fix)
// 2. POST /api/v1/jobs/preview/   (the task file's errors come back with line and field)
// 3. POST /api/v1/jobs/           (with the preview's confirmation id) -> the job's page.
//    2 and 3 ask the pre-checks again on the server: a failure there is a 400
//    {"prechecks": [checks]}, shown like 1's, and nothing was created.
//    The button stays disabled until the answer (and while the job's page loads): one click, one
//    request. A confirmation launches one job; a reuse gets 409 with that job's id, shown as a link.
// With an archive, 2 and 3 go as multipart with the same file (the confirmation binds its digest).
// A task file that leaves an env or secret to the launch (SkyPilot's `HF_TOKEN: null`) is refused
// by 2 naming each (task problems with `env` and `secret`): the dialog then asks for each value,
// one input per name (a password input for a secret), and sends them as `env` with 2 and 3 (the
// confirmation binds them). Values are never shown back: the preview's task has them redacted.
// Every text from the server or the file goes in as textContent, never as HTML.
(function () {
  "use strict";
  const dialog = document.getElementById("launch-dialog");
  const opener = document.getElementById("launch-open");
  if (!dialog || !opener) return;
  const $ = (id) => document.getElementById(id);
  const form = $("launch-dialog-form");
  const plan = Number(dialog.dataset.plan);
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  const rank = $("launch-rank"), text = $("launch-task-text"), spend = $("launch-spend"), hours = $("launch-hours");
  const go = $("launch-go");
  const workdirBox = $("launch-workdir"), workdirFile = $("launch-workdir-file"), workdirError = $("launch-workdir-error");
  let prepared = null;

  // The values asked for at launch: a fieldset built here, before the limits row.
  const envBox = document.createElement("fieldset");
  envBox.id = "launch-envs";
  envBox.hidden = true;
  const envLegend = document.createElement("legend");
  envLegend.textContent = "Values the task file leaves to the launch";
  const envHelp = document.createElement("p");
  envHelp.className = "muted";
  envHelp.textContent = "Each is set on every node, as sky launch --env sets it. A secret is sent once and never shown back.";
  const envFields = document.createElement("div");
  envFields.id = "launch-env-fields";
  const envError = document.createElement("p");
  envError.id = "launch-env-errors";
  envError.className = "error";
  envError.setAttribute("role", "alert");
  envError.hidden = true;
  envBox.append(envLegend, envHelp, envFields, envError);
  spend.closest(".launch-row").before(envBox);

  const el = (tag, cls, content) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (content !== undefined) node.textContent = content;
    return node;
  };
  const show = (node, on) => { node.hidden = !on; };
  const money = (v) => "$" + Number(v).toFixed(2);
  const size = (n) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KB` : `${n} bytes`);

  function localWorkdir() {
    // A top-level "workdir:" that is not git:URL@ref names a folder on the user's disk.
    const m = /^workdir:[ \t]*["']?([^"'#\n]*)/m.exec(text.value);
    return Boolean(m && m[1].trim() && !m[1].trim().startsWith("git:"));
  }

  function syncWorkdir() {
    show(workdirBox, localWorkdir() || workdirFile.files.length > 0 || !workdirError.hidden);
  }

  function defaults() {
    // As the launch page suggests: 1.5x the p90 time (at least half an hour), and its cost.
    const opt = rank.selectedOptions[0];
    const h = Math.max(0.5, Math.ceil(Number(opt.dataset.p90 || 1) * 1.5 * 10) / 10);
    hours.value = String(h);
    spend.value = String(Math.ceil(Number(opt.dataset.hourly || 0) * h));
    $("launch-sky").href = `/api/v1/jobs/sky-export/?plan=${plan}&rank=${rank.value}`;
  }

  function envInputs() {
    return Array.from(envFields.querySelectorAll("input[data-env]"));
  }

  function askEnv(name, secret) {
    // One input per name the server asked for; a name asked again keeps what was typed.
    if (envInputs().some((i) => i.dataset.env === name)) return;
    const label = el("label", "launch-env");
    label.style.cssText = "display:flex;gap:.5rem;align-items:center;margin:.3rem 0";  // one name a row
    const input = document.createElement("input");
    input.type = secret ? "password" : "text";
    input.autocomplete = secret ? "new-password" : "off";  // no browser keeps or offers a secret
    input.spellcheck = false;
    input.size = 40;
    input.dataset.env = name;
    input.id = `launch-env-${name}`;
    input.addEventListener("input", reset);
    const said = el("span", "", secret ? " (secret)" : "");
    said.prepend(el("code", "", name));
    said.style.minWidth = "16rem";
    label.append(said, input);
    envFields.append(label);
    show(envBox, true);
  }

  function pruneEnvs() {
    // A name the task file no longer mentions is no longer asked for.
    for (const input of envInputs()) {
      if (!new RegExp(`\\b${input.dataset.env}\\b`).test(text.value)) input.closest("label").remove();
    }
    show(envBox, envInputs().length > 0);
  }

  function envValues() {
    // What was typed; an empty input sends nothing, so the server asks for it again.
    const values = {};
    for (const input of envInputs()) if (input.value !== "") values[input.dataset.env] = input.value;
    return values;
  }

  function clearEnvs() {
    envFields.replaceChildren();
    show(envBox, false);
  }

  function reset() {
    prepared = null;
    show(envError, false);
    show(go, false);
    show($("launch-confirm"), false);
    show($("launch-task-errors"), false);
    show($("launch-field-errors"), false);
    show($("launch-workdir-summary"), false);
    show(workdirError, false);
    syncWorkdir();
    $("launch-review").disabled = false;
  }

  async function post(url, body, archive) {
    // JSON, or multipart with the workdir archive (the browser sets the boundary).
    const headers = { "X-CSRFToken": csrf, Accept: "application/json" };
    let payload;
    if (archive) {
      payload = new FormData();
      for (const [k, v] of Object.entries(body)) {
        if (k === "env") for (const [name, value] of Object.entries(v)) payload.append(`env.${name}`, value);
        else payload.append(k, String(v));
      }
      payload.append("workdir_archive", archive, archive.name);
    } else {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
    const resp = await fetch(url, { method: "POST", credentials: "same-origin", headers, body: payload });
    let data = {};
    try { data = await resp.json(); } catch (e) { data = { detail: `HTTP ${resp.status}` }; }
    return { status: resp.status, data };
  }

  function showChecks(result) {
    const list = $("launch-check-list");
    list.replaceChildren();
    if (result.region) $("launch-region").textContent = result.region;
    for (const c of result.checks) {
      const item = el("li", `check check-${c.status}`);
      item.dataset.name = c.name;
      item.dataset.status = c.status;
      item.append(el("strong", "", `${c.status === "ok" ? "✓" : c.status === "warning" ? "!" : "✗"} ${c.name}: `));
      item.append(el("span", "check-message", c.message));
      if (c.fix) {
        const fix = el("div", "check-fix");
        fix.append(el("strong", "", "Fix: "), el("span", "", c.fix));
        item.append(fix);
      }
      list.append(item);
    }
    show($("launch-checks"), true);
  }

  function showErrors(data) {
    // task: [{line, field, message}] from the task file; other fields: ["message"].
    const box = $("launch-task-errors"), list = box.querySelector("ul");
    list.replaceChildren();
    const others = [];
    const asked = [];
    if (Array.isArray(data.prechecks)) showChecks({ checks: data.prechecks });  // refused on review or submit
    for (const [field, problems] of Object.entries(data)) {
      if (field === "prechecks") continue;
      for (const p of Array.isArray(problems) ? problems : [problems]) {
        if (field === "task" && p && typeof p === "object" && p.env) {
          askEnv(p.env, Boolean(p.secret));  // left to the launch: an input, not an error
          asked.push(p.env);
        } else if (field === "env") {
          continue;  // shown with the inputs, below
        } else if (field === "workdir_archive") {
          workdirError.textContent = `workdir archive: ${p}`;
          show(workdirError, true);
          show(workdirBox, true);
        } else if (field === "task" && typeof p === "object" && p) {
          const item = el("li", "task-error", `${p.line ? `line ${p.line} · ` : ""}${p.field}: ${p.message}`);
          if (p.line) item.dataset.line = p.line;
          item.dataset.field = p.field;
          list.append(item);
        } else if (field === "task") {
          list.append(el("li", "task-error", String(p)));
        } else {
          others.push(`${field}: ${p}`);
        }
      }
    }
    show(box, list.children.length > 0);
    $("launch-field-errors").textContent = others.join(" · ");
    show($("launch-field-errors"), others.length > 0);
    const envProblems = data.env ? (Array.isArray(data.env) ? data.env : [data.env]).map(String) : [];
    if (asked.length || envProblems.length) {
      envError.textContent = envProblems.length
        ? envProblems.join(" · ")
        : `Give ${asked.length === 1 ? "a value" : "values"} for ${asked.join(", ")}, then review again.`;
      show(envError, true);
      const empty = envInputs().find((i) => asked.includes(i.dataset.env) && i.value === "");
      if (empty) empty.focus();
    }
  }

  function showPreview(p) {
    const nodes = p.nodes, label = `${nodes} instance${nodes === 1 ? "" : "s"}`;
    $("launch-summary").textContent =
      `${p.label} · ${p.gpus} GPU${p.gpus === 1 ? "" : "s"} · ${money(p.hourly_usd)} per hour · ` +
      `at most ${money(p.max_spend_usd)} (stopped after ${Number(p.cap_hours).toFixed(2)} h) · ` +
      "one cluster placement group, a security group for the cluster only, EFA where the type has it.";
    const archive = p.workdir_archive, line = $("launch-workdir-summary");
    line.textContent = archive
      ? `Workdir: ${archive.name} (${size(archive.bytes)}, ${archive.files} file${archive.files === 1 ? "" : "s"}), ` +
        "stored when you launch and fetched by every node."
      : "";
    show(line, Boolean(archive));
    const notes = $("launch-notes");
    notes.replaceChildren(...(p.task_notes || []).map((n) => el("li", "", `Note: ${n}`)));
    if (p.env && p.env.length) notes.append(el("li", "launch-env-given", `Given at launch: ${p.env.join(", ")}`));
    go.textContent = `Launch ${label} · up to ${money(p.max_spend_usd)}`;
    show($("launch-confirm"), true);
    show(go, true);
  }

  async function review(event) {
    event.preventDefault();
    reset();
    $("launch-review").disabled = true;
    try {
      const checks = await post("/api/v1/jobs/precheck/", { plan, rank: Number(rank.value) });
      if (checks.status !== 200) { showErrors(checks.data); return; }
      showChecks(checks.data);
      if (!checks.data.ok) return; // fix first: no confirm button
      const body = { plan, rank: Number(rank.value), task: text.value, max_spend_usd: spend.value, max_hours: hours.value };
      const env = envValues();
      if (Object.keys(env).length) body.env = env;
      const archive = workdirFile.files[0] || null;
      const shown = await post("/api/v1/jobs/preview/", body, archive);
      if (shown.status !== 200) { showErrors(shown.data); return; }
      prepared = { body: { ...body, ...shown.data.requested, confirmation: shown.data.confirmation }, archive };
      showPreview(shown.data);
    } finally {
      $("launch-review").disabled = false;
    }
  }

  function showUsed(data) {
    const box = $("launch-field-errors"), link = el("a", "", `Go to job ${data.job}`);
    link.href = `/jobs/${data.job}/`;
    box.replaceChildren(el("span", "", `${data.detail} · `), link);
    show(box, true);
  }

  async function launch() {
    if (!prepared || go.disabled) return;
    go.disabled = true;
    let made = null;
    try {
      made = await post("/api/v1/jobs/", prepared.body, prepared.archive);
    } finally {
      go.disabled = Boolean(made && made.status === 201);
    }
    if (made.status === 201) { window.location.assign(`/jobs/${made.data.id}/`); return; }
    reset();
    if (made.status === 409 && made.data.job) showUsed(made.data);
    else showErrors(made.data);
  }

  opener.addEventListener("click", () => { defaults(); reset(); dialog.showModal(); text.focus(); });
  $("launch-cancel").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", clearEnvs);  // typed secrets go with the dialog
  rank.addEventListener("change", () => { defaults(); reset(); });
  for (const input of [spend, hours]) input.addEventListener("input", reset);
  text.addEventListener("input", () => { pruneEnvs(); reset(); });
  workdirFile.addEventListener("change", reset);
  $("launch-task-file").addEventListener("change", async (ev) => {
    const file = ev.target.files[0];
    if (!file) return;
    text.value = await file.text();
    pruneEnvs();
    reset();
  });
  form.addEventListener("submit", review);
  go.addEventListener("click", launch);
})();
