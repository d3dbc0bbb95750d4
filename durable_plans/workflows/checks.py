"""Checks in workflows: run a subtask's or a plan's check commands, one activity each.

Every command is an activity (``run_check``) whose result is recorded in history: a
replay reads it, a crash after it never runs it again, and a worker lost while it runs
has it run again by the next worker (it is idempotent: a throwaway copy of the tree).
Commands run in order and a round stops at the first that fails.

Nothing here runs unless a ``check`` is set: runs without one issue no command for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_plans.domain.checks import (
        ACT_APPEND_CHECK_FEEDBACK,
        ACT_RUN_CHECK,
        DEFAULT_CHECK_TIMEOUT_S,
        CheckFeedbackInput,
        CheckInput,
        CheckRun,
        shown,
    )
    from durable_plans.domain.tools_config import SandboxPolicy
    from durable_plans.domain.workspace_refs import WorkspaceRef

from durable_plans.workflows import policies
from durable_plans.workflows.store_ops import store_op


async def run_check_round(
    workspace: WorkspaceRef,
    commands: Sequence[Sequence[str]],
    round_: int,
    *,
    on_run: Callable[[CheckRun], None] | None = None,
    on_start: Callable[[Sequence[str]], None] | None = None,
    timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
    sandbox: SandboxPolicy | None = None,
) -> CheckRun | None:
    """Run ``commands`` on ``workspace``'s head in order, in ``sandbox`` (an agent's; None:
    offline); the first that failed, or None when every one passed. ``on_run`` sees each
    run as it is recorded."""
    for argv in commands:
        if on_start is not None:
            on_start(argv)
        run: CheckRun = await workflow.execute_activity(
            ACT_RUN_CHECK,
            CheckInput(
                workspace=workspace,
                argv=tuple(argv),
                round=round_,
                timeout_s=timeout_s,
                sandbox=sandbox,
            ),
            result_type=CheckRun,
            start_to_close_timeout=policies.check_start_to_close(timeout_s),
            heartbeat_timeout=policies.SHORT_HEARTBEAT,
            retry_policy=policies.check_retry(),
            summary=f"check (round {round_}): {shown(argv)}"[:200],
        )
        if on_run is not None:
            on_run(run)
        if not run.passed:
            return run
    return None


async def tell_the_model(session_id: str, scope: str, round_: int, text: str) -> None:
    """A failed check, as a user message in the subtask's conversation."""
    await store_op(
        ACT_APPEND_CHECK_FEEDBACK,
        CheckFeedbackInput(session_id=session_id, scope=scope, round=round_, text=text),
        result_type=int,
    )
