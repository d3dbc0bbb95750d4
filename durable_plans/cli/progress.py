"""Watching a plan run: a live table on a terminal, plain lines anywhere else.

The display only ever shows what the workflow reports through its ``status`` query, so a
person sees exactly what Temporal knows, never an optimistic guess made by the CLI: a
display that says "8/8 completed" while the plan failed is the one thing it must not do.

On a terminal the table redraws in place; in a pipe, CI log or file each subtask's status
change becomes one plain line with no ANSI codes, so logs stay greppable.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from durable_plans.cli.workspace_lines import short_commit, workspace_line
from durable_plans.client import PlanWatch, SubtaskNow
from durable_plans.domain.checks import CheckRun, shown
from durable_plans.domain.models import Plan, PlanReport, PlanStatus, SubtaskResult, SubtaskStatus
from durable_plans.domain.rate_pacing import format_duration

__all__ = [
    "StatusFn",
    "follow_progress",
    "render_report",
    "report_renderable",
]

StatusFn = Callable[[], Awaitable[PlanReport]]

POLL_INTERVAL_S = 0.3
_EXCERPT_CHARS = 60

# symbol, style; RUNNING is drawn as a spinner on a terminal.
_LOOK: Mapping[SubtaskStatus, tuple[str, str]] = {
    SubtaskStatus.PENDING: ("·", "dim"),
    SubtaskStatus.RUNNING: ("▸", "cyan"),
    SubtaskStatus.COMPLETED: ("✓", "green"),
    SubtaskStatus.FAILED: ("✗", "bold red"),
    SubtaskStatus.SKIPPED: ("↷", "yellow"),
    SubtaskStatus.CANCELLED: ("⊘", "magenta"),
    SubtaskStatus.PAUSED: ("‖", "bold yellow"),
}
_PLAN_STYLE: Mapping[PlanStatus, str] = {
    PlanStatus.RUNNING: "cyan",
    PlanStatus.COMPLETED: "bold green",
    PlanStatus.FAILED: "bold red",
    PlanStatus.CANCELLED: "bold magenta",
    PlanStatus.PAUSED: "bold yellow",
}


def _one_line(text: str | None, limit: int = _EXCERPT_CHARS) -> str:
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _detail(result: SubtaskResult, description: str | None) -> str:
    if result.error is not None:
        replaced = f"replaced by {result.replaced_by}; " if result.replaced_by else ""
        return f"{replaced}{result.error.type}: {result.error.message}"
    if result.result is not None:
        return result.result
    return description or ""


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _counts_line(report: PlanReport) -> str:
    c = report.counts
    done = c.completed + c.failed + c.skipped + c.cancelled
    parts = [f"{done}/{c.total} done"]
    for label, value in (
        ("running", c.running),
        ("completed", c.completed),
        ("failed", c.failed),
        ("skipped", c.skipped),
        ("cancelled", c.cancelled),
        ("paused", c.paused),
    ):
        if value:
            parts.append(f"{value} {label}")
    return " · ".join(parts)


@dataclass
class _LiveView:
    """What the live display draws; re-rendered on every refresh (spinners, clock)."""

    plan_id: str
    goal: str
    web_url: str | None
    descriptions: Mapping[str, str]
    started: float = field(default_factory=time.monotonic)
    report: PlanReport | None = None
    note: str | None = None
    spinners: dict[str, Spinner] = field(default_factory=dict)
    watch: PlanWatch | None = None

    def _status_cell(self, result: SubtaskResult) -> RenderableType:
        if result.status is SubtaskStatus.RUNNING:
            spinner = self.spinners.setdefault(result.id, Spinner("dots", style="cyan"))
            return spinner
        symbol, style = _LOOK[result.status]
        return Text(symbol, style=style)

    def __rich__(self) -> RenderableType:
        header = Text.assemble(
            ("Plan ", "bold"),
            (self.plan_id, "bold cyan"),
            (f"  {_one_line(self.goal, 70)}" if self.goal else "", "italic"),
        )
        status_line = Text.assemble(
            _counts_line(self.report) if self.report else "waiting for the first status…",
            ("  ⏱ " + _elapsed(time.monotonic() - self.started), "dim"),
            (f"  {self.note}" if self.note else "", "yellow"),
        )
        table = Table(box=None, pad_edge=False, header_style="bold dim", expand=False)
        table.add_column("", width=1, no_wrap=True)
        table.add_column("subtask", style="bold", no_wrap=True)
        table.add_column("agent", style="dim", no_wrap=True)
        table.add_column("calls", justify="right", no_wrap=True)
        table.add_column("tokens", justify="right", no_wrap=True)
        table.add_column("", no_wrap=True, overflow="ellipsis")
        for result in self.report.subtasks if self.report else ():
            detail = _one_line(_detail(result, self.descriptions.get(result.id)))
            now = self.watch.now.get(result.id) if self.watch else None
            if result.status is SubtaskStatus.RUNNING and now is not None:
                detail = _one_line(_now_line(now), 90) or detail
            table.add_row(
                self._status_cell(result),
                result.id,
                result.agent,
                str(result.llm_calls) if result.llm_calls else "",
                f"{result.usage.total_tokens:,}" if result.usage.total_tokens else "",
                Text(detail, style=_LOOK[result.status][1] if result.error else "dim"),
            )
        parts: list[RenderableType] = [header, status_line, table]
        if self.web_url:
            parts.append(Text.assemble(("Temporal Web ", "dim"), (self.web_url, "underline")))
        return Group(*parts)


def _now_line(now: SubtaskNow) -> str:
    """A running subtask's step and latest text, as one line."""
    text = " ".join(now.text.split())
    if now.step and text:
        return f"{now.step} · {text}"
    return now.step or text


class _PlainLines:
    """One line per subtask status change, for logs and pipes; for running subtasks, one
    per step and one per answer (and, while an answer streams, its text so far)."""

    def __init__(self, out: Console, started: float) -> None:
        self._out = out
        self._started = started
        self._seen: dict[str, SubtaskStatus] = {}
        self._steps: dict[str, str] = {}
        self._texts: dict[str, str] = {}
        self._text_at: dict[str, float] = {}

    def _print(self, line: str) -> None:
        self._out.print(line, markup=False, highlight=False, soft_wrap=True)

    def update_now(self, watch: PlanWatch) -> None:
        clock = _elapsed(time.monotonic() - self._started)
        for sid, now in list(watch.now.items()):
            if now.step and self._steps.get(sid) != now.step:
                self._steps[sid] = now.step
                self._print(f"[{clock}]   {sid}: {now.step}")
            if not now.text or self._texts.get(sid) == now.text:
                continue
            # Text still being written is shown at most once a second per subtask.
            if now.text_done or time.monotonic() - self._text_at.get(sid, 0.0) >= 1.0:
                self._texts[sid] = now.text
                self._text_at[sid] = time.monotonic()
                verb = "said" if now.text_done else "writing"
                self._print(f"[{clock}]   {sid} {verb}: {_one_line(now.text, 100)}")

    def update(self, report: PlanReport) -> None:
        for result in report.subtasks:
            if self._seen.get(result.id) is result.status:
                continue
            self._seen[result.id] = result.status
            if result.status is SubtaskStatus.PENDING:
                continue  # everything starts pending; saying so per subtask is noise
            symbol = _LOOK[result.status][0]
            line = f"[{_elapsed(time.monotonic() - self._started)}] {symbol} {result.id} "
            line += f"({result.agent}) {result.status.value}"
            if result.status.is_terminal or result.status is SubtaskStatus.PAUSED:
                line += f" · {_counts_line(report)}"
                detail = _one_line(_detail(result, None), 100)
                if detail:
                    line += f" — {detail}"
            if result.status is SubtaskStatus.PAUSED:
                line += f" (dplan resume|skip {report.plan_id} {result.id})"
            self._print(line)
            if result.status.is_terminal or result.status is SubtaskStatus.PAUSED:
                for run in result.checks:
                    self._print(f"    {check_line(result.id, run)}")


async def follow_progress(
    status: StatusFn,
    *,
    plan: Plan | None = None,
    plan_id: str | None = None,
    web_url: str | None = None,
    console: Console | None = None,
    interval_s: float = POLL_INTERVAL_S,
    until: asyncio.Future[Any] | None = None,
    watch: PlanWatch | None = None,
) -> PlanReport | None:
    """Show progress until the reported plan is no longer running (or ``until`` is done).

    Returns the last report seen, None if none ever arrived. A failing status call
    (no worker yet, a query racing the workflow's first task) is shown as a note and
    retried: the wait itself belongs to the caller, who passes its future as ``until``.
    """
    console = console or Console()
    view = _LiveView(
        plan_id=plan.id if plan else (plan_id or "?"),
        goal=plan.goal if plan else "",
        web_url=web_url,
        descriptions={s.id: s.description for s in plan.subtasks} if plan else {},
        watch=watch,
    )
    plain = None if console.is_terminal else _PlainLines(console, view.started)
    if plain is not None:
        console.print(f"following plan {view.plan_id}", markup=False, highlight=False)
        if web_url:
            console.print(f"Temporal Web: {web_url}", markup=False, highlight=False)

    async def poll() -> None:
        while until is None or not until.done():
            try:
                view.report = await status()
                view.note = None
            except asyncio.CancelledError:
                raise
            except Exception as err:
                view.note = f"(status unavailable: {_one_line(str(err), 80)})"
            if watch is not None and view.report is not None:
                with contextlib.suppress(Exception):  # a display aid: never stops following
                    await watch.refresh(view.report)
            if plain is not None and view.report is not None:
                plain.update(view.report)
                if watch is not None:
                    plain.update_now(watch)
            # Followed until every subtask is final: a plan that already failed may still
            # have subtasks running, and a paused one waits for an operator.
            if view.report is not None and view.report.subtasks and view.report.finished:
                return
            await _sleep_or_done(interval_s, until)

    def settle() -> None:
        # ``until`` may finish between two polls; its report is the authoritative last
        # state, so the last changes are shown instead of being lost in the gap.
        if until is None or not until.done() or until.cancelled() or until.exception():
            return
        final = until.result()
        if isinstance(final, PlanReport):
            view.report = final
            if plain is not None:
                plain.update(final)

    try:
        if plain is not None:
            await poll()
            settle()
        else:
            with Live(view, console=console, refresh_per_second=12, transient=True):
                await poll()
                settle()
    finally:
        if watch is not None:
            await watch.aclose()
    return view.report


async def _sleep_or_done(seconds: float, until: asyncio.Future[Any] | None) -> None:
    if until is None:
        await asyncio.sleep(seconds)
        return
    await asyncio.wait({until}, timeout=seconds)


# --------------------------------------------------------------------------- final report


def _models_cell(result: SubtaskResult) -> str:
    if not result.models:
        return ""
    more = len(result.models) - 1
    return result.models[-1].model + (f" +{more}" if more else "")


def _model_lines(report: PlanReport) -> list[Text]:
    """Each subtask answered by more than one model (a fallback took over): what each
    model answered and what it cost."""
    lines = []
    for r in report.subtasks:
        if len(r.models) < 2:
            continue
        shares = "; ".join(
            f"{m.model} {m.llm_calls} call{'s' if m.llm_calls != 1 else ''} · "
            f"{m.usage.total_tokens:,} tokens · ${m.usage.cost_usd:.4f}"
            for m in r.models
        )
        lines.append(Text(f"models of {r.id}: {shares}", style="dim"))
    return lines


def report_renderable(report: PlanReport, *, web_url: str | None = None) -> RenderableType:
    """The final summary: headline, per-subtask table, totals, usage, duration, link."""
    headline = Text.assemble(
        ("Plan ", "bold"),
        (report.plan_id, "bold cyan"),
        ("  ", ""),
        (report.status.value.upper(), _PLAN_STYLE[report.status]),
        (f"  in {report.duration_s:.1f}s", "dim"),
    )
    table = Table(show_edge=False, header_style="bold", expand=True)
    # One line per subtask: the text column is cut to the width left (the full texts are
    # in the JSON report and the sessions), so the table stays scannable at any width.
    table.add_column("", width=1, no_wrap=True)
    table.add_column("subtask", style="bold", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("agent", no_wrap=True)
    # Which model answered: the agent's own, or its fallback when the first kept failing
    # (the last to answer; "+N": N others did too, listed under the table).
    table.add_column("model", no_wrap=True, overflow="ellipsis", max_width=32)
    table.add_column("calls", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    # Each subtask's last commit (a completed one's is what it gave the plan), for plans
    # that keep the workspace in git.
    commits = report.workspace is not None or any(r.commit for r in report.subtasks)
    if commits:
        table.add_column("commit", no_wrap=True, style="dim")
    table.add_column("result / error", no_wrap=True, overflow="ellipsis", ratio=1)
    for r in report.subtasks:
        symbol, style = _LOOK[r.status]
        cells: list[RenderableType] = [
            Text(symbol, style=style),
            r.id,
            Text(r.status.value + (f" ↻{r.retries}" if r.retries else ""), style=style),
            r.agent,
            _models_cell(r),
            str(r.llm_calls),
            f"{r.usage.total_tokens:,}",
            f"${r.usage.cost_usd:.4f}",
        ]
        if commits:
            cells.append(short_commit(r.commit))
        cells.append(Text(_one_line(_detail(r, None), 140), style=style if r.error else ""))
        table.add_row(*cells)
    c, u = report.counts, report.usage
    totals = Text(
        f"completed {c.completed} · failed {c.failed} · skipped {c.skipped} · "
        f"cancelled {c.cancelled}"
        + (f" · paused {c.paused}" if c.paused else "")
        + (f" · not finished {c.pending + c.running}" if c.pending + c.running else "")
        + f"  (of {c.total})"
    )
    cached = f" ({u.cached_tokens:,} cached)" if u.cached_tokens else ""
    usage = Text(
        f"usage: {u.prompt_tokens:,} prompt{cached} + {u.completion_tokens:,} completion tokens"
        f" = {u.total_tokens:,} · ${u.cost_usd:.4f}"
        + (
            f" · waited {format_duration(u.rate_limited_s)} on rate limits"
            if u.rate_limited_s
            else ""
        ),
        style="dim",
    )
    parts: list[RenderableType] = [headline, table, totals, usage]
    if report.forked_from is not None:
        origin = report.forked_from
        parts.append(Text(f"forked from plan {origin.plan} at {origin.subtask}", style="dim"))
    if report.revisions:
        parts.append(
            Text(
                f"revised {len(report.revisions)} time"
                + ("s" if len(report.revisions) != 1 else "")
                + " while it ran (see the log)",
                style="dim",
            )
        )
    parts.extend(_model_lines(report))
    workspace = workspace_line(report)
    if workspace is not None:
        parts.append(Text(workspace))
    # The table cuts text to fit; why a subtask failed must never be cut, so it is
    # repeated in full below the table.
    for r in report.subtasks:
        if r.status is SubtaskStatus.PAUSED and r.error is not None:
            parts.append(
                Text.assemble(
                    ("‖ ", "bold yellow"),
                    (r.id, "bold"),
                    (f" paused: {r.error.type}: ", "yellow"),
                    " ".join(r.error.message.split()),
                    (f"  (dplan resume|skip {report.plan_id} {r.id})", "dim"),
                )
            )
        if r.status is SubtaskStatus.FAILED and r.error is not None:
            parts.append(
                Text.assemble(
                    ("✗ ", "bold red"),
                    (r.id, "bold"),
                    (f" failed: {r.error.type}: ", "red"),
                    " ".join(r.error.message.split()),
                    (f"  (replanned: replaced by {r.replaced_by})" if r.replaced_by else "", "dim"),
                )
            )
    parts.extend(_check_lines(report))
    if web_url:
        parts.append(Text.assemble(("Temporal Web: ", "dim"), (web_url, "underline")))
    return Group(*parts)


def check_line(owner: str, run: CheckRun) -> str:
    """One check run, on one line: passed or not, the command, its exit code and time."""
    symbol = "✓" if run.passed else "✗"
    how = "timed out" if run.timed_out else f"exit {run.exit_code}"
    return (
        f"{symbol} {owner} check (round {run.round}): {_one_line(shown(run.argv), 80)} "
        f"→ {how} in {run.duration_s:.1f}s"
    )


def _check_lines(report: PlanReport) -> list[Text]:
    """Every check run (the subtasks' and the plan's own on the merge), one line each."""
    lines = [
        Text(check_line(r.id, run), style="" if run.passed else "red")
        for r in report.subtasks
        for run in r.checks
    ]
    lines.extend(
        Text(check_line("plan", run), style="" if run.passed else "red") for run in report.checks
    )
    if report.error is not None:
        lines.append(
            Text.assemble(
                ("✗ plan failed: ", "bold red"),
                (f"{report.error.type}: ", "red"),
                " ".join(report.error.message.split()),
            )
        )
    return lines


def render_report(report: PlanReport, *, web_url: str | None = None, width: int = 120) -> str:
    """The final summary as plain text (no ANSI), e.g. for logs or a non-terminal."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(report_renderable(report, web_url=web_url))
    return buffer.getvalue()
