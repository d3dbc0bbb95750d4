"""Time to first render of a 1,000-subtask plan in ``dplan ui``, in headless Chromium.

    python -m bench.ui_render [--short] [--subtasks 1000] [--layers 10] [--repeats 3]

What is measured is the page: fetching the plan's JSON, laying out the DAG with the
vendored dagre and drawing it as SVG, as a person opening the plan would wait for it.
The data are served by a stand-in for the UI's read API, built with the UI's own JSON
functions (``durable_plans/ui/views.py``) from a synthetic ``Plan`` and ``PlanReport``
(``--layers`` layers, each subtask needing two of the layer above; the first 60 % of the
layers completed, one running, the rest pending; a timeline run for each subtask that
started, and one sub-agent every 25 subtasks), behind the UI's real security middleware
and static files. No Temporal server is involved: what a server costs is the other
benchmarks' business, and here it would only add its own noise.

Printed for each repeat (a fresh browser page each time, nothing asserted):

* ``first render``: from the start of navigation to the moment the first picture is
  complete (``window.dplanFirstRender``, set by the page), and within it the fetch, the
  layout and the drawing; with over 150 subtasks the wide layers start collapsed, so the
  first picture is one node per layer;
* ``one layer opened``: a click on a collapsed layer (its 100 subtasks, laid out by dagre);
* ``expand all``: laying out and drawing every subtask (1,000 SVG nodes and their edges;
  past 400 drawn nodes the page's own layered layout, dagre taking seconds there);
* ``search``: finding and highlighting the subtasks matching a word.

Skipped, saying why, when chromium is missing. ``--short`` (CI): one repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from durable_plans.domain.models import (
    Plan,
    PlanReport,
    Subtask,
    SubtaskResult,
    SubtaskStatus,
    Usage,
)
from durable_plans.ui.security import UiSecurity
from durable_plans.ui.server import static_dir
from durable_plans.ui.views import plan_json, report_json
from tests.browser import CHROMIUM, headless_chromium

PLAN_ID = "bench-ui-1000"


def synthetic_plan(subtasks: int, layers: int) -> tuple[Plan, PlanReport, list[dict[str, Any]]]:
    width = max(1, subtasks // layers)
    steps: list[Subtask] = []
    for layer in range(layers):
        for j in range(width):
            deps: tuple[str, ...] = ()
            if layer:
                deps = tuple(sorted({f"s{layer - 1}-{j}", f"s{layer - 1}-{(j + 7) % width}"}))
            steps.append(
                Subtask(
                    id=f"s{layer}-{j}",
                    description=f"Step {j} of layer {layer}: change module {j}",
                    agent="coder" if j % 3 else "reviewer",
                    depends_on=deps,
                )
            )
    plan = Plan(id=PLAN_ID, goal="a 1,000-subtask plan for the UI benchmark", subtasks=tuple(steps))
    done_layers = int(layers * 0.6)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    results: list[SubtaskResult] = []
    runs: list[dict[str, Any]] = []
    for n, step in enumerate(steps):
        layer = int(step.id[1:].split("-")[0])
        began = start + timedelta(seconds=layer * 12 + (n % width) * 0.05)
        if layer < done_layers:
            status = SubtaskStatus.COMPLETED
            ended: datetime | None = began + timedelta(seconds=3 + n % 9)
        elif layer == done_layers:
            status, ended = SubtaskStatus.RUNNING, None
        else:
            status, ended = SubtaskStatus.PENDING, None
        usage = Usage(prompt_tokens=800 + n % 300, completion_tokens=120, cost_usd=0.0021)
        results.append(
            SubtaskResult(
                id=step.id,
                status=status,
                agent=step.agent,
                result="Done." if status is SubtaskStatus.COMPLETED else None,
                usage=usage if status is not SubtaskStatus.PENDING else Usage(),
                llm_calls=2 if status is SubtaskStatus.COMPLETED else 0,
            )
        )
        if status is not SubtaskStatus.PENDING:
            paths = [[step.id]] + ([[step.id, "coder-1-0"]] if n % 25 == 0 else [])
            for path in paths:
                runs.append(
                    {
                        "workflow_id": "/".join([PLAN_ID, *path]),
                        "subtask": step.id,
                        "path": path,
                        "started": began.isoformat(),
                        "closed": ended.isoformat() if ended else None,
                        "status": status.value,
                        "temporal_url": "http://localhost:8233/",
                    }
                )
    report = PlanReport.build(PLAN_ID, results, duration_s=layers * 12.0)
    return plan, report, runs


def stand_in_app(plan: Plan, report: PlanReport, runs: list[dict[str, Any]]) -> web.Application:
    """The UI's read API for one plan, with its static files and security middleware."""
    security = UiSecurity()
    index = (static_dir() / "index.html").read_text("utf-8").replace("{{CSRF_TOKEN}}", "x")
    body = {
        "plan": plan_json(plan, "http://localhost:8233", "default"),
        "report": report_json(report),
        "timeline": {"available": True, "runs": runs},
    }

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=index, content_type="text/html")

    async def config(request: web.Request) -> web.Response:
        return web.json_response({"operator": "bench@host", "namespace": "default"})

    async def whole(request: web.Request) -> web.Response:
        return web.json_response(body)

    async def empty(request: web.Request) -> web.Response:
        return web.json_response([])

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(3600)  # a plan that keeps running: the stream stays open
        return response

    app = web.Application(middlewares=[security.middleware()])
    app.router.add_get("/", page)
    app.router.add_static("/static/", static_dir())
    app.router.add_get("/api/config", config)
    app.router.add_get(f"/api/plans/{PLAN_ID}", whole)
    app.router.add_get(f"/api/plans/{PLAN_ID}/approvals", empty)
    app.router.add_get(f"/api/plans/{PLAN_ID}/events", events)
    return app


async def measure(url: str, tmp: Path) -> dict[str, float]:
    async with headless_chromium(tmp, window=(1400, 900)) as cdp:
        await cdp.call("Page.enable")
        await cdp.call("Page.navigate", url=url)
        first = await cdp.wait_for("window.dplanFirstRender", timeout_s=120)
        one = await cdp.evaluate(
            "(() => { const t = performance.now(); dplanPage.graph.clicked('layer:5'); "
            "return {ms: performance.now() - t, "
            "nodes: document.querySelectorAll('#graph g.node').length}; })()"
        )
        expand = await cdp.evaluate(
            "(() => { const t = performance.now(); dplanPage.graph.expandAll(true); "
            "return {ms: performance.now() - t, "
            "nodes: document.querySelectorAll('#graph g.node').length, "
            "edges: document.querySelectorAll('#graph path.edge').length}; })()"
        )
        search = await cdp.evaluate(
            "(() => { const t = performance.now(); const found = dplanPage.graph.search('s7-1'); "
            "return {ms: performance.now() - t, found: found.length}; })()"
        )
    return {
        "since_navigation_ms": float(first["sinceNavigationMs"]),
        "fetch_ms": float(first["fetchMs"]),
        "layout_ms": float(first["layoutMs"]),
        "render_ms": float(first["renderMs"]),
        "first_nodes": float(first["nodes"]),
        "layer_ms": float(one["ms"]),
        "layer_nodes": float(one["nodes"]),
        "expand_ms": float(expand["ms"]),
        "expand_nodes": float(expand["nodes"]),
        "expand_edges": float(expand["edges"]),
        "search_ms": float(search["ms"]),
        "search_found": float(search["found"]),
    }


async def run(subtasks: int, layers: int, repeats: int) -> None:
    if CHROMIUM is None:
        print("skipped: chromium is not installed (Debian: apt-get install chromium)")
        return
    plan, report, runs = synthetic_plan(subtasks, layers)
    runner = web.AppRunner(stand_in_app(plan, report, runs), access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}/#/plan/{PLAN_ID}"
    samples: list[dict[str, float]] = []
    try:
        for i in range(repeats):
            with tempfile.TemporaryDirectory(prefix="bench-ui-", ignore_cleanup_errors=True) as tmp:
                sample = await measure(url, Path(tmp))
            samples.append(sample)
            print(
                f"  repeat {i + 1}: first render {sample['since_navigation_ms']:.0f} ms after "
                f"navigation (fetch {sample['fetch_ms']:.0f} ms, layout "
                f"{sample['layout_ms']:.0f} ms, draw {sample['render_ms']:.0f} ms; "
                f"{sample['first_nodes']:.0f} nodes: wide layers collapsed) · one layer opened "
                f"{sample['layer_ms']:.0f} ms ({sample['layer_nodes']:.0f} nodes) · expand all "
                f"{sample['expand_ms']:.0f} ms ({sample['expand_nodes']:.0f} nodes, "
                f"{sample['expand_edges']:.0f} edges) · search {sample['search_ms']:.0f} ms "
                f"({sample['search_found']:.0f} found)",
                flush=True,
            )
    finally:
        await runner.cleanup()

    def median(key: str) -> float:
        return statistics.median(s[key] for s in samples)

    print(
        f"{len(plan.subtasks)} subtasks in {layers} layers: first render "
        f"{median('since_navigation_ms'):.0f} ms (median of {len(samples)}); a layer opened "
        f"{median('layer_ms'):.0f} ms; every subtask drawn {median('expand_ms'):.0f} ms; "
        f"search {median('search_ms'):.0f} ms"
    )


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_render", description=__doc__)
    parser.add_argument("--short", action="store_true", help="one repeat (CI)")
    parser.add_argument("--subtasks", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    asyncio.run(run(args.subtasks, args.layers, 1 if args.short else args.repeats))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
