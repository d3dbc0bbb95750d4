"""What a plan shows to Temporal's visibility: its search attributes and its memo.

``PlanVisibility`` sets a plan's ``Dplan*`` search attributes (``domain.search_attributes``)
when it starts, as its counts change, and when it ends, and its memo (goal, subtask
count, and the tenant of a plan that has one) whoever started it.

Setting an attribute the namespace has not registered fails the workflow task, so the
worker checks the namespace at start (``DurablePlansPlugin``). That answer may differ
between the worker that ran a workflow and one that replays it (a replayer knows nothing;
a worker started before ``dplan setup`` thinks they are missing). So the run asks its
worker once, in its first activation, in the ``worker_facts`` local activity
(``WorkerFacts.search_attributes``), whose recorded result a replay reads: ``enabled``.

Bounded: one upsert at start, at most one per ``PROGRESS_INTERVAL`` of workflow time while
counts change (coalescing every completion in between), one at the end; so a plan's
history holds at most ``2 + duration / PROGRESS_INTERVAL + 1`` upserts, however many
subtasks it has, and a subtask's none (its attributes are set when the plan starts it).
A held-back change is said when the next one comes; a plan that is about to wait for an
operator with nothing running says it at once (``idle``), since no change may come for
days: at most one more upsert per such wait (each ended by an operator or a pause timeout).

Pure and deterministic; passed through the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes

from durable_plans.domain import search_attributes as sa
from durable_plans.domain.models import Plan, PlanReport, PlanStatus
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.domain.workspace_refs import WorkspaceSummary

__all__ = [
    "GOAL_CHARS",
    "GOAL_SEARCHABLE_EXTERN",
    "PROGRESS_INTERVAL",
    "WORKSPACE_MEMO",
    "PlanVisibility",
    "plan_memo",
]

# The name under which a worker tells its workflows whether the goal may be an attribute.
GOAL_SEARCHABLE_EXTERN = "durable_plans.goal_searchable"

# Minimum workflow time between two progress upserts: each is a history event and a
# visibility write, and a list refreshed every few seconds needs nothing finer.
PROGRESS_INTERVAL = timedelta(seconds=10)

# The goal as memo and search attribute: scrubbed (memos and attributes are readable by
# anyone with UI access) and short (a Text attribute is for finding, not for reading).
GOAL_CHARS = 200

# Read-only: this module is passed through the sandbox, so every run shares it.
_STATUS_OF_REPORT = MappingProxyType(
    {
        PlanStatus.RUNNING: sa.VisibilityStatus.RUNNING,
        PlanStatus.COMPLETED: sa.VisibilityStatus.COMPLETED,
        PlanStatus.FAILED: sa.VisibilityStatus.FAILED,
        PlanStatus.CANCELLED: sa.VisibilityStatus.CANCELLED,
        PlanStatus.PAUSED: sa.VisibilityStatus.PAUSED,
    }
)

PAUSED_REASON_CHARS = 300

# The memo key of a plan's workspace result ({base, result, branch, left_out}), set once
# when it ends; only plans that keep the workspace in git write it.
WORKSPACE_MEMO = "workspace"


def goal_searchable() -> bool:
    """False where the worker encrypts payloads: a search attribute is stored and indexed
    in plain text, so the goal would leak past the codec. True when the worker did not say."""
    extern = workflow.extern_functions().get(GOAL_SEARCHABLE_EXTERN)
    return bool(extern()) if extern is not None else True


def plan_memo(plan: Plan) -> dict[str, Any]:
    """The memo Temporal Web and ``dplan list`` show for a plan. ``tenant`` only when the
    plan has one: a plan without keeps the memo it always had (recorded histories replay)."""
    memo: dict[str, Any] = {
        "goal": scrub_secrets(plan.goal)[:GOAL_CHARS],
        "subtask_count": len(plan.subtasks),
    }
    if plan.tenant:
        memo["tenant"] = plan.tenant
    return memo


def subtask_search_attributes(plan_id: str, agent: str) -> TypedSearchAttributes:
    """A SubtaskWorkflow's attributes, given when it is started (no upsert of its own)."""
    return TypedSearchAttributes(
        [SearchAttributePair(sa.PLAN_ID, plan_id), SearchAttributePair(sa.AGENT, agent)]
    )


class PlanVisibility:
    """A PlanWorkflow's memo and search attributes over its run."""

    def __init__(self) -> None:
        # Whether this run sets the attributes: the worker's recorded answer
        # (``WorkerFacts.search_attributes``), set by the plan before ``start``.
        self.enabled = False
        self._last: dict[str, Any] = {}
        self._last_at_s = 0.0
        self._paused: dict[str, str] = {}

    def start(self, plan: Plan, report: PlanReport) -> None:
        """First task of a run: the memo, and ``running`` with the counts carried over (a
        continued run starts from its predecessor's)."""
        self.memo(plan)
        if self.enabled:
            first = self._values(report, sa.VisibilityStatus.RUNNING) | {sa.PLAN_ID.name: plan.id}
            if goal_searchable():
                first[sa.GOAL.name] = scrub_secrets(plan.goal)[:GOAL_CHARS]
            # Only when it has one (no empty keyword); set even where payloads are
            # encrypted: the server already reads it as the plan's fairness key.
            if plan.tenant:
                first[sa.TENANT.name] = plan.tenant
            self._upsert(first)

    def memo(self, plan: Plan) -> None:
        """The plan's goal and size in the memo, where lists read them: at a run's start,
        and after a revision changed its size."""
        memo = plan_memo(plan)
        current = {key: workflow.memo_value(key, None) for key in memo}
        if current != memo:
            workflow.upsert_memo(memo)

    def progress(
        self, report: Callable[[], PlanReport], *, paused: dict[str, str] | None = None
    ) -> None:
        """Counts, tokens and cost as they are now, if they changed and the last upsert is
        at least ``PROGRESS_INTERVAL`` old; otherwise the next call or the end says it.

        A pause, or its end, is said at once (status ``paused`` and, in the memo, which
        subtasks and why): that is what an operator is looking for.
        """
        paused = paused or {}
        if paused != self._paused:
            self._say_paused(paused)
        if not self.enabled:
            return
        status = sa.VisibilityStatus.PAUSED if paused else sa.VisibilityStatus.RUNNING
        due = workflow.now().timestamp() - self._last_at_s >= PROGRESS_INTERVAL.total_seconds()
        if due or self._last.get(sa.STATUS.name) != status.value:
            # Built only now: a report is a pass over every subtask, and a plan makes
            # this call after each child finishes, mostly within the interval.
            self._upsert(self._values(report(), status))

    def idle(self, report: Callable[[], PlanReport], *, paused: dict[str, str]) -> None:
        """The counts ``progress`` held back, said now: the plan is about to wait with
        nothing running, and no completion will come to carry them, so ``dplan list``
        would show stale counts for as long as the wait lasts.
        """
        if not self.enabled:
            return
        status = sa.VisibilityStatus.PAUSED if paused else sa.VisibilityStatus.RUNNING
        self._upsert(self._values(report(), status))

    def _say_paused(self, paused: dict[str, str]) -> None:
        """The memo's ``paused`` entry; only runs that pause ever write it."""
        self._paused = dict(paused)
        reasons = {
            sid: scrub_secrets(reason)[:PAUSED_REASON_CHARS] for sid, reason in paused.items()
        }
        workflow.upsert_memo({sa.PAUSED_MEMO: reasons or None})

    def workspace(self, summary: WorkspaceSummary) -> None:
        """Where the plan's work is (its base, result commit and branch), in the memo: what
        Temporal Web and a list of plans show without asking each workflow."""
        workflow.upsert_memo({WORKSPACE_MEMO: summary.model_dump(mode="json")})

    def end(self, report: PlanReport, status: PlanStatus | None = None) -> None:
        """The final status and totals (always, when anything changed)."""
        if self._paused:
            self._say_paused({})
        if not self.enabled:
            return
        final = _STATUS_OF_REPORT[status or report.status]
        self._upsert(self._values(report, final))

    @staticmethod
    def _values(report: PlanReport, status: sa.VisibilityStatus) -> dict[str, Any]:
        return {
            sa.STATUS.name: status.value,
            sa.COMPLETED.name: report.counts.completed,
            sa.FAILED.name: report.counts.failed,
            sa.TOKENS.name: report.usage.total_tokens,
            sa.COST_USD.name: float(report.usage.cost_usd),
        }

    def _upsert(self, values: dict[str, Any]) -> None:
        changed = {name: v for name, v in values.items() if self._last.get(name) != v}
        if not changed:
            return
        keys = {key.name: key for key in sa.PLAN_ATTRIBUTES}
        updates: list[SearchAttributeUpdate[Any]] = [
            keys[name].value_set(value) for name, value in changed.items()
        ]
        workflow.upsert_search_attributes(updates)
        self._last.update(changed)
        self._last_at_s = workflow.now().timestamp()
