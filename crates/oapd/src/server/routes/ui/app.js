// The status page's script: reads oapd's JSON API on this origin and
// writes every value with textContent. Manifest names and descriptions
// come from the internet; nothing read here is ever parsed as markup.
"use strict";

(function () {
  const REFRESH_MS = 15000;

  // ---- small helpers -------------------------------------------------

  function $(id) {
    return document.getElementById(id);
  }

  // An element with a class (optional) and text or child nodes.
  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) {
      node.className = className;
    }
    for (const child of children) {
      if (child === null || child === undefined) {
        continue;
      }
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function row(...cells) {
    const tr = document.createElement("tr");
    for (const cell of cells) {
      tr.append(cell instanceof Node && cell.tagName === "TD" ? cell : el("td", null, cell));
    }
    return tr;
  }

  function num(value) {
    return el("td", "num", value === null || value === undefined ? "" : value);
  }

  // A long text cut to two lines; the whole of it on hover.
  function clamped(text) {
    const td = el("td", "desc", el("div", "clamp", text));
    td.title = text;
    return td;
  }

  function badge(text, kind) {
    return el("span", "badge " + kind, text);
  }

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  function when(ms) {
    if (!ms) {
      return "";
    }
    return new Date(ms).toLocaleString();
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) {
      return "";
    }
    if (seconds <= 0) {
      return "now";
    }
    if (seconds < 90) {
      return "in " + Math.round(seconds) + " s";
    }
    if (seconds < 5400) {
      return "in " + Math.round(seconds / 60) + " min";
    }
    return "in " + Math.round(seconds / 3600) + " h";
  }

  function bytes(n) {
    if (typeof n !== "number") {
      return "";
    }
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }

  // GET or POST JSON on this origin: {ok, status, body, error}. Never
  // throws: a section that cannot load says so in its own place.
  async function api(path, body) {
    const init = { headers: { Accept: "application/json" }, cache: "no-store" };
    if (body !== undefined) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      return { ok: false, status: 0, body: null, error: "oapd did not answer (" + err.message + ")" };
    }
    let parsed = null;
    const text = await response.text();
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch (err) {
      parsed = null;
    }
    let error = null;
    if (!response.ok) {
      error = parsed && typeof parsed.error === "string" ? parsed.error : "HTTP " + response.status;
    }
    return { ok: response.ok, status: response.status, body: parsed, error: error };
  }

  function failed(target, path, answer) {
    target.replaceChildren(el("span", "problem", "Could not load " + path + ": " + answer.error));
  }

  // ---- health, index, Ollama ------------------------------------------

  let validation = { only_validated_models: false, records: [] };

  function renderHealth(answer) {
    const list = $("health-list");
    const overall = $("overall");
    if (!answer.ok) {
      overall.className = "badge bad";
      overall.textContent = "unreachable";
      failed(list, "/health", answer);
      return;
    }
    const h = answer.body;
    overall.className = "badge " + (h.status === "ok" ? "good" : "warn");
    overall.textContent = h.status;
    $("version").textContent = "version " + h.version;
    const reason = $("health-reason");
    reason.hidden = !h.reason;
    reason.textContent = h.reason || "";
    const index = h.index || {};
    const sandbox = h.tool_sandbox || {};
    const model = h.model || {};
    const items = [
      ["Retrieval", h.retrieval],
      ["Embedding model", model.loaded ? "loaded (" + (model.id || "") + ")" : "not loaded: " + (model.error || "")],
      ["Manifests served", index.manifests],
      ["Index", (index.rows || 0) + " rows, " + bytes(index.bytes) + ", " + index.dtype],
      ["Index current", index.behind ? "no: behind its manifests" : "yes"],
      ["Directory watch", index.watch],
      ["Load problems", h.load_problems],
      ["Id collisions", h.collisions],
      ["Tool sandbox", sandbox.mode + (sandbox.missing && sandbox.missing.length ? ", missing: " + sandbox.missing.join(", ") : ", every protection active")],
    ];
    const gen = h.request_generation;
    if (gen) {
      items.push(["Generated requests", !gen.enabled ? "off (discovery.generate_requests)"
        : gen.generated + " capabilities, " + gen.pending + " waiting, " + gen.failed + " given up" +
          (gen.model ? ", by " + gen.model : "") +
          (gen.last_error ? "; last error: " + gen.last_error : "")]);
    }
    const snap = h.snapshot;
    if (snap) {
      items.push(["Snapshot", (snap.version ? "version " + snap.version + " (" + snap.model + ", key " + snap.key_id +
          ", installed " + snap.installed_at + ")" : "none installed yet") +
        (snap.last_check ? "; checked " + snap.last_check : "") +
        (snap.last_error ? "; last error: " + snap.last_error : "")]);
    }
    if (index.rebuild_failure) {
      items.push(["Rebuild failing", index.rebuild_failure.error + " (" + index.rebuild_failure.consecutive + " in a row)"]);
    }
    list.replaceChildren(...items.flatMap(([term, value]) => [el("dt", null, term), el("dd", null, value)]));
  }

  function renderStatus(answer) {
    const sources = $("sources").tBodies[0];
    const state = $("ollama-state");
    const models = $("models").tBodies[0];
    if (!answer.ok) {
      failed(state, "/v1/status", answer);
      fill(sources, []);
      fill(models, []);
      return;
    }
    const s = answer.body;
    const bySource = s.manifests.by_source;
    const labels = { bundled: "bundled", dir: "directories", crawl: "crawled", lan: "LAN (mDNS)", mcp: "MCP servers", snapshot: "signed snapshot" };
    const names = Object.keys(labels).concat(Object.keys(bySource).filter((n) => !(n in labels)));
    fill(sources, names.map((name) => {
      const tr = row(labels[name] || name, num(bySource[name] || 0));
      tr.dataset.source = name;
      return tr;
    }));
    const last = s.last_rebuild;
    const list = $("health-list");
    if (last) {
      const text = last.ok
        ? "succeeded " + when(last.finished_unix_ms) + " (" + last.manifests + " manifests, " +
          Math.round(last.elapsed_ms) + " ms" + (last.reused_index ? ", nothing changed" : "") + ")"
        : "failed " + when(last.finished_unix_ms) + ": " + last.error;
      list.append(el("dt", null, "Last rebuild"), el("dd", last.ok ? null : "problem", text));
    }
    const o = s.ollama;
    if (o.reachable) {
      state.replaceChildren(badge("reachable", "good"), " " + o.models.length + " model(s) installed");
    } else {
      state.replaceChildren(badge("unreachable", "bad"), " " + (o.error || ""));
    }
    const records = new Map(validation.records.map((r) => [r.model, r]));
    fill(models, o.models.map((m) => {
      const record = records.get(m.name);
      let verdict = el("td", "muted", "not validated");
      if (record) {
        verdict = el("td", null, badge(record.passed ? "passed" : "failed", record.passed ? "good" : "bad"),
          " " + (record.validated_at_rfc3339 || ""));
      }
      return row(m.name, num(bytes(m.size)), verdict);
    }));
    $("validation-note").textContent = validation.only_validated_models
      ? "Only models that passed validate-model get oapd's tools."
      : "Every model that supports tools gets oapd's tools (tool_bridge.only_validated_models is off).";
  }

  // ---- capabilities -----------------------------------------------------

  let capabilities = [];

  // The requests the co-located model wrote for a capability: data from
  // a model, shown apart from the capability's own text and marked so.
  function generatedCell(generated) {
    if (!generated || !generated.requests || !generated.requests.length) {
      return el("td", "muted", "");
    }
    const list = el("ul", "generated");
    for (const request of generated.requests) {
      list.append(el("li", null, request));
    }
    return el("td", "desc", list, el("div", "muted", "generated by " + generated.model));
  }

  function renderCapabilities(answer, generatedAnswer) {
    const generated = generatedAnswer && generatedAnswer.ok && generatedAnswer.body
      ? generatedAnswer.body.tools || {}
      : {};
    const tbody = $("caps").tBodies[0];
    if (!answer.ok) {
      capabilities = [];
      fill(tbody, [row(el("td", "problem", "Could not load /v1/manifests: " + answer.error))]);
      $("cap-count").textContent = "";
      return;
    }
    capabilities = answer.body.map((m) => {
      const mine = Object.prototype.hasOwnProperty.call(generated, m.id) ? generated[m.id] : null;
      const desc = clamped(m.description);
      // Why the tool could not use its schema (it has the fallback parameters).
      for (const reason of m.schema_errors || []) {
        desc.append(el("div", "problem", reason));
      }
      const tr = row(el("td", "mono id", m.id), m.name, desc, m.source, m.trust,
        generatedCell(mine));
      const extra = mine && mine.requests ? mine.requests.join(" ") : "";
      const haystack = [m.id, m.name, m.description, m.source, m.trust, extra].join(" ").toLowerCase();
      return { tr: tr, haystack: haystack };
    });
    fill(tbody, capabilities.map((c) => c.tr));
    applyFilter();
  }

  function applyFilter() {
    const words = $("cap-filter").value.toLowerCase().split(/\s+/).filter((w) => w);
    let shown = 0;
    for (const c of capabilities) {
      const match = words.every((w) => c.haystack.includes(w));
      c.tr.hidden = !match;
      shown += match ? 1 : 0;
    }
    $("cap-count").textContent = words.length
      ? shown + " of " + capabilities.length
      : String(capabilities.length);
  }

  // ---- discovery --------------------------------------------------------

  async function discover(event) {
    event.preventDefault();
    const task = $("task").value.trim();
    const verdict = $("discover-verdict");
    const table = $("candidates");
    if (!task) {
      return;
    }
    verdict.textContent = "Searching…";
    const answer = await api("/v1/discover", { task: task, top_k: 5 });
    if (!answer.ok) {
      table.hidden = true;
      verdict.replaceChildren(el("span", "problem", answer.error));
      return;
    }
    const d = answer.body;
    const meta = d.meta || {};
    const timing = " (" + meta.mode + " retrieval, " + Number(meta.total_ms).toFixed(1) + " ms)";
    const threshold = Number(meta.threshold).toFixed(3);
    if (d.match) {
      verdict.replaceChildren(badge("match", "good"), " " + d.match.name + " (" + d.match.id + "): score " +
        Number(d.match.score).toFixed(3) + " ≥ threshold " + threshold + timing);
    } else if (d.candidates.length > 0) {
      verdict.replaceChildren(badge("abstains", "warn"), " nothing fits: the best-ranked score " +
        Number(d.candidates[0].score).toFixed(3) + " < threshold " + threshold + timing);
    } else {
      verdict.replaceChildren(badge("abstains", "warn"), " nothing fits: no candidate" + timing);
    }
    fill(table.tBodies[0], d.candidates.map((c, i) => {
      const tr = row(String(i + 1), el("td", "mono id", c.id), clamped(c.description), c.trust,
        num(Number(c.score).toFixed(3)), c.fits ? "yes" : "no");
      if (d.match && c.id === d.match.id) {
        tr.className = "best";
      }
      return tr;
    }));
    table.hidden = d.candidates.length === 0;
  }

  // ---- crawler and LAN ----------------------------------------------------

  function renderCrawl(answer) {
    const state = $("crawl-state");
    const table = $("domains");
    const refused = $("lan-refused").tBodies[0];
    if (!answer.ok) {
      failed(state, "/v1/crawl/status", answer);
      table.hidden = true;
      fill(refused, []);
      return;
    }
    const c = answer.body;
    if (!c.enabled) {
      state.textContent = "The crawler is off (crawler.enabled: false).";
    } else {
      const failing = c.domains.filter((d) => d.consecutive_failures > 0).length;
      state.textContent = c.domains.length + " domain(s) tracked, " + failing + " failing; internet crawling " +
        (c.internet ? "on" : "off") + ", LAN discovery (mDNS) " + (c.mdns ? "on" : "off") + ".";
    }
    fill(table.tBodies[0], c.domains.map((d) => {
      const result = d.removed_reason ? "removed: " + d.removed_reason : (d.last_result || "not fetched yet");
      const failing = d.consecutive_failures > 0 || d.removed_reason;
      return row(el("td", "mono", d.domain), d.trust, el("td", failing ? "problem" : null, result),
        duration(d.next_due_in_s), num(d.consecutive_failures), d.health || "");
    }));
    table.hidden = c.domains.length === 0;
    const refusals = c.lan_refused || [];
    fill(refused, refusals.length
      ? refusals.map((r) => row(el("td", "mono", r.name), r.reason, when(r.at_ms)))
      : [row(el("td", "muted", "none"), "", "")]);
  }

  function renderMcp(answer) {
    const state = $("mcp-state");
    const table = $("mcp-servers");
    if (!answer.ok) {
      failed(state, "/v1/mcp/status", answer);
      table.hidden = true;
      return;
    }
    const servers = answer.body.servers || [];
    const problems = answer.body.problems || [];
    state.textContent = servers.length
      ? servers.length + " server(s) configured."
      : "No MCP servers configured (mcp.servers, mcp.servers_file).";
    for (const p of problems) {
      state.append(el("br"), el("span", "problem", p.path + ": " + p.message));
    }
    fill(table.tBodies[0], servers.map((s) => row(s.name,
      badge(s.state, s.state === "ready" ? "good" : (s.state === "failed" || s.state === "backoff" ? "bad" : "warn")),
      num(Array.isArray(s.tools) ? s.tools.length : s.tools), s.trust || "", el("td", "desc", s.last_error || ""))));
    table.hidden = servers.length === 0;
  }

  // ---- recent requests --------------------------------------------------

  function renderRequests(answer) {
    const state = $("requests-state");
    const table = $("requests-table");
    if (answer.status === 404) {
      table.hidden = true;
      state.replaceChildren(el("span", "muted", "Request history: not available in this oapd."));
      return;
    }
    if (!answer.ok || !answer.body || !Array.isArray(answer.body.requests)) {
      table.hidden = true;
      failed(state, "/v1/requests", answer.ok ? { error: "unexpected answer" } : answer);
      return;
    }
    const requests = answer.body.requests;
    state.textContent = requests.length
      ? "The last " + requests.length + " bridged request(s), newest first."
      : "No bridged request yet.";
    fill(table.tBodies[0], requests.map((r) => {
      const calls = (r.rounds || []).flatMap((round) => (round.calls || []).map((call) =>
        call.name + " " + call.outcome + (call.duration_ms !== undefined ? " (" + call.duration_ms + " ms)" : "")));
      const ok = typeof r.status === "number" ? r.status < 400 : !r.error;
      const status = el("td", ok ? null : "problem", String(r.status) + (r.error ? ": " + r.error : ""));
      const tr = row(when(r.started_unix_ms), el("td", "mono", r.route), r.model || "", status, num(r.duration_ms),
        (r.tools_injected || []).join(", "), calls.join("; "), r.client || "");
      tr.dataset.id = String(r.id);
      return tr;
    }));
    table.hidden = requests.length === 0;
  }

  // ---- named clients (server.clients) -------------------------------------

  function renderClients(answer) {
    const state = $("clients-state");
    const table = $("clients-table");
    if (!answer.ok || !answer.body || !Array.isArray(answer.body.clients)) {
      table.hidden = true;
      failed(state, "/v1/clients", answer.ok ? { error: "unexpected answer" } : answer);
      return;
    }
    const clients = answer.body.clients;
    state.textContent = clients.length
      ? "Requests since oapd started, by the name of the client's token."
      : "No named client (server.clients).";
    fill(table.tBodies[0], clients.map((c) => {
      const tr = row(c.name, (c.scopes || []).join(", "), num(c.requests), c.last_used_unix_ms ? when(c.last_used_unix_ms) : "never");
      tr.dataset.client = String(c.name);
      return tr;
    }));
    table.hidden = clients.length === 0;
  }

  // ---- loading ------------------------------------------------------------

  async function refresh() {
    const [health, validationAnswer, manifests, crawl, mcp, requests, generated, clients] = await Promise.all([
      api("/health"),
      api("/v1/validation"),
      api("/v1/manifests"),
      api("/v1/crawl/status"),
      api("/v1/mcp/status"),
      api("/v1/requests"),
      api("/v1/generated-requests"),
      api("/v1/clients"),
    ]);
    if (validationAnswer.ok && validationAnswer.body) {
      validation = validationAnswer.body;
    }
    // /v1/status asks Ollama with a deadline: it may take a few seconds.
    const status = await api("/v1/status");
    renderHealth(health);
    renderStatus(status);
    renderCapabilities(manifests, generated);
    renderCrawl(crawl);
    renderMcp(mcp);
    renderRequests(requests);
    renderClients(clients);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }

  let timer = null;

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(() => refresh().then(schedule), REFRESH_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("discover-form").addEventListener("submit", discover);
    $("cap-filter").addEventListener("input", applyFilter);
    $("refresh").addEventListener("click", () => refresh().then(schedule));
    refresh().then(schedule);
  });
})();
