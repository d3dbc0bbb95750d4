"""The README's "Embedding" example, run as written against a dev server.

A service copies it to start plans and put their events on its own screen; executing it
keeps its imports, the client's calls and the event fields it reads true.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.client import Client

from durable_plans.domain.models import PlanReport, PlanStatus, SubtaskStatus
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider
from tests.integration.conftest import provider_settings
from tests.integration.readme_examples import example_source, imported_modules, run_example

pytestmark = pytest.mark.integration

SECTION = "## Embedding"

Main = Callable[[dict[str, Any], Settings, Callable[[str], None]], Awaitable[PlanReport]]


def test_the_example_imports_only_the_public_surface() -> None:
    assert imported_modules(example_source(SECTION)) <= {"asyncio", "durable_plans"}


async def test_the_example_runs_a_plan_and_shows_its_events(
    client: Client, provider: FakeProvider, tmp_path: Path
) -> None:
    settings = provider_settings(client, provider, tmp_path, prefix="readme")
    plan = {
        "id": f"readme-{settings.task_queue}",
        "subtasks": [
            {"id": "look", "description": "List the workspace", "agent": "architect"},
            {"id": "write", "description": "Write notes", "agent": "coder", "depends_on": ["look"]},
        ],
    }
    shown: list[str] = []
    main = cast(Main, run_example(SECTION)["main"])

    report = await main(plan, settings, shown.append)

    assert report.status is PlanStatus.COMPLETED
    assert [r.status for r in report.subtasks] == [SubtaskStatus.COMPLETED] * 2
    assert shown[-1] == "plan completed", shown
    for subtask in ("look", "write"):
        states = [line for line in shown if line.startswith(f"{subtask}: ")]
        assert states and states[-1] == f"{subtask}: completed", shown
    # `write` waits for `look`: it cannot be seen completing first.
    assert shown.index("look: completed") < shown.index("write: completed")
