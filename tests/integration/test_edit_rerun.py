"""Edit and re-run on a real dev server (issue 24): a failed subtask runs again with a
changed description and model, and only it and its dependents reach the provider.

A four-subtask plan whose ``b`` carries ``[fail:400]`` in its description (the fake
provider answers every request of that conversation 400, which is not retried): ``a`` and
``d`` complete, ``b`` fails, ``c`` (after ``b``) is skipped. Every assertion about what ran
counts what reached the provider per subtask: a completed subtask asked again is a call
paid twice.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowFailureError

from durable_plans import Client, Refused, SubtaskChanges
from durable_plans.cli.operate_command import retry_command
from durable_plans.cli.run_command import status_command
from durable_plans.client._plans import plan_status
from durable_plans.domain.models import PlanReport, PlanStatus, SubtaskStatus, Usage
from durable_plans.settings import Settings
from durable_plans.testing import AgentScenario, ChatRequest, FakeProvider, Reply
from tests.integration.conftest import provider_settings, running_worker
from tests.integration.plans import by_id, make_plan, start_plan_workflow

pytestmark = pytest.mark.integration

PLAN = [
    ("a", "task-a Inspect the repository", []),
    ("b", "task-b Call the weather API [fail:400]", ["a"]),
    ("c", "task-c Render the forecast", ["b"]),
    ("d", "task-d Write the changelog", []),
]
MARKERS = ("task-a", "task-b", "task-c", "task-d")
TURNS = 2  # a completed subtask of the fake agent: one tool turn, then the answer
OPERATOR = "alice@ops"


@dataclass
class Recorder:
    """The default fake agent (directives honoured), noting what each request asked:
    its task (the last user message), model and system prompt."""

    inner: AgentScenario = field(default_factory=AgentScenario)
    seen: list[tuple[str, str, str]] = field(default_factory=list)

    def __call__(self, request: ChatRequest) -> Reply:
        system = next((m.get("content") for m in request.messages if m["role"] == "system"), "")
        self.seen.append((request.last_user_text, request.model, str(system or "")))
        return self.inner(request)

    def count(self) -> Counter[str]:
        return Counter(m for task, _, _ in self.seen for m in MARKERS if m in task)

    def since(self, mark: int, marker: str) -> list[tuple[str, str]]:
        """(model, system prompt) of the requests for ``marker`` after the first ``mark``."""
        return [(model, system) for task, model, system in self.seen[mark:] if marker in task]


@dataclass
class Rig:
    client: TemporalClient
    settings: Settings
    recorder: Recorder


@pytest.fixture
async def rig(client: TemporalClient, tmp_path: Path) -> AsyncIterator[Rig]:
    recorder = Recorder()
    async with FakeProvider(recorder, latency_ms=0) as provider:
        settings = provider_settings(client, provider, tmp_path, prefix="edit")
        async with running_worker(client, settings):
            yield Rig(client, settings, recorder)


async def first_run_fails(rig: Rig) -> tuple[str, PlanReport]:
    plan = make_plan(PLAN, prefix="edit")
    handle = await start_plan_workflow(rig.client, plan, rig.settings.task_queue)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    report = await plan_status(rig.client, plan.id)
    rows = by_id(report)
    assert rows["b"].status is SubtaskStatus.FAILED and rows["b"].error.type == "BadRequest"
    assert rows["c"].status is SubtaskStatus.SKIPPED
    assert rows["a"].status is rows["d"].status is SubtaskStatus.COMPLETED
    counts = rig.recorder.count()
    assert (counts["task-a"], counts["task-c"], counts["task-d"]) == (TURNS, 0, TURNS)
    assert counts["task-b"] == rows["b"].llm_calls >= 1  # 400 is not retried
    return plan.id, report


async def test_edit_and_rerun_a_failed_subtask_from_the_cli(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_id, failed = await first_run_fails(rig)
    before, mark = rig.recorder.count(), len(rig.recorder.seen)

    code = await retry_command(
        plan_id,
        subtasks=["b"],
        changes=["description=task-b Call the weather API", "model=openai/edited-model"],
        operator=OPERATOR,
        embedded=False,
        json_output=True,
        no_wait=False,
        settings=rig.settings,
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "retrying plan" in out.err and f"b: description, model changed by {OPERATOR}" in out.err
    report = PlanReport.model_validate_json(out.out)

    # Only the edited subtask and its dependent reached the provider again.
    assert rig.recorder.count() - before == Counter({"task-b": TURNS, "task-c": TURNS})
    # b asked the model the edit named; c kept the agent's (the worker's DPLAN_MODEL).
    b_models = {model for model, _ in rig.recorder.since(mark, "task-b")}
    c_models = {model for model, _ in rig.recorder.since(mark, "task-c")}
    assert len(b_models) == 1 and next(iter(b_models)).endswith("edited-model")
    assert c_models and not any(m.endswith("edited-model") for m in c_models)

    # The report reads as one plan: the completed ones as they were, b counting both tries.
    assert report.status is PlanStatus.COMPLETED
    assert [r.id for r in report.subtasks] == ["a", "b", "c", "d"]
    assert report.counts.completed == 4
    rows, old = by_id(report), by_id(failed)
    assert rows["a"] == old["a"] and rows["d"] == old["d"]
    assert rows["b"].retries == 1 and rows["b"].llm_calls == old["b"].llm_calls + TURNS
    assert rows["c"].retries == 0 and rows["c"].llm_calls == TURNS
    assert report.usage == Usage.total(r.usage for r in report.subtasks)

    # The change is recorded: which fields, by whom, in the plan's memo.
    plans = Client(rig.client, rig.settings, operator="bob@ops")
    edits = await plans.edits(plan_id)
    assert [(e.subtask, e.fields, e.by) for e in edits] == [
        ("b", ("description", "model"), OPERATOR)
    ]
    assert edits[0].at  # when
    # ... which dplan status says under the report.
    assert await status_command(plan_id, json_output=False, settings=rig.settings) == 0
    said = capsys.readouterr().out
    assert re.search(
        rf"\n  20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC edited b by {re.escape(OPERATOR)}: "
        r"changed description, model\n",
        said,
    ), said
    assert [e.kind for e in report.log][-2:] == ["retried", "edited"], report.log


async def test_edit_a_completed_subtask_through_the_client(rig: Rig) -> None:
    plan_id, failed = await first_run_fails(rig)
    plans = Client(rig.client, rig.settings, operator="bob@ops")

    # A subtask the plan lacks is refused, naming it, and nothing starts.
    with pytest.raises(Refused, match=r"has no subtask 'zz'"):
        await plans.retry(plan_id, changes={"zz": SubtaskChanges(description="x")})
    assert (await plans.status(plan_id)).status is PlanStatus.FAILED

    # d completed; with a new agent it runs again (it has no dependents), and so does
    # what failed (b, then c), as any retry does.
    before, mark = rig.recorder.count(), len(rig.recorder.seen)
    rerun = await plans.retry(
        plan_id,
        changes={
            "d": SubtaskChanges(agent="architect"),
            "b": SubtaskChanges(description="task-b Call the weather API"),
        },
    )
    assert rerun == ["b", "c", "d"]
    report = await plans.report(plan_id)
    assert report.status is PlanStatus.COMPLETED
    assert set(rig.recorder.count() - before) == {"task-b", "task-c", "task-d"}
    assert rig.recorder.count()["task-a"] == before["task-a"]  # a was reused
    systems = {system for _, system in rig.recorder.since(mark, "task-d")}
    assert systems and all(s.startswith("You are the architect") for s in systems)
    rows = by_id(report)
    assert rows["a"] == by_id(failed)["a"]
    assert rows["d"].agent == "architect" and rows["d"].retries == 1
    assert rows["d"].llm_calls > by_id(failed)["d"].llm_calls  # both runs of d counted

    # A later plain retry keeps the record of the edits.
    assert await plans.retry(plan_id, ["d"]) == ["d"]
    await plans.report(plan_id)
    edits = await plans.edits(plan_id)
    assert sorted((e.subtask, e.fields, e.by) for e in edits) == [
        ("b", ("description",), "bob@ops"),
        ("d", ("agent",), "bob@ops"),
    ]
