"""``DurablePlansPlugin`` on a real dev server: a client and worker wired by the plugin alone
run a plan that the plugin's replayer replays; the timeouts and attempts the settings
give reach the activities of that worker's workflows, and only that worker's."""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.activity import _Definition
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker

from durable_plans.activities.registry import PlanActivities
from durable_plans.cli.replay_command import replay_history
from durable_plans.domain.contracts import (
    ACT_CALL_LLM,
    ACT_RUN_TOOL,
    ACT_WORKER_FACTS,
    ToolCallInput,
    ToolCallOutput,
)
from durable_plans.domain.ids import subtask_workflow_id
from durable_plans.domain.models import PlanStatus, SubtaskStatus
from durable_plans.plugin import DurablePlansPlugin, client_carrying, plugin_of
from durable_plans.settings import LLM_ACTIVITY_MARGIN_S, Settings
from durable_plans.testing import FakeProvider
from durable_plans.worker import build_worker
from durable_plans.workflows.policies import DEFAULT_PARAMETERS
from tests.integration.conftest import FAKE_KEY, Harness
from tests.integration.plans import by_id, make_plan, run_plan
from tests.integration.stored import opened_store

pytestmark = pytest.mark.integration


def worker_settings(provider: FakeProvider, tmp_path: Path, env: dict[str, str]) -> Settings:
    """Settings read from ``env`` as a worker reads them, pointed at the fake provider."""
    settings = Settings.from_env(
        {
            "DPLAN_TASK_QUEUE": f"tq-{uuid.uuid4().hex[:10]}",
            "DPLAN_MODEL": "openai/fake-model",
            "DPLAN_SUBAGENT_MODEL": "openai/cheap-model",
            "DPLAN_API_BASE": provider.base_url,
            "DPLAN_API_KEY": FAKE_KEY,
            "DPLAN_SESSION_STORE": str(tmp_path / "sessions.db"),
            "DPLAN_WORKSPACE": str(tmp_path / "workspace"),
            "DPLAN_STATE_DIR": str(tmp_path / "state"),
            **env,
        }
    )
    settings.workspace.mkdir(parents=True, exist_ok=True)
    (settings.workspace / "README.md").write_text("# demo workspace\n")
    return settings


async def scheduled(client: Client, workflow_id: str, activity_type: str) -> list[HistoryEvent]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    ]


def with_recorded_tool(
    plugin_activities: Sequence[Callable[..., Any]],
    run_tool: Callable[..., Any],
    seen: list[activity.Info],
) -> list[Callable[..., Any]]:
    """The worker's activities, with ``run_tool`` noting the options it was scheduled with
    (a local activity's options are not in the history)."""

    @activity.defn(name=ACT_RUN_TOOL)
    async def recording_run_tool(inp: ToolCallInput) -> ToolCallOutput:
        seen.append(activity.info())
        result: ToolCallOutput = await run_tool(inp)
        return result

    return [a for a in plugin_activities if a != run_tool] + [recording_run_tool]


async def test_a_client_and_worker_built_only_from_the_plugin_run_a_plan_that_replays(
    temporal_env: Any, provider: FakeProvider, tmp_path: Path
) -> None:
    settings = worker_settings(provider, tmp_path, {})
    async with opened_store(settings.session_store) as store:
        client = await Client.connect(
            temporal_env.client.service_client.config.target_host,
            plugins=[DurablePlansPlugin(settings=settings, store=store)],
        )
        # Nothing but a task queue: workflows, activities, converter and sandbox all come
        # from the plugin the client carries.
        worker = Worker(client, task_queue=settings.task_queue)
        plan = make_plan([("a", "Look around the workspace", []), ("b", "Summarise", ["a"])])
        async with worker:
            report, failure = await run_plan(client, plan, settings.task_queue)
        assert failure is None, failure
        assert report.status is PlanStatus.COMPLETED
        assert provider.rejections == []

    replayer = Replayer(workflows=[], plugins=[DurablePlansPlugin()])
    for workflow_id in (plan.id, *(subtask_workflow_id(plan.id, s) for s in ("a", "b"))):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        result = await replay_history(replayer, history)
        assert result.replay_failure is None, (workflow_id, result.replay_failure)


async def test_build_worker_on_a_client_carrying_the_plugin_configures_the_worker_once(
    harness: Harness,
) -> None:
    """The harness's client carries a DurablePlansPlugin (conftest); build_worker adds the
    worker's own. The SDK would warn and register every workflow twice if both applied."""
    carried = plugin_of(harness.client)
    assert carried is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The same plugin type ... may run twice"
        # Its own queue: one process may not run two workers on one queue.
        settings = harness.settings.with_overrides(task_queue=f"tq-{uuid.uuid4().hex[:10]}")
        worker = build_worker(harness.client, settings, harness.store)
    active = worker.config(active_config=True)
    names = [w.__name__ for w in active.get("workflows", [])]
    assert sorted(names) == ["PlanWorkflow", "SessionWorkflow", "SubtaskWorkflow"]
    # Every activity once, and the plugin's own ``worker_facts`` (asked by each plan run).
    registered = [str(_Definition.must_from_callable(fn).name) for fn in active["activities"]]
    expected = [
        str(_Definition.must_from_callable(fn).name)
        for fn in PlanActivities(harness.store, harness.settings).all()
    ]
    assert sorted(registered) == sorted([*expected, ACT_WORKER_FACTS])
    plugins = [p for p in active["client"].config()["plugins"] if isinstance(p, DurablePlansPlugin)]
    assert len(plugins) == 1 and plugins[0] is not carried
    # The caller's client is untouched.
    assert plugin_of(harness.client) is carried
    assert client_carrying(harness.client, carried) is harness.client


async def test_the_settings_set_llm_and_tool_timeouts_and_attempts_of_their_worker_only(
    harness: Harness, provider: FakeProvider, tmp_path: Path
) -> None:
    """One worker reads DPLAN_LLM_* / DPLAN_TOOL_* from its environment; the harness's
    worker in the same process keeps its own numbers (no process-wide state)."""
    settings = worker_settings(
        provider,
        tmp_path,
        {
            "DPLAN_LLM_MAX_ATTEMPTS": "2",
            "DPLAN_LLM_TIMEOUT_S": "45",
            "DPLAN_LLM_HEARTBEAT_S": "40",
            "DPLAN_TOOL_TIMEOUT_S": "50",
            "DPLAN_TOOL_MAX_ATTEMPTS": "3",
            # Regular activities: their scheduled events carry the timeouts read below
            # (a local call's are the worker's own, with no event to read them from).
            "DPLAN_LLM_LOCAL": "0",
        },
    )
    seen: list[activity.Info] = []
    async with opened_store(settings.session_store) as store:
        plan_activities = PlanActivities(store, settings)
        custom = build_worker(
            harness.client,
            settings,
            store,
            activities=with_recorded_tool(
                plan_activities.all(), plan_activities.tools.run_tool, seen
            ),
        )
        plan = make_plan(
            [("tools", "Look around the workspace", []), ("down", "Fix [fail:500]", [])]
        )
        other = make_plan([("a", "Look around the workspace", [])])
        async with custom:
            (report, failure), (other_report, other_failure) = await asyncio.gather(
                run_plan(harness.client, plan, settings.task_queue),
                run_plan(harness.client, other, harness.task_queue),
            )

    # DPLAN_LLM_MAX_ATTEMPTS=2: a retryable 500 reaches the provider exactly twice.
    assert failure is not None and report.status is PlanStatus.FAILED
    down = by_id(report)["down"]
    assert down.status is SubtaskStatus.FAILED and down.error.type == "ServerError"
    fails = [r for r in provider.requests if r.status == 500]
    assert len(fails) == 2, [(r.status, r.conversation) for r in provider.requests]
    assert by_id(report)["tools"].status is SubtaskStatus.COMPLETED

    # The LLM activity was scheduled with the worker's numbers ...
    for subtask in ("tools", "down"):
        events = await scheduled(
            harness.client, subtask_workflow_id(plan.id, subtask), ACT_CALL_LLM
        )
        assert events
        for e in events:
            attrs = e.activity_task_scheduled_event_attributes
            assert attrs.start_to_close_timeout.ToTimedelta() == timedelta(
                seconds=45 + LLM_ACTIVITY_MARGIN_S
            )
            assert attrs.heartbeat_timeout.ToTimedelta() == timedelta(seconds=40)
            # Temporal's count is a backstop past the 2 attempts and the refusals the
            # patience allows; the activity itself stopped the 500s at 2 (above).
            assert attrs.retry_policy.maximum_attempts == (
                settings.activity_parameters().llm_retry.maximum_attempts
            )
            assert settings.activity_parameters().llm_max_attempts == 2
    # ... and the tool (a local activity) with its own.
    assert seen, "the plan's tool call never ran"
    for info in seen:
        assert info.is_local
        assert info.start_to_close_timeout == timedelta(seconds=50)
        assert info.retry_policy is not None and info.retry_policy.maximum_attempts == 3

    # The other worker, same process, same time: the harness's settings, not these.
    assert other_failure is None and other_report.status is PlanStatus.COMPLETED
    events = await scheduled(harness.client, subtask_workflow_id(other.id, "a"), ACT_CALL_LLM)
    if harness.settings.llm_local:
        # Its calls ran as local activities: the DPLAN_LLM_LOCAL=0 above stayed with
        # the other worker (no scheduled LLM activity here).
        assert events == []
        return
    assert events
    for e in events:
        attrs = e.activity_task_scheduled_event_attributes
        assert attrs.start_to_close_timeout.ToTimedelta() == timedelta(
            seconds=harness.settings.llm_timeout_s + LLM_ACTIVITY_MARGIN_S
        )
        assert attrs.heartbeat_timeout.ToTimedelta() == DEFAULT_PARAMETERS.llm_heartbeat
        assert attrs.retry_policy.maximum_attempts == DEFAULT_PARAMETERS.llm_retry.maximum_attempts


async def test_an_input_that_does_not_fit_fails_the_workflow_instead_of_retrying_its_task(
    harness: Harness,
) -> None:
    """The plugin's failure types: a payload pydantic rejects fails the run at once; without
    them its first workflow task would fail and be retried forever (Running)."""
    workflow_id = f"bad-input-{uuid.uuid4().hex[:8]}"
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(
            harness.client.execute_workflow(
                "PlanWorkflow",
                {"plan": {"subtasks": "not a list"}},
                id=workflow_id,
                task_queue=harness.task_queue,
            ),
            timeout=30,
        )
    assert isinstance(info.value.cause, ApplicationError)
    assert "subtasks" in str(info.value.cause)
