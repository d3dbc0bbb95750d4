"""The SQLite store runs on the event loop, and must never stall it.

Most of its operations are SQLite calls made right on the loop
(``session_store/sqlite.py``); what could block there is kept off it: a write lock held
by another process is waited for with ``asyncio.sleep``, not in SQLite's busy handler;
writes that copy or delete a whole session run in a thread; and checkpoints (which sync
files to disk) run in a thread, every ``_CHECKPOINT_EVERY`` commits, since the automatic
checkpoint is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_plans._errors import SessionStoreError
from durable_plans.domain.models import Message, SessionMeta
from durable_plans.session_store import sqlite as sqlite_store
from durable_plans.session_store.sqlite import SqliteSessionStore


def _message(i: int) -> Message:
    return Message(id=f"m{i}", role="user", content=f"message {i}")


@contextlib.contextmanager
def _write_lock_held_elsewhere(path: Path, *, then: str = "COMMIT") -> Iterator[None]:
    """Another connection (as another process would) holds the file's write lock."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute(then)
        other.close()


async def test_a_write_waits_for_another_writer_without_stalling_the_loop(tmp_path: Path) -> None:
    store = await SqliteSessionStore.open(tmp_path / "s.db")
    await store.create_session(SessionMeta(session_id="s"))
    with _write_lock_held_elsewhere(tmp_path / "s.db"):
        append = asyncio.create_task(store.append("s", [_message(1)]))
        ticks = 0
        for _ in range(5):
            await asyncio.sleep(0.02)  # returns only if the loop is free
            ticks += 1
        assert not append.done()
        # Reads go on meanwhile: WAL readers never wait for the writer.
        assert await store.count("s") == 0
    assert await asyncio.wait_for(append, 10) == 1
    assert ticks == 5
    assert [m.id for m in await store.read("s")] == ["m1"]
    await store.close()


async def test_a_snapshot_waits_for_another_writer_in_a_thread(tmp_path: Path) -> None:
    store = await SqliteSessionStore.open(tmp_path / "s.db")
    await store.create_session(SessionMeta(session_id="s"))
    await store.append("s", [_message(i) for i in range(3)])
    with _write_lock_held_elsewhere(tmp_path / "s.db"):
        snapshot = asyncio.create_task(store.snapshot("s", "snap"))
        for _ in range(5):
            await asyncio.sleep(0.02)  # the loop is free while the thread waits
        assert not snapshot.done()
        assert not await store.has_snapshot("snap")
    assert await asyncio.wait_for(snapshot, 10) == 3
    assert [m.id for m in await store.read_snapshot("snap")] == ["m0", "m1", "m2"]
    await store.close()


async def test_a_lock_held_past_the_timeout_fails_the_write_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "_BUSY_TIMEOUT_S", 0.2)
    store = await SqliteSessionStore.open(tmp_path / "s.db")
    await store.create_session(SessionMeta(session_id="s"))
    with (
        _write_lock_held_elsewhere(tmp_path / "s.db", then="ROLLBACK"),
        pytest.raises(sqlite3.OperationalError, match="locked"),
    ):
        await store.append("s", [_message(1)])
    assert await store.count("s") == 0
    await store.append("s", [_message(2)])  # the store is fine afterwards
    assert [m.id for m in await store.read("s")] == ["m2"]
    await store.close()


async def test_commits_are_checkpointed_into_the_database_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "_CHECKPOINT_EVERY", 4)
    path = tmp_path / "s.db"
    store = await SqliteSessionStore.open(path)
    await store.create_session(SessionMeta(session_id="s"))  # commit 1

    def in_database_file_alone() -> int:
        # The database file without its WAL: only what a checkpoint copied there.
        copy = tmp_path / "copy.db"
        shutil.copyfile(path, copy)
        conn = sqlite3.connect(copy)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
        finally:
            conn.close()
            copy.unlink()

    await store.append("s", [_message(1)])  # commit 2
    await store.append("s", [_message(2)])  # commit 3
    assert in_database_file_alone() == 0  # still only in the WAL
    await store.append("s", [_message(3)])  # commit 4: checkpointed before it returns
    assert in_database_file_alone() == 3
    await store.close()


async def test_a_closed_store_refuses_a_write_that_was_waiting(tmp_path: Path) -> None:
    store = await SqliteSessionStore.open(tmp_path / "s.db")
    await store.create_session(SessionMeta(session_id="s"))
    with _write_lock_held_elsewhere(tmp_path / "s.db", then="ROLLBACK"):
        append = asyncio.create_task(store.append("s", [_message(1)]))
        await asyncio.sleep(0.05)
        await store.close()
        with pytest.raises(SessionStoreError, match="closed"):
            await asyncio.wait_for(append, 10)


async def test_opening_waits_while_another_connection_has_the_file_to_itself(
    tmp_path: Path,
) -> None:
    # As right after a writer was SIGKILLed and another process recovers its WAL: the new
    # connection's very first statements (its pragmas) are answered "locked".
    path = tmp_path / "s.db"
    first = await SqliteSessionStore.open(path)
    await first.create_session(SessionMeta(session_id="s"))
    await first.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("COMMIT")  # the exclusive lock stays until the connection closes
    try:
        opening = asyncio.create_task(SqliteSessionStore.open(path))
        for _ in range(5):
            await asyncio.sleep(0.02)
        assert not opening.done()
    finally:
        holder.close()
    store = await asyncio.wait_for(opening, 10)
    assert (await store.get_session("s")).session_id == "s"
    await store.close()
