"""``durable_plans.testing.local_stack``: a plan test in a few lines, and nothing left behind.

What users rely on: a plan runs to the end through ``stack.client`` against the provider
they gave (or the scripted model), and leaving the block, however it is left, stops the
dev server, the worker and the provider the stack started.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from durable_plans.domain.models import Plan, PlanStatus
from durable_plans.embedded import is_reachable
from durable_plans.testing import (
    LATENCY_ENV,
    Completion,
    FakeProvider,
    LocalStack,
    ScriptedScenario,
    ToolCallSpec,
    local_stack,
)

pytestmark = pytest.mark.integration

ONE_SUBTASK = {
    "id": "stack-check",
    "subtasks": [{"id": "read", "description": "Read the README", "agent": "coder"}],
}


class Boom(Exception):
    pass


def listens(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((host, int(port))) == 0


async def test_a_plan_runs_to_completed_against_the_provider_given(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("hello\n")
    scenario = ScriptedScenario(
        [
            Completion(tool_calls=(ToolCallSpec("read_file", '{"path": "README.md"}'),)),
            Completion(content="The README says hello."),
        ]
    )
    async with local_stack(provider=FakeProvider(scenario), workspace=tmp_path) as stack:
        report = await stack.client.report(await stack.client.start(ONE_SUBTASK))
        address = stack.settings.temporal_address
        assert listens(address)
        assert stack.provider is not None
        provider_url = stack.provider.base_url
        assert stack.task_queue == stack.settings.task_queue == stack.client.settings.task_queue

    assert report.status is PlanStatus.COMPLETED
    assert report.subtasks[0].result == "The README says hello."
    assert stack.provider is not None
    assert [r.model for r in stack.provider.requests] == ["fake", "fake"]
    assert stack.provider.rejections == []
    assert stack.provider.requests[1].messages[-1]["role"] == "tool"
    # Leaving the block stopped the server, and the provider the stack started.
    assert not listens(address)
    assert not stack.provider.running
    assert not await is_reachable(provider_url.removeprefix("http://").removesuffix("/v1"))


async def test_leaving_with_an_error_stops_everything_and_removes_its_directory() -> None:
    seen: list[LocalStack] = []
    with pytest.raises(Boom):
        async with local_stack() as stack:
            seen.append(stack)
            assert listens(stack.settings.temporal_address)
            assert stack.settings.workspace.is_dir()
            raise Boom
    (stack,) = seen
    assert not listens(stack.settings.temporal_address)
    assert stack.provider is not None and not stack.provider.running
    # Its directory is gone, with the workspace and the session store that were in it.
    assert stack.settings.state_dir.parent == stack.settings.workspace.parent
    assert not stack.settings.state_dir.parent.exists()


async def test_without_a_provider_the_scripted_model_answers_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LATENCY_ENV, raising=False)
    plan = Plan.model_validate(ONE_SUBTASK)
    async with local_stack(provider=None) as stack:
        assert stack.provider is None
        assert os.environ[LATENCY_ENV] == "0"
        report = await stack.client.report(await stack.client.start(plan))
    assert report.status is PlanStatus.COMPLETED
    assert (report.subtasks[0].result or "").startswith("Done: Read the README")
    assert LATENCY_ENV not in os.environ  # the environment is the caller's again


async def test_a_provider_the_caller_started_is_left_running() -> None:
    async with FakeProvider() as provider:
        async with local_stack(provider=provider) as stack:
            report = await stack.client.report(await stack.client.start(ONE_SUBTASK))
        assert report.status is PlanStatus.COMPLETED
        assert provider.running and provider.completions()
        two_stacks = [stack.task_queue]
        async with local_stack(provider=provider) as stack:
            two_stacks.append(stack.task_queue)
        assert two_stacks[0] != two_stacks[1]  # stacks never share a task queue
