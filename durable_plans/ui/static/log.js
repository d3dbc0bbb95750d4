/* The plan's log of decisions (the report's ``log``, newest first): who paused, resumed,
 * skipped, raised the budget, approved, rejected, cancelled, retried or edited what, and
 * when. Every text is set with textContent. */
"use strict";

(function () {
  // What each kind of entry is called on the page, with the status icon it reads as.
  const KINDS = {
    paused: "‖ paused",
    resumed: "▶ resumed",
    skipped: "✗ skipped",
    timed_out: "✗ pause timed out",
    budget: "$ budget set",
    approved: "✓ approved",
    rejected: "✗ rejected",
    cancelled: "⊘ cancelled",
    retried: "↻ retried",
    edited: "✎ edited",
    revised: "+ revised",
    forked: "⑂ forked",
  };

  function when(atS) {
    return new Date(atS * 1000).toLocaleString();
  }

  /* The log as a table in ``box``; a subtask's name opens its panel. */
  function showLog(page, box) {
    const h = window.DplanPanel.h;
    const report = page.report;
    const entries = report ? report.log || [] : [];
    box.replaceChildren();
    if (!entries.length) {
      box.append(h("p", { class: "note", id: "log-empty" },
        "no decisions yet: pauses, resumes, skips, budget changes, approvals, rejections, cancels, retries and edits appear here, with who and when"));
      return;
    }
    const rows = entries.map((e) => {
      const target = e.call || e.subtask;
      const cell = target
        ? h("a", { href: page.href(e.subtask),
          onclick: (ev) => { ev.preventDefault(); page.select(e.subtask); } }, target)
        : "";
      return h("tr", { data: { kind: e.kind } },
        h("td", { class: "when" }, when(e.at_s)),
        h("td", { class: "kind" }, KINDS[e.kind] || e.kind),
        h("td", {}, cell),
        h("td", { class: "by" }, e.by || (e.kind === "paused" ? "the plan (on_failure: pause)" : "")),
        h("td", { class: "detail" }, e.detail));
    });
    box.append(h("table", { id: "log-table" },
      h("thead", {}, h("tr", {}, ...["when", "what", "subtask / call", "who", "detail"].map((t) => h("th", {}, t)))),
      h("tbody", {}, ...rows)));
    if (report.log_omitted) {
      box.append(h("p", { class: "note" }, `${report.log_omitted} older entries are not kept`));
    }
  }

  window.DplanLog = { showLog };
})();
