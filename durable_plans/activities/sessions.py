"""Session activities: give a subtask its isolated branch, close it, merge results back.

Subtasks of one plan may run in parallel on one session, so nothing here edits the base
history in place while a subtask runs. Each subtask gets a branch built from a snapshot of
the base (tool traffic stripped, dependency results added); a success is merged into the
base afterwards, in an order the plan workflow fixes; a failure merges nothing, so the base
is exactly as it was (the rollback). Every step is idempotent: a retried activity finds its
earlier work and does not repeat it.
"""

from __future__ import annotations

from temporalio import activity

from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.plan_data import stored_subtasks
from durable_plans.activities.spend import paid_for
from durable_plans.domain.contracts import (
    ACT_BRANCH_SPEND,
    ACT_END_SUBTASK,
    ACT_MERGE_RESULTS,
    BeginSubtaskInput,
    BeginSubtaskOutput,
    BranchSpend,
    BranchSpendInput,
    BranchSpendOutput,
    EndSubtaskInput,
    MergeResultsInput,
)
from durable_plans.domain.history import DependencyResult, isolate_for_subtask, last_result
from durable_plans.domain.ids import (
    assistant_message_id,
    attempt_key,
    branch_context_message_id,
    branch_system_message_id,
    branch_task_message_id,
    merged_result_id,
    subtask_scope,
)
from durable_plans.domain.models import Message, SessionMeta, Subtask, Usage
from durable_plans.domain.plan_data import full_description
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.session_store import SessionNotFound, SessionStore


async def branch_result(store: SessionStore, branch_session_id: str) -> str | None:
    try:
        found = last_result(await store.read(branch_session_id))
    except SessionNotFound:
        return None
    return found.content if found is not None else None


async def begin_branch(store: SessionStore, inp: BeginSubtaskInput) -> BeginSubtaskOutput:
    """Snapshot the base and build the subtask's branch from it; a second call (a retry,
    or the first LLM call's attempt after a crash) finds the branch and keeps it.

    A branch already closed is left alone: a cancelled subtask's workflow closes its
    branch without waiting for a first LLM call still in flight, and that call's build
    must not reopen it or leave its snapshot behind.
    """
    base = await store.create_session(SessionMeta(session_id=inp.base_session_id))
    snapshot_count = await store.snapshot(inp.base_session_id, inp.snapshot_id)
    branch_meta = SessionMeta(
        session_id=inp.branch_session_id,
        agent=inp.subtask.agent,
        parent_session_id=base.parent_session_id,
        root_session_id=inp.root_session_id or base.root,
        depth=inp.depth,
        budget=base.budget,
    )
    if (await store.create_session(branch_meta)).ended:
        await store.delete_snapshot(inp.snapshot_id)
        return BeginSubtaskOutput(
            branch_session_id=inp.branch_session_id,
            message_count=await store.count(inp.branch_session_id),
            snapshot_message_count=snapshot_count,
        )
    existing = await store.count(inp.branch_session_id)
    if existing > 0:
        # A retry after the branch was already written: keep the first build.
        return BeginSubtaskOutput(
            branch_session_id=inp.branch_session_id,
            message_count=existing,
            snapshot_message_count=snapshot_count,
        )

    task, dep_descriptions = await _descriptions(store, inp)
    deps: list[DependencyResult] = []
    for (dep_id, dep_branch), description in zip(
        inp.dependency_branches, dep_descriptions, strict=True
    ):
        result = await branch_result(store, dep_branch)
        deps.append(
            DependencyResult(
                subtask_id=dep_id,
                description=description,
                result=result if result is not None else "(no result recorded)",
            )
        )

    # The view is built from the snapshot, so every attempt sees the same base.
    base_view = await store.read_snapshot(inp.snapshot_id)
    scope = subtask_scope(inp.plan_run_id, attempt_key(inp.subtask.id, inp.retries))
    isolated = isolate_for_subtask(base_view, deps, context_id=branch_context_message_id(scope))
    messages = [
        Message(id=branch_system_message_id(scope), role="system", content=inp.system_prompt),
        *isolated,
        Message(
            id=branch_task_message_id(scope),
            role="user",
            content=scrub_secrets(task),
        ),
    ]
    await store.append(inp.branch_session_id, messages)
    return BeginSubtaskOutput(
        branch_session_id=inp.branch_session_id,
        message_count=await store.count(inp.branch_session_id),
        snapshot_message_count=snapshot_count,
    )


async def _descriptions(store: SessionStore, inp: BeginSubtaskInput) -> tuple[str, list[str]]:
    """The subtask's description and its dependencies', whole: read from the plan's
    stored data where the workflow carries excerpts (``domain.plan_data``)."""
    if inp.plan_data is None:
        return inp.subtask.description, list(inp.dependency_descriptions)
    stored = await stored_subtasks(store, inp.plan_data)
    task = full_description(inp.subtask, stored.get(inp.subtask.id))
    deps = [
        full_description(Subtask(id=dep_id, description=excerpt), stored.get(dep_id))
        for (dep_id, _), excerpt in zip(
            inp.dependency_branches, inp.dependency_descriptions, strict=True
        )
    ]
    return task, deps


async def close_branch(store: SessionStore, inp: EndSubtaskInput) -> None:
    """Mark the branch ended and drop its snapshot; the base needs no restore because no
    subtask writes to it. Idempotent. A branch not built yet is recorded as ended (empty),
    so a build still in flight (``begin_branch``) finds it closed and builds nothing."""
    meta = await store.create_session(SessionMeta(session_id=inp.branch_session_id, ended=True))
    if not meta.ended:
        await store.update_session(meta.model_copy(update={"ended": True}))
    await store.delete_snapshot(inp.snapshot_id)


class SessionActivities:
    def __init__(self, store: SessionStore) -> None:
        self._store = store

    @activity.defn(name=ACT_END_SUBTASK)
    async def end_subtask(self, inp: EndSubtaskInput) -> None:
        async with heartbeating():
            await close_branch(self._store, inp)

    @activity.defn(name=ACT_MERGE_RESULTS)
    async def merge_results(self, inp: MergeResultsInput) -> int:
        """Append completed subtasks' results to the base session in the given order."""
        async with heartbeating():
            return await self._merge_results(inp)

    async def _merge_results(self, inp: MergeResultsInput) -> int:
        messages: list[Message] = []
        for subtask_id, branch in inp.entries:
            result = await branch_result(self._store, branch)
            if result is None:
                continue
            messages.append(
                Message(
                    id=merged_result_id(inp.plan_run_id, subtask_id),
                    role="assistant",
                    content=result,
                )
            )
        # A fork merges results it reused before any of its own subtasks began (which
        # makes the base session): it may not exist yet.
        await self._store.create_session(SessionMeta(session_id=inp.base_session_id))
        return await self._store.append(inp.base_session_id, messages)

    @activity.defn(name=ACT_BRANCH_SPEND)
    async def branch_spend(self, inp: BranchSpendInput) -> BranchSpendOutput:
        """What cancelled subtasks had spent, read from their branches: a cancelled child
        reports nothing back, and a report of 0 calls after real, billed calls would lie."""
        spends: list[BranchSpend] = []
        for subtask_id, branch, scope, max_turns in inp.entries:
            try:
                messages = await self._store.read(branch)
                exists = True
            except SessionNotFound:
                messages, exists = [], False
            answer_ids = {assistant_message_id(scope, turn) for turn in range(max_turns)}
            answers = [m for m in messages if m.id in answer_ids]
            usage = Usage()
            for answer in answers:
                # Every answer paid for that call, not only the stored one (spend.py).
                usage = usage + await paid_for(self._store, answer.id, answer.usage or Usage())
            spends.append(
                BranchSpend(
                    subtask_id=subtask_id,
                    branch_exists=exists,
                    llm_calls=len(answers),
                    usage=usage,
                )
            )
        return BranchSpendOutput(spends=tuple(spends))
