"""`dplan replay` against a real server: fetch, follow children, save, replay saved files."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from durable_plans.cli.main import main
from durable_plans.cli.replay_command import runs_forward
from durable_plans.domain.session_contracts import (
    SendMessageInput,
    SendMessageResult,
    SessionInput,
    SessionState,
    session_workflow_id,
)
from tests.integration.conftest import Harness
from tests.integration.plans import make_plan, run_plan

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command reads its server and queue from the environment, like an operator's."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", harness.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", harness.client.namespace)
    monkeypatch.setenv("DPLAN_TASK_QUEUE", harness.task_queue)


async def dplan(*argv: str) -> int:
    # The command runs its own event loop (asyncio.run); the harness's worker needs this
    # one to keep running, so the command goes to a thread.
    return await asyncio.to_thread(main, list(argv))


@pytest.mark.usefixtures("cli_env")
async def test_replay_fetches_the_plan_and_its_children_then_saved_files_replay(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = make_plan([("a", "Inspect", []), ("b", "Write [turns:2]", ["a"]), ("c", "Docs", [])])
    _, failure = await run_plan(harness.client, plan, harness.task_queue)
    assert failure is None
    saved = tmp_path / "saved"

    assert await dplan("replay", plan.id, "--children", "--save", str(saved)) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    replayed = [line.split()[1] for line in lines[:-1]]
    assert all(line.startswith("ok    ") for line in lines[:-1]), out
    # The plan first, then its children in the order the plan started them.
    assert replayed[0] == plan.id
    assert sorted(replayed[1:]) == [f"{plan.id}/a", f"{plan.id}/b", f"{plan.id}/c"]
    assert lines[-1] == "replayed 4 runs of 4 workflows: 4 ok, 0 failed"
    assert f"saved 4 histories to {saved}" in err

    names = sorted(p.name for p in saved.iterdir())
    prefix = plan.id
    assert names == [
        f"{prefix}.0.json",
        f"{prefix}__a.0.json",
        f"{prefix}__b.0.json",
        f"{prefix}__c.0.json",
    ]
    files = [arg for name in names for arg in ("--file", str(saved / name))]
    assert await dplan("replay", *files) == 0
    out_files, _ = capsys.readouterr()
    # The same runs, with the same ids and event counts, read back from the files.
    assert sorted(out_files.splitlines()[:-1]) == sorted(lines[:-1])


@pytest.mark.usefixtures("cli_env")
async def test_without_children_only_the_workflow_itself_is_replayed(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = make_plan([("a", "Inspect", [])])
    await run_plan(harness.client, plan, harness.task_queue)

    assert await dplan("replay", plan.id) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[-1] == "replayed 1 runs of 1 workflows: 1 ok, 0 failed"
    assert out.split()[1] == plan.id


@pytest.mark.usefixtures("cli_env")
async def test_every_run_of_a_continued_as_new_workflow_is_replayed(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    handle = await harness.client.start_workflow(
        "SessionWorkflow",
        SessionInput(session_id=sid, agent="ask", max_messages_per_run=1),
        id=session_workflow_id(sid),
        task_queue=harness.task_queue,
        result_type=SessionState,
    )
    for text in ("First question", "Second question"):
        await handle.execute_update(
            "send_message", SendMessageInput(text=text), result_type=SendMessageResult
        )
    await handle.signal("end")
    await handle.result()

    assert await dplan("replay", handle.id) == 0
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert lines[-1] == "replayed 3 runs of 1 workflows: 3 ok, 0 failed"
    run_ids = [line.split()[3] for line in lines[:-1]]
    assert run_ids[-1] == (await handle.describe()).run_id  # oldest first, latest last
    assert len(set(run_ids)) == 3
    # A child's runs are followed forward from the run its parent started: same chain.
    forward = await runs_forward(harness.client, handle.id, run_ids[0])
    assert [r.run_id for r in forward] == run_ids

    # One run alone keeps its place in the chain in the saved file's name.
    saved = tmp_path / "one"
    assert await dplan("replay", handle.id, "--run-id", run_ids[1], "--save", str(saved)) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[-1] == "replayed 1 runs of 1 workflows: 1 ok, 0 failed"
    assert [p.name for p in saved.iterdir()] == [f"session__{sid}.1.json"]


@pytest.mark.usefixtures("cli_env")
async def test_an_unknown_workflow_is_a_clear_error(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await dplan("replay", "no-such-plan-42", "--children") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        f"error: no workflow with id 'no-such-plan-42' in namespace '{harness.client.namespace}'"
    )


async def test_an_unreachable_server_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    assert await dplan("replay", "any-plan") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach a Temporal server at 127.0.0.1:1: "), err
