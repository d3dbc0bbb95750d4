/* A subtask's panel (its conversation, error, usage, diff, Temporal Web link, and what
 * an operator can do to it) and the plan's waiting tool calls (approve, approve with
 * edited arguments, reject with a reason). Every text is set with textContent. */
"use strict";

(function () {
  const G = () => window.DplanGraph;
  const api = () => window.DplanApi;

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "data") Object.assign(node.dataset, v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  function kv(pairs) {
    const dl = h("dl", { class: "kv" });
    for (const [k, v] of pairs) dl.append(h("dt", {}, k), h("dd", {}, v));
    return dl;
  }

  function badge(status) {
    return h("span", { class: "badge s-" + status, data: { status } }, `${G().icon(status)} ${status}`);
  }

  function messageView(m) {
    const box = h("div", { class: "msg " + m.role });
    const label = h("div", { class: "role" }, m.role + (m.name ? ` (${m.name})` : ""));
    // Another subtask's result, merged into the plan's conversation before this one began.
    if (m.from_subtask) {
      box.classList.add("merged");
      label.append(" · the result of subtask ", h("span", { class: "from-subtask" }, m.from_subtask));
    }
    // The call's id as the assistant's line gives it (ids are case-sensitive).
    if (m.tool_call_id) label.append(" ← ", h("span", { class: "call-id" }, m.tool_call_id));
    box.append(label);
    if (m.content) box.append(h("pre", {}, m.content));
    for (const c of m.tool_calls || []) {
      box.append(h("div", { class: "call" }, `→ ${c.name}(${c.arguments || ""})  [${c.id}]`));
    }
    if (m.usage) {
      const u = m.usage;
      box.append(h("div", { class: "note" }, `${u.prompt_tokens + u.completion_tokens} tokens · ${G().fmtCost(u.cost_usd)}`));
    }
    return box;
  }

  function diffView(data) {
    if (data.unavailable) return h("p", { class: "note" }, "no diff: " + data.unavailable);
    const pre = h("pre", { class: "diff" });
    pre.append(h("span", { class: "note" }, `${data.start.slice(0, 12)}..${data.commit.slice(0, 12)}\n${data.stat}\n`));
    for (const line of data.diff.split("\n")) {
      let cls = "";
      if (line.startsWith("+") && !line.startsWith("+++")) cls = "diff-add";
      else if (line.startsWith("-") && !line.startsWith("---")) cls = "diff-del";
      else if (line.startsWith("@@")) cls = "diff-hunk";
      pre.append(h("span", { class: cls }, line + "\n"));
    }
    if (data.truncated) pre.append(h("span", { class: "note" }, "… (truncated)"));
    return pre;
  }

  /* What can be done to this subtask now, given the plan's state. */
  function controls(page, sid, def, result) {
    const box = h("div", { id: "subtask-controls" });
    const status = result ? result.status : "pending";
    const planOpen = !page.report || G().planOpen(page.report);
    if (page.readOnly) {  // an earlier run: what is done to the plan is done to its latest
      box.append(h("p", { class: "note" }, "an earlier run: act on the latest run"));
      return box;
    }
    if (status === "paused") {
      box.append(
        h("button", { type: "button", class: "primary", data: { action: "resume" }, onclick: () => page.act("resume", { subtask: sid }) }, "resume"),
        " ",
        h("button", { type: "button", class: "danger", data: { action: "skip" }, onclick: () => page.act("skip", { subtask: sid }) }, "skip"),
      );
      // A failure that would repeat: change what it runs with, then run it again now.
      box.append(h("h3", {}, "edit and run again"), editForm(def, "edit-form", "edit",
        "change and run again", (change) => {
          if (!Object.keys(change).length) { page.flash("change the description, agent or model first", true); return; }
          page.act("edit", { subtask: sid, changes: change });
        }));
    }
    if (planOpen) {
      // A revision: a subtask the plan did not foresee, run once this one completed.
      box.append(h("h3", {}, "add a subtask after this one"), addForm(page, sid));
    }
    // A fork: this subtask (changed) and what follows run again in a new plan.
    box.append(h("h3", {}, "fork from here"), editForm(def, "fork-form", "fork",
      "fork: a new plan from this step", (change) => {
        page.act("fork", Object.keys(change).length ? { subtask: sid, changes: change } : { subtask: sid });
      }));
    if (!planOpen) {
      box.append(h("h3", {}, "edit and re-run"), editForm(def, "rerun-form", "rerun",
        "edit and re-run (with its dependents)", (change) => {
          const body = Object.keys(change).length ? { subtasks: [sid], changes: { [sid]: change } } : { subtasks: status === "completed" ? [sid] : [] };
          page.act("retry", body);
        }));
    }
    return box;
  }

  /* A new subtask depending on ``sid``: the plan's ``add`` action (a revision). */
  function addForm(page, sid) {
    const id = h("input", { name: "id", placeholder: "new subtask id" });
    const description = h("textarea", { name: "description", rows: "3", placeholder: "what it must achieve" });
    const agent = h("input", { name: "agent", placeholder: "coder" });
    const form = h("form", { class: "control", id: "add-form" },
      h("label", {}, "id ", id),
      h("label", {}, "description", description),
      h("label", {}, "agent ", agent),
      h("button", { type: "submit", class: "primary", data: { action: "add" } }, "add to the plan"),
    );
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const subtask = { id: id.value.trim(), description: description.value, depends_on: [sid] };
      if (agent.value.trim()) subtask.agent = agent.value.trim();
      page.act("add", { add: [subtask], reason: "added from the plan page" });
    });
    return form;
  }

  /* A form for a subtask's description, agent and model; ``submit`` gets what changed. */
  function editForm(def, id, action, label, submit) {
    const description = h("textarea", { name: "description", rows: "4" });
    description.value = def.description;
    const agent = h("input", { name: "agent", placeholder: def.agent });
    const model = h("input", { name: "model", placeholder: "model (default: the agent's)" });
    const form = h("form", { class: "control", id },
      h("label", {}, "description", description),
      h("label", {}, "agent ", agent),
      h("label", {}, "model ", model),
      h("button", { type: "submit", class: "primary", data: { action } }, label),
    );
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const change = {};
      if (description.value !== def.description) change.description = description.value;
      if (agent.value.trim()) change.agent = agent.value.trim();
      if (model.value.trim()) change.model = model.value.trim();
      submit(change);
    });
    return form;
  }

  async function showSubtask(page, sid) {
    const panel = document.getElementById("panel");
    panel.hidden = false;
    // Another subtask: say it is loading; the same one keeps what it shows until then.
    if (panel.dataset.subtask !== sid) {
      panel.dataset.subtask = sid;
      panel.dataset.status = "";
      panel.replaceChildren(h("p", { class: "note" }, "loading " + sid + "…"));
    }
    let data;
    try {
      data = await api().get(page.api(`/subtasks/${encodeURIComponent(sid)}`));
    } catch (err) {
      if (!page.gone) panel.replaceChildren(h("p", { class: "error-box" }, err.message));
      return;
    }
    if (page.gone || panel.dataset.subtask !== sid) return; // another was chosen meanwhile
    const def = data.subtask;
    const r = data.result || { status: "pending", agent: def.agent, usage: { tokens: 0, prompt_tokens: 0, completion_tokens: 0, cost_usd: 0 }, llm_calls: 0, retries: 0 };
    panel.dataset.status = r.status;
    const secs = page.graph.durationOf(sid);
    const close = h("button", { type: "button", onclick: () => page.select(null) }, "close");
    panel.replaceChildren(
      h("h2", {}, sid + " ", badge(r.status), " ", close),
      kv([
        ["agent", r.agent || def.agent],
        ["depends on", def.depends_on.join(", ") || "nothing"],
        ["duration", secs ? G().fmtDuration(secs) : "–"],
        ["tokens", `${r.usage.tokens} (${r.usage.prompt_tokens} in, ${r.usage.completion_tokens} out)`],
        ["cost", G().fmtCost(r.usage.cost_usd)],
        ["LLM calls", String(r.llm_calls)],
        ["retries", String(r.retries)],
        ["commit", r.commit ? r.commit.slice(0, 12) : "–"],
        ["workflow", data.temporal_url
          ? h("a", { href: data.temporal_url, target: "_blank", rel: "noopener noreferrer" }, "open in Temporal Web")
          : page.readOnly ? "an earlier run's: the plan's Temporal Web link opens that run"
            : "never started: Temporal has no workflow for it"],
      ]),
    );
    panel.append(h("h3", {}, "description"), h("pre", { class: "live" }, def.description));
    if (r.error) panel.append(h("h3", {}, "error"), h("div", { class: "error-box", id: "subtask-error" }, `${r.error.type}: ${r.error.message}`));
    if (r.result) panel.append(h("h3", {}, "result"), h("pre", {}, r.result));
    if (r.checks && r.checks.length) {
      // Each check run (docs/plans.md, "Checks"): passed or not, and a failed one's output.
      const list = h("ul", { id: "subtask-checks" });
      for (const c of r.checks) {
        const how = c.timed_out ? "timed out" : `exit ${c.exit_code}`;
        const ok = c.exit_code === 0 && !c.timed_out;
        const item = h("li", {}, `${ok ? "✓" : "✗"} round ${c.round}: ${c.argv.join(" ")} → ${how} in ${c.duration_s.toFixed(1)}s`);
        if (!ok) item.append(h("pre", {}, c.output));
        list.append(item);
      }
      panel.append(h("h3", {}, "checks"), list);
    }
    const subs = page.graph.subagentsOf(sid);
    if (subs.length) {
      const list = h("ul", {});
      for (const s of subs) {
        list.append(h("li", {}, `${G().icon(s.status)} ${s.path.slice(1).join("/")} · ${s.status} `, h("a", { href: s.temporal_url, target: "_blank", rel: "noopener noreferrer" }, "Temporal Web")));
      }
      panel.append(h("h3", {}, "sub-agents"), list);
    }
    panel.append(controls(page, sid, def, data.result));
    const live = h("pre", { class: "live", id: "live-text" });
    live.hidden = true;
    panel.append(live);
    page.paintLiveText();
    const conv = data.conversation;
    panel.append(h("h3", {}, "conversation"));
    if (conv.unavailable) panel.append(h("p", { class: "note" }, conv.unavailable));
    else {
      const list = h("div", { id: "conversation" });
      for (const m of conv.messages) list.append(messageView(m));
      if (!conv.messages.length) list.append(h("p", { class: "note" }, "no messages yet"));
      panel.append(list);
    }
    panel.append(h("h3", {}, "diff"));
    const diffBox = h("div", { id: "diff" }, h("p", { class: "note" }, "reading the workspace…"));
    panel.append(diffBox);
    try {
      const diff = await api().get(page.api(`/subtasks/${encodeURIComponent(sid)}/diff`));
      diffBox.replaceChildren(diffView(diff));
    } catch (err) {
      diffBox.replaceChildren(h("p", { class: "note" }, err.message));
    }
  }

  /* The waiting calls, updated in place: a row already shown keeps what the operator
   * typed (edited arguments, a reason) while the list refreshes around it. */
  /* When a call began waiting, as a person reads it: the local time, and how long ago. */
  function sinceText(iso) {
    const at = new Date(iso);
    if (Number.isNaN(at.getTime())) return iso;
    const secs = Math.max(0, (Date.now() - at.getTime()) / 1000);
    return `${at.toLocaleString()} (${window.DplanGraph.fmtDuration(secs)} ago)`;
  }

  function showApprovals(page, calls) {
    // A subtask with a call waiting is not working: its node says whom it waits for.
    if (page.graph.setWaiting(calls.map((c) => c.subtask.split("/")[0]))) page.redraw();
    const box = document.getElementById("approvals");
    box.hidden = !calls.length;
    const wanted = new Set(calls.map((c) => c.call));
    const shown = new Map([...box.querySelectorAll(".approval")].map((row) => [row.dataset.call, row]));
    for (const [call, row] of shown) if (!wanted.has(call)) row.remove();
    let title = box.querySelector("strong");
    if (!title) { title = h("strong", {}); box.prepend(title); }
    title.textContent = `${calls.length} tool call${calls.length > 1 ? "s" : ""} waiting for a decision`;
    for (const c of calls) {
      if (shown.has(c.call)) continue;
      const args = h("textarea", { name: "arguments", "aria-label": "arguments" });
      args.value = c.arguments;
      const reason = h("input", { name: "reason", placeholder: "reason (the model reads it)", size: "28" });
      const approve = () => {
        const edited = args.value.trim() !== c.arguments.trim();
        page.act("approve", edited ? { call: c.call, arguments: args.value } : { call: c.call });
      };
      const reject = () => page.act("reject", { call: c.call, reason: reason.value });
      box.append(h("div", { class: "approval", data: { call: c.call } },
        h("div", {},
          h("div", { title: c.since }, `${c.call} · ${c.agent} wants ${c.tool} · since ${sinceText(c.since)}`),
          args),
        h("div", { class: "actions" },
          h("button", { type: "button", class: "primary", data: { action: "approve" }, onclick: approve }, "approve"),
          reason,
          h("button", { type: "button", class: "danger", data: { action: "reject" }, onclick: reject }, "reject")),
      ));
    }
  }

  window.DplanPanel = { showSubtask, showApprovals, h, badge };
})();
