"""Replay recorded histories against the current workflow code.

A change that makes workflow code non-deterministic (a new activity call in the middle, a
different order of commands) makes these replays fail, before it can break a running plan.
"""

from __future__ import annotations

from collections.abc import Iterable

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from durable_plans.cli.replay_command import make_replayer, replay_history


async def assert_replays(client: Client, workflow_ids: Iterable[str]) -> int:
    """Replay every run of each workflow id, following continue-as-new back to the first
    run; returns how many runs were replayed."""
    replayer = make_replayer()
    replayed = 0
    for workflow_id in workflow_ids:
        replayed += len(await _replay_runs(client, workflow_id, replayer))
    return replayed


async def replayed_runs(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """``assert_replays`` for one workflow id, returning the histories it replayed (newest
    run first), for a test that checks them too without fetching them again."""
    return await _replay_runs(client, workflow_id, make_replayer())


async def _replay_runs(
    client: Client, workflow_id: str, replayer: Replayer
) -> list[WorkflowHistory]:
    histories: list[WorkflowHistory] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        result = await replay_history(replayer, history)
        assert result.replay_failure is None, (
            f"{workflow_id} (run {run_id or 'latest'}) does not replay: {result.replay_failure!r}"
        )
        histories.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            return histories
