"""Big plans on a real Temporal dev server: plan data by reference (``domain.plan_data``).

A plan too big for one payload travels packed in its first input (a client that cannot
reach the session store) or as a reference the client put there (``--embedded``); the
workflow stores or checks it, holds a lean plan (descriptions cut to excerpts) and
carries the reference across continue-as-new, and each subtask's branch is built from
the stored, whole description. A reference whose data is missing or altered fails the
plan at once with one line. The scripted model at zero latency keeps the plans quick:
what is tested is the orchestration, not a model.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durable_plans.activities.plan_data import put_data
from durable_plans.activities.scripted_model import LATENCY_ENV, SCRIPTED_MODEL
from durable_plans.client._plans import start_plan
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import Message, Plan, PlanReport, PlanStatus, Subtask
from durable_plans.domain.plan_data import (
    LEAN_MARK,
    PACKED_FIELD,
    PlanDataRef,
    content_hash,
    lean_plan,
    pack,
    plan_bytes,
    plan_data_session_id,
    with_carried_subtasks,
)
from durable_plans.domain.plan_loader import MAX_PLAN_BYTES
from durable_plans.embedded import free_port
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings
from tests.integration.conftest import running_worker
from tests.integration.replay import assert_replays

pytestmark = pytest.mark.integration

DPLAN = Path(sys.executable).parent / "dplan"
FILLER = "Read the item, apply the change it describes and report what changed, in a line."


@pytest.fixture(autouse=True)
def no_latency() -> Iterator[None]:
    before = os.environ.get(LATENCY_ENV)
    os.environ[LATENCY_ENV] = "0"
    yield
    if before is None:
        os.environ.pop(LATENCY_ENV, None)
    else:
        os.environ[LATENCY_ENV] = before


@dataclass
class Rig:
    client: TemporalClient
    settings: Settings
    store: SessionStore


@pytest.fixture
async def rig(client: TemporalClient, tmp_path: Path) -> AsyncIterator[Rig]:
    settings = Settings(
        temporal_address=client.service_client.config.target_host,
        temporal_namespace=client.namespace,
        task_queue=f"big-{uuid.uuid4().hex[:10]}",
        model=SCRIPTED_MODEL,
        session_store=str(tmp_path / "sessions.db"),
        workspace=tmp_path / "workspace",
        state_dir=tmp_path / "state",
    )
    settings.workspace.mkdir(parents=True)
    async with running_worker(client, settings) as (_, store):
        yield Rig(client, settings, store)


def words(rng: random.Random, chars: int) -> str:
    """Text of made-up words: compresses about as badly as a real description."""
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10)))]
    while len(vocabulary) < 2000:
        vocabulary.append("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))))
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(vocabulary)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def long_plan(count: int, chars: int, *, seed: int = 25, prefix: str = "long") -> Plan:
    rng = random.Random(seed)
    return Plan(
        id=f"{prefix}-{uuid.uuid4().hex[:8]}",
        goal="long descriptions",
        max_parallel=50,
        subtasks=tuple(
            Subtask(
                id=f"t{i}",
                description=f"task {i}: " + words(rng, chars),
                depends_on=(f"t{i - 1}",) if i % 5 else (),
            )
            for i in range(count)
        ),
    )


async def task_message(store: SessionStore, plan: Plan, report: PlanReport, sid: str) -> Message:
    row = next(r for r in report.subtasks if r.id == sid)
    assert row.session_id is not None
    messages = await store.read(row.session_id)
    return next(m for m in messages if m.role == "user")


async def start_by_reference(
    rig: Rig, plan: Plan, ref: PlanDataRef, **extra: Any
) -> WorkflowHandle[Any, PlanReport]:
    """Start ``plan`` as a client that put its data in the store does: lean, by ``ref``."""
    return await rig.client.start_workflow(
        "PlanWorkflow",
        PlanInput(plan=lean_plan(plan), plan_data=ref, **extra),
        id=plan.id,
        task_queue=rig.settings.task_queue,
        result_type=PlanReport,
    )


async def failure_of(client: TemporalClient, workflow_id: str) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as caught:
        await client.get_workflow_handle(workflow_id).result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def workflow_task_failures(client: TemporalClient, workflow_id: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in history.events)


# --------------------------------------------------------------------------- tests


async def test_packed_plan_runs_by_reference_across_continue_as_new_and_replays(
    rig: Rig,
) -> None:
    """A client without the store sends the plan packed; the first task stores it; every
    later run (continue-as-new after 10 completions) carries only the lean plan and the
    reference; branches get the whole descriptions; every run replays."""
    plan = long_plan(30, 12_000)
    handle = await start_plan(rig.client, plan, rig.settings)  # no store: packed
    started = (await handle.fetch_history()).events[0]
    first_input = json.loads(
        started.workflow_execution_started_event_attributes.input.payloads[0].data
    )
    assert set(first_input) == {PACKED_FIELD}

    report = await handle.result()

    assert report.status is PlanStatus.COMPLETED, report.counts
    assert report.counts.completed == 30
    for sid in ("t0", "t7", "t29"):  # the whole description, not the excerpt
        message = await task_message(rig.store, plan, report, sid)
        assert message.content == plan.subtask(sid).description
    stored = await rig.store.read(plan_data_session_id(_ref(plan)))
    assert "".join(m.content or "" for m in stored).encode() == plan_bytes(plan)


async def test_continued_runs_carry_the_reference_not_the_plan(rig: Rig) -> None:
    plan = long_plan(24, 12_000, prefix="carry")
    ref = await put_data(rig.store, plan_bytes(plan))
    handle = await start_by_reference(rig, plan, ref, max_completions_per_run=8)
    report = await handle.result()

    assert report.status is PlanStatus.COMPLETED, report.counts
    runs = await assert_replays(rig.client, [plan.id])
    assert runs >= 3  # continued as new at least twice
    history = await handle.fetch_history()  # the last run
    attrs = history.events[0].workflow_execution_started_event_attributes
    carried = json.loads(attrs.input.payloads[0].data)
    assert carried["plan_data"] == ref.model_dump()
    # The lean plan's subtasks travel packed with the progress, not beside it.
    assert carried["plan"]["subtasks"] == []
    restored = with_carried_subtasks(carried)["plan"]["subtasks"]
    assert [s["id"] for s in restored] == [s.id for s in plan.subtasks]
    assert all(s["description"].endswith(LEAN_MARK) for s in restored)
    assert len(json.dumps(restored)) < len(plan_bytes(plan)) // 10  # lean, not whole
    message = await task_message(rig.store, plan, report, "t23")
    assert message.content == plan.subtask("t23").description


async def test_missing_plan_data_fails_the_plan_with_one_line(rig: Rig) -> None:
    plan = long_plan(3, 3_000, prefix="missing")
    ref = PlanDataRef(sha256="0" * 64, size=len(plan_bytes(plan)))
    await start_by_reference(rig, plan, ref)
    failure = await failure_of(rig.client, plan.id)

    assert failure.type == "PlanDataUnavailable"
    assert failure.non_retryable
    assert "\n" not in failure.message
    assert failure.message == (
        f"plan {plan.id!r} cannot run: plan data sha256:0000000000000000 "
        f"({ref.size} bytes) is missing from the session store"
    )
    assert await workflow_task_failures(rig.client, plan.id) == 0


async def test_altered_plan_data_fails_the_plan_with_one_line(rig: Rig) -> None:
    plan = long_plan(3, 3_000, prefix="altered")
    ref = await put_data(rig.store, plan_bytes(plan))
    session = plan_data_session_id(ref)
    kept = await rig.store.read(session)
    tampered = kept[0].content.replace("task 1:", "task 9:")  # type: ignore[union-attr]
    await rig.store.replace(session, [kept[0].model_copy(update={"content": tampered})])
    await start_by_reference(rig, plan, ref)
    failure = await failure_of(rig.client, plan.id)

    assert failure.type == "PlanDataUnavailable"
    assert failure.message.endswith("was altered in the session store (its content hash differs)")
    assert "\n" not in failure.message
    assert await workflow_task_failures(rig.client, plan.id) == 0


async def test_a_plan_too_big_to_carry_is_refused_by_the_workflow_in_one_line(rig: Rig) -> None:
    """Long ids and many dependencies: the lean plan itself is past what a run carries.
    Sent packed by hand (the client would refuse it before sending)."""
    stem = "s" * 100
    subtasks = [
        {
            "id": f"{stem}{i}",
            "description": "x",
            "depends_on": [f"{stem}{j}" for j in range(max(0, i - 6), i)],
        }
        for i in range(2_500)
    ]
    plan_id = f"huge-{uuid.uuid4().hex[:8]}"
    data: dict[str, Any] = {"plan": {"id": plan_id, "goal": "g", "subtasks": subtasks}}
    await rig.client.start_workflow(
        "PlanWorkflow",
        {PACKED_FIELD: pack(data).model_dump()},
        id=plan_id,
        task_queue=rig.settings.task_queue,
    )
    failure = await failure_of(rig.client, plan_id)

    assert failure.type == "InvalidPlan"
    assert "\n" not in failure.message
    assert failure.message.startswith(f"invalid plan {plan_id!r}: plan structure is too large")


def test_dplan_runs_the_long_descriptions_plan_embedded(tmp_path: Path) -> None:
    """The plan ``dplan validate`` always accepted (150 subtasks of 19,000 characters,
    2.8 MB) runs with ``dplan run --embedded``: the client puts it in the session store."""
    plan = long_plan(150, 19_000, prefix="embedded")
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json(exclude_defaults=True))
    assert 2_700_000 < path.stat().st_size < MAX_PLAN_BYTES
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "DPLAN_STATE_DIR": str(tmp_path / "state"),
        "DPLAN_WORKSPACE": str(tmp_path / "workspace"),
        "DPLAN_MODEL": SCRIPTED_MODEL,
        LATENCY_ENV: "0",
    }
    for key in ("DPLAN_SESSION_STORE", "DPLAN_TASK_QUEUE", "DPLAN_AGENTS"):
        env.pop(key, None)
    validated = subprocess.run(
        [DPLAN, "validate", str(path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert validated.returncode == 0, validated.stderr
    ran = subprocess.run(
        [DPLAN, "run", str(path), "--embedded", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,  # a bound for hangs: 117 s beside the suite on a slow day
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    # The report is the JSON object on stdout (the SDK core may log a line before it).
    report = json.loads(ran.stdout[ran.stdout.find("{") :])
    assert report["status"] == "completed"
    assert report["counts"]["completed"] == 150


def _ref(plan: Plan) -> PlanDataRef:
    data = plan_bytes(plan)
    return PlanDataRef(sha256=content_hash(data), size=len(data))
