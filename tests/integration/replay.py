"""Replay recorded histories against the current workflow code.

A change that makes workflow code non-deterministic (a new activity call in the middle, a
different order of commands) makes these replays fail, before it can break a running plan.
"""

from __future__ import annotations

from collections.abc import Iterable

from temporalio.client import Client

from durable_plans.cli.replay_command import make_replayer


async def assert_replays(client: Client, workflow_ids: Iterable[str]) -> int:
    """Replay every run of each workflow id, following continue-as-new back to the first
    run; returns how many runs were replayed."""
    replayer = make_replayer()
    replayed = 0
    for workflow_id in workflow_ids:
        run_id: str | None = None
        while True:
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert result.replay_failure is None, (
                f"{workflow_id} (run {run_id or 'latest'}) does not replay: "
                f"{result.replay_failure!r}"
            )
            replayed += 1
            started = history.events[0].workflow_execution_started_event_attributes
            run_id = started.continued_execution_run_id or None
            if run_id is None:
                break
    return replayed
