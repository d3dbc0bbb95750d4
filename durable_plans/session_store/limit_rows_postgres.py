"""The shared rate-limit rows in PostgreSQL: every worker and host of one store share them.

A reservation is one short transaction: an upsert that creates the model's row if needed
and returns it *locked* (``ON CONFLICT ... DO UPDATE`` takes the row lock, like
``SELECT ... FOR UPDATE``) together with the server's clock, the arithmetic of
``domain.rate_pacing.reserve``, and the update. Concurrent reservations of one model queue
on that row lock, so each sees the one before it; other models never wait. The server's
clock (``clock_timestamp()``) is the only clock, so hosts whose clocks differ still agree
on the schedule; the caller is told how long to wait, not until when.

A correction (real tokens known) and a Retry-After are single statements.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from durable_plans.domain.rate_pacing import BucketState, RateLimit, Reservation, reserve
from durable_plans.session_store.postgres import quote_identifier

_LOCK_NAMESPACE = 0x64706C72  # "dplr": advisory lock held while creating the table
_NOW = "extract(epoch FROM clock_timestamp())::float8"

_LOCKED_ROW = f"""
    INSERT INTO rate_limits AS r (key) VALUES ($1)
    ON CONFLICT (key) DO UPDATE SET key = r.key
    RETURNING request_at, tokens_at, blocked_until, {_NOW} AS now
"""
_WRITE = "UPDATE rate_limits SET request_at = $2, tokens_at = $3 WHERE key = $1"
_CORRECT = "UPDATE rate_limits SET tokens_at = tokens_at + $2 WHERE key = $1"
_BLOCK = f"""
    INSERT INTO rate_limits AS r (key, blocked_until) VALUES ($1, {_NOW} + $2)
    ON CONFLICT (key) DO UPDATE
    SET blocked_until = GREATEST(r.blocked_until, excluded.blocked_until)
"""
_BLOCKED_FOR = f"SELECT GREATEST(blocked_until - {_NOW}, 0) FROM rate_limits WHERE key = $1"


class PostgresRateLimitStore:
    """``RateLimitStore`` on a small asyncpg pool of its own (two connections at most)."""

    def __init__(self, pool: Any, description: str) -> None:
        self._pool: Any = pool  # asyncpg is untyped
        self.description = description

    @classmethod
    async def open(
        cls, dsn: str, *, schema: str, description: str, timeout_s: float = 5.0
    ) -> PostgresRateLimitStore:
        quoted = quote_identifier(schema)
        conn = await asyncpg.connect(dsn, timeout=timeout_s)
        try:
            async with conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock($1, hashtext($2))", _LOCK_NAMESPACE, schema
                )
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
                await conn.execute(
                    f"""CREATE TABLE IF NOT EXISTS {quoted}.rate_limits (
                        key text PRIMARY KEY,
                        request_at double precision NOT NULL DEFAULT 0,
                        tokens_at double precision NOT NULL DEFAULT 0,
                        blocked_until double precision NOT NULL DEFAULT 0
                    )"""
                )
        finally:
            await conn.close()
        pool = await asyncpg.create_pool(
            dsn,
            min_size=1,
            max_size=2,
            timeout=timeout_s,
            server_settings={"search_path": quoted},
        )
        return cls(pool, description)

    async def reserve(
        self, key: str, limit: RateLimit, *, tokens: int, max_wait_s: float
    ) -> Reservation:
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(_LOCKED_ROW, key)
            before = BucketState(row["request_at"], row["tokens_at"], row["blocked_until"])
            after, answer = reserve(
                before, limit, now=row["now"], tokens=tokens, max_wait_s=max_wait_s
            )
            if after != before:
                await conn.execute(_WRITE, key, after.request_at, after.tokens_at)
        return answer

    async def correct(self, key: str, limit: RateLimit, *, tokens_delta: int) -> None:
        shift = limit.token_seconds(abs(tokens_delta))
        if shift:
            await self._pool.execute(_CORRECT, key, shift if tokens_delta > 0 else -shift)

    async def block(self, key: str, seconds: float) -> None:
        await self._pool.execute(_BLOCK, key, max(seconds, 0.0))

    async def blocked_for(self, key: str) -> float:
        value = await self._pool.fetchval(_BLOCKED_FOR, key)
        return float(value or 0.0)

    async def close(self) -> None:
        await self._pool.close()
