"""PostgreSQL session store: the shared store for several workers and hosts.

Writers of one session serialize on that session's row (``SELECT ... FOR UPDATE``), then
assign ``seq`` from ``MAX(seq)`` and insert with ``ON CONFLICT (session_id, id) DO
NOTHING``, so a retried activity never duplicates a message and concurrent batches never
interleave; writers of different sessions never wait for each other. A batch is one
``INSERT ... SELECT FROM unnest(...)`` statement, whatever its size.

Message bodies are TEXT, not JSONB: the store never queries inside a body (the columns
SQL needs are split out by the codec), so JSONB would only add a parse on every write and
a re-serialization on every read, and would not keep the codec's exact bytes that the
restore diff compares. Snapshot and restore are ``INSERT ... SELECT`` on the server.

All tables live in one schema (``dplan`` by default); every pooled connection has it as
its ``search_path``, which lets tests and tenants use separate schemas in one database.

Usage ledger (schema version 2): see ``_SCHEMA_V2`` and ``_CHARGE``. Waits of refused
calls (version 3): see ``_SCHEMA_V3``.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Sequence
from typing import Any

import asyncpg

from durable_plans._errors import (
    SessionNotFound,
    SessionStoreError,
    SnapshotNotFound,
    SnapshotSessionMismatch,
)
from durable_plans.domain.models import Message, SessionMeta, Usage
from durable_plans.session_store import _codec
from durable_plans.session_store.base import WaitTally

SCHEMA_VERSION = 3
# First key of the two-key advisory lock taken while creating or migrating a schema.
_MIGRATION_LOCK_NAMESPACE = 0x64706C6E  # "dpln"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

# snapshot_messages has no foreign key to snapshots on purpose: the per-row check made big
# snapshots several times slower (bench/RESULTS.md), and the only writers, snapshot() and
# delete_snapshot(), keep parent and rows consistent within one transaction.
_SCHEMA_V1 = (
    """CREATE TABLE IF NOT EXISTS sessions (
        session_id text PRIMARY KEY,
        meta text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE TABLE IF NOT EXISTS messages (
        session_id text NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        id text NOT NULL,
        is_result boolean NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (session_id, seq),
        UNIQUE (session_id, id)
    )""",
    """CREATE TABLE IF NOT EXISTS snapshots (
        snapshot_id text PRIMARY KEY,
        session_id text NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
        message_count integer NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX IF NOT EXISTS snapshots_by_session ON snapshots (session_id)",
    """CREATE TABLE IF NOT EXISTS snapshot_messages (
        snapshot_id text NOT NULL,
        seq bigint NOT NULL,
        id text NOT NULL,
        is_result boolean NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (snapshot_id, seq)
    )""",
)

# Version 2: the usage ledger, as in the SQLite store. One row per charge keyed (root,
# charge_id), whose primary key doubles as the index by root; a running total per root,
# updated in the same statement as the ledger insert. The totals row is also what
# serializes chargers of one root (its row lock), which is what lets every charge return
# the exact total right after it; a SUM under READ COMMITTED could let two racing charges
# each miss the other. No foreign key to sessions: see ``SessionStore.charge``.
_SCHEMA_V2 = (
    """CREATE TABLE IF NOT EXISTS usage_ledger (
        root_session_id text NOT NULL,
        charge_id text NOT NULL,
        prompt_tokens bigint NOT NULL,
        completion_tokens bigint NOT NULL,
        cost_usd double precision NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (root_session_id, charge_id)
    )""",
    """CREATE TABLE IF NOT EXISTS usage_totals (
        root_session_id text PRIMARY KEY,
        prompt_tokens bigint NOT NULL,
        completion_tokens bigint NOT NULL,
        cost_usd double precision NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
    )""",
)

# Version 3: the waits of refused LLM calls, as in the SQLite store: one row per refused
# attempt keyed (call, entry); a call's tally is a SUM over its few rows.
_SCHEMA_V3 = (
    """CREATE TABLE IF NOT EXISTS call_waits (
        call_id text NOT NULL,
        entry text NOT NULL,
        wait_s double precision NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (call_id, entry)
    )""",
)

# Steps applied in order to bring a schema from ``version - 1`` to ``version``.
_MIGRATIONS: dict[int, tuple[str, ...]] = {1: _SCHEMA_V1, 2: _SCHEMA_V2, 3: _SCHEMA_V3}

_INSERT_WAIT = (
    "INSERT INTO call_waits (call_id, entry, wait_s) VALUES ($1, $2, $3) "
    "ON CONFLICT (call_id, entry) DO NOTHING"
)
_READ_WAITS = (
    "SELECT COUNT(*) AS refusals, COALESCE(SUM(wait_s), 0.0) AS waited_s "
    "FROM call_waits WHERE call_id = $1"
)

# One statement, so atomic without an explicit transaction. A repeated charge_id inserts no
# ledger row, hence no totals update, and returns no row (the caller then reads the total).
# A racing duplicate of an uncommitted charge waits for it in ON CONFLICT, so by the time
# it returns, the first charge is committed or rolled back (and then this one is inserted).
_CHARGE = """
    WITH charged AS (
        INSERT INTO usage_ledger
            (root_session_id, charge_id, prompt_tokens, completion_tokens, cost_usd)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (root_session_id, charge_id) DO NOTHING
        RETURNING root_session_id, prompt_tokens, completion_tokens, cost_usd
    )
    INSERT INTO usage_totals AS t (root_session_id, prompt_tokens, completion_tokens, cost_usd)
    SELECT root_session_id, prompt_tokens, completion_tokens, cost_usd FROM charged
    ON CONFLICT (root_session_id) DO UPDATE SET
        prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = t.completion_tokens + excluded.completion_tokens,
        cost_usd = t.cost_usd + excluded.cost_usd,
        updated_at = now()
    RETURNING prompt_tokens, completion_tokens, cost_usd
"""
_READ_TOTALS = (
    "SELECT prompt_tokens, completion_tokens, cost_usd FROM usage_totals WHERE root_session_id = $1"
)

_LOCK_SESSION = "SELECT 1 FROM sessions WHERE session_id = $1 FOR UPDATE"
_SHARE_SESSION = "SELECT 1 FROM sessions WHERE session_id = $1 FOR SHARE"
_READ_BODIES = "SELECT body FROM messages WHERE session_id = $1 ORDER BY seq"
_APPEND = """
    INSERT INTO messages (session_id, seq, id, is_result, body)
    SELECT $1, base.next + t.ord - 1, t.id, t.is_result, t.body
    FROM (SELECT COALESCE(MAX(seq), -1) + 1 AS next FROM messages WHERE session_id = $1) AS base,
         unnest($2::text[], $3::boolean[], $4::text[])
             WITH ORDINALITY AS t(id, is_result, body, ord)
    ORDER BY t.ord
    ON CONFLICT (session_id, id) DO NOTHING
"""
# See the SQLite store: restore rewrites only the rows that differ from the snapshot.
_RESTORE_DELETE = """
    DELETE FROM messages AS m
    WHERE m.session_id = $1 AND NOT EXISTS (
        SELECT 1 FROM snapshot_messages AS s
        WHERE s.snapshot_id = $2 AND s.seq = m.seq AND s.id = m.id AND s.body = m.body)
"""
_RESTORE_INSERT = """
    INSERT INTO messages (session_id, seq, id, is_result, body)
    SELECT $1, s.seq, s.id, s.is_result, s.body FROM snapshot_messages AS s
    WHERE s.snapshot_id = $2 AND NOT EXISTS (
        SELECT 1 FROM messages AS m WHERE m.session_id = $1 AND m.seq = s.seq)
"""
_LAST_NEW_RESULT = """
    SELECT id, body FROM messages
    WHERE session_id = $1 AND is_result
      AND id NOT IN (SELECT id FROM snapshot_messages WHERE snapshot_id = $2)
    ORDER BY seq DESC LIMIT 1
"""
_APPEND_ONE = """
    INSERT INTO messages (session_id, seq, id, is_result, body)
    SELECT $1, COALESCE(MAX(seq), -1) + 1, $2, true, $3 FROM messages WHERE session_id = $1
"""


def unavailable_reason(exc: BaseException) -> str | None:
    """Why opening the store failed, in words (None: not a failure to reach or use the
    server, but a bug to let through). The server's own messages ('database "x" does not
    exist', 'password authentication failed for user "x"') are already the reason."""
    if isinstance(exc, SessionStoreError | asyncpg.PostgresError | asyncpg.InterfaceError):
        return " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is PostgreSQL running and listening on that port?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror})"
    if isinstance(exc, TimeoutError):
        return "no answer from the server (timed out connecting)"
    if isinstance(exc, OSError):
        return exc.strerror or " ".join(str(exc).split()) or type(exc).__name__
    return None


def quote_identifier(name: str) -> str:
    """The schema name, checked and quoted: it is spliced into DDL and ``search_path``."""
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(
            f"invalid PostgreSQL schema name {name!r}: use letters, digits and _ "
            "(not starting with a digit, at most 63 characters)"
        )
    return f'"{name}"'


class PostgresSessionStore:
    """``SessionStore`` on PostgreSQL through an asyncpg pool. Build it with ``open``."""

    def __init__(self, pool: Any, schema: str) -> None:
        # asyncpg is untyped; the pool stays ``Any`` inside this class only.
        self._pool: Any = pool
        self.schema = schema

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        schema: str = "dplan",
        min_size: int = 1,
        max_size: int = 10,
    ) -> PostgresSessionStore:
        quoted = quote_identifier(schema)
        conn = await asyncpg.connect(dsn)
        try:
            await _migrate(conn, schema, quoted)
        finally:
            await conn.close()
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            server_settings={
                "search_path": quoted,
                # Sessions range from a few messages to tens of thousands. A generic plan
                # cached while tables were small (nested loops) made restoring a long
                # session many times slower; planning each call costs far less.
                "plan_cache_mode": "force_custom_plan",
            },
        )
        return cls(pool, schema)

    async def close(self) -> None:
        await self._pool.close()

    # ----------------------------------------------------------------- sessions

    async def create_session(self, meta: SessionMeta) -> SessionMeta:
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO sessions (session_id, meta) VALUES ($1, $2) "
                "ON CONFLICT (session_id) DO NOTHING",
                meta.session_id,
                _codec.encode_meta(meta),
            )
            stored = await conn.fetchval(
                "SELECT meta FROM sessions WHERE session_id = $1", meta.session_id
            )
        return _codec.decode_meta(str(stored))

    async def get_session(self, session_id: str) -> SessionMeta:
        stored = await self._pool.fetchval(
            "SELECT meta FROM sessions WHERE session_id = $1", session_id
        )
        if stored is None:
            raise SessionNotFound(session_id)
        return _codec.decode_meta(str(stored))

    async def update_session(self, meta: SessionMeta) -> None:
        status = await self._pool.execute(
            "UPDATE sessions SET meta = $2, updated_at = now() WHERE session_id = $1",
            meta.session_id,
            _codec.encode_meta(meta),
        )
        if _affected(status) == 0:
            raise SessionNotFound(meta.session_id)

    # ----------------------------------------------------------------- messages

    async def append(self, session_id: str, messages: Sequence[Message]) -> int:
        rows = _codec.rows_for_append(messages)
        async with self._pool.acquire() as conn, conn.transaction():
            await _lock(conn, _LOCK_SESSION, session_id)
            if not rows:
                return 0
            status = await conn.execute(
                _APPEND,
                session_id,
                [r.id for r in rows],
                [r.is_result for r in rows],
                [r.body for r in rows],
            )
        return _affected(status)

    async def read(self, session_id: str) -> list[Message]:
        async with self._pool.acquire() as conn:
            records = await conn.fetch(_READ_BODIES, session_id)
            if not records:
                await _require_session(conn, session_id)
        return _codec.decode_all(r[0] for r in records)

    async def count(self, session_id: str) -> int:
        n = await self._pool.fetchval(
            "SELECT (SELECT count(*) FROM messages WHERE session_id = s.session_id) "
            "FROM sessions AS s WHERE s.session_id = $1",
            session_id,
        )
        if n is None:
            raise SessionNotFound(session_id)
        return int(n)

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        rows = _codec.rows_for_replace(messages)
        async with self._pool.acquire() as conn, conn.transaction():
            await _lock(conn, _LOCK_SESSION, session_id)
            await conn.execute("DELETE FROM messages WHERE session_id = $1", session_id)
            if rows:
                await conn.execute(
                    _APPEND,
                    session_id,
                    [r.id for r in rows],
                    [r.is_result for r in rows],
                    [r.body for r in rows],
                )

    # ----------------------------------------------------------------- snapshots

    async def snapshot(self, session_id: str, snapshot_id: str) -> int:
        async with self._pool.acquire() as conn, conn.transaction():
            # FOR SHARE: appenders (FOR UPDATE) wait, so the count and the copy agree.
            await _lock(conn, _SHARE_SESSION, session_id)
            status = await conn.execute(
                "INSERT INTO snapshots (snapshot_id, session_id, message_count) "
                "SELECT $1, $2, count(*) FROM messages WHERE session_id = $2 "
                "ON CONFLICT (snapshot_id) DO NOTHING",
                snapshot_id,
                session_id,
            )
            if _affected(status) == 0:
                existing = await conn.fetchrow(
                    "SELECT session_id, message_count FROM snapshots WHERE snapshot_id = $1",
                    snapshot_id,
                )
                if existing["session_id"] != session_id:
                    raise SnapshotSessionMismatch(snapshot_id, existing["session_id"], session_id)
                return int(existing["message_count"])
            status = await conn.execute(
                "INSERT INTO snapshot_messages (snapshot_id, seq, id, is_result, body) "
                "SELECT $1, seq, id, is_result, body FROM messages WHERE session_id = $2",
                snapshot_id,
                session_id,
            )
        return _affected(status)

    async def restore(
        self, session_id: str, snapshot_id: str, *, keep_last_result: bool = False
    ) -> list[Message]:
        async with self._pool.acquire() as conn, conn.transaction():
            await _lock(conn, _LOCK_SESSION, session_id)
            # FOR SHARE keeps a concurrent delete_snapshot from pulling the rows away.
            owner = await conn.fetchval(
                "SELECT session_id FROM snapshots WHERE snapshot_id = $1 FOR SHARE", snapshot_id
            )
            if owner is None:
                raise SnapshotNotFound(snapshot_id)
            if owner != session_id:
                raise SnapshotSessionMismatch(snapshot_id, str(owner), session_id)
            kept = (
                await conn.fetchrow(_LAST_NEW_RESULT, session_id, snapshot_id)
                if keep_last_result
                else None
            )
            await conn.execute(_RESTORE_DELETE, session_id, snapshot_id)
            await conn.execute(_RESTORE_INSERT, session_id, snapshot_id)
            if kept is not None:
                await conn.execute(_APPEND_ONE, session_id, kept["id"], kept["body"])
            records = await conn.fetch(_READ_BODIES, session_id)
        return _codec.decode_all(r[0] for r in records)

    async def read_snapshot(self, snapshot_id: str) -> list[Message]:
        async with self._pool.acquire() as conn:
            records = await conn.fetch(
                "SELECT body FROM snapshot_messages WHERE snapshot_id = $1 ORDER BY seq",
                snapshot_id,
            )
            if not records and not await conn.fetchval(
                "SELECT 1 FROM snapshots WHERE snapshot_id = $1", snapshot_id
            ):
                raise SnapshotNotFound(snapshot_id)
        return _codec.decode_all(r[0] for r in records)

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        async with self._pool.acquire() as conn, conn.transaction():
            # The parent row first: its row lock waits for a restore reading this snapshot.
            status = await conn.execute("DELETE FROM snapshots WHERE snapshot_id = $1", snapshot_id)
            await conn.execute("DELETE FROM snapshot_messages WHERE snapshot_id = $1", snapshot_id)
        return _affected(status) > 0

    async def has_snapshot(self, snapshot_id: str) -> bool:
        found = await self._pool.fetchval(
            "SELECT 1 FROM snapshots WHERE snapshot_id = $1", snapshot_id
        )
        return found is not None

    # ----------------------------------------------------------------- usage ledger

    async def charge(self, root_session_id: str, charge_id: str, usage: Usage) -> Usage:
        _codec.check_charge(root_session_id, charge_id, usage)
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(
                _CHARGE,
                root_session_id,
                charge_id,
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cost_usd,
            )
            if row is None:
                # Already charged: a new statement sees the committed total, which includes
                # that earlier charge (ledger row and total commit together).
                row = await conn.fetchrow(_READ_TOTALS, root_session_id)
        return _totals(row)

    async def total_usage(self, root_session_id: str) -> Usage:
        return _totals(await self._pool.fetchrow(_READ_TOTALS, root_session_id))

    # ----------------------------------------------------------------- waits

    async def record_wait(self, call_id: str, entry: str, wait_s: float) -> WaitTally:
        _codec.check_wait(call_id, entry, wait_s)
        async with self._pool.acquire() as conn:
            # Two statements: the read is a new snapshot, so it sees this insert and any
            # racing one that committed (an uncommitted duplicate waited in ON CONFLICT).
            await conn.execute(_INSERT_WAIT, call_id, entry, wait_s)
            row = await conn.fetchrow(_READ_WAITS, call_id)
        return _tally(row)

    async def waits(self, call_id: str) -> WaitTally:
        return _tally(await self._pool.fetchrow(_READ_WAITS, call_id))


# --------------------------------------------------------------------- helpers


async def _migrate(conn: Any, schema: str, quoted: str) -> None:
    """Create or upgrade the schema once, however many workers start at the same moment."""
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))", _MIGRATION_LOCK_NAMESPACE, schema
        )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        await conn.execute(f"SET LOCAL search_path TO {quoted}")
        await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
        version = await conn.fetchval("SELECT max(version) FROM schema_version")
        if version is not None and version > SCHEMA_VERSION:
            raise SessionStoreError(
                f"schema {schema!r} has version {version}; this code knows up to "
                f"{SCHEMA_VERSION} (upgrade durable-plans)"
            )
        # Step by step inside this transaction (DDL is transactional here): a schema of any
        # older version ends up exactly like a fresh one, or untouched on error.
        current = version or 0
        for step in range(current + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                await conn.execute(statement)
        if current < SCHEMA_VERSION:
            await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", SCHEMA_VERSION)


def _tally(row: Any) -> WaitTally:
    return WaitTally(refusals=int(row["refusals"]), waited_s=float(row["waited_s"]))


def _totals(row: Any) -> Usage:
    if row is None:
        return Usage()
    return _codec.usage_from_totals(row["prompt_tokens"], row["completion_tokens"], row["cost_usd"])


async def _lock(conn: Any, sql: str, session_id: str) -> None:
    if await conn.fetchval(sql, session_id) is None:
        raise SessionNotFound(session_id)


async def _require_session(conn: Any, session_id: str) -> None:
    if await conn.fetchval("SELECT 1 FROM sessions WHERE session_id = $1", session_id) is None:
        raise SessionNotFound(session_id)


def _affected(status: str) -> int:
    """Rows touched, from a command tag such as ``INSERT 0 5`` or ``DELETE 3``."""
    return int(status.rsplit(" ", 1)[-1])
