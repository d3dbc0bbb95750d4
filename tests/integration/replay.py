"""Replay recorded histories against the current workflow code.

A change that makes workflow code non-deterministic (a new activity call in the middle, a
different order of commands) makes these replays fail, before it can break a running plan.
"""

from __future__ import annotations

from collections.abc import Iterable

from temporalio.client import Client, WorkflowHistory

from durable_plans.cli.replay_command import RunHistory, replay_runs


async def assert_replays(client: Client, workflow_ids: Iterable[str]) -> int:
    """Replay every run of each workflow id, following continue-as-new back to the first
    run; returns how many runs were replayed."""
    runs = [run for workflow_id in workflow_ids for run in await _runs(client, workflow_id)]
    await _replay(runs)
    return len(runs)


async def replayed_runs(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """``assert_replays`` for one workflow id, returning the histories it replayed (newest
    run first), for a test that checks them too without fetching them again."""
    runs = await _runs(client, workflow_id)
    await _replay(runs)
    return [run.history for run in runs]


async def _runs(client: Client, workflow_id: str) -> list[RunHistory]:
    """Every run of ``workflow_id``, newest first (``run_index`` 0 is the newest)."""
    runs: list[RunHistory] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(RunHistory(workflow_id, len(runs), history))
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            return runs


async def _replay(runs: list[RunHistory]) -> None:
    """All of ``runs`` on one replay worker, as ``dplan replay`` replays a tree (a worker
    per history cost twice the CPU); the first that does not replay fails the test."""
    for outcome in await replay_runs(runs):
        run = outcome.run
        assert outcome.failure is None, (
            f"{run.workflow_id} (run {run.run_id}, {run.run_index} back from the latest) "
            f"does not replay: {outcome.failure!r}"
        )
