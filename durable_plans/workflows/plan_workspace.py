"""The workspace's steps in workflow code: where a plan's trees start, who their commits
are by, and the three activities that resolve a base, merge dependencies and publish a
plan's result.

The workflows carry commit ids only (``domain.workspace_refs``); every git operation is an
activity, so what a tree is at each step is recorded in the history: a replay, a retried
activity or another host rebuilds exactly that tree.

Trees are named per plan execution (``subtask_tree``): running a finished plan again
starts new trees instead of finding the earlier run's, whose refs stay as they were.

Deterministic: no I/O, workflow time only.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.contracts import (
        ACT_WORKSPACE_MERGE,
        ACT_WORKSPACE_OPEN,
        ACT_WORKSPACE_PUBLISH,
    )
    from durable_plans.domain.failures import application_error
    from durable_plans.domain.ids import attempt_key
    from durable_plans.domain.models import Plan, SubtaskResult, SubtaskStatus
    from durable_plans.domain.workspace_refs import (
        GitIdentity,
        WorkspaceMergeInput,
        WorkspaceMergeOutput,
        WorkspaceOpenInput,
        WorkspaceOpenOutput,
        WorkspacePublishInput,
        WorkspaceRef,
        WorkspaceStart,
        WorkspaceSummary,
    )

from durable_plans.workflows import policies
from durable_plans.workflows.activity_failures import workspace_failure
from durable_plans.workflows.llm_call import execute_local

__all__ = [
    "WorkspaceStepFailed",
    "completed_commits",
    "moved_to",
    "open_base",
    "plan_identity",
    "publish_result",
    "result_commits",
    "start_head",
    "subagent_start",
    "subtask_identity",
    "subtask_tree",
]

# An e-mail address's local part is at most 64 characters; the domain part is cut so the
# whole stays within GitIdentity's limit whatever the plan id's length.
_LOCAL_CHARS = 64
_DOMAIN_CHARS = 120


class WorkspaceStepFailed(Exception):
    """A workspace activity failed for good: its failure type and message, for the
    subtask to fail with (a conflict pauses it under ``on_failure: pause``)."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message


def _email(local: str, plan_id: str) -> str:
    return f"{local[:_LOCAL_CHARS]}@{plan_id[:_DOMAIN_CHARS]}.dplan"


def subtask_identity(agent: str, subtask: str, plan_id: str) -> GitIdentity:
    """Who a subtask's commits are by: its agent, on behalf of the subtask and plan, so
    ``git log`` says which subtask made each commit."""
    return GitIdentity(name=f"{agent} (dplan)", email=_email(subtask, plan_id))


def plan_identity(plan_id: str) -> GitIdentity:
    """Who the merges that make a plan's result are by."""
    return GitIdentity(name="durable-plans", email=_email("plan", plan_id))


def subtask_tree(plan_run_id: str, subtask: str, retries: int) -> str:
    """The tree of one attempt of a subtask in one plan execution: the execution's run key
    (``domain.ids.plan_run_id``), then the attempt (``domain.ids.attempt_key``).

    The run key keeps a plan that is run again under the same id off the earlier run's
    trees (their refs are compare-and-swapped from the head a call names, so a tree left
    at another commit would refuse every write); a retried or resumed attempt gets a tree
    of its own, so the failed one stays inspectable.
    """
    run_key = plan_run_id.rpartition(".")[2]
    return f"{run_key}/{attempt_key(subtask, retries)}"


def subagent_start(parent: WorkspaceRef, child_id: str, agent: str) -> WorkspaceStart:
    """A sub-agent's tree: its own, below its parent's, starting at the parent's head (the
    parent waits in the spawn call, so the sub-agent's result is a fast-forward of it)."""
    local, _, domain = parent.identity.email.partition("@")
    return WorkspaceStart(
        plan_id=parent.plan_id,
        tree=f"{parent.tree}/{child_id}",
        base=parent.head,
        identity=GitIdentity(
            name=f"{agent} (dplan)", email=f"{f'{child_id}.{local}'[:_LOCAL_CHARS]}@{domain}"
        ),
    )


def moved_to(ref: WorkspaceRef | None, commit: str | None) -> WorkspaceRef | None:
    """``ref`` at ``commit`` when a call made one; as it was otherwise."""
    if ref is None or commit is None or commit == ref.head:
        return ref
    return ref.model_copy(update={"head": commit})


def completed_commits(
    plan: Plan, results: dict[str, SubtaskResult], among: frozenset[str] | None = None
) -> tuple[tuple[str, str], ...]:
    """(subtask id, result commit) of the completed subtasks (``among`` these, if given)
    in the plan's order: the order merges fold them in, the same on every host and replay.
    A subtask completed before the workspace was kept in git has no commit to give."""
    picked: list[tuple[str, str]] = []
    for sub in plan.subtasks:
        if among is not None and sub.id not in among:
            continue
        result = results.get(sub.id)
        if result is not None and result.status is SubtaskStatus.COMPLETED and result.commit:
            picked.append((sub.id, result.commit))
    return tuple(picked)


def result_commits(plan: Plan, results: dict[str, SubtaskResult]) -> tuple[tuple[str, str], ...]:
    """What the plan's result merges: the completed subtasks' commits (plan order) that no
    completed dependent's commit already contains. A dependent started from its
    dependencies' results, so its commit holds theirs: the result of a plan whose last
    subtask joins everything is that subtask's commit, and the branch's history is the
    plan's DAG, with no merge of what is merged already."""
    done = completed_commits(plan, results)
    with_commit = {sid for sid, _ in done}
    contained = {dep for sub in plan.subtasks if sub.id in with_commit for dep in sub.depends_on}
    return tuple((sid, commit) for sid, commit in done if sid not in contained)


def _cancelled(err: ActivityError) -> bool:
    return isinstance(err.cause, CancelledError)


async def open_base(plan: Plan) -> str:
    """The commit the plan starts from: ``plan.workspace_base`` (a branch, tag or commit)
    or the repository's HEAD, resolved once; a plan that cannot have one does not start."""
    try:
        out: WorkspaceOpenOutput = await workflow.execute_activity(
            ACT_WORKSPACE_OPEN,
            WorkspaceOpenInput(plan_id=plan.id, requested_base=plan.workspace_base),
            result_type=WorkspaceOpenOutput,
            start_to_close_timeout=policies.WORKSPACE_START_TO_CLOSE,
            heartbeat_timeout=policies.SHORT_HEARTBEAT,
            retry_policy=policies.workspace_retry(),
            summary="workspace: resolve the base",
        )
    except ActivityError as err:
        if _cancelled(err):  # the plan is being cancelled: it ends cancelled, with a report
            raise asyncio.CancelledError() from err
        type_, message = workspace_failure(err)
        raise application_error(
            type_, f"plan {plan.id!r} cannot start: its workspace: {message}"
        ) from None
    return out.base


async def start_head(start: WorkspaceStart, subtask: str, *, local: bool = False) -> str:
    """Where a subtask's tree starts: the plan's base without dependencies, the one
    dependency's result, or the merge of several (an activity: a conflict fails the
    subtask with ``WorkspaceConflict``, naming the files, the subtasks and the ref an
    operator may push a resolution to). ``local``: the merge is a local activity, in the
    workflow task that starts the subtask (a run whose LLM calls are local,
    ``WorkerFacts.llm_local``: one activity task and one workflow task fewer per join)."""
    if not start.parents:
        return start.base
    if len(start.parents) == 1:
        return start.parents[0][1]
    merge = WorkspaceMergeInput(
        plan_id=start.plan_id,
        subtask=subtask,
        base=start.base,
        parents=start.parents,
        at_s=workflow.now().timestamp(),
        identity=start.identity,
    )
    summary = "workspace: merge " + ", ".join(sid for sid, _ in start.parents)[:150]
    try:
        if local:
            out: WorkspaceMergeOutput = await execute_local(
                ACT_WORKSPACE_MERGE,
                merge,
                result_type=WorkspaceMergeOutput,
                start_to_close_timeout=policies.WORKSPACE_START_TO_CLOSE,
                retry_policy=policies.workspace_retry(),
                summary=summary,
            )
        else:
            out = await workflow.execute_activity(
                ACT_WORKSPACE_MERGE,
                merge,
                result_type=WorkspaceMergeOutput,
                start_to_close_timeout=policies.WORKSPACE_START_TO_CLOSE,
                heartbeat_timeout=policies.SHORT_HEARTBEAT,
                retry_policy=policies.workspace_retry(),
                summary=summary,
            )
    except ActivityError as err:
        if _cancelled(err):
            raise
        raise WorkspaceStepFailed(*workspace_failure(err)) from None
    return out.commit


async def publish_result(
    plan_id: str, base: str, commits: tuple[tuple[str, str], ...]
) -> WorkspaceSummary:
    """The plan's result: its completed subtasks' commits merged onto the base, on the
    branch ``dplan/<plan-id>``. A result that cannot be published leaves the report saying
    only the base (the subtasks' commits stay under their refs), never a made-up branch."""
    try:
        summary: WorkspaceSummary = await workflow.execute_activity(
            ACT_WORKSPACE_PUBLISH,
            WorkspacePublishInput(
                plan_id=plan_id,
                base=base,
                commits=commits,
                at_s=workflow.now().timestamp(),
                identity=plan_identity(plan_id),
            ),
            result_type=WorkspaceSummary,
            start_to_close_timeout=policies.WORKSPACE_START_TO_CLOSE,
            heartbeat_timeout=policies.SHORT_HEARTBEAT,
            retry_policy=policies.workspace_retry(),
            summary="workspace: publish the result branch",
        )
    except ActivityError as err:
        # A cancel that arrives while the plan is publishing (it had ended otherwise) is
        # treated like any other failure to publish: the report is made all the same.
        type_, message = workspace_failure(err)
        workflow.logger.warning(
            "plan %s: its result branch was not published: %s: %s", plan_id, type_, message
        )
        return WorkspaceSummary(base=base)
    return summary
