"""SQLite session store: the zero-set-up default, one file shared by the workers of a host.

Concurrency: the file is in WAL mode, so readers never block the writer or each other.
Every write runs in ``BEGIN IMMEDIATE``, which takes SQLite's single write lock up front;
that is what serializes writers of a session (and makes read-then-insert of ``seq`` safe)
across store instances and processes.

Where it runs: on the caller's event loop, on one connection, each operation whole (a
read, or a write transaction from BEGIN to COMMIT) with no await inside, so operations of
one store never interleave. A SQLite call on a file this size is so short that handing
each one to a thread costs far more than the call itself: one subtask's store traffic
(``bench.store_cpu``) costs less CPU this way than with aiosqlite (a thread hand-off per
statement) or with a thread per connection and one hand-off per operation. What could
block the loop is kept off it: the connection has no busy timeout, so a
lock held by another process is reported at once and waited out with ``asyncio.sleep``
(``_when_unlocked``); the writes that copy or delete a whole session (snapshot, restore,
replace, dropping a snapshot) run in a thread on a second connection (``_write_bulk``),
as do checkpoints, which sync the files to disk (``_checkpoint``). Reading a session is
done on the loop: decoding its messages there always cost more than the SQL.

Layout: one row per message (compact JSON body plus ``seq``/``id``/``is_result``) and the
same row shape for snapshot copies, so snapshot and restore are ``INSERT ... SELECT``
inside the database; restore rewrites only rows that differ from the snapshot, which makes
the usual case (a subtask appended a few turns to a long history) touch a few rows.

Usage ledger (schema version 2): see ``_SCHEMA_V2``. Waits of refused calls (version 3):
see ``_SCHEMA_V3``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from durable_plans._errors import (
    SessionNotFound,
    SessionStoreError,
    SessionStoreUnavailable,
    SnapshotNotFound,
    SnapshotSessionMismatch,
)
from durable_plans.domain.models import Message, SessionMeta, Usage
from durable_plans.session_store import _codec
from durable_plans.session_store.base import WaitTally

SCHEMA_VERSION = 3
_BUSY_TIMEOUT_MS = 30_000
_BUSY_TIMEOUT_S = _BUSY_TIMEOUT_MS / 1000

T = TypeVar("T")

_PRAGMAS = (
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA wal_autocheckpoint=0",  # see _checkpoint
)

# Statements, not a script: executescript() would COMMIT the guarding transaction.
# snapshot_messages has no foreign key to snapshots (as in the PostgreSQL store, where the
# per-row check made big snapshots several times slower); snapshot() and delete_snapshot()
# keep parent and rows consistent within one transaction.
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

# Version 3: the waits of refused LLM calls (``SessionStore.record_wait``): one row per
# refused attempt, keyed (call, entry) so a recorded attempt is an ``ON CONFLICT DO
# NOTHING``; a call has a few rows (at most its patience over the shortest wait), so its
# tally is a SUM over its primary key's prefix.
_SCHEMA_V3 = (
    """CREATE TABLE IF NOT EXISTS call_waits (
        call_id TEXT NOT NULL,
        entry TEXT NOT NULL,
        wait_s REAL NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (call_id, entry)
    )""",
)

# Steps applied in order to bring a file from ``version - 1`` to ``version``.
_MIGRATIONS: dict[int, tuple[str, ...]] = {1: _SCHEMA_V1, 2: _SCHEMA_V2, 3: _SCHEMA_V3}

_INSERT_WAIT = (
    "INSERT INTO call_waits (call_id, entry, wait_s, created_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (call_id, entry) DO NOTHING"
)
_READ_WAITS = "SELECT COUNT(*), COALESCE(SUM(wait_s), 0.0) FROM call_waits WHERE call_id = ?"

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

    def __init__(self, path: str | Path) -> None:
        if str(path) == ":memory:" or str(path).startswith("file:"):
            raise ValueError(
                "SqliteSessionStore needs a file path (connections must share one database)"
            )
        self._path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._bulk_conn: sqlite3.Connection | None = None  # used in a thread (_write_bulk)
        self._bulk_lock = asyncio.Lock()
        self._open_lock = asyncio.Lock()
        self._closed = False
        self._commits = 0

    @classmethod
    async def open(cls, path: str | Path) -> SqliteSessionStore:
        store = cls(path)
        await store._ensure_open()
        return store

    @property
    def path(self) -> Path:
        return self._path

    # ----------------------------------------------------------------- the connection

    async def _ensure_open(self) -> sqlite3.Connection:
        self._check_open()
        if self._conn is not None:
            return self._conn
        async with self._open_lock:
            if self._conn is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                # No busy timeout: a lock held elsewhere is reported at once, and
                # _when_unlocked waits for it off the loop.
                conn = await _connect(self._path, timeout_s=0)
                try:
                    await _when_unlocked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                    await _when_unlocked(lambda: _transaction(conn, self._migrate))
                    # The connection for bulk writes, used only in a worker thread (one
                    # at a time, _bulk_lock): there SQLite's own busy wait is harmless.
                    bulk = await _connect(self._path, timeout_s=_BUSY_TIMEOUT_S)
                except BaseException:
                    conn.close()
                    raise
                self._conn, self._bulk_conn = conn, bulk
                # Whatever an earlier process left in the WAL, and a new schema, go into
                # the database file now rather than some hundred commits later.
                await self._checkpoint()
        return self._conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        # In one BEGIN IMMEDIATE transaction (_transaction), so two processes opening a
        # fresh file create it once, and a file of any older version ends up exactly like
        # a fresh one, or (on error) untouched.
        version = int(_one(conn, "PRAGMA user_version", ())[0])
        if version > SCHEMA_VERSION:
            raise SessionStoreUnavailable(
                str(self._path),
                f"has schema version {version}; this code knows up to {SCHEMA_VERSION} "
                "(upgrade durable-plans)",
            )
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    async def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body`` in one ``BEGIN IMMEDIATE`` transaction; every ``_CHECKPOINT_EVERY``
        commits, a checkpoint (off the event loop) before returning."""
        conn = await self._ensure_open()
        result = await _when_unlocked(lambda: _transaction(conn, body), store=self)
        await self._committed()
        return result

    async def _write_bulk(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body`` in one ``BEGIN IMMEDIATE`` transaction, in a thread: for the writes
        whose work grows with a session (snapshot, restore, replace, dropping a snapshot),
        which copy or delete every row of it in SQL: for a long session far too long to
        hold the event loop (bench.sessions)."""
        await self._ensure_open()
        async with self._bulk_lock:
            self._check_open()
            bulk = self._bulk_conn
            assert bulk is not None
            result = await _when_unlocked(
                lambda: _transaction(bulk, body), store=self, in_thread=True
            )
        await self._committed()
        return result

    async def _committed(self) -> None:
        """Count a commit; every ``_CHECKPOINT_EVERY``-th is followed by a checkpoint."""
        self._commits += 1
        if self._commits % _CHECKPOINT_EVERY == 0:
            await self._checkpoint()

    async def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        conn = await self._ensure_open()
        return await _when_unlocked(lambda: body(conn), store=self)

    async def _checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file, in a thread: a
        checkpoint syncs both files to disk, which must not stall the event loop.
        PASSIVE never waits for a lock; one that cannot finish now finishes next time."""
        async with self._bulk_lock:
            bulk = self._bulk_conn
            if bulk is None:  # closed meanwhile
                return
            with contextlib.suppress(sqlite3.Error):
                await asyncio.to_thread(bulk.execute, "PRAGMA wal_checkpoint(PASSIVE)")

    def _check_open(self) -> None:
        if self._closed:
            raise SessionStoreError("session store is closed")

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        async with self._bulk_lock:  # a bulk write in its thread finishes first
            bulk, self._bulk_conn = self._bulk_conn, None
        if bulk is not None:
            bulk.close()

    # ----------------------------------------------------------------- sessions

    async def create_session(self, meta: SessionMeta) -> SessionMeta:
        encoded = _codec.encode_meta(meta)

        def body(conn: sqlite3.Connection) -> str:
            conn.execute(
                "INSERT INTO sessions (session_id, meta) VALUES (?, ?) "
                "ON CONFLICT (session_id) DO NOTHING",
                (meta.session_id, encoded),
            )
            return str(_one(conn, _READ_META, (meta.session_id,))[0])

        return _codec.decode_meta(await self._write(body))

    async def get_session(self, session_id: str) -> SessionMeta:
        row = await self._read(lambda conn: _maybe_one(conn, _READ_META, (session_id,)))
        if row is None:
            raise SessionNotFound(session_id)
        return _codec.decode_meta(row[0])

    async def update_session(self, meta: SessionMeta) -> None:
        encoded = _codec.encode_meta(meta)

        def body(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "UPDATE sessions SET meta = ? WHERE session_id = ?", (encoded, meta.session_id)
            )
            if cursor.rowcount == 0:
                raise SessionNotFound(meta.session_id)

        await self._write(body)

    # ----------------------------------------------------------------- messages

    async def append(self, session_id: str, messages: Sequence[Message]) -> int:
        rows = _codec.rows_for_append(messages)

        def body(conn: sqlite3.Connection) -> int:
            _require_session(conn, session_id)
            if not rows:
                return 0
            start = int(_one(conn, _NEXT_SEQ, (session_id,))[0])
            cursor = conn.executemany(
                _INSERT_MESSAGE,
                [(session_id, start + i, r.id, r.is_result, r.body) for i, r in enumerate(rows)],
            )
            return cursor.rowcount

        return await self._write(body)

    async def read(self, session_id: str) -> list[Message]:
        def body(conn: sqlite3.Connection) -> list[Any]:
            rows = conn.execute(_READ_BODIES, (session_id,)).fetchall()
            if not rows:
                _require_session(conn, session_id)
            return rows

        return _codec.decode_all(r[0] for r in await self._read(body))

    async def count(self, session_id: str) -> int:
        row = await self._read(
            lambda conn: _maybe_one(
                conn,
                "SELECT (SELECT COUNT(*) FROM messages WHERE session_id = s.session_id) "
                "FROM sessions AS s WHERE s.session_id = ?",
                (session_id,),
            )
        )
        if row is None:
            raise SessionNotFound(session_id)
        return int(row[0])

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        rows = _codec.rows_for_replace(messages)

        def body(conn: sqlite3.Connection) -> None:
            _require_session(conn, session_id)
            conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            conn.executemany(
                _INSERT_MESSAGE,
                [(session_id, i, r.id, r.is_result, r.body) for i, r in enumerate(rows)],
            )

        await self._write_bulk(body)

    # ----------------------------------------------------------------- snapshots

    async def snapshot(self, session_id: str, snapshot_id: str) -> int:
        def body(conn: sqlite3.Connection) -> int:
            _require_session(conn, session_id)
            existing = _maybe_one(
                conn,
                "SELECT session_id, message_count FROM snapshots WHERE snapshot_id = ?",
                (snapshot_id,),
            )
            if existing is not None:
                if existing[0] != session_id:
                    raise SnapshotSessionMismatch(snapshot_id, existing[0], session_id)
                return int(existing[1])
            conn.execute(
                "INSERT INTO snapshots (snapshot_id, session_id, message_count, created_at) "
                "VALUES (?, ?, (SELECT COUNT(*) FROM messages WHERE session_id = ?), ?)",
                (snapshot_id, session_id, session_id, time.time()),
            )
            cursor = conn.execute(
                "INSERT INTO snapshot_messages (snapshot_id, seq, id, is_result, body) "
                "SELECT ?, seq, id, is_result, body FROM messages WHERE session_id = ?",
                (snapshot_id, session_id),
            )
            return cursor.rowcount

        return await self._write_bulk(body)

    async def restore(
        self, session_id: str, snapshot_id: str, *, keep_last_result: bool = False
    ) -> list[Message]:
        keys = {"session": session_id, "snapshot": snapshot_id}

        def body(conn: sqlite3.Connection) -> list[Any]:
            _require_session(conn, session_id)
            owner = _maybe_one(
                conn, "SELECT session_id FROM snapshots WHERE snapshot_id = ?", (snapshot_id,)
            )
            if owner is None:
                raise SnapshotNotFound(snapshot_id)
            if owner[0] != session_id:
                raise SnapshotSessionMismatch(snapshot_id, owner[0], session_id)
            kept = _maybe_one(conn, _LAST_NEW_RESULT, keys) if keep_last_result else None
            conn.execute(_RESTORE_DELETE, keys)
            conn.execute(_RESTORE_INSERT, keys)
            if kept is not None:
                start = int(_one(conn, _NEXT_SEQ, (session_id,))[0])
                conn.execute(_INSERT_MESSAGE, (session_id, start, kept[0], True, kept[1]))
            return conn.execute(_READ_BODIES, (session_id,)).fetchall()

        return _codec.decode_all(r[0] for r in await self._write_bulk(body))

    async def read_snapshot(self, snapshot_id: str) -> list[Message]:
        def body(conn: sqlite3.Connection) -> list[Any]:
            rows = conn.execute(
                "SELECT body FROM snapshot_messages WHERE snapshot_id = ? ORDER BY seq",
                (snapshot_id,),
            ).fetchall()
            if not rows and _maybe_one(conn, _HAS_SNAPSHOT, (snapshot_id,)) is None:
                raise SnapshotNotFound(snapshot_id)
            return rows

        return _codec.decode_all(r[0] for r in await self._read(body))

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        def body(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute("DELETE FROM snapshots WHERE snapshot_id = ?", (snapshot_id,))
            conn.execute("DELETE FROM snapshot_messages WHERE snapshot_id = ?", (snapshot_id,))
            return cursor.rowcount > 0

        return await self._write_bulk(body)

    async def has_snapshot(self, snapshot_id: str) -> bool:
        row = await self._read(lambda conn: _maybe_one(conn, _HAS_SNAPSHOT, (snapshot_id,)))
        return row is not None

    # ----------------------------------------------------------------- usage ledger

    async def charge(self, root_session_id: str, charge_id: str, usage: Usage) -> Usage:
        _codec.check_charge(root_session_id, charge_id, usage)
        entry = (
            root_session_id,
            charge_id,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cost_usd,
            time.time(),
        )

        # BEGIN IMMEDIATE serializes chargers across instances and processes, so the ledger
        # insert, the totals update and the read-back form one step no other charge splits.
        def body(conn: sqlite3.Connection) -> Any:
            if conn.execute(_INSERT_CHARGE, entry).rowcount == 1:
                conn.execute(
                    _ADD_TO_TOTALS,
                    (root_session_id, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd),
                )
            return _maybe_one(conn, _READ_TOTALS, (root_session_id,))

        return _totals(await self._write(body))

    async def total_usage(self, root_session_id: str) -> Usage:
        row = await self._read(lambda conn: _maybe_one(conn, _READ_TOTALS, (root_session_id,)))
        return _totals(row)

    # ----------------------------------------------------------------- waits

    async def record_wait(self, call_id: str, entry: str, wait_s: float) -> WaitTally:
        _codec.check_wait(call_id, entry, wait_s)

        def body(conn: sqlite3.Connection) -> Any:
            conn.execute(_INSERT_WAIT, (call_id, entry, wait_s, time.time()))
            return _one(conn, _READ_WAITS, (call_id,))

        row = await self._write(body)
        return WaitTally(refusals=int(row[0]), waited_s=float(row[1]))

    async def waits(self, call_id: str) -> WaitTally:
        row = await self._read(lambda conn: _one(conn, _READ_WAITS, (call_id,)))
        return WaitTally(refusals=int(row[0]), waited_s=float(row[1]))


# --------------------------------------------------------------------- helpers

_READ_META = "SELECT meta FROM sessions WHERE session_id = ?"
_HAS_SNAPSHOT = "SELECT 1 FROM snapshots WHERE snapshot_id = ?"
# A PASSIVE checkpoint every this many of this store's commits (the connection's own
# automatic checkpoint is off: it would sync the files on the event loop).
_CHECKPOINT_EVERY = 256
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6


def unavailable_reason(path: Path, exc: BaseException) -> str | None:
    """Why the file at ``path`` could not be opened as a store, in words (None: a bug to
    let through). SQLite's own "unable to open database file" does not say why."""
    if path.is_dir():
        return "is a directory, not a database file"
    if isinstance(exc, FileExistsError | NotADirectoryError):  # creating its directory
        return f"cannot create the directory {exc.filename}: a file of that name is in the way"
    if isinstance(exc, OSError):
        what = f"the directory {exc.filename}" if exc.filename else "its directory"
        return f"cannot create {what}: {(exc.strerror or type(exc).__name__).lower()}"
    if not isinstance(exc, sqlite3.Error):
        return None
    if getattr(exc, "sqlite_errorname", "") == "SQLITE_CANTOPEN":
        if not path.exists() and not os.access(path.parent, os.W_OK | os.X_OK):
            return f"cannot create the file: no permission to write in {path.parent}"
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            return "no permission to read and write the file"
    return " ".join(str(exc).split()) or type(exc).__name__


async def _connect(path: Path, *, timeout_s: float) -> sqlite3.Connection:
    """A connection with our pragmas. isolation_level=None: the sqlite3 module must not
    open transactions behind our back (every transaction here is an explicit BEGIN).
    check_same_thread=False: a store is used from one thread at a time, never the same
    connection by two (no call holds one across an await; the bulk one has its lock).
    The pragmas are the connection's first statements: right after a process was killed
    mid-write they can meet a WAL being recovered ("locked", busy timeout or not), so
    they are retried like any other statement (they are idempotent)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout_s, check_same_thread=False)

    def apply_pragmas() -> None:
        for pragma in _PRAGMAS:
            conn.execute(pragma)

    try:
        await _when_unlocked(apply_pragmas)
    except BaseException:
        conn.close()
        raise
    return conn


def _transaction(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(conn)
        conn.execute("COMMIT")
    except BaseException:
        # SQLite rolls some failures back by itself; a second ROLLBACK would raise
        # "no transaction is active" and hide the original error.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(exc)  # pragma: no cover - sqlite3 before Python 3.11


async def _when_unlocked(
    attempt: Callable[[], T],
    *,
    store: SqliteSessionStore | None = None,
    in_thread: bool = False,
) -> T:
    """Run ``attempt`` (one whole statement or transaction, no waiting inside), again
    after a pause while SQLite says another connection holds the lock it needs.

    The connection has no busy timeout: SQLite's own wait would sleep on the event loop.
    The pause here is an ``asyncio.sleep``, so the worker goes on while another process
    writes; the same ``_BUSY_TIMEOUT_MS`` bounds it. ``attempt`` leaves nothing behind
    when it fails (a transaction rolls back), so repeating it is safe. While a fresh
    file changes journal mode, or a WAL index is rebuilt, SQLite also answers "locked"
    at once, busy timeout or not: that is waited out the same way. ``in_thread`` runs each
    attempt in a worker thread (a bulk write, whose connection does have a busy timeout).
    """
    # One pass of the event loop first: an await that never suspends would let a caller
    # that only reads or writes (a loop over sessions) hold the loop for as long as it
    # likes; every store call stays a point where other tasks run.
    await asyncio.sleep(0)
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    delay = 0.001
    while True:
        if store is not None:
            store._check_open()
        try:
            return await asyncio.to_thread(attempt) if in_thread else attempt()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.025)


# sqlite3 accepts a sequence for ``?`` and a mapping for ``:name`` placeholders.
_Params = Iterable[Any] | dict[str, Any]


def _maybe_one(conn: sqlite3.Connection, sql: str, params: _Params) -> Any:
    return conn.execute(sql, params).fetchone()  # type: ignore[arg-type]


def _one(conn: sqlite3.Connection, sql: str, params: _Params) -> Any:
    row = _maybe_one(conn, sql, params)
    if row is None:  # pragma: no cover - only for queries that always yield a row
        raise SessionStoreError(f"query returned no row: {sql}")
    return row


def _totals(row: Any) -> Usage:
    return Usage() if row is None else _codec.usage_from_totals(row[0], row[1], row[2])


def _require_session(conn: sqlite3.Connection, session_id: str) -> None:
    if _maybe_one(conn, "SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)) is None:
        raise SessionNotFound(session_id)
