"""Where the workers keep their shared rate-limit rows: beside the session store.

Every worker that shares a session store shares its rate limits: with PostgreSQL, a table
``rate_limits`` in the store's schema (``rate_limits_postgres.py``); with SQLite, a file
``rate-limits.db`` beside the sessions file (its own file, so reservations never wait on
session writes). ``DPLAN_RATE_LIMIT_STORE`` may name another target of either kind.

Each row is one model's ``BucketState`` (``domain/rate_pacing.py``); a reservation reads
and writes it atomically (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: the row locked by the
upsert that reads it), so two workers never take the same slot. ``MemoryRateLimitStore``
is the same rows in one process: the per-worker fallback when the shared store is down.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol

from durable_plans.domain.rate_pacing import (
    BucketState,
    RateLimit,
    Reservation,
    block,
    correct,
    reserve,
)
from durable_plans.session_store.factory import (
    describe_store_target,
    resolve_target,
    split_postgres_target,
    sqlite_path,
)

SQLITE_FILE = "rate-limits.db"
OPEN_TIMEOUT_S = 5.0


class RateLimitStore(Protocol):
    """The shared rows; every method is atomic on its own."""

    description: str

    async def reserve(
        self, key: str, limit: RateLimit, *, tokens: int, max_wait_s: float
    ) -> Reservation: ...

    async def correct(self, key: str, limit: RateLimit, *, tokens_delta: int) -> None: ...

    async def block(self, key: str, seconds: float) -> None: ...

    async def blocked_for(self, key: str) -> float:
        """Seconds left of the provider's Retry-After for ``key`` (0: none)."""
        ...

    async def close(self) -> None: ...


class MemoryRateLimitStore:
    """The rows in this process only (the fallback; also what the unit tests start from)."""

    description = "memory (this worker only)"

    def __init__(self) -> None:
        self._rows: dict[str, BucketState] = {}

    async def reserve(
        self, key: str, limit: RateLimit, *, tokens: int, max_wait_s: float
    ) -> Reservation:
        row, answer = reserve(
            self._rows.get(key, BucketState()),
            limit,
            now=time.time(),
            tokens=tokens,
            max_wait_s=max_wait_s,
        )
        self._rows[key] = row
        return answer

    async def correct(self, key: str, limit: RateLimit, *, tokens_delta: int) -> None:
        if key in self._rows:
            self._rows[key] = correct(self._rows[key], limit, tokens_delta=tokens_delta)

    async def block(self, key: str, seconds: float) -> None:
        self._rows[key] = block(
            self._rows.get(key, BucketState()), now=time.time(), seconds=seconds
        )

    async def blocked_for(self, key: str) -> float:
        row = self._rows.get(key)
        return max(0.0, row.blocked_until - time.time()) if row else 0.0

    async def close(self) -> None:
        self._rows.clear()


_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS rate_limits (
    key TEXT PRIMARY KEY,
    request_at REAL NOT NULL,
    tokens_at REAL NOT NULL,
    blocked_until REAL NOT NULL
)
"""


class SqliteRateLimitStore:
    """The rows in a SQLite file every worker of this host opens (WAL, ``BEGIN IMMEDIATE``).

    One connection, used from worker threads one call at a time: a reservation is a few
    microseconds of SQL, so the event loop only waits for the file lock when another
    process holds it.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.description = f"sqlite://{path}"

    @classmethod
    async def open(cls, path: Path) -> SqliteRateLimitStore:
        def connect() -> sqlite3.Connection:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                path, timeout=OPEN_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(_SQLITE_SCHEMA)
            except BaseException:
                conn.close()
                raise
            return conn

        return cls(await asyncio.to_thread(connect), path)

    def _row(self, key: str) -> BucketState:
        found = self._conn.execute(
            "SELECT request_at, tokens_at, blocked_until FROM rate_limits WHERE key = ?", (key,)
        ).fetchone()
        return BucketState(*found) if found else BucketState()

    def _write(self, key: str, row: BucketState) -> None:
        self._conn.execute(
            "INSERT INTO rate_limits (key, request_at, tokens_at, blocked_until) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET request_at = excluded.request_at, "
            "tokens_at = excluded.tokens_at, blocked_until = excluded.blocked_until",
            (key, row.request_at, row.tokens_at, row.blocked_until),
        )

    async def _update(self, key: str, change: _Change) -> Reservation | None:
        def run() -> Reservation | None:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    before = self._row(key)
                    after, answer = change(before, time.time())
                    if after != before:
                        self._write(key, after)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                return answer

        return await asyncio.to_thread(run)

    async def reserve(
        self, key: str, limit: RateLimit, *, tokens: int, max_wait_s: float
    ) -> Reservation:
        def change(row: BucketState, now: float) -> tuple[BucketState, Reservation | None]:
            return reserve(row, limit, now=now, tokens=tokens, max_wait_s=max_wait_s)

        answer = await self._update(key, change)
        assert answer is not None
        return answer

    async def correct(self, key: str, limit: RateLimit, *, tokens_delta: int) -> None:
        await self._update(
            key, lambda row, _now: (correct(row, limit, tokens_delta=tokens_delta), None)
        )

    async def block(self, key: str, seconds: float) -> None:
        await self._update(key, lambda row, now: (block(row, now=now, seconds=seconds), None))

    async def blocked_for(self, key: str) -> float:
        def run() -> float:
            with self._lock:
                return max(0.0, self._row(key).blocked_until - time.time())

        return await asyncio.to_thread(run)

    async def close(self) -> None:
        def run() -> None:
            with self._lock:  # after an operation still running in its thread
                self._conn.close()

        await asyncio.to_thread(run)


class _Change(Protocol):
    def __call__(self, row: BucketState, now: float) -> tuple[BucketState, Reservation | None]: ...


def rate_limit_target(session_store: str | None = None, explicit: str | None = None) -> str:
    """The shared store's target: ``explicit`` (``DPLAN_RATE_LIMIT_STORE``), else the
    session store's PostgreSQL URL as is, else ``rate-limits.db`` beside its SQLite file."""
    if explicit:
        return explicit
    target = resolve_target(session_store)
    if _is_postgres(target):
        return target
    return str(sqlite_path(target).parent / SQLITE_FILE)


async def open_rate_limit_store(target: str) -> RateLimitStore:
    """Open (creating its table when needed) the store ``target`` names: a PostgreSQL URL
    (``?schema=`` as for the session store) or a SQLite file. Raises what the driver
    raises; the limiter treats any failure as the store being down."""
    if _is_postgres(target):
        from durable_plans.session_store.limit_rows_postgres import PostgresRateLimitStore

        dsn, schema = split_postgres_target(target)
        return await PostgresRateLimitStore.open(
            dsn, schema=schema or "dplan", description=describe_store_target(target)
        )
    return await SqliteRateLimitStore.open(sqlite_path(target))


def _is_postgres(target: str) -> bool:
    return target.lower().startswith(("postgresql://", "postgres://"))
