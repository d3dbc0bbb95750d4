"""What plans left in the session store, read from outside the worker that wrote it.

Tests hold the store against the report (a subtask's branch holds its tools' answers and
its final answer) and, after a worker was killed, against the calls made again (an
answer already stored must never be asked for twice).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from durable_plans.domain.models import Message, PlanReport
from durable_plans.session_store import SessionNotFound, SessionStore
from durable_plans.session_store.factory import open_session_store
from tests.integration.plans import by_id


@asynccontextmanager
async def opened_store(target: Path | str) -> AsyncIterator[SessionStore]:
    """The store at ``target`` (a SQLite path or any store target) for the block: a
    connection of its own, as another process would have, closed after."""
    store = await open_session_store(str(target))
    try:
        yield store
    finally:
        await store.close()


async def subtask_messages(store: SessionStore, report: PlanReport, subtask: str) -> list[Message]:
    """The branch session of ``subtask``: its prompt, the model's turns and its tools'
    answers, in order."""
    session = by_id(report)[subtask].session_id
    assert session, f"subtask {subtask!r} has no session in the report: {report}"
    return await store.read(session)


def tool_answers(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if m.role == "tool"]


async def stored_answers(store_path: Path, branches: Mapping[str, str]) -> dict[str, int]:
    """How many of its own answers each subtask's branch holds (task text -> count).

    Read right after a SIGKILL and before the next worker starts, it is exactly what the
    dead worker (and those before it) had stored: those answers must never be asked for
    again."""
    async with opened_store(store_path) as store:
        counts: dict[str, int] = {}
        for task, branch_id in branches.items():
            try:
                branch = await store.read(branch_id)
            except SessionNotFound:
                branch = []
            users = [i for i, m in enumerate(branch) if m.role == "user" and m.content == task]
            own = branch[users[-1] + 1 :] if users else []
            counts[task] = sum(1 for m in own if m.role == "assistant")
        return counts
