"""Which model answers, and what the answers cost, on a real dev server: prompt caching's
cached tokens reach the report, and (below) a model that is down hands its calls to the
agent's fallback model, the report naming the model that answered."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from durable_plans.domain.models import PlanStatus, SubtaskStatus
from durable_plans.testing import FakeProvider
from tests.integration.conftest import provider_settings, running_worker
from tests.integration.plans import make_plan, run_plan

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
