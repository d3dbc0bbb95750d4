"""Agents, delegation, sub-agents, budgets and tool errors on a real Temporal server."""

from __future__ import annotations

import itertools

import pytest
from temporalio.api.enums.v1 import WorkflowExecutionStatus

from durable_plans.domain.agents import BUILTIN_CATALOG, AgentSpec
from durable_plans.domain.contracts import MAX_SUBAGENT_DEPTH, SubtaskOutcome
from durable_plans.domain.models import Budget, PlanStatus, SubtaskStatus, Usage
from tests.integration.conftest import Harness
from tests.integration.plans import by_id, make_plan, run_plan, workflow_status
from tests.integration.replay import assert_replays
from tests.integration.stored import subtask_messages, tool_answers

pytestmark = pytest.mark.integration


async def test_delegation_is_an_isolated_request_to_the_cheap_model(harness: Harness) -> None:
    plan = make_plan(
        [("notes", "Summarise the release notes [call:delegate_to_sub_agent]", [])],
        agent="orchestrator",
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is None
    cheap = [r for r in harness.provider.requests if r.model == "cheap-model"]
    assert len(cheap) == 1
    body = cheap[0].body or {}
    assert "tools" not in body
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "Summarise the release notes" in body["messages"][1]["content"]
    main = [r for r in harness.provider.requests if r.model == "fake-model"]
    assert len(main) == 2 and all("tools" in (r.body or {}) for r in main)

    result = by_id(report)["notes"]
    branch = await subtask_messages(harness.store, report, "notes")
    answers = tool_answers(branch)
    assert [m.name for m in answers] == ["delegate_to_sub_agent"]
    assert (answers[0].content or "").startswith("Done: Summarise the release notes")
    # The delegation's tokens are charged to the subtask (and the root's ledger).
    spent = Usage.total(m.usage for m in branch if m.usage is not None)
    assert answers[0].usage is not None and answers[0].usage.total_tokens > 0
    assert result.usage == spent
    assert await harness.store.total_usage(f"plan-{plan.id}") == spent


async def test_sub_agents_nest_to_depth_three_and_the_fourth_is_refused(harness: Harness) -> None:
    plan = make_plan(
        [("deep", "Investigate [call:spawn_subagent] [agent:orchestrator]", [])],
        agent="orchestrator",
        session_id="s-deep",
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is None, failure
    assert report.counts.completed == 1
    child_ids = [f"{plan.id}/deep"]
    for _ in range(MAX_SUBAGENT_DEPTH):
        child_ids.append(f"{child_ids[-1]}/orchestrator-0-0")
    done = WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_COMPLETED
    outcomes: list[SubtaskOutcome] = []
    for wid in child_ids:
        assert await workflow_status(harness.client, wid) == done, wid
        handle = harness.client.get_workflow_handle(wid, result_type=SubtaskOutcome)
        outcomes.append(await handle.result())

    store = harness.store
    # The deepest (depth 3) agent asked for a fourth level and got a tool error back.
    deepest = await store.read(outcomes[-1].branch_session_id)
    refusals = [m for m in deepest if m.role == "tool"]
    assert len(refusals) == 1
    assert (refusals[0].content or "").startswith("error: sub-agent depth limit reached")

    # Each parent got its child's summary as the tool result and as a system note.
    for parent, child in itertools.pairwise(outcomes):
        messages = await store.read(parent.branch_session_id)
        tool = next(m for m in messages if m.role == "tool")
        assert tool.name == "spawn_subagent" and tool.content == child.result
        notes = [m for m in messages if m.role == "system" and "[sub-agent " in (m.content or "")]
        assert len(notes) == 1 and " result] " in (notes[0].content or "")
        assert (notes[0].content or "").endswith(child.result)
        assert messages.index(notes[0]) == messages.index(tool) + 1

    # Child sessions are linked to their parent, carry the root and depth, and are ended.
    for depth, (parent, child) in enumerate(itertools.pairwise(outcomes), 1):
        branch_meta = await store.get_session(child.branch_session_id)
        child_session = await store.get_session(child.branch_session_id.split(":")[0])
        for meta in (branch_meta, child_session):
            assert meta.depth == depth
            assert meta.root == "s-deep"
            assert meta.parent_session_id == parent.branch_session_id
            assert meta.ended
    # Usage of the whole tree is charged to the root and reported on the subtask.
    total = await store.total_usage("s-deep")
    assert report.usage == total
    assert outcomes[0].usage == total
    # Each level's usage includes its sub-agents': strictly more than the level below.
    tokens = [o.usage.total_tokens for o in outcomes]
    assert tokens == sorted(tokens, reverse=True) and len(set(tokens)) == len(tokens)
    await assert_replays(harness.client, [plan.id, *child_ids])


async def test_budget_exhaustion_fails_the_subtask_that_crosses_it(harness: Harness) -> None:
    chain = [("a", "First step", []), ("b", "Second step", ["a"]), ("c", "Third", ["b"])]
    probe, _ = await run_plan(
        harness.client, make_plan(chain[:1], session_id="s-probe"), harness.task_queue
    )
    first_step_tokens = probe.subtasks[0].usage.total_tokens

    plan = make_plan(chain, session_id="s-budget").model_copy(
        update={"budget": Budget(max_tokens=first_step_tokens + 1)}
    )
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is not None and report.status is PlanStatus.FAILED
    results = by_id(report)
    assert results["a"].status is SubtaskStatus.COMPLETED
    assert results["b"].status is SubtaskStatus.FAILED
    assert results["b"].error is not None and results["b"].error.type == "BudgetExceeded"
    assert "token budget exhausted" in results["b"].error.message
    assert results["b"].llm_calls == 2  # one answered, the next refused before any request
    assert results["c"].status is SubtaskStatus.SKIPPED
    assert report.usage.total_tokens >= first_step_tokens + 1


@pytest.mark.parametrize(
    ("directive", "expected"),
    [
        ("[bad-args]", "error: arguments for list_dir are not valid JSON"),
        ("[unknown-tool]", "error: unknown tool 'no_such_tool'"),
    ],
)
async def test_malformed_tool_calls_reach_the_model_as_tool_errors(
    harness: Harness, directive: str, expected: str
) -> None:
    plan = make_plan([("t", f"Look around {directive}", [])])
    report, failure = await run_plan(harness.client, plan, harness.task_queue)

    assert failure is None
    result = report.subtasks[0]
    assert result.status is SubtaskStatus.COMPLETED
    branch = await subtask_messages(harness.store, report, "t")
    tool = next(m for m in branch if m.role == "tool")
    assert (tool.content or "").startswith(expected), tool.content
    # The model saw the error and answered with it in hand.
    assert expected[:20] in (result.result or "")


async def test_custom_agents_travel_with_the_plan(harness: Harness) -> None:
    reviewer = AgentSpec(
        name="reviewer",
        system_prompt="You review changes for a living; be precise.",
        tools=("read_file",),
        max_turns=3,
    )
    catalog = BUILTIN_CATALOG.merged([reviewer])
    plan = make_plan([("review", "Review the README", [])], agent="reviewer")
    report, failure = await run_plan(
        harness.client, plan, harness.task_queue, agents=catalog.agents
    )

    assert failure is None
    branch = await subtask_messages(harness.store, report, "review")
    assert branch[0].role == "system" and branch[0].content == reviewer.system_prompt
    tools_offered = {
        t["function"]["name"]
        for r in harness.provider.requests
        for t in (r.body or {}).get("tools", [])
    }
    assert tools_offered == {"read_file"}
