"""SQLite session store: the zero-set-up default, one file shared by the workers of a host.

Concurrency: the file is in WAL mode, so readers never block the writer or each other.
Every write runs in ``BEGIN IMMEDIATE``, which takes SQLite's single write lock up front;
that is what serializes writers of a session (and makes read-then-insert of ``seq`` safe)
across store instances and processes, with ``busy_timeout`` turning contention into a
wait. Inside one store an ``asyncio.Lock`` queues writers before they reach SQLite, so
tasks of one process wait on the event loop instead of in SQLite's sleep-and-retry busy
handler. Reads use a small pool of connections (each aiosqlite connection owns a thread).

Layout: one row per message (compact JSON body plus ``seq``/``id``/``is_result``) and the
same row shape for snapshot copies, so snapshot and restore are ``INSERT ... SELECT``
inside the database; restore rewrites only rows that differ from the snapshot, which makes
the usual case (a subtask appended a few turns to a long history) touch a few rows.

Usage ledger (schema version 2): see ``_SCHEMA_V2``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from durable_plans.domain.models import Message, SessionMeta, Usage
from durable_plans.session_store import _codec
from durable_plans.session_store.base import (
    SessionNotFound,
    SessionStoreError,
    SnapshotNotFound,
    SnapshotSessionMismatch,
)

SCHEMA_VERSION = 2
_BUSY_TIMEOUT_MS = 30_000

_PRAGMAS = (
    f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}",
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
)

# Statements, not a script: executescript() would COMMIT the guarding transaction.
# snapshot_messages has no foreign key to snapshots (as in the PostgreSQL store, where the
# per-row check made big snapshots 2.5x slower); snapshot() and delete_snapshot() keep
# parent and rows consistent within one transaction.
_SCHEMA_V1 = (
    """CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        meta TEXT NOT NULL
    )""",
    """CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        id TEXT NOT NULL,
        is_result INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq),
        UNIQUE (session_id, id)
    )""",
    """CREATE TABLE snapshots (
        snapshot_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
        message_count INTEGER NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX snapshots_by_session ON snapshots(session_id)",
    """CREATE TABLE snapshot_messages (
        snapshot_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        id TEXT NOT NULL,
        is_result INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (snapshot_id, seq)
    )""",
)

# Version 2: the usage ledger. One row per charge, keyed (root, charge_id) so a retried
# charge is an ``ON CONFLICT DO NOTHING``; the primary key's root prefix is the index by
# root. Next to it a running total per root, updated in the same transaction as the ledger
# insert, so reading a total is one row whatever the ledger's length, and under the write
# lock every charge returns the exact total right after it. No foreign key to sessions:
# a root may be charged before (or without) its session row, and deleting a session must
# not refund the tree's spending. IF NOT EXISTS keeps the step safe to re-run.
_SCHEMA_V2 = (
    """CREATE TABLE IF NOT EXISTS usage_ledger (
        root_session_id TEXT NOT NULL,
        charge_id TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (root_session_id, charge_id)
    )""",
    """CREATE TABLE IF NOT EXISTS usage_totals (
        root_session_id TEXT PRIMARY KEY,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL
    )""",
)

# Steps applied in order to bring a file from ``version - 1`` to ``version``.
_MIGRATIONS: dict[int, tuple[str, ...]] = {1: _SCHEMA_V1, 2: _SCHEMA_V2}

_INSERT_CHARGE = (
    "INSERT INTO usage_ledger "
    "(root_session_id, charge_id, prompt_tokens, completion_tokens, cost_usd, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (root_session_id, charge_id) DO NOTHING"
)
_ADD_TO_TOTALS = """
    INSERT INTO usage_totals (root_session_id, prompt_tokens, completion_tokens, cost_usd)
    VALUES (?, ?, ?, ?)
    ON CONFLICT (root_session_id) DO UPDATE SET
        prompt_tokens = prompt_tokens + excluded.prompt_tokens,
        completion_tokens = completion_tokens + excluded.completion_tokens,
        cost_usd = cost_usd + excluded.cost_usd
"""
_READ_TOTALS = (
    "SELECT prompt_tokens, completion_tokens, cost_usd FROM usage_totals WHERE root_session_id = ?"
)

_INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, seq, id, is_result, body) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (session_id, id) DO NOTHING"
)
_READ_BODIES = "SELECT body FROM messages WHERE session_id = ? ORDER BY seq"
_NEXT_SEQ = "SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE session_id = ?"

# Restore as a diff: keep rows identical to the snapshot's row at the same seq, delete the
# rest, then insert the snapshot rows whose seq is now free. The result is exactly the
# snapshot, and a history that only grew since the snapshot costs a handful of row writes.
_RESTORE_DELETE = """
    DELETE FROM messages
    WHERE session_id = :session AND NOT EXISTS (
        SELECT 1 FROM snapshot_messages AS s
        WHERE s.snapshot_id = :snapshot AND s.seq = messages.seq
          AND s.id = messages.id AND s.body = messages.body)
"""
_RESTORE_INSERT = """
    INSERT INTO messages (session_id, seq, id, is_result, body)
    SELECT :session, s.seq, s.id, s.is_result, s.body FROM snapshot_messages AS s
    WHERE s.snapshot_id = :snapshot AND NOT EXISTS (
        SELECT 1 FROM messages AS m WHERE m.session_id = :session AND m.seq = s.seq)
    ORDER BY s.seq
"""
_LAST_NEW_RESULT = """
    SELECT id, body FROM messages
    WHERE session_id = :session AND is_result = 1
      AND id NOT IN (SELECT id FROM snapshot_messages WHERE snapshot_id = :snapshot)
    ORDER BY seq DESC LIMIT 1
"""


class SqliteSessionStore:
    """``SessionStore`` on one SQLite file. Usable right after construction (the file and
    schema are created on first use); ``await SqliteSessionStore.open(path)`` does that
    eagerly so configuration errors surface at start-up."""

    def __init__(self, path: str | Path, *, readers: int = 4) -> None:
        if str(path) == ":memory:" or str(path).startswith("file:"):
            raise ValueError(
                "SqliteSessionStore needs a file path (connections must share one database)"
            )
        if readers < 1:
            raise ValueError("readers must be at least 1")
        self._path = Path(path)
        self._max_readers = readers
        self._writer: aiosqlite.Connection | None = None
        self._idle_readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._connections: list[aiosqlite.Connection] = []
        self._reader_count = 0
        self._write_lock = asyncio.Lock()
        self._open_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, path: str | Path, *, readers: int = 4) -> SqliteSessionStore:
        store = cls(path, readers=readers)
        await store._ensure_open()
        return store

    @property
    def path(self) -> Path:
        return self._path

    # ----------------------------------------------------------------- connections

    async def _connect(self) -> aiosqlite.Connection:
        # isolation_level=None: the sqlite3 module must not open transactions behind our
        # back; every transaction here is an explicit BEGIN.
        conn = await aiosqlite.connect(
            self._path, isolation_level=None, timeout=_BUSY_TIMEOUT_MS / 1000
        )
        try:
            for pragma in _PRAGMAS:
                await conn.execute(pragma)
        except BaseException:
            await conn.close()
            raise
        self._connections.append(conn)
        return conn

    async def _ensure_open(self) -> aiosqlite.Connection:
        if self._closed:
            raise SessionStoreError("session store is closed")
        if self._writer is not None:
            return self._writer
        async with self._open_lock:
            if self._writer is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                writer = await self._connect()
                try:
                    await self._initialize(writer)
                except BaseException:
                    self._connections.remove(writer)
                    await writer.close()
                    raise
                self._writer = writer
        return self._writer

    async def _initialize(self, conn: aiosqlite.Connection) -> None:
        async def attempt() -> None:
            await conn.execute("PRAGMA journal_mode=WAL")
            await self._migrate(conn)

        await _while_locked(attempt)

    async def _migrate(self, conn: aiosqlite.Connection) -> None:
        # Under the write lock so two processes opening a fresh file create it once.
        await conn.execute("BEGIN IMMEDIATE")
        try:
            version = int((await _one(conn, "PRAGMA user_version", ()))[0])
            if version > SCHEMA_VERSION:
                raise SessionStoreError(
                    f"{self._path} has schema version {version}; this code knows up to "
                    f"{SCHEMA_VERSION} (upgrade durable-plans)"
                )
            # Step by step, all in this one transaction: a file of any older version ends
            # up exactly like a fresh one, or (on error) untouched.
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[step]:
                    await conn.execute(statement)
            if version < SCHEMA_VERSION:
                await conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            await conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                await conn.execute("ROLLBACK")
            raise

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        conn = await self._ensure_open()
        async with self._write_lock:
            await _while_locked(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                yield conn
                await conn.execute("COMMIT")
            except BaseException:
                # SQLite rolls some failures back by itself; a second ROLLBACK would raise
                # "no transaction is active" and hide the original error.
                if conn.in_transaction:
                    await conn.execute("ROLLBACK")
                raise

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        await self._ensure_open()
        try:
            conn = self._idle_readers.get_nowait()
        except asyncio.QueueEmpty:
            if self._reader_count < self._max_readers:
                self._reader_count += 1
                try:
                    conn = await self._connect()
                except BaseException:
                    self._reader_count -= 1
                    raise
            else:
                conn = await self._idle_readers.get()
        try:
            yield conn
        finally:
            self._idle_readers.put_nowait(conn)

    async def close(self) -> None:
        self._closed = True
        connections, self._connections = self._connections, []
        self._writer = None
        for conn in connections:
            await conn.close()

    # ----------------------------------------------------------------- sessions

    async def create_session(self, meta: SessionMeta) -> SessionMeta:
        async with self._write() as conn:
            await conn.execute(
                "INSERT INTO sessions (session_id, meta) VALUES (?, ?) "
                "ON CONFLICT (session_id) DO NOTHING",
                (meta.session_id, _codec.encode_meta(meta)),
            )
            row = await _one(
                conn, "SELECT meta FROM sessions WHERE session_id = ?", (meta.session_id,)
            )
        return _codec.decode_meta(row[0])

    async def get_session(self, session_id: str) -> SessionMeta:
        async with self._read() as conn:
            row = await _maybe_one(
                conn, "SELECT meta FROM sessions WHERE session_id = ?", (session_id,)
            )
        if row is None:
            raise SessionNotFound(session_id)
        return _codec.decode_meta(row[0])

    async def update_session(self, meta: SessionMeta) -> None:
        async with self._write() as conn:
            cursor = await conn.execute(
                "UPDATE sessions SET meta = ? WHERE session_id = ?",
                (_codec.encode_meta(meta), meta.session_id),
            )
            if cursor.rowcount == 0:
                raise SessionNotFound(meta.session_id)

    # ----------------------------------------------------------------- messages

    async def append(self, session_id: str, messages: Sequence[Message]) -> int:
        rows = _codec.rows_for_append(messages)
        async with self._write() as conn:
            await _require_session(conn, session_id)
            if not rows:
                return 0
            start = int((await _one(conn, _NEXT_SEQ, (session_id,)))[0])
            cursor = await conn.executemany(
                _INSERT_MESSAGE,
                [(session_id, start + i, r.id, r.is_result, r.body) for i, r in enumerate(rows)],
            )
            return cursor.rowcount

    async def read(self, session_id: str) -> list[Message]:
        async with self._read() as conn:
            rows = await conn.execute_fetchall(_READ_BODIES, (session_id,))
            if not rows:
                await _require_session(conn, session_id)
        return _codec.decode_all(r[0] for r in rows)

    async def count(self, session_id: str) -> int:
        async with self._read() as conn:
            row = await _maybe_one(
                conn,
                "SELECT (SELECT COUNT(*) FROM messages WHERE session_id = s.session_id) "
                "FROM sessions AS s WHERE s.session_id = ?",
                (session_id,),
            )
        if row is None:
            raise SessionNotFound(session_id)
        return int(row[0])

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        rows = _codec.rows_for_replace(messages)
        async with self._write() as conn:
            await _require_session(conn, session_id)
            await conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            await conn.executemany(
                _INSERT_MESSAGE,
                [(session_id, i, r.id, r.is_result, r.body) for i, r in enumerate(rows)],
            )

    # ----------------------------------------------------------------- snapshots

    async def snapshot(self, session_id: str, snapshot_id: str) -> int:
        async with self._write() as conn:
            await _require_session(conn, session_id)
            existing = await _maybe_one(
                conn,
                "SELECT session_id, message_count FROM snapshots WHERE snapshot_id = ?",
                (snapshot_id,),
            )
            if existing is not None:
                if existing[0] != session_id:
                    raise SnapshotSessionMismatch(snapshot_id, existing[0], session_id)
                return int(existing[1])
            await conn.execute(
                "INSERT INTO snapshots (snapshot_id, session_id, message_count, created_at) "
                "VALUES (?, ?, (SELECT COUNT(*) FROM messages WHERE session_id = ?), ?)",
                (snapshot_id, session_id, session_id, time.time()),
            )
            cursor = await conn.execute(
                "INSERT INTO snapshot_messages (snapshot_id, seq, id, is_result, body) "
                "SELECT ?, seq, id, is_result, body FROM messages WHERE session_id = ?",
                (snapshot_id, session_id),
            )
            return cursor.rowcount

    async def restore(
        self, session_id: str, snapshot_id: str, *, keep_last_result: bool = False
    ) -> list[Message]:
        keys = {"session": session_id, "snapshot": snapshot_id}
        async with self._write() as conn:
            await _require_session(conn, session_id)
            owner = await _maybe_one(
                conn, "SELECT session_id FROM snapshots WHERE snapshot_id = ?", (snapshot_id,)
            )
            if owner is None:
                raise SnapshotNotFound(snapshot_id)
            if owner[0] != session_id:
                raise SnapshotSessionMismatch(snapshot_id, owner[0], session_id)
            kept = await _maybe_one(conn, _LAST_NEW_RESULT, keys) if keep_last_result else None
            await conn.execute(_RESTORE_DELETE, keys)
            await conn.execute(_RESTORE_INSERT, keys)
            if kept is not None:
                start = int((await _one(conn, _NEXT_SEQ, (session_id,)))[0])
                await conn.execute(_INSERT_MESSAGE, (session_id, start, kept[0], True, kept[1]))
            rows = await conn.execute_fetchall(_READ_BODIES, (session_id,))
        return _codec.decode_all(r[0] for r in rows)

    async def read_snapshot(self, snapshot_id: str) -> list[Message]:
        async with self._read() as conn:
            rows = await conn.execute_fetchall(
                "SELECT body FROM snapshot_messages WHERE snapshot_id = ? ORDER BY seq",
                (snapshot_id,),
            )
            if (
                not rows
                and await _maybe_one(
                    conn, "SELECT 1 FROM snapshots WHERE snapshot_id = ?", (snapshot_id,)
                )
                is None
            ):
                raise SnapshotNotFound(snapshot_id)
        return _codec.decode_all(r[0] for r in rows)

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        async with self._write() as conn:
            cursor = await conn.execute(
                "DELETE FROM snapshots WHERE snapshot_id = ?", (snapshot_id,)
            )
            await conn.execute(
                "DELETE FROM snapshot_messages WHERE snapshot_id = ?", (snapshot_id,)
            )
            return cursor.rowcount > 0

    async def has_snapshot(self, snapshot_id: str) -> bool:
        async with self._read() as conn:
            row = await _maybe_one(
                conn, "SELECT 1 FROM snapshots WHERE snapshot_id = ?", (snapshot_id,)
            )
        return row is not None

    # ----------------------------------------------------------------- usage ledger

    async def charge(self, root_session_id: str, charge_id: str, usage: Usage) -> Usage:
        _codec.check_charge(root_session_id, charge_id, usage)
        # BEGIN IMMEDIATE serializes chargers across instances and processes, so the ledger
        # insert, the totals update and the read-back form one step no other charge splits.
        async with self._write() as conn:
            cursor = await conn.execute(
                _INSERT_CHARGE,
                (
                    root_session_id,
                    charge_id,
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.cost_usd,
                    time.time(),
                ),
            )
            if cursor.rowcount == 1:
                await conn.execute(
                    _ADD_TO_TOTALS,
                    (root_session_id, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd),
                )
            row = await _maybe_one(conn, _READ_TOTALS, (root_session_id,))
        return _totals(row)

    async def total_usage(self, root_session_id: str) -> Usage:
        async with self._read() as conn:
            row = await _maybe_one(conn, _READ_TOTALS, (root_session_id,))
        return _totals(row)


# --------------------------------------------------------------------- helpers


async def _while_locked(attempt: Callable[[], Awaitable[object]]) -> None:
    """Run ``attempt``, retrying while SQLite reports the database locked.

    The busy timeout covers ordinary lock waits, but while a fresh file changes journal
    mode, or a WAL index is being rebuilt after the last connection closed, SQLite answers
    "database is locked" at once without calling the busy handler. Workers starting
    together hit exactly that, so the attempt is retried here up to the same timeout.
    Only statements that leave no transaction open when they fail are retried.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            await attempt()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)


# aiosqlite accepts a sequence for ``?`` and a mapping for ``:name`` placeholders.
_Params = Iterable[Any]


async def _maybe_one(conn: aiosqlite.Connection, sql: str, params: _Params) -> sqlite3.Row | None:
    # One trip to the connection's thread (execute, fetch and close there), not three:
    # each trip costs the event loop a wake-up, and writes make several of these calls.
    rows = await conn.execute_fetchall(sql, params)
    return next(iter(rows), None)


async def _one(conn: aiosqlite.Connection, sql: str, params: _Params) -> sqlite3.Row:
    row = await _maybe_one(conn, sql, params)
    if row is None:  # pragma: no cover - only for queries that always yield a row
        raise SessionStoreError(f"query returned no row: {sql}")
    return row


def _totals(row: sqlite3.Row | None) -> Usage:
    return Usage() if row is None else _codec.usage_from_totals(row[0], row[1], row[2])


async def _require_session(conn: aiosqlite.Connection, session_id: str) -> None:
    if await _maybe_one(conn, "SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)) is None:
        raise SessionNotFound(session_id)
