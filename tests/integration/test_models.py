"""Which model answers, and what the answers cost, on a real dev server: prompt caching's
cached tokens reach the report, and (below) a model that is down hands its calls to the
agent's fallback model, the report naming the model that answered."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from durable_plans.cli.progress import render_report
from durable_plans.domain.agents import agent_spec
from durable_plans.domain.models import PlanStatus, SubtaskStatus
from durable_plans.testing import FakeProvider
from tests.integration.conftest import provider_settings, running_worker
from tests.integration.plans import make_plan, run_plan
from tests.integration.replay import assert_replays

pytestmark = pytest.mark.integration


async def test_cached_prompt_tokens_reach_the_report(client: Client, tmp_path: Path) -> None:
    """Each subtask's second call resends its first call's prompt: a caching provider
    reports that prefix as cached, and the report counts exactly what it reported."""
    async with FakeProvider(prompt_cache=True) as provider:
        settings = provider_settings(client, provider, tmp_path, prefix="tq-cache")
        (settings.workspace / "README.md").write_text("# cached\n")
        plan = make_plan([("one", "Look around", ()), ("two", "Look again", ())])
        async with running_worker(client, settings):
            report, failure = await run_plan(client, plan, settings.task_queue)
    assert failure is None and report.status is PlanStatus.COMPLETED
    served = [r for r in provider.completions()]
    reported = sum(r.cached_tokens for r in served)
    assert reported > 0
    assert report.usage.cached_tokens == reported
    for result in report.subtasks:
        assert result.status is SubtaskStatus.COMPLETED
        assert 0 < result.usage.cached_tokens < result.usage.prompt_tokens


async def test_a_model_that_stays_down_hands_the_subtask_to_its_fallback(
    client: Client, tmp_path: Path
) -> None:
    """The coder's model answers 500 to everything; after two attempts of each call its
    fallback answers. The subtask completes, the report names the fallback as the model
    that answered (with its calls and usage), and the store records it per message."""
    coder = agent_spec("coder").model_copy(
        update={"model": "openai/primary", "fallback_models": ("openai/backup",)}
    )
    async with FakeProvider() as provider:
        settings = provider_settings(
            client, provider, tmp_path, prefix="tq-fallback", fallback_after_attempts=2
        )
        (settings.workspace / "README.md").write_text("# fallback\n")
        plan = make_plan([("fix", "Fix it [fail:500:model=primary]", ())])
        async with running_worker(client, settings) as (_, store):
            report, failure = await run_plan(client, plan, settings.task_queue, agents=(coder,))
            (result,) = report.subtasks
            assert result.session_id is not None
            stored = await store.read(result.session_id)
    assert failure is None and report.status is PlanStatus.COMPLETED
    assert result.status is SubtaskStatus.COMPLETED and result.result
    # Two calls (a tool call, then the answer), each after two refused attempts.
    assert result.llm_calls == 2
    (share,) = result.models
    assert share.model == "openai/backup" and share.llm_calls == 2
    assert share.usage == result.usage and result.usage.total_tokens > 0
    answers = [m for m in stored if m.role == "assistant"]
    assert [m.model for m in answers] == ["openai/backup", "openai/backup"]
    asked = [(r.model, r.status) for r in provider.requests]
    assert asked.count(("primary", 500)) == 4
    assert asked.count(("backup", 200)) == 2
    # The report as a person reads it names the model that answered.
    assert "openai/backup" in render_report(report, width=200)
    # The choice was made inside the activity: the run replays as any other.
    assert await assert_replays(client, [plan.id, f"{plan.id}/fix"]) == 2
