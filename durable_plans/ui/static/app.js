/* dplan ui: the API client, the router (#/ and #/plan/ID[/SUBTASK]), the plans list and
 * the plan page (live through server-sent events). Controls are POSTs with a JSON body
 * and the page's CSRF token; the server answers with the CLI's sentence. */
"use strict";

(function () {
  const CSRF = document.querySelector('meta[name="dplan-csrf"]').content;

  async function parse(res) {
    let data = null;
    try { data = await res.json(); } catch (_) { data = null; }
    if (!res.ok) throw new Error((data && data.error) || `error: ${res.status} ${res.statusText}`);
    return data;
  }
  // Requests not answered yet (read by the tests: the page has settled when it is 0).
  window.dplanInFlight = 0;
  async function counted(request) {
    window.dplanInFlight += 1;
    try { return await request(); } finally { window.dplanInFlight -= 1; }
  }
  const DplanApi = {
    async get(path) { return counted(async () => parse(await fetch(path, { credentials: "same-origin" }))); },
    async post(path, body) {
      return counted(async () => parse(await fetch(path, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Dplan-CSRF": CSRF },
        body: JSON.stringify(body || {}),
      })));
    },
  };
  window.DplanApi = DplanApi;
  const G = window.DplanGraph;
  const P = window.DplanPanel;
  const $ = (id) => document.getElementById(id);

  function flash(text, isError) {
    const box = $("flash");
    box.textContent = text;
    box.className = isError ? "error" : "";
    box.hidden = !text;
  }

  /* ---------------------------------------------------------------- plans list */

  let listTimer = null;

  async function showList() {
    $("crumb").textContent = "plans";
    document.title = "plans · dplan";
    const form = $("filters");
    const params = new URLSearchParams();
    for (const name of ["status", "tenant", "query", "limit"]) {
      const v = form.elements[name].value.trim();
      if (v) params.set(name, v);
    }
    let rows;
    let note;
    try {
      ({ plans: rows, note } = await DplanApi.get("/api/plans?" + params.toString()));
    } catch (err) {
      flash(err.message, true);
      return;
    }
    flash("");
    const body = document.querySelector("#plans tbody");
    body.replaceChildren();
    const now = Date.now();
    for (const r of rows) {
      const dur = r.duration_s !== null ? r.duration_s : (now - Date.parse(r.started)) / 1000;
      // A retried plan has a row per run: each opens its own (a closed one by its run id;
      // the page drops the id again when that run is the latest).
      const run = r.status !== "running" && r.status !== "paused" && r.run_id ? "?run=" + encodeURIComponent(r.run_id) : "";
      const link = P.h("a", { href: "#/plan/" + encodeURIComponent(r.plan_id) + run }, r.plan_id);
      const cells = [
        link, P.badge(r.status), r.tenant || "", r.goal || "",
        `${r.completed === null ? "–" : r.completed}/${r.total === null ? "?" : r.total}`,
        r.tokens === null ? "–" : r.tokens.toLocaleString("en-US"),
        r.cost_usd === null ? "–" : G.fmtCost(r.cost_usd),
        new Date(r.started).toISOString().replace("T", " ").slice(0, 19),
        G.fmtDuration(dur),
      ];
      const tr = P.h("tr", { data: { plan: r.plan_id } });
      cells.forEach((c, i) => tr.append(P.h("td", { class: i >= 4 && i !== 7 ? "num" : "" }, c)));
      body.append(tr);
      if (r.paused) {
        for (const [sid, why] of Object.entries(r.paused)) {
          body.append(P.h("tr", {}, P.h("td", { colspan: "9", class: "note" }, `${r.plan_id}: ${sid} paused — ${why}`)));
        }
      }
    }
    $("plans-note").textContent = [rows.length ? "" : "no plans found", note].filter(Boolean).join(" · ");
  }

  /* ---------------------------------------------------------------- a plan */

  function criticalText(path) {
    const n = path.nodes.size;
    return `${n} subtask${n === 1 ? "" : "s"}` + (path.length ? `, ${G.fmtDuration(path.length)}` : "");
  }

  // The order the header counts statuses in (the report's Counts).
  const STATUS_ORDER = ["completed", "failed", "skipped", "cancelled", "paused", "running", "pending"];

  class PlanPage {
    constructor(planId, run) {
      this.planId = planId;
      // An earlier run (a retried plan's first, say): its report, read only, no stream.
      this.run = run || null;
      this.readOnly = Boolean(run);
      this.report = null;
      this.plan = null;
      this.liveText = new Map();
      this.source = null;
      this.selected = null;
      this.viewName = "graph";
      this.graph = new G.PlanGraph($("graph"), { onSelect: (id) => this.select(id) });
      this.timelineDue = null;
      this.approvalsDue = null;
      this.closed = false;
      // Set when another page replaced this one: nothing of its own may paint any more
      // (the answers it still awaits belong to a plan no longer shown).
      this.gone = false;
    }

    /* The page's API address for ``path`` (of this plan, of this run). */
    api(path) {
      return "/api/plans/" + encodeURIComponent(this.planId) + (path || "") +
        (this.run ? "?run=" + encodeURIComponent(this.run) : "");
    }

    /* The page's own address, with a subtask's panel open. */
    href(subtask) {
      return "#/plan/" + encodeURIComponent(this.planId) + (subtask ? "/" + encodeURIComponent(subtask) : "") +
        (this.run ? "?run=" + encodeURIComponent(this.run) : "");
    }

    async load() {
      const t0 = performance.now();
      const data = await DplanApi.get(this.api());
      if (this.gone) return;
      const fetched = performance.now();
      this.plan = data.plan;
      this.graph.setPlan(data.plan.subtasks);
      this.graph.setRuns(data.timeline.available ? data.timeline.runs : []);
      this.timelineNote = data.timeline.available ? "" : data.timeline.reason;
      if (data.report) this.setReport(data.report);
      else flash(data.report_unavailable || "", true);
      this.graph.render();
      this.graph.fit();
      const drawn = performance.now();
      // Read by the benchmark and the tests: when the first picture was complete.
      window.dplanFirstRender = { sinceNavigationMs: performance.now(), fetchMs: fetched - t0, renderMs: drawn - fetched, totalMs: drawn - t0,
        layoutMs: this.graph.lastLayoutMs, nodes: document.querySelectorAll("#graph g.node").length };
      document.body.dataset.rendered = "1";
      this.paintHead();
      if (this.readOnly) this.closed = true;
      else {
        this.connect();
        this.refreshApprovals();
      }
      this.loadRuns();
    }

    /* The plan's runs (its start, then each retry), each opening its own report. */
    async loadRuns() {
      let runs = [];
      try { runs = await DplanApi.get("/api/plans/" + encodeURIComponent(this.planId) + "/runs"); } catch (_) { return; }
      if (this.gone) return;
      const select = $("plan-runs");
      const shown = this.run ? runs.find((r) => r.run_id === this.run) : runs.find((r) => r.latest);
      if (this.run && shown && shown.latest) {
        // The latest run, named by its id (a row of the plans list): open it as the plan.
        location.replace(this.href(this.selected).replace(/\?run=[^/]*$/, ""));
        return;
      }
      select.replaceChildren(...runs.slice().reverse().map((r) => P.h("option", {
        value: r.latest ? "" : r.run_id,
        data: { number: String(r.number), status: r.status },
      }, `run ${r.number} of ${runs.length}${r.latest ? " (latest)" : ""} · ${r.status} · ${new Date(r.started).toLocaleString()}`)));
      if (shown) select.value = shown.latest ? "" : shown.run_id;
      select.hidden = runs.length < 2 && !this.run;
      select.onchange = () => {
        const run = select.value;
        location.hash = "#/plan/" + encodeURIComponent(this.planId) + (run ? "?run=" + encodeURIComponent(run) : "");
      };
      const note = $("plan-run-note");
      note.replaceChildren();
      note.hidden = !this.run;
      if (this.run) {
        const latest = P.h("a", { href: "#/plan/" + encodeURIComponent(this.planId) }, "open the latest run");
        note.append(shown ? `run ${shown.number} of ${runs.length}, ${shown.status}: an earlier run, read only (its report and conversations as it left them) — `
          : "an earlier run, read only — ", latest);
      }
    }

    setReport(report) {
      this.report = report;
      this.reportAt = Date.now();
      for (const r of report.subtasks) this.graph.setResult(r);
      this.graph.setRevisions(report.revisions || []);
    }

    /* A revision changed the plan while it runs: draw the plan as it is now. */
    async refreshPlan() {
      const data = await DplanApi.get(this.api());
      if (this.gone) return;
      this.plan = data.plan;
      this.graph.setPlan(data.plan.subtasks);
      if (data.report && !this.closed) this.setReport(data.report);
      this.graph.drawnKey = "";
      this.redraw();
      this.paintHead();
    }

    /* The plan's duration now: the report's, counting on while the plan is open (the
     * server reckons it up to when it answered; the page goes on from there). */
    durationNow() {
      const r = this.report;
      if (!r) return 0;
      const open = G.planOpen(r);
      return r.duration_s + (open ? (Date.now() - this.reportAt) / 1000 : 0);
    }

    paintTotals() {
      const r = this.report;
      if (!r) return;
      const c = r.counts;
      const total = Object.values(c).reduce((a, b) => a + b, 0);
      // Every status with a subtask in it, so the parts add up to the whole.
      const parts = STATUS_ORDER.filter((s) => c[s]).map((s) => `${c[s]} ${s}`);
      $("plan-totals").textContent =
        `${total} subtask${total === 1 ? "" : "s"}: ${parts.join(" · ")}` +
        ` · ${G.fmtTokens(r.usage.tokens)} · ${G.fmtCost(r.usage.cost_usd)} · ${G.fmtDuration(this.durationNow())}` +
        ` · critical path ${criticalText(this.graph.critical)}`;
    }

    /* The first failure, at the top: which subtask, what error, and a way to it. */
    paintFailure() {
      const box = $("plan-failure");
      const r = this.report;
      const first = r && r.subtasks.find((x) => x.status === "failed" || x.status === "paused");
      box.replaceChildren();
      box.hidden = !(first || (r && r.error));
      if (first) {
        const verb = first.status === "paused" ? "paused on" : "first failure:";
        const link = P.h("a", { href: this.href(first.id),
          onclick: (ev) => { ev.preventDefault(); this.select(first.id); } }, first.id);
        box.append(`${G.icon(first.status)} ${verb} `, link, ` — ${first.error.type}: ${first.error.message}`);
      } else if (r && r.error) {
        box.append(`✗ the plan's check failed — ${r.error.type}: ${r.error.message}`);
      }
    }

    paintHead() {
      const p = this.plan;
      const r = this.report;
      const fork = $("plan-fork");
      const origin = r && r.forked_from;
      fork.hidden = !origin;
      fork.replaceChildren();
      if (origin) {
        fork.append("forked from plan ", P.h("a", { href: "#/plan/" + encodeURIComponent(origin.plan) }, origin.plan),
          ` at ${origin.subtask}: what came before it is reused from there, the rest ran here`);
      }
      $("crumb").textContent = "plan " + p.id;
      $("plan-title").textContent = p.id;
      $("plan-goal").textContent = p.goal;
      $("plan-temporal").href = p.temporal_url;
      const st = $("plan-status");
      const status = r ? r.status : "unknown";
      st.className = "badge s-" + status;
      st.dataset.status = status;
      st.textContent = `${G.icon(status)} ${status}`;
      document.title = `${G.icon(status)} ${p.id} · dplan`;
      this.paintTotals();
      this.paintFailure();
      if (this.viewName === "log") this.paintLog();
      clearInterval(this.clock);
      if (G.planOpen(r)) {
        this.clock = setInterval(() => this.paintTotals(), 1000);
      }
      $("legend").textContent = "○ pending ▶ running ✓ completed ✗ failed ↷ skipped ⊘ cancelled ‖ paused · purple: critical path" +
        (this.timelineNote ? " · timeline unavailable: " + this.timelineNote : "");
      this.paintControls();
    }

    /* Drawn again only when what the plan allows changed: a limit being typed stays
     * while events redraw the header around it. */
    paintControls() {
      const box = $("plan-controls");
      const status = this.report ? this.report.status : null;
      const open = G.planOpen(this.report);
      // Retry is offered once the run has closed (the "ended" event), not when the report
      // first reads as ended: a cancelled or failed plan's report says so while its run
      // still winds down (children cancelled, the end published), and a retry asked then
      // is refused as "still running".
      const ended = this.closed && status && status !== "completed";
      const mode = this.readOnly ? "none" : open ? "open" : ended ? "ended" : "none";
      if (box.dataset.mode === mode) return;
      box.dataset.mode = mode;
      box.replaceChildren();
      if (mode === "open") {
        const tokens = P.h("input", { type: "number", min: "0", placeholder: "max tokens", name: "max_tokens" });
        const cost = P.h("input", { type: "number", min: "0", step: "0.01", placeholder: "max $", name: "max_cost_usd" });
        const num = (i) => (i.value.trim() === "" ? null : Number(i.value));
        box.append(tokens, cost,
          P.h("button", { type: "button", data: { action: "budget" }, onclick: () => this.act("budget", { max_tokens: num(tokens), max_cost_usd: num(cost) }) }, "raise budget"),
          P.h("button", { type: "button", class: "danger", data: { action: "cancel" }, onclick: () => {
            if (confirm(`Cancel plan ${this.planId}? Running subtasks are cancelled; what completed is kept.`)) this.act("cancel", {});
          } }, "cancel plan"));
      } else if (mode === "ended") {
        box.append(P.h("button", { type: "button", class: "primary", data: { action: "retry" }, onclick: () => this.act("retry", {}) }, "retry what did not complete"));
      }
    }

    connect() {
      if (this.source) this.source.close();
      const source = new EventSource("/api/plans/" + encodeURIComponent(this.planId) + "/events");
      this.source = source;
      source.onmessage = (ev) => this.onEvent(JSON.parse(ev.data));
      source.onerror = () => {
        // The stream ends with the plan (closed below); otherwise the browser retries.
        if (this.closed) source.close();
      };
    }

    onEvent(event) {
      if (this.gone) return;
      if (event.type === "subtask") {
        this.graph.setResult(event.result);
        this.soonTimeline();
        this.soonApprovals();
        this.refreshReport();
        if (this.selected === event.result.id && $("panel").dataset.status !== event.result.status) this.soonPanel();
      } else if (event.type === "text") {
        this.liveText.set(event.subtask, event.text);
        if (this.selected === event.subtask) this.paintLiveText();
      } else if (event.type === "approval") {
        this.refreshApprovals();
      } else if (event.type === "revised") {
        this.refreshPlan();
      } else if (event.type === "ended") {
        this.setReport(event.report);
        this.closed = true;
        if (this.source) this.source.close();
        this.redraw();
        this.refreshTimeline();
        this.refreshApprovals();
        this.paintHead();
        // Redraw the panel only if its subtask changed: an edit being typed stays.
        const shown = $("panel").dataset.status;
        const now = this.graph.results.get(this.selected);
        if (this.selected && now && shown !== now.status) this.soonPanel();
      } else if (event.type === "error") {
        flash(event.error, true);
      }
    }

    /* The report read again after an event. An event that comes while a read is under way
     * asks for one more read after it, not for nothing: that read may have left before the
     * change the event tells of, and a paused plan sends no further event to fix it (its
     * log, counts and totals would stay stale for as long as it waits). */
    async refreshReport() {
      if (this.reportBusy) { this.reportAgain = true; return; }
      this.reportBusy = true;
      try {
        do {
          this.reportAgain = false;
          const data = await DplanApi.get(this.api());
          if (this.gone) return;
          // The final report came with the stream's end: an answer read before it is older.
          if (data.report && !this.closed) this.setReport(data.report);
          this.graph.setRuns(data.timeline.available ? data.timeline.runs : []);
          this.redraw();
          this.paintHead();
        } while (this.reportAgain);
      } catch (_) { /* the next event tries again */ } finally { this.reportBusy = false; }
    }

    soonTimeline() {
      if (this.timelineDue) return;
      this.timelineDue = setTimeout(() => { this.timelineDue = null; this.refreshTimeline(); }, 700);
      this.redraw();
    }

    async refreshTimeline() {
      try {
        if (this.readOnly) return;
        const t = await DplanApi.get(this.api("/timeline"));
        if (this.gone) return;
        if (t.available) this.graph.setRuns(t.runs);
      } catch (_) { /* shown on the next load */ }
      if (!this.gone) this.redraw();
    }

    redraw() {
      this.graph.render();
      if (this.viewName === "timeline") this.graph.renderTimeline($("timeline"));
      if (this.viewName === "log") this.paintLog();
    }

    /* The log view, drawn again only when the log changed (a link being hovered stays). */
    paintLog() {
      const log = this.report ? this.report.log || [] : [];
      const key = JSON.stringify([log.length, log[0] && log[0].at_s, this.report && this.report.log_omitted]);
      if (key === this.logKey) return;
      this.logKey = key;
      window.DplanLog.showLog(this, $("log"));
    }

    soonApprovals() {
      if (this.approvalsDue) return;
      this.approvalsDue = setTimeout(() => { this.approvalsDue = null; this.refreshApprovals(); }, 500);
    }

    async refreshApprovals() {
      try {
        const calls = G.planOpen(this.report) && !this.readOnly
          ? await DplanApi.get("/api/plans/" + encodeURIComponent(this.planId) + "/approvals") : [];
        if (!this.gone) P.showApprovals(this, calls);
      } catch (err) { if (!this.gone) P.showApprovals(this, []); }
    }

    soonPanel() {
      clearTimeout(this.panelDue);
      this.panelDue = setTimeout(() => {
        if (!this.selected || this.gone) return;
        // Drawn since this was asked, with the status it has now: keep it (an edit being
        // typed stays).
        const panel = $("panel");
        const now = this.graph.results.get(this.selected);
        if (panel.dataset.subtask === this.selected && now && panel.dataset.status === now.status) return;
        P.showSubtask(this, this.selected);
      }, 300);
    }

    paintLiveText() {
      const box = $("live-text");
      if (!box) return;
      const text = this.liveText.get(this.selected);
      const r = this.graph.results.get(this.selected);
      box.hidden = !(text && r && r.status === "running");
      box.textContent = text || "";
    }

    select(id) {
      this.selected = id;
      this.graph.select(id);
      history.replaceState(null, "", this.href(id));
      const wasOpen = !$("panel").hidden;
      if (id) P.showSubtask(this, id);
      else $("panel").hidden = true;
      // The canvas changed width: fit the graph to it again, the chosen node in view.
      if (wasOpen !== Boolean(id)) this.graph.fit();
    }

    flash(text, isError) {
      if (!this.gone) flash(text, isError);
    }

    async act(action, body) {
      flash("…");
      try {
        const answer = await DplanApi.post(`/api/do/${encodeURIComponent(this.planId)}/${action}`, body);
        if (this.gone) return;
        flash(answer.message || "done");
        if (action === "fork" && answer.plan_id) { location.hash = "#/plan/" + encodeURIComponent(answer.plan_id); return; }
        if (action === "retry") { this.closed = false; setTimeout(() => { this.reload(); this.loadRuns(); }, 300); }
        this.refreshApprovals();
        this.refreshReport();
        if (this.selected) this.soonPanel();
      } catch (err) {
        if (!this.gone) flash(err.message, true);
      }
    }

    async reload() {
      const data = await DplanApi.get(this.api());
      if (this.gone) return;
      this.plan = data.plan;
      this.graph.setPlan(data.plan.subtasks);
      if (data.report) this.setReport(data.report);
      this.graph.setRuns(data.timeline.available ? data.timeline.runs : []);
      this.graph.drawnKey = "";
      this.redraw();
      this.paintHead();
      this.connect();
      // The open subtask as the new run has it (a retried one is no longer failed).
      if (this.selected) this.soonPanel();
    }

    stop() {
      this.gone = true;
      clearInterval(this.timelineTimer);
      clearInterval(this.clock);
      for (const t of [this.timelineDue, this.approvalsDue, this.panelDue]) clearTimeout(t);
      this.closed = true;
      if (this.source) this.source.close();
      this.graph.destroy();
    }
  }

  /* ---------------------------------------------------------------- wiring */

  let page = null;

  function setView(name) {
    if (!page) return;
    page.viewName = name;
    document.querySelectorAll("#toolbar .tab").forEach((b) => b.classList.toggle("active", b.dataset.view === name));
    $("graph").style.display = name === "graph" ? "" : "none";
    $("timeline").hidden = name !== "timeline";
    $("log").hidden = name !== "log";
    clearInterval(page.timelineTimer);
    if (name === "log") { page.logKey = null; page.paintLog(); }
    if (name === "timeline") {
      page.graph.renderTimeline($("timeline"));
      // Visibility lags a little behind the plan: read it again while it is shown.
      page.refreshTimeline();
      page.timelineTimer = setInterval(() => page.refreshTimeline(), 3000);
    }
  }

  /* The plan view as a new plan finds it: nothing left of the one shown before (its
   * header, graph, panel, waiting calls, search, message). */
  function clearPlanView(planId) {
    flash("");
    $("crumb").textContent = "plan " + planId;
    $("plan-title").textContent = planId;
    document.title = `${planId} · dplan`;
    const st = $("plan-status");
    st.className = "badge";
    st.dataset.status = "";
    st.textContent = "";
    for (const id of ["plan-totals", "plan-goal", "legend", "search-count"]) $(id).textContent = "";
    $("plan-failure").hidden = true;
    $("plan-failure").replaceChildren();
    $("plan-controls").replaceChildren();
    delete $("plan-controls").dataset.mode;
    $("plan-temporal").removeAttribute("href");
    $("plan-runs").hidden = true;
    $("plan-runs").replaceChildren();
    $("plan-run-note").hidden = true;
    $("plan-run-note").replaceChildren();
    $("plan-fork").hidden = true;
    $("plan-fork").replaceChildren();
    $("approvals").hidden = true;
    $("approvals").replaceChildren();
    $("search").value = "";
    $("panel").hidden = true;
    $("panel").replaceChildren();
    delete $("panel").dataset.subtask;
    document.body.dataset.rendered = "";
    $("viewport").replaceChildren();
    $("timeline").replaceChildren();
    $("log").replaceChildren();
  }

  async function route() {
    const hash = location.hash;
    const [path, query] = hash.replace(/^#\/?/, "").split("?");
    const parts = path.split("/").map(decodeURIComponent);
    const run = new URLSearchParams(query || "").get("run");
    clearInterval(listTimer);
    if (page) { page.stop(); page = null; }
    if (parts[0] === "plan" && parts[1]) {
      $("list-view").hidden = true;
      $("plan-view").hidden = false;
      clearPlanView(parts[1]);
      const mine = new PlanPage(parts[1], run);
      page = mine;
      window.dplanPage = mine;
      setView("graph");
      try {
        await mine.load();
        // Another plan was opened meanwhile; or its address is set and its hashchange not
        // handled yet: selecting here would write this plan's address over it.
        if (mine.gone || location.hash !== hash) return;
        if (parts[2]) mine.select(parts[2]);
      } catch (err) {
        if (!mine.gone) flash(err.message, true);
      }
    } else {
      $("plan-view").hidden = true;
      $("list-view").hidden = false;
      showList();
      listTimer = setInterval(showList, 5000);
    }
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("filters").addEventListener("submit", (ev) => { ev.preventDefault(); showList(); });
    document.querySelectorAll("#toolbar .tab").forEach((b) => b.addEventListener("click", () => setView(b.dataset.view)));
    $("zoom-in").addEventListener("click", () => page && page.graph.zoom(1.25));
    $("zoom-out").addEventListener("click", () => page && page.graph.zoom(0.8));
    $("zoom-fit").addEventListener("click", () => page && page.graph.fit());
    $("expand-all").addEventListener("click", () => page && (page.graph.expandAll(true), page.graph.fit()));
    $("collapse-all").addEventListener("click", () => page && (page.graph.expandAll(false), page.graph.fit()));
    $("search").addEventListener("input", (ev) => {
      if (!page) return;
      const found = page.graph.search(ev.target.value);
      $("search-count").textContent = ev.target.value.trim() ? `${found.length} found` : "";
    });
    $("search").addEventListener("keydown", (ev) => {
      if (ev.key !== "Enter" || !page) return;
      const found = page.graph.search(ev.target.value);
      if (found.length) { page.select(found[0]); page.graph.focus(found[0]); }
    });
    window.addEventListener("hashchange", route);
    try {
      const cfg = await DplanApi.get("/api/config");
      $("who").textContent = `as ${cfg.operator} · namespace ${cfg.namespace}`;
    } catch (err) { flash(err.message, true); }
    route();
  });
})();
