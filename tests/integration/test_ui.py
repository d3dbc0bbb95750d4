"""``dplan ui`` in a real headless Chromium, against a real dev server and worker.

The page is served by ``running_ui`` on a free port, over a ``Client`` of the test's
server; the worker's model is the fake provider (through litellm), whose directives steer
subtasks. The tests read the page's DOM (SVG nodes and edges, the status each node
carries as a word, the panels) and click its buttons as a person would, then check what
Temporal and the session store hold. Screenshots are saved in each test's tmp dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio.client import WorkflowFailureError

from durable_plans.client import Client as PlansClient
from durable_plans.client import PlanNotFound, Refused, SubtaskChanges
from durable_plans.client._operator import default_operator
from durable_plans.domain.approval_rules import QUERY_APPROVALS, ApprovalPolicy, WorkflowApprovals
from durable_plans.domain.models import (
    Notify,
    Plan,
    PlanReport,
    PlanStatus,
    Subtask,
    SubtaskStatus,
)
from durable_plans.testing import FakeProvider
from durable_plans.ui import UiSecurity, running_ui
from durable_plans.ui.server import UiServer
from tests.browser import CHROMIUM, Cdp, headless_chromium
from tests.integration.conftest import Harness
from tests.integration.gates import GatedProvider, first_call_of
from tests.integration.plans import by_id, make_plan
from tests.integration.stored import subtask_messages, tool_answers
from tests.integration.webhook_receiver import Answer, WebhookReceiver

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed (Debian: `apt-get install chromium`, or `make chromium`)",
    ),
]

WAIT_S = 60.0  # a bound on waiting for the page or the plan, never asserted


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    """The fake provider, able to hold a subtask's first call until the test lets it go."""
    async with GatedProvider(latency_ms=0, hold_s=25.0) as p:
        yield p


@asynccontextmanager
async def ui_for(
    harness: Harness, *, host: str = "127.0.0.1", token: str | None = None
) -> AsyncIterator[UiServer]:
    client = PlansClient(harness.client, harness.settings)
    async with running_ui(client, UiSecurity(bind_host=host, token=token), port=0) as server:
        yield server


async def open_page(cdp: Cdp, url: str) -> None:
    await cdp.call("Page.enable")
    await cdp.call("Page.navigate", url=url)
    await cdp.wait_for("document.body && document.body.dataset.rendered === '1'", timeout_s=WAIT_S)


def node_status(subtask: str) -> str:
    return (
        f"(document.querySelector('#graph g.node[data-id=\"{subtask}\"]') || "
        "{dataset: {}}).dataset.status"
    )


async def click(cdp: Cdp, selector: str) -> None:
    """Click ``selector`` once it is there: a poll answered from before the state the test
    waited for can redraw the page for a moment (a paused panel drawn as running while the
    next poll is under way), so one look is not enough."""
    script = (
        f"(() => {{ const b = document.querySelector({json.dumps(selector)}); "
        "if (!b) return false; "
        "b.dispatchEvent(new MouseEvent('click', {bubbles: true})); return true; })()"
    )
    deadline = time.monotonic() + WAIT_S
    while not await cdp.evaluate(script):
        assert time.monotonic() < deadline, f"nothing to click at {selector}"
        await asyncio.sleep(0.1)


async def set_value(cdp: Cdp, selector: str, value: str) -> None:
    found = await cdp.evaluate(
        f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
        f"if (!e) return false; e.value = {json.dumps(value)}; return true; }})()"
    )
    assert found, f"no field at {selector}"


async def wait_status(harness: Harness, plan_id: str, subtask: str, status: SubtaskStatus) -> None:
    client = PlansClient(harness.client, harness.settings)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        report = await client.status(plan_id)
        if by_id(report)[subtask].status is status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{subtask} never became {status.value}")


def last_user_text(body: Mapping[str, Any] | None) -> str:
    messages = (body or {}).get("messages") or []
    users = [m.get("content") for m in messages if m.get("role") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else ""


def requests_naming(provider: FakeProvider, marker: str) -> int:
    return sum(1 for r in provider.requests if marker in last_user_text(r.body))


# --------------------------------------------------------------------------- the DAG


def layered_plan(width: int = 4, depth: int = 5) -> Plan:
    """``depth`` layers of ``width``: each subtask depends on two of the layer above."""
    subtasks = []
    for layer in range(1, depth + 1):
        for j in range(1, width + 1):
            deps: tuple[str, ...] = ()
            if layer > 1:
                deps = tuple(sorted({f"L{layer - 1}-{j}", f"L{layer - 1}-{j % width + 1}"}))
            subtasks.append(
                Subtask(id=f"L{layer}-{j}", description=f"Step {layer}.{j}", depends_on=deps)
            )
    base = make_plan([("x", "x", [])], prefix="ui-dag")
    return base.model_copy(update={"subtasks": tuple(subtasks), "goal": "a 4x5 layered plan"})


async def test_a_layered_plan_is_drawn_and_updates_live(harness: Harness, tmp_path: Path) -> None:
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("L1-1", 99, first_call_of("Step 1.1"))
    plan = layered_plan().model_copy(update={"tenant": "team-ui"})
    edges = sum(len(s.depends_on) for s in plan.subtasks)
    handle = await harness.start(plan)
    await wait_status(harness, plan.id, "L1-1", SubtaskStatus.RUNNING)

    async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
        await open_page(cdp, f"{ui.url}#/plan/{plan.id}")
        assert await cdp.evaluate("document.querySelectorAll('#graph g.node').length") == 20
        assert await cdp.evaluate("document.querySelectorAll('#graph path.edge').length") == edges
        assert await cdp.evaluate(EDGES_UNDER_NODES) == []  # dagre's routes too
        # Readable without colour: the node says its status in words, with an icon.
        await cdp.wait_for(f"{node_status('L1-1')} === 'running'", timeout_s=WAIT_S)
        text = await cdp.evaluate(
            "document.querySelector('#graph g.node[data-id=\"L1-1\"]').textContent"
        )
        assert "▶ running" in text and "coder" in text
        await cdp.evaluate("window.sameDocument = 'yes'")
        await cdp.screenshot(tmp_path / "ui-dag-running.png")
        # A subtask not started yet has no workflow: no link to Temporal Web's "not found".
        await click(cdp, '#graph g.node[data-id="L5-1"]')
        shown = await cdp.wait_for(
            "document.getElementById('panel').dataset.subtask === 'L5-1' "
            "&& document.getElementById('panel').innerText.includes('never started') "
            "&& document.getElementById('panel').innerText"
        )
        assert "open in Temporal Web" not in shown
        assert await cdp.evaluate("document.querySelector('#panel dd a')") is None

        held.release()
        await cdp.wait_for(f"{node_status('L1-1')} === 'completed'", timeout_s=WAIT_S)
        assert await cdp.evaluate("window.sameDocument") == "yes"  # no reload happened
        report = await asyncio.wait_for(handle.result(), timeout=WAIT_S)
        assert report.status is PlanStatus.COMPLETED
        await cdp.wait_for(
            "document.getElementById('plan-status').dataset.status === 'completed'",
            timeout_s=WAIT_S,
        )
        statuses = await cdp.evaluate(
            "[...document.querySelectorAll('#graph g.node')].map(n => n.dataset.status)"
        )
        assert statuses == ["completed"] * 20
        # The critical path is highlighted: a chain from the first layer to the last.
        critical = await cdp.evaluate(
            "[...document.querySelectorAll('#graph g.node.critical')].map(n => n.dataset.id)"
        )
        assert {c.split("-")[0] for c in critical} == {f"L{i}" for i in range(1, 6)}
        assert await cdp.evaluate("document.querySelectorAll('#graph path.edge.critical').length")
        # From real times, queueing included: c waited 3 s for a worker after b and ended
        # last, so the path is b → c (5 s), not a → x, whose runs add up to more.
        path = await cdp.evaluate(
            "(() => { const spans = {a: [0, 3], x: [3, 4], b: [0, 1], c: [4, 5]}; "
            "const subs = [{id: 'a', depends_on: []}, {id: 'x', depends_on: ['a']}, "
            "{id: 'b', depends_on: []}, {id: 'c', depends_on: ['b']}]; "
            "const p = DplanGraph.criticalPath(subs, "
            "(id) => ({start: spans[id][0] * 1000, end: spans[id][1] * 1000})); "
            "return {nodes: [...p.nodes].sort(), edges: [...p.edges], length: p.length}; })()"
        )
        assert path == {"nodes": ["b", "c"], "edges": ["b>c"], "length": 5}
        # A subtask the report says ran, not in the timeline yet (visibility lags): the
        # path still ends at it, at a last subtask, its length unknown until it is timed.
        lagging = await cdp.evaluate(
            "(() => { const subs = [{id: 'a', depends_on: []}, {id: 'b', depends_on: ['a']}]; "
            "const p = DplanGraph.criticalPath(subs, "
            "(id) => (id === 'a' ? {start: 0, end: 1000} : null), () => true); "
            "return {nodes: [...p.nodes].sort(), length: p.length}; })()"
        )
        assert lagging == {"nodes": ["a", "b"], "length": 0}
        await cdp.screenshot(tmp_path / "ui-dag.png")

        # A subtask's panel: its conversation from the session store, its link.
        await click(cdp, '#graph g.node[data-id="L3-2"]')
        # (read in one step each: the panel may be redrawn as the plan's last events land)
        conversation = await cdp.wait_for(
            "document.querySelectorAll('#conversation .msg').length > 0 "
            "&& document.getElementById('conversation').innerText"
        )
        assert "list_dir" in conversation and "Step 3.2" in conversation
        # A tool result names its call as the assistant's line does (ids are case-sensitive).
        label, call_id = await cdp.evaluate(
            "(() => { const r = document.querySelector('#conversation .msg.tool .role'); "
            "return [r.innerText, r.querySelector('.call-id').textContent]; })()"
        )
        assert call_id and call_id in label and call_id in conversation, (label, call_id)
        await cdp.screenshot(tmp_path / "ui-plan-page.png", scale=0.6)  # docs/plan-page.png
        link = await cdp.wait_for("(document.querySelector('#panel dd a') || {}).href")
        assert link.endswith(f"/workflows/{plan.id}%2FL3-2")
        # The timeline shows when each subtask ran.
        await click(cdp, '#toolbar .tab[data-view="timeline"]')
        await cdp.wait_for("document.querySelectorAll('#timeline .tl-row').length >= 20")
        await cdp.screenshot(tmp_path / "ui-timeline.png")

        # The plans list shows it.
        await cdp.call("Page.navigate", url=f"{ui.url}#/")
        await cdp.wait_for(
            f"document.querySelector('#plans tr[data-plan=\"{plan.id}\"]') !== null",
            timeout_s=WAIT_S,
        )
        # Its tenant, in the column headed so (the list refreshes until visibility has it).
        await cdp.wait_for(
            f"document.querySelector('#plans tr[data-plan=\"{plan.id}\"]')"
            "?.cells[2].textContent === 'team-ui'",
            timeout_s=WAIT_S,
        )
        header = "document.querySelector('#plans thead tr').cells[2].textContent"
        assert await cdp.evaluate(header) == "tenant"
        await cdp.screenshot(tmp_path / "ui-plans.png")


# --------------------------------------------------------------------------- figures

STATUS_ORDER = ("completed", "failed", "skipped", "cancelled", "paused", "running", "pending")


def header_of(report: PlanReport) -> str:
    """The header's figures as the page must give them for ``report`` (what ``dplan
    status --json`` says), up to the duration."""
    counts = report.counts.model_dump()
    total = sum(counts.values())
    parts = " · ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts[s])
    tokens = report.usage.prompt_tokens + report.usage.completion_tokens
    return (
        f"{total} subtask{'' if total == 1 else 's'}: {parts} · {tokens:,} tok"
        f" · ${report.usage.cost_usd:.4f} · "
    )


async def test_the_header_gives_the_reports_figures_in_every_terminal_state(
    harness: Harness, tmp_path: Path
) -> None:
    """A completed, a failed and a cancelled plan: each page's status, counts (every
    status, adding up), tokens, cost and duration are its report's."""
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("hold", 99, first_call_of("Wait here"))
    done = make_plan([("a", "Do it", []), ("b", "Then this", ["a"])], prefix="fig-ok")
    failed = make_plan(
        [("ok", "Fine", []), ("bad", "Break it [fail:400]", []), ("dep", "After", ["bad"])],
        prefix="fig-fail",
    )
    cancelled = make_plan(
        [("quick", "Quick", []), ("slow", "Wait here", []), ("later", "After", ["slow"])],
        prefix="fig-cancel",
    )
    handles = {p.id: await harness.start(p) for p in (done, failed, cancelled)}
    await wait_status(harness, cancelled.id, "slow", SubtaskStatus.RUNNING)
    await wait_status(harness, cancelled.id, "quick", SubtaskStatus.COMPLETED)
    await handles[cancelled.id].cancel()
    held.release()
    for handle in handles.values():
        with contextlib.suppress(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=WAIT_S)
    client = PlansClient(harness.client, harness.settings)
    reports = {p.id: await client.status(p.id) for p in (done, failed, cancelled)}
    assert [r.status for r in reports.values()] == [
        PlanStatus.COMPLETED,
        PlanStatus.FAILED,
        PlanStatus.CANCELLED,
    ]

    async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
        for plan_id, report in reports.items():
            await open_page(cdp, f"{ui.url}#/plan/{plan_id}")
            status = await cdp.wait_for(
                "document.getElementById('plan-status').dataset.status", timeout_s=WAIT_S
            )
            assert status == report.status.value, plan_id
            totals = await cdp.evaluate("document.getElementById('plan-totals').textContent")
            expected = header_of(report)
            assert totals.startswith(expected), (totals, expected)
            shown = float(totals[len(expected) :].split("s", 1)[0])
            # Shown to a tenth of a second: off by at most half of one (and a float's ulp).
            assert abs(shown - report.duration_s) <= 0.05 + 1e-9, (totals, report.duration_s)
            await cdp.screenshot(tmp_path / f"ui-figures-{report.status.value}.png")


# --------------------------------------------------------------------------- approvals


@pytest.mark.parametrize("decision", ["approve", "edit", "reject"])
async def test_a_waiting_tool_call_is_decided_from_the_page(
    harness: Harness, tmp_path: Path, decision: str
) -> None:
    (harness.settings.workspace / "sub").mkdir()
    (harness.settings.workspace / "sub" / "edited.txt").write_text("edited\n")
    plan = make_plan([("look", "Look at the workspace", [])], prefix=f"ui-{decision}")
    plan = plan.model_copy(update={"approval": ApprovalPolicy(tools=("list_dir",))})
    handle = await harness.start(plan)

    async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
        await open_page(cdp, f"{ui.url}#/plan/{plan.id}")
        row = '#approvals .approval[data-call="look:0.0"]'
        await cdp.wait_for(f"document.querySelector('{row}') !== null", timeout_s=WAIT_S)
        # Its node says whom it waits for, not "running".
        node = '#graph g.node[data-id="look"]'
        await cdp.wait_for(f"document.querySelector('{node}').dataset.waiting === 'true'")
        label = await cdp.evaluate(f"document.querySelector('{node}').textContent")
        assert "… waiting for a person" in label and "▶ running" not in label
        # The header counts the plan as dplan status does, and its duration runs on. (The
        # waiting call can be listed before the page's next report says the subtask runs:
        # the header follows that report.)
        totals = await cdp.wait_for(
            "(t => t.startsWith('1 subtask: 1 running · ') && t)"
            "(document.getElementById('plan-totals').textContent)",
            timeout_s=WAIT_S,
        )
        await cdp.wait_for(
            f"document.getElementById('plan-totals').textContent !== {json.dumps(totals)}",
            timeout_s=WAIT_S,
        )
        await cdp.screenshot(tmp_path / f"ui-{decision}-waiting.png")
        if decision == "reject":
            await set_value(cdp, f'{row} input[name="reason"]', "not in this sandbox")
        if decision == "edit":  # approve with edited arguments
            await set_value(cdp, f'{row} textarea[name="arguments"]', '{"path": "sub"}')
        button = "reject" if decision == "reject" else "approve"
        await click(cdp, f'{row} button[data-action="{button}"]')
        report = await asyncio.wait_for(handle.result(), timeout=WAIT_S)
        await cdp.wait_for(
            "document.getElementById('plan-status').dataset.status === 'completed'",
            timeout_s=WAIT_S,
        )
        flash = await cdp.evaluate("document.getElementById('flash').textContent")
        # The decision is on record in the plan's log view.
        await click(cdp, '#toolbar .tab[data-view="log"]')
        logged = await cdp.wait_for(
            "(() => { const r = document.querySelector('#log-table tbody tr'); "
            "return r && [r.dataset.kind, "
            "...[...r.cells].slice(2).map((c) => c.textContent)]; })()",
            timeout_s=WAIT_S,
        )

    assert report.status is PlanStatus.COMPLETED
    who = default_operator()  # recorded as the CLI records it (--by's default)
    kind = "rejected" if decision == "reject" else "approved"
    assert logged[:3] == [kind, "look:0.0", who], logged
    assert [(e.kind, e.by) for e in report.log] == [(kind, who)]
    said = {
        "approve": "approved",
        "edit": "approved with edited arguments",
        "reject": "rejected",
    }[decision]
    assert f"look:0.0: {said} by {who}" in flash
    snap = await harness.client.get_workflow_handle(f"{plan.id}/look").query(
        QUERY_APPROVALS, result_type=WorkflowApprovals
    )
    assert [(d.approved, d.who) for d in snap.decided] == [(decision != "reject", who)]
    answer = tool_answers(await subtask_messages(harness.store, report, "look"))[0].content or ""
    if decision == "approve":
        assert "README.md" in answer and snap.decided[0].arguments is None
    elif decision == "edit":
        assert "edited.txt" in answer and "README.md" not in answer
        assert snap.decided[0].arguments == '{"path": "sub"}'
    else:
        assert snap.decided[0].reason == "not in this sandbox"
        assert "not in this sandbox" in answer


# --------------------------------------------------------------------------- the log


async def log_kinds_until(client: PlansClient, plan_id: str, want: list[str]) -> PlanReport:
    """The plan's report once its log's kinds are ``want`` (bounded in time)."""
    deadline = time.monotonic() + WAIT_S
    kinds: list[str] = []
    while time.monotonic() < deadline:
        report = await client.status(plan_id)
        kinds = [e.kind for e in report.log]
        if kinds == want:
            return report
        assert kinds == want[: len(kinds)], kinds  # never an entry it should not have
        await asyncio.sleep(0.1)
    raise AssertionError(f"the log says {kinds}, not {want}")


async def flashed(cdp: Cdp, words: str) -> None:
    """Wait until the page's message says ``words`` (the answer to the last action); on a
    timeout, say what it says instead."""
    try:
        await cdp.wait_for(
            f"document.getElementById('flash').textContent.includes({json.dumps(words)})",
            timeout_s=WAIT_S,
        )
    except TimeoutError:
        shown = await cdp.evaluate("document.getElementById('flash').textContent")
        raise AssertionError(f"the page's message is {shown!r}, not {words!r}") from None


async def test_the_log_lists_every_decision_taken_from_the_page(
    harness: Harness, tmp_path: Path
) -> None:
    """Resume, skip, budget, cancel and retry, each clicked on the page: the log view lists
    each (and the pauses between), with who and when, as ``dplan status --json`` does."""
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("hold", 99, first_call_of("Wait here"))
    plan = make_plan(
        [("bad", "Break it [fail:400]", []), ("dep", "After", ["bad"]), ("slow", "Wait here", [])],
        prefix="ui-log",
    ).model_copy(update={"on_failure": "pause"})
    await harness.start(plan)
    client = PlansClient(harness.client, harness.settings)
    who = default_operator()
    panel_paused = (
        "document.getElementById('panel').dataset.status === 'paused' && "
        "document.querySelector('#panel button[data-action=\"{}\"]') !== null"
    )
    try:
        async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
            await open_page(cdp, f"{ui.url}#/plan/{plan.id}/bad")
            await cdp.evaluate("window.confirm = () => true")  # the cancel's question
            await log_kinds_until(client, plan.id, ["paused"])
            await cdp.wait_for(panel_paused.format("resume"), timeout_s=WAIT_S)
            await click(cdp, '#panel button[data-action="resume"]')
            # [fail:400] fails again: paused again, then skipped for good.
            await log_kinds_until(client, plan.id, ["paused", "resumed", "paused"])
            await cdp.wait_for(panel_paused.format("skip"), timeout_s=WAIT_S)
            await click(cdp, '#panel button[data-action="skip"]')
            await log_kinds_until(client, plan.id, ["paused", "resumed", "paused", "skipped"])
            await set_value(cdp, '#plan-controls input[name="max_tokens"]', "1000000000")
            await click(cdp, '#plan-controls button[data-action="budget"]')
            await flashed(cdp, "budget set")
            await log_kinds_until(
                client, plan.id, ["paused", "resumed", "paused", "skipped", "budget"]
            )
            await click(cdp, '#plan-controls button[data-action="cancel"]')
            await flashed(cdp, "asked to stop")
            # The plan has stopped (its retry button shows) with the held call still held:
            # `slow` was cancelled, not answered. Released earlier, the call could answer
            # before the cancel reached `slow` on a loaded host (a plan task took over 5 s
            # in a failed run): `slow` completed and the retry rightly left it out.
            await cdp.wait_for(
                "document.querySelector('#plan-controls button[data-action=\"retry\"]') !== null",
                timeout_s=WAIT_S,
            )
            held.release()
            await click(cdp, '#plan-controls button[data-action="retry"]')
            await flashed(cdp, "retrying: bad, dep, slow")
            want = ["paused", "resumed", "paused", "skipped", "budget", "cancelled", "retried"]
            report = await log_kinds_until(client, plan.id, [*want, "paused"])

            # The open panel follows the new run: its subtask is paused again, not failed.
            await cdp.wait_for(panel_paused.format("resume"), timeout_s=WAIT_S)
            await click(cdp, '#toolbar .tab[data-view="log"]')
            rows_js = (
                "[...document.querySelectorAll('#log-table tbody tr')].map((tr) => "
                "[tr.dataset.kind, ...[...tr.cells].slice(2).map((c) => c.textContent)])"
            )
            try:
                await cdp.wait_for(f"{rows_js}.length === {len(report.log)}", timeout_s=WAIT_S)
            except TimeoutError as timed_out:  # what the page shows, against the plan's log
                kinds = [e.kind for e in report.log]
                raise AssertionError(f"{kinds}: {await cdp.evaluate(rows_js)}") from timed_out
            shown = await cdp.evaluate(rows_js)
            await cdp.screenshot(tmp_path / "ui-log.png", scale=0.6)  # docs/plan-log.png
    finally:
        held.release()
        with contextlib.suppress(Exception):
            await client.cancel(plan.id)

    # Newest first, each as the report has it; the people's decisions are the operator's.
    expected = [
        [
            e.kind,
            e.call or e.subtask,
            e.by or ("the plan (on_failure: pause)" if e.kind == "paused" else ""),
            e.detail,
        ]
        for e in reversed(report.log)
    ]
    assert shown == expected
    assert {e.by for e in report.log if e.kind != "paused"} == {who}
    assert [e.subtask for e in report.log if e.kind in ("paused", "resumed", "skipped")] == [
        "bad"
    ] * 5
    budget = next(e for e in report.log if e.kind == "budget")
    assert budget.detail == "max_tokens 1,000,000,000"


async def test_retry_is_offered_once_the_run_has_closed_not_while_it_winds_down(
    harness: Harness, tmp_path: Path, secret_env: tuple[str, str]
) -> None:
    """A failed plan's report reads as ended while its run still winds down (here its
    webhook, held, is still being told): a retry asked then is refused as still running,
    so the page offers it only once the run has closed. Offered at the first report that
    read as ended, a click could meet that refusal (the likely cause of a fresh-clone
    failure of the log test above, whose retry never said "retrying")."""
    env, secret = secret_env
    hold = asyncio.Event()
    retry_button = "document.querySelector('#plan-controls button[data-action=\"retry\"]') !== null"
    async with WebhookReceiver(secret, [Answer(200)], hold=hold) as hook:
        plan = make_plan([("bad", "Break it [fail:400]", [])], prefix="ui-wind")
        plan = plan.model_copy(update={"notify": Notify(webhook=hook.url, secret_env=env)})
        await harness.start(plan)
        client = PlansClient(harness.client, harness.settings)
        try:
            async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
                await open_page(cdp, f"{ui.url}#/plan/{plan.id}")
                await asyncio.wait_for(hook.arrived.wait(), timeout=WAIT_S)
                # The run waits on its webhook: its report says failed, the page shows it.
                await cdp.wait_for(
                    "document.getElementById('plan-status').dataset.status === 'failed'",
                    timeout_s=WAIT_S,
                )
                assert not await cdp.evaluate(retry_button)
                with pytest.raises(Refused, match="still running"):
                    await client.retry(plan.id)
                hold.set()
                await cdp.wait_for(retry_button, timeout_s=WAIT_S)
                await click(cdp, '#plan-controls button[data-action="retry"]')
                await flashed(cdp, "retrying: bad")
        finally:
            hold.set()
            with contextlib.suppress(Exception):
                await client.cancel(plan.id)


async def test_a_subtask_added_from_the_panel_appears_live_and_a_fork_from_it_links_back(
    harness: Harness, tmp_path: Path
) -> None:
    """The panel's "add a subtask after this one" revises the running plan: the node
    appears without a reload, marked with who added it, as one added through the client
    does; "fork from here" starts a new plan and opens it, linked to the original."""
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("lead", 99, first_call_of("Survey first"))
    plan = make_plan([("lead", "Survey first", [])], prefix="ui-revise")
    await harness.start(plan)
    client = PlansClient(harness.client, harness.settings)
    node = "document.querySelector('#graph g.node[data-id=\"{}\"]')"
    try:
        async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
            await open_page(cdp, f"{ui.url}#/plan/{plan.id}/lead")
            await wait_status(harness, plan.id, "lead", SubtaskStatus.RUNNING)
            await cdp.wait_for("document.getElementById('add-form') !== null", timeout_s=WAIT_S)
            await set_value(cdp, '#add-form input[name="id"]', "m0")
            await set_value(cdp, '#add-form textarea[name="description"]', "Module 0")
            await click(cdp, '#add-form button[data-action="add"]')
            await flashed(cdp, "revision 1: added m0")
            await client.revise(plan.id, add=[Subtask(id="m1", description="Module 1")])
            await cdp.wait_for(f"{node.format('m1')} !== null", timeout_s=WAIT_S)
            added_by = await cdp.evaluate(
                f"[{node.format('m0')}.dataset.addedBy, {node.format('m1')}.dataset.addedBy]"
            )
            held.release()
            await cdp.wait_for(f"{node_status('m0')} === 'completed'", timeout_s=WAIT_S)
            await click(cdp, '#graph g.node[data-id="m0"]')
            await cdp.wait_for("document.getElementById('fork-form') !== null", timeout_s=WAIT_S)
            await set_value(cdp, '#fork-form textarea[name="description"]', "Module 0, again")
            await click(cdp, '#fork-form button[data-action="fork"]')
            await cdp.wait_for("!document.getElementById('plan-fork').hidden", timeout_s=WAIT_S)
            told = await cdp.evaluate("document.getElementById('plan-fork').textContent")
            link = await cdp.evaluate("document.querySelector('#plan-fork a').getAttribute('href')")
            forked = await cdp.evaluate("location.hash")
    finally:
        held.release()
    who = default_operator()
    assert added_by == [who, who]
    assert told.startswith(f"forked from plan {plan.id} at m0")
    assert link == f"#/plan/{plan.id}"
    fork_id = forked.removeprefix("#/plan/")
    report = await client.report(fork_id)
    assert report.forked_from is not None and report.forked_from.plan == plan.id
    assert by_id(report)["m0"].result != by_id(await client.report(plan.id))["m0"].result


async def test_a_paused_subtask_is_edited_and_run_again_from_its_panel(
    harness: Harness, tmp_path: Path
) -> None:
    """A failure that would repeat: the paused subtask's panel changes its description
    and runs it again; the plan completes, the log says who edited what."""
    plan = make_plan(
        [("bad", "Break it [fail:400]", []), ("dep", "After", ["bad"])], prefix="ui-edit"
    ).model_copy(update={"on_failure": "pause"})
    handle = await harness.start(plan)
    async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
        await open_page(cdp, f"{ui.url}#/plan/{plan.id}/bad")
        form = "#edit-form"
        await cdp.wait_for(
            "document.getElementById('panel').dataset.status === 'paused' && "
            f"document.querySelector('{form}') !== null",
            timeout_s=WAIT_S,
        )
        await cdp.screenshot(tmp_path / "ui-edit-paused.png")
        await click(cdp, f'{form} button[data-action="edit"]')  # nothing changed yet
        await flashed(cdp, "change the description, agent or model first")
        await set_value(cdp, f'{form} textarea[name="description"]', "Fixed now")
        await click(cdp, f'{form} button[data-action="edit"]')
        await flashed(cdp, "subtask 'bad' changed (description) and resumed")
        report = await asyncio.wait_for(handle.result(), timeout=WAIT_S)
        await cdp.wait_for(
            "document.getElementById('plan-status').dataset.status === 'completed'",
            timeout_s=WAIT_S,
        )
    assert report.status is PlanStatus.COMPLETED
    assert by_id(report)["bad"].retries == 1
    assert [(e.kind, e.by) for e in report.log] == [
        ("paused", ""),
        ("edited", default_operator()),
    ]
    users = [
        m.content for m in await subtask_messages(harness.store, report, "bad") if m.role == "user"
    ]
    assert "Fixed now" in (users[0] or "") and "[fail:400]" not in (users[0] or "")


# --------------------------------------------------------------------------- runs


def conversation_text() -> str:
    return "(document.getElementById('conversation') || {textContent: ''}).textContent"


async def test_each_run_of_a_retried_plan_opens_its_own_report_and_conversations(
    harness: Harness, tmp_path: Path
) -> None:
    """A plan fails, then an edit and re-run completes it: the page lists both runs; the
    first opens its own report (failed, its figures) and its own conversation of the
    failed subtask, read only; the latest opens the completed one."""
    plan = make_plan(
        [("ok", "Fine", []), ("bad", "Break it [fail:400]", []), ("dep", "After", ["bad"])],
        prefix="ui-runs",
    )
    handle = await harness.start(plan)
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), timeout=WAIT_S)
    client = PlansClient(harness.client, harness.settings)
    await client.retry(plan.id, changes={"bad": SubtaskChanges(description="Fixed now")})
    latest = await asyncio.wait_for(client.report(plan.id), timeout=WAIT_S)
    assert latest.status is PlanStatus.COMPLETED
    runs = await client.runs(plan.id)
    assert [(r.number, r.status, r.latest) for r in runs] == [
        (1, "failed", False),
        (2, "completed", True),
    ]
    first = await client.status(plan.id, run=runs[0].run_id)
    assert first.status is PlanStatus.FAILED and by_id(first)["dep"].status is SubtaskStatus.SKIPPED
    assert await client.status(plan.id, run=runs[1].run_id) == latest
    with pytest.raises(PlanNotFound, match="has no run 'nope'"):
        await client.status(plan.id, run="nope")

    status_is = "document.getElementById('plan-status').dataset.status === '{}'"
    async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
        await open_page(cdp, f"{ui.url}#/plan/{plan.id}/bad")
        options_js = "[...document.querySelectorAll('#plan-runs option')].map((o) => o.textContent)"
        await cdp.wait_for(f"{options_js}.length === 2", timeout_s=WAIT_S)
        options = await cdp.evaluate(options_js)
        assert options[0].startswith("run 2 of 2 (latest) · completed · "), options
        assert options[1].startswith("run 1 of 2 · failed · "), options
        await cdp.wait_for(status_is.format("completed"), timeout_s=WAIT_S)
        await cdp.wait_for(f"{conversation_text()}.includes('Fixed now')", timeout_s=WAIT_S)
        # ok's result, merged in the first run, is in the retry's conversations: labelled.
        merged = await cdp.evaluate(
            "[...document.querySelectorAll('#conversation .msg.merged .from-subtask')]"
            ".map((e) => e.textContent)"
        )
        assert merged == ["ok"], merged
        assert "assistant · the result of subtask ok" in await cdp.evaluate(conversation_text())

        # The first run, chosen from the list: its own report, read only.
        await cdp.evaluate(
            "(() => { const s = document.getElementById('plan-runs'); "
            f"s.value = {json.dumps(runs[0].run_id)}; s.dispatchEvent(new Event('change')); }})()"
        )
        await cdp.wait_for(status_is.format("failed"), timeout_s=WAIT_S)
        totals = await cdp.evaluate("document.getElementById('plan-totals').textContent")
        assert totals.startswith(header_of(first)), (totals, header_of(first))
        note = await cdp.wait_for(
            "document.getElementById('plan-run-note').textContent", timeout_s=WAIT_S
        )
        assert note.startswith("run 1 of 2, failed: an earlier run, read only"), note
        assert await cdp.evaluate("document.getElementById('plan-controls').innerHTML") == ""
        failure = await cdp.evaluate("document.getElementById('plan-failure').textContent")
        assert "first failure: bad — BadRequest" in failure, failure
        # Its failed subtask's conversation is that run's, with the task it was given.
        await click(cdp, "#plan-failure a")
        await cdp.wait_for(
            f"{conversation_text()}.includes('Break it [fail:400]')", timeout_s=WAIT_S
        )
        assert "Fixed now" not in await cdp.evaluate(conversation_text())
        url = await cdp.evaluate("location.hash")
        assert url == f"#/plan/{plan.id}/bad?run={runs[0].run_id}", url
        assert await cdp.evaluate("document.getElementById('subtask-controls').textContent") == (
            "an earlier run: act on the latest run"
        )
        await cdp.screenshot(tmp_path / "ui-earlier-run.png", scale=0.6)  # docs/plan-runs.png

        # Back to the latest from the note's link.
        await click(cdp, "#plan-run-note a")
        await cdp.wait_for(status_is.format("completed"), timeout_s=WAIT_S)
        assert await cdp.evaluate("document.getElementById('plan-run-note').hidden")

        # The plans list has a row per run, each opening its own.
        await cdp.call("Page.navigate", url=f"{ui.url}#/")
        rows = f"document.querySelectorAll('#plans tr[data-plan=\"{plan.id}\"] a')"
        await cdp.wait_for(f"{rows}.length === 2", timeout_s=WAIT_S)  # visibility lags
        await cdp.evaluate(f"{rows}[1].click()")  # newest first: the first run
        await cdp.wait_for(status_is.format("failed"), timeout_s=WAIT_S)
        note = "document.getElementById('plan-run-note')"
        await cdp.wait_for(f"!{note}.hidden", timeout_s=WAIT_S)
        await cdp.call("Page.navigate", url=f"{ui.url}#/")
        await cdp.wait_for(f"{rows}.length === 2", timeout_s=WAIT_S)
        await cdp.evaluate(f"{rows}[0].click()")  # the latest, by its run id at first
        await cdp.wait_for(
            f"location.hash === '#/plan/{plan.id}' && "
            "document.getElementById('plan-status').dataset.status === 'completed'",
            timeout_s=WAIT_S,
        )
        assert await cdp.evaluate(f"{note}.hidden")


# --------------------------------------------------------------------------- edit and re-run


async def test_edit_and_rerun_runs_the_subtask_and_its_dependents_only(
    harness: Harness, tmp_path: Path
) -> None:
    plan = make_plan(
        [
            ("first", "Prepare [marker:first]", []),
            ("broken", "Build it [fail:400] [marker:broken]", ["first"]),
            ("after", "Ship it [marker:after]", ["broken"]),
        ],
        prefix="ui-rerun",
    )
    handle = await harness.start(plan)
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), timeout=WAIT_S)
    client = PlansClient(harness.client, harness.settings)
    failed = await client.status(plan.id)
    assert by_id(failed)["broken"].status is SubtaskStatus.FAILED
    before = {m: requests_naming(harness.provider, f"[marker:{m}]") for m in ("first", "after")}
    assert before["after"] == 0

    async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
        await open_page(cdp, f"{ui.url}#/plan/{plan.id}/after")
        # The failure first: one line naming the subtask and its error, and every count.
        line = await cdp.wait_for("document.getElementById('plan-failure').textContent")
        error_of = by_id(failed)["broken"].error
        assert error_of is not None
        assert line.startswith(f"✗ first failure: broken — {error_of.type}: "), line
        totals = await cdp.evaluate("document.getElementById('plan-totals').textContent")
        counts = failed.counts
        assert (counts.completed, counts.failed, counts.skipped) == (1, 1, 1)
        assert totals.startswith("3 subtasks: 1 completed · 1 failed · 1 skipped · "), totals
        assert await cdp.evaluate("document.title") == f"✗ {plan.id} · dplan"
        # A skipped subtask never ran: its panel says so, not "no conversation yet".
        note = await cdp.wait_for(
            "document.getElementById('panel').dataset.subtask === 'after' "
            "&& document.getElementById('panel').innerText.includes('never ran') "
            "&& document.getElementById('panel').innerText"
        )
        assert "no conversation: this subtask never ran (skipped: " in note, note
        assert "yet" not in note, note

        # The failed subtask's page, as an operator opens it to edit and re-run it.
        await cdp.evaluate(f"location.hash = '#/plan/{plan.id}/broken'")
        error = await cdp.wait_for(
            "window.dplanPage.selected === 'broken' "
            "&& document.getElementById('panel').dataset.subtask === 'broken' "
            "&& (document.getElementById('subtask-error') || {}).textContent",
            timeout_s=WAIT_S,
        )
        # The plan's stream has said it ended: nothing redraws the panel under the edit.
        await cdp.wait_for("window.dplanPage.closed === true")
        assert "400" in error or "BadRequest" in error
        fixed = "Build it, fixed [marker:fixed]"
        await set_value(cdp, '#rerun-form textarea[name="description"]', fixed)
        await click(cdp, '#rerun-form button[data-action="rerun"]')
        flash = await cdp.wait_for(
            "document.getElementById('flash').textContent.startsWith('retrying') "
            "&& document.getElementById('flash').textContent",
            timeout_s=WAIT_S,
        )
        assert flash == "retrying: broken, after"
        report = await client.report(plan.id)
        await cdp.wait_for(
            "document.getElementById('plan-status').dataset.status === 'completed'",
            timeout_s=WAIT_S,
        )
        await cdp.screenshot(tmp_path / "ui-rerun.png")

    assert report.status is PlanStatus.COMPLETED
    rows = by_id(report)
    assert [r.id for r in report.subtasks] == ["first", "broken", "after"]  # one plan
    assert all(r.status is SubtaskStatus.COMPLETED for r in report.subtasks)
    assert rows["broken"].retries == 1 and rows["first"].retries == 0
    assert "fixed" in (rows["broken"].result or "")
    # Only the edited subtask and its dependent asked the model again.
    assert requests_naming(harness.provider, "[marker:first]") == before["first"]
    assert requests_naming(harness.provider, "[marker:fixed]") > 0
    assert requests_naming(harness.provider, "[marker:after]") > 0


# --------------------------------------------------------------------------- navigation


async def test_one_plan_per_page_however_fast_the_operator_moves(
    harness: Harness, tmp_path: Path
) -> None:
    """A plan opened at a subtask, and another 50 ms later: the page shows the second plan
    only (its header, its graph, its URL), nothing of the first lands on it, and an
    unknown plan after it shows its error on a clean page."""
    docs = make_plan([("docs", "Write the docs", []), ("x", "Check", ["docs"])], prefix="nav-a")
    other = make_plan([("only", "Look around", [])], prefix="nav-b")
    for plan in (docs, other):
        await asyncio.wait_for((await harness.start(plan)).result(), timeout=WAIT_S)

    async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
        await open_page(cdp, f"{ui.url}#/plan/{other.id}")
        await cdp.evaluate(
            "window.dplanErrors = []; "
            "window.addEventListener('error', (e) => dplanErrors.push(String(e.message)));"
            "window.addEventListener('unhandledrejection', (e) => "
            "dplanErrors.push(String(e.reason)));"
        )
        await set_value(cdp, "#search", "only")  # search state the next plan must not keep
        await cdp.evaluate("document.getElementById('search').dispatchEvent(new Event('input'))")
        assert await cdp.evaluate("document.getElementById('search-count').textContent")
        settled = (
            "window.dplanInFlight === 0 && document.body.dataset.rendered === '1' "
            "&& window.dplanPage.planId === {id}"
        )
        for _ in range(3):  # the race, three times over: each must end on the second plan
            await cdp.evaluate(
                f"location.hash = '#/plan/{docs.id}/docs'; "
                f"setTimeout(() => {{ location.hash = '#/plan/{other.id}'; }}, 50);"
            )
            await cdp.wait_for(settled.format(id=json.dumps(other.id)), timeout_s=WAIT_S)
            await cdp.wait_for("window.dplanInFlight === 0", timeout_s=WAIT_S)
            state = await cdp.evaluate(
                "({title: document.getElementById('plan-title').textContent, "
                "hash: location.hash, panel: document.getElementById('panel').hidden, "
                "nodes: [...document.querySelectorAll('#graph g.node')].map(n => n.dataset.id), "
                "transform: document.getElementById('viewport').getAttribute('transform'), "
                "search: document.getElementById('search').value, "
                "count: document.getElementById('search-count').textContent, "
                "flash: document.getElementById('flash').textContent, errors: dplanErrors})"
            )
            assert state["title"] == other.id and state["hash"] == f"#/plan/{other.id}", state
            assert state["panel"] is True and state["nodes"] == ["only"], state
            assert "NaN" not in (state["transform"] or ""), state
            assert state["search"] == "" and state["count"] == "", state
            assert state["flash"] == "" and state["errors"] == [], state

        await cdp.evaluate("location.hash = '#/plan/no-such-plan-x'")
        flash = await cdp.wait_for(
            "window.dplanInFlight === 0 && document.getElementById('flash').textContent",
            timeout_s=WAIT_S,
        )
        assert "no-such-plan-x" in flash
        clean = await cdp.evaluate(
            "({title: document.getElementById('plan-title').textContent, "
            "status: document.getElementById('plan-status').textContent, "
            "totals: document.getElementById('plan-totals').textContent, "
            "nodes: document.querySelectorAll('#graph g.node').length})"
        )
        assert clean == {"title": "no-such-plan-x", "status": "", "totals": "", "nodes": 0}
        await cdp.screenshot(tmp_path / "ui-unknown-plan.png")


# --------------------------------------------------------------------------- big plans


# Edges that pass over a node they do not join, sampled every 2 px along each segment
# (a node's box taken 2 px in, so touching a border is not passing under it).
EDGES_UNDER_NODES = """(() => {
  const boxes = [...document.querySelectorAll('#graph g.node')].map((g) => {
    const m = /translate\\(([-\\d.]+),([-\\d.]+)\\)/.exec(g.getAttribute('transform'));
    const r = g.querySelector('rect.box');
    return {id: g.dataset.id, x: +m[1] + 2, y: +m[2] + 2,
            w: +r.getAttribute('width') - 4, h: +r.getAttribute('height') - 4};
  });
  const bad = [];
  for (const p of document.querySelectorAll('#graph path.edge')) {
    const pts = p.getAttribute('d').split(/[ML]/).filter((s) => s.trim())
      .map((s) => s.trim().split(/\\s+/).map(Number));
    for (let i = 1; i < pts.length; i++) {
      const [x0, y0] = pts[i - 1], [x1, y1] = pts[i];
      const steps = Math.max(1, Math.ceil(Math.hypot(x1 - x0, y1 - y0) / 2));
      const [lx, hx] = [Math.min(x0, x1), Math.max(x0, x1)];
      const [ly, hy] = [Math.min(y0, y1), Math.max(y0, y1)];
      for (const b of boxes) {
        if (b.id === p.dataset.from || b.id === p.dataset.to) continue;
        if (hx <= b.x || lx >= b.x + b.w || hy <= b.y || ly >= b.y + b.h) continue;
        for (let k = 0; k <= steps; k++) {
          const x = x0 + (x1 - x0) * k / steps, y = y0 + (y1 - y0) * k / steps;
          if (x > b.x && x < b.x + b.w && y > b.y && y < b.y + b.h) {
            bad.push(p.dataset.from + '>' + p.dataset.to + ' under ' + b.id); break;
          }
        }
      }
    }
  }
  return [...new Set(bad)].slice(0, 10);
})()"""

VIEW_SCALE = (
    "Number(/scale\\(([\\d.]+)\\)/.exec("
    "document.getElementById('viewport').getAttribute('transform'))[1])"
)

TEXTS_OVERFLOWING = (
    "[...document.querySelectorAll('#graph g.node')].flatMap((g) => {"
    " const room = Number(g.querySelector('rect.box').getAttribute('width')) - 16;"
    " return [...g.querySelectorAll('text')]"
    "  .filter((t) => t.getComputedTextLength() > room + 0.5).map((t) => t.textContent); })"
)


@pytest.mark.parametrize("size", [300, 1000])
async def test_every_label_fits_its_box_collapsed_and_expanded(
    harness: Harness, tmp_path: Path, size: int
) -> None:
    """A plan of 300 (1,000) subtasks, its second layer of 299 (999) collapsed into one
    node at first: every line of every node fits its box, before and after *expand
    layers*; the expanded layer wraps into a block, not a strip, with no edge under a node;
    a search goes to its subtask, drawn readably. Its first subtask is held, so the rest
    wait: the page draws them from the plan."""
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("root", 99, first_call_of("Look at the repository first"))
    subtasks = [Subtask(id="root", description="Look at the repository first")]
    subtasks += [
        Subtask(id=f"module-{i:03}-with-a-long-name", description=f"Port module {i}",
                depends_on=("root",))
        for i in range(size - 1)
    ]  # fmt: skip
    plan = make_plan([("x", "x", [])], prefix="ui-big").model_copy(
        update={"subtasks": tuple(subtasks)}
    )
    handle = await harness.start(plan)
    try:
        async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
            await open_page(cdp, f"{ui.url}#/plan/{plan.id}")
            group = await cdp.evaluate(
                "document.querySelector('#graph g.node.group text.title').textContent"
            )
            assert group == f"▸ layer 2 · {size - 1} subtasks"
            assert await cdp.evaluate(TEXTS_OVERFLOWING) == []
            await click(cdp, "#expand-all")
            await cdp.wait_for(
                f"document.querySelectorAll('#graph g.node').length === {size}",
                timeout_s=WAIT_S,
            )
            assert await cdp.evaluate(TEXTS_OVERFLOWING) == []
            # Readable once fitted: the wide layer wraps into rows, no edge under a node.
            assert await cdp.evaluate(EDGES_UNDER_NODES) == []
            width, height = await cdp.evaluate(
                "(() => { const b = document.getElementById('viewport').getBBox(); "
                "return [b.width, b.height]; })()"
            )
            assert 0.25 <= width / height <= 4, (width, height)  # a block, never a strip
            if size <= 300:
                scale = await cdp.evaluate(VIEW_SCALE)
                assert scale >= 0.3, scale  # a 220 px box at least 66 px wide on screen
            await cdp.screenshot(tmp_path / f"ui-big-{size}-expanded.png")
            # A search goes to its subtask: in view, at a readable scale.
            found = f"module-{size // 2:03}-with-a-long-name"
            await set_value(cdp, "#search", found)
            await cdp.evaluate(
                "document.getElementById('search').dispatchEvent("
                "new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}))"
            )
            await cdp.wait_for(
                f"document.getElementById('panel').dataset.subtask === {json.dumps(found)}",
                timeout_s=WAIT_S,
            )
            assert await cdp.evaluate(VIEW_SCALE) >= 0.8
            inside = await cdp.evaluate(
                "(() => { const n = document.querySelector("
                f"'#graph g.node[data-id=\"{found}\"] rect.box').getBoundingClientRect(); "
                "const v = document.getElementById('graph').getBoundingClientRect(); "
                "return n.left >= v.left && n.right <= v.right && "
                "n.top >= v.top && n.bottom <= v.bottom; })()"
            )
            assert inside, "the found subtask is not in view"
            await cdp.screenshot(tmp_path / f"ui-big-{size}-found.png")
    finally:
        await handle.terminate("test over")
        held.release()  # the worker stops without waiting out the held call


# --------------------------------------------------------------------------- refusals


async def test_forged_and_tokenless_requests_are_refused(harness: Harness, tmp_path: Path) -> None:
    assert isinstance(harness.provider, GatedProvider)
    held = harness.provider.gate("hold", 99, first_call_of("Wait here"))
    plan = make_plan([("w", "Wait here", [])], prefix="ui-forge")
    await harness.start(plan)
    await wait_status(harness, plan.id, "w", SubtaskStatus.RUNNING)

    async with ui_for(harness) as ui, aiohttp.ClientSession() as http:
        page = await (await http.get(ui.url)).text()
        csrf = page.split('name="dplan-csrf" content="', 1)[1].split('"', 1)[0]
        cancel = f"{ui.url}api/do/{plan.id}/cancel"
        forged = [
            # another origin, even with the right token (it cannot read it, but still)
            {"Origin": "http://evil.example", "X-Dplan-CSRF": csrf},
            # no CSRF header: what a cross-site form or a no-cors fetch can send
            {"Origin": ui.url.rstrip("/")},
            # a browser's cross-site fetch metadata
            {"X-Dplan-CSRF": csrf, "Sec-Fetch-Site": "cross-site"},
        ]
        for headers in forged:
            async with http.post(cancel, json={}, headers=headers) as resp:
                assert resp.status == 403, headers
                assert "error:" in (await resp.json())["error"]
        async with http.post(
            cancel, data="{}", headers={"X-Dplan-CSRF": csrf, "Content-Type": "text/plain"}
        ) as resp:
            assert resp.status == 403  # a form's content type, not JSON
        async with http.get(cancel) as resp:
            assert resp.status in (403, 405)
        # A rebinding page on a name that resolves here is not this server.
        async with http.get(ui.url, headers={"Host": "evil.example"}) as resp:
            assert resp.status == 403
        assert (await client_status(harness, plan.id)) is PlanStatus.RUNNING
        # The page loads nothing from elsewhere.
        async with http.get(ui.url) as resp:
            assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
            assert "connect-src 'self'" in resp.headers["Content-Security-Policy"]

    token = "t0ken-for-the-ui-test-1234"
    async with (
        ui_for(harness, host="0.0.0.0", token=token) as ui,
        # A browser keeps a cookie of an address too; aiohttp's jar needs telling.
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
    ):
        base = f"http://127.0.0.1:{ui.port}/"
        for path in ("", "api/plans", f"api/plans/{plan.id}", "static/app.js"):
            async with http.get(base + path) as resp:
                assert resp.status == 401, path
        async with http.get(base + "api/plans", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
        async with http.post(base + f"api/do/{plan.id}/cancel", json={}) as resp:
            assert resp.status == 401
        assert (await client_status(harness, plan.id)) is PlanStatus.RUNNING
        async with http.get(base + f"?token={token}", allow_redirects=False) as resp:
            assert resp.status == 303  # kept in an HttpOnly cookie, dropped from the address
            assert "HttpOnly" in resp.headers["Set-Cookie"]
        async with http.get(base + "api/plans") as resp:  # the cookie now
            assert resp.status == 200
    with pytest.raises(ValueError, match="not a local address"):
        UiSecurity(bind_host="0.0.0.0", token=None)

    # The page's own request does what the forged ones could not.
    async with ui_for(harness) as ui, headless_chromium(tmp_path) as cdp:
        await open_page(cdp, f"{ui.url}#/plan/{plan.id}")
        await cdp.evaluate("window.confirm = () => true")  # the 'cancel plan?' question
        await click(cdp, '#plan-controls button[data-action="cancel"]')
        await cdp.wait_for(
            "document.getElementById('flash').textContent.includes('asked to stop')",
            timeout_s=WAIT_S,
        )
        # Stopped with the call still held (as in the log test): released earlier, it could
        # answer before the cancel reached `w` on a loaded host, and the plan complete.
        await cdp.wait_for(
            "document.getElementById('plan-status').dataset.status === 'cancelled'",
            timeout_s=WAIT_S,
        )
        held.release()
        report = await client_report(harness, plan.id)
    assert report.status is PlanStatus.CANCELLED


async def client_report(harness: Harness, plan_id: str) -> PlanReport:
    client = PlansClient(harness.client, harness.settings)
    return await asyncio.wait_for(client.report(plan_id), timeout=WAIT_S)


async def client_status(harness: Harness, plan_id: str) -> PlanStatus:
    return (await PlansClient(harness.client, harness.settings).status(plan_id)).status
