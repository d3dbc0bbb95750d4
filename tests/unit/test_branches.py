"""Branch build and close (``activities.sessions``) on a real SQLite store, in both orders.

The first LLM call of a subtask builds its branch; a cancelled subtask's workflow closes
the branch without waiting for that call, so a close may land before or during the build.
Either way no snapshot may be left behind and a closed branch must stay closed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_plans.activities.sessions import begin_branch, close_branch
from durable_plans.domain.contracts import BeginSubtaskInput, EndSubtaskInput
from durable_plans.domain.models import Message, SessionMeta, Subtask
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store

BASE = "base-1"
BRANCH = "base-1:run-1:a:branch"
SNAP = "base-1:run-1:a:snap"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_session_store(str(tmp_path / "sessions.db"))
    await opened.create_session(SessionMeta(session_id=BASE))
    await opened.append(
        BASE,
        [
            Message(id="u1", role="user", content="earlier question"),
            Message(id="a1", role="assistant", content="earlier answer"),
        ],
    )
    try:
        yield opened
    finally:
        await opened.close()


def begin() -> BeginSubtaskInput:
    return BeginSubtaskInput(
        plan_run_id="run-1",
        subtask=Subtask(id="a", description="do a"),
        base_session_id=BASE,
        branch_session_id=BRANCH,
        snapshot_id=SNAP,
        system_prompt="you are a coder",
        root_session_id=BASE,
    )


def end() -> EndSubtaskInput:
    return EndSubtaskInput(
        base_session_id=BASE, branch_session_id=BRANCH, snapshot_id=SNAP, succeeded=False
    )


async def test_build_then_close(store: SessionStore) -> None:
    built = await begin_branch(store, begin())
    assert built.message_count == 4  # system prompt, the two earlier messages, the task
    assert await store.has_snapshot(SNAP)
    again = await begin_branch(store, begin())  # a retried first call keeps the first build
    assert again.message_count == 4 and await store.count(BRANCH) == 4
    await close_branch(store, end())
    await close_branch(store, end())  # idempotent
    assert (await store.get_session(BRANCH)).ended
    assert not await store.has_snapshot(SNAP)
    assert await store.count(BASE) == 2  # the base is untouched


async def test_a_close_before_the_build_keeps_the_branch_closed_and_empty(
    store: SessionStore,
) -> None:
    await close_branch(store, end())
    late = await begin_branch(store, begin())
    assert late.message_count == 0 and await store.count(BRANCH) == 0
    assert (await store.get_session(BRANCH)).ended
    assert not await store.has_snapshot(SNAP)
    assert await store.count(BASE) == 2
