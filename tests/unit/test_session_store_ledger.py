"""The usage ledger (``SessionStore.charge`` / ``total_usage``), run against every backend.

Budgets apply to a whole session tree, charged by many activities on many workers, each of
which may be retried: these tests pin that totals are exact, retries never double-charge,
racing chargers never lose a charge, and a store of the previous schema version gains the
ledger when it is opened.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
from collections.abc import Awaitable, Callable

import pytest

from durable_plans.domain.models import Message, SessionMeta, Usage
from durable_plans.session_store import SessionNotFound, SessionStore, WaitTally
from durable_plans.session_store.factory import split_postgres_target

OpenStore = Callable[[], Awaitable[SessionStore]]  # the ``open_store`` fixture


def usage(prompt: int = 0, completion: int = 0, cost: float = 0.0) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost)


# --------------------------------------------------------------------------- totals


async def test_each_charge_returns_the_new_total(store: SessionStore) -> None:
    assert await store.charge("root", "c1", usage(100, 20, 0.5)) == usage(100, 20, 0.5)
    assert await store.charge("root", "c2", usage(7, 3, 0.25)) == usage(107, 23, 0.75)
    assert await store.charge("root", "c3", usage()) == usage(107, 23, 0.75)
    assert await store.charge("root", "c4", usage(1, 0, 0.125)) == usage(108, 23, 0.875)
    assert await store.total_usage("root") == usage(108, 23, 0.875)


async def test_a_repeated_charge_id_is_a_no_op(store: SessionStore) -> None:
    """A retried activity charges again with the same id; the first charge stands, even
    when the retry reports a different usage."""
    await store.charge("root", "llm:1", usage(10, 5, 0.01))
    await store.charge("root", "llm:2", usage(1, 1, 0.02))
    expected = usage(11, 6, 0.03)
    assert await store.charge("root", "llm:1", usage(10, 5, 0.01)) == expected
    assert await store.charge("root", "llm:2", usage(999, 999, 9.0)) == expected
    assert await store.total_usage("root") == expected


async def test_roots_are_independent(store: SessionStore) -> None:
    """The key is (root, charge_id): the same step id under two roots is two charges."""
    assert await store.charge("plan-a", "step:1", usage(10, 1, 0.1)) == usage(10, 1, 0.1)
    assert await store.charge("plan-b", "step:1", usage(20, 2, 0.2)) == usage(20, 2, 0.2)
    total_a = await store.charge("plan-a", "step:2", usage(5, 0, 0.05))
    assert (total_a.prompt_tokens, total_a.completion_tokens) == (15, 1)
    assert total_a.cost_usd == pytest.approx(0.15, abs=1e-12)
    assert await store.total_usage("plan-a") == total_a
    assert await store.total_usage("plan-b") == usage(20, 2, 0.2)


async def test_an_unknown_root_has_zero_usage(store: SessionStore) -> None:
    assert await store.total_usage("nobody") == Usage()
    await store.charge("somebody", "c1", usage(1, 1, 0.1))
    assert await store.total_usage("nobody") == Usage()
    assert await store.total_usage("") == Usage()


async def test_charging_needs_no_session_row_and_creates_none(store: SessionStore) -> None:
    """A budget may be charged before (or without) its root session being written."""
    assert await store.charge("early-root", "c1", usage(3, 4, 0.5)) == usage(3, 4, 0.5)
    with pytest.raises(SessionNotFound):
        await store.get_session("early-root")
    await store.create_session(SessionMeta(session_id="early-root"))
    assert await store.total_usage("early-root") == usage(3, 4, 0.5)
    assert await store.charge("early-root", "c2", usage(1, 0, 0.0)) == usage(4, 4, 0.5)


@pytest.mark.parametrize(
    ("root", "charge_id", "cost"),
    [("root", "", 0.1), ("", "c1", 0.1), ("root", "c1", math.inf)],
    ids=["no-charge-id", "no-root", "infinite-cost"],
)
async def test_charges_that_would_corrupt_the_ledger_are_refused(
    store: SessionStore, root: str, charge_id: str, cost: float
) -> None:
    with pytest.raises(ValueError, match="charge"):
        await store.charge(root, charge_id, usage(1, 1, cost))
    assert await store.total_usage(root) == Usage()
    # Nothing was written under the key either: a valid charge with it still counts.
    if root and charge_id:
        assert await store.charge(root, charge_id, usage(1, 1, 0.1)) == usage(1, 1, 0.1)


# --------------------------------------------------------------------------- precision


async def test_cost_keeps_full_precision(store: SessionStore) -> None:
    for i in range(1000):
        total = await store.charge("root", f"c{i}", usage(1, 0, 0.0001))
    assert total.prompt_tokens == 1000
    assert abs(total.cost_usd - 0.1) < 1e-9
    assert await store.total_usage("root") == total


async def test_tiny_costs_are_not_rounded_away(store: SessionStore) -> None:
    """``Usage.__add__`` rounds to 1e-10; the ledger must not (cheap models, many calls)."""
    assert (await store.charge("root", "c1", usage(cost=1e-12))).cost_usd == 1e-12
    assert (await store.charge("root", "c2", usage(cost=2e-12))).cost_usd == pytest.approx(
        3e-12, rel=1e-12
    )


# --------------------------------------------------------------------------- concurrency


async def test_concurrent_charges_from_two_stores_sum_exactly(open_store: OpenStore) -> None:
    """Two store instances (two connections / pools), as two workers would hold. Each
    charge adds one prompt token, so the totals the 50 calls return must be exactly
    1..50: each call saw the total right after its own charge, none missed a racing one."""
    first, second = await open_store(), await open_store()
    charges = [(f"llm:{i}", usage(1, i, 0.001 * (i + 1))) for i in range(50)]
    returned = await asyncio.gather(
        *(
            (first if i % 2 else second).charge("root", charge_id, u)
            for i, (charge_id, u) in enumerate(charges)
        )
    )
    expected = usage(50, sum(range(50)), sum(0.001 * (i + 1) for i in range(50)))
    for reader in (first, second):
        total = await reader.total_usage("root")
        assert (total.prompt_tokens, total.completion_tokens) == (50, sum(range(50)))
        assert total.cost_usd == pytest.approx(expected.cost_usd, abs=1e-9)
    assert sorted(u.prompt_tokens for u in returned) == list(range(1, 51))
    assert max(returned, key=lambda u: u.prompt_tokens) == await first.total_usage("root")


async def test_racing_retries_of_one_charge_count_once(open_store: OpenStore) -> None:
    """Both workers charge the same ids at the same moment (an activity and its retry)."""
    first, second = await open_store(), await open_store()
    calls = [
        store.charge("root", f"llm:{i}", usage(1, 2, 0.01))
        for i in range(25)
        for store in (first, second, first)
    ]
    returned = await asyncio.gather(*calls)
    total = await second.total_usage("root")
    assert (total.prompt_tokens, total.completion_tokens) == (25, 50)
    assert total.cost_usd == pytest.approx(0.25, abs=1e-9)
    assert {u.prompt_tokens for u in returned} == set(range(1, 26))


# --------------------------------------------------------------------------- call waits


async def test_waits_add_up_once_per_entry(store: SessionStore) -> None:
    assert await store.waits("call") == WaitTally()
    assert await store.record_wait("call", "attempt-1", 1.5) == WaitTally(1, 1.5)
    assert await store.record_wait("call", "attempt-2", 2.0) == WaitTally(2, 3.5)
    # An attempt recorded again (a retried write) counts once, with its first wait.
    assert await store.record_wait("call", "attempt-2", 9.0) == WaitTally(2, 3.5)
    assert await store.record_wait("other", "attempt-1", 0.0) == WaitTally(1, 0.0)
    assert await store.waits("call") == WaitTally(2, 3.5)


@pytest.mark.parametrize(
    ("call", "entry", "wait"),
    [("", "e", 1.0), ("c", "", 1.0), ("c", "e", -1.0), ("c", "e", math.inf)],
)
async def test_a_bad_wait_is_refused(
    store: SessionStore, call: str, entry: str, wait: float
) -> None:
    with pytest.raises(ValueError):
        await store.record_wait(call, entry, wait)
    assert await store.waits("c") == WaitTally()


# --------------------------------------------------------------------------- migration


async def _downgrade_to_version_1(store_target: str) -> None:
    """Turn a current store into what the version-1 code left behind: version 2 only
    added the two ledger tables and version 3 the call waits, so dropping them and
    resetting the version is exact."""
    if store_target.startswith("postgres"):
        import asyncpg

        dsn, schema = split_postgres_target(store_target)
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(
                f'DROP TABLE "{schema}".usage_ledger, "{schema}".usage_totals, '
                f'"{schema}".call_waits'
            )
            # What version-1 code recorded: a single row holding 1.
            await admin.execute(f'DELETE FROM "{schema}".schema_version')
            await admin.execute(f'INSERT INTO "{schema}".schema_version VALUES (1)')
        finally:
            await admin.close()
    else:
        with sqlite3.connect(store_target) as conn:
            conn.execute("DROP TABLE usage_ledger")
            conn.execute("DROP TABLE usage_totals")
            conn.execute("DROP TABLE call_waits")
            conn.execute("PRAGMA user_version = 1")
        conn.close()


async def _schema_version(store_target: str) -> int:
    if store_target.startswith("postgres"):
        import asyncpg

        dsn, schema = split_postgres_target(store_target)
        admin = await asyncpg.connect(dsn)
        try:
            return int(await admin.fetchval(f'SELECT max(version) FROM "{schema}".schema_version'))
        finally:
            await admin.close()
    with sqlite3.connect(store_target) as conn:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    conn.close()
    return version


async def _has_ledger(store_target: str) -> bool:
    if store_target.startswith("postgres"):
        import asyncpg

        dsn, schema = split_postgres_target(store_target)
        admin = await asyncpg.connect(dsn)
        try:
            found = await admin.fetchval("SELECT to_regclass($1)", f'"{schema}".usage_ledger')
        finally:
            await admin.close()
        return found is not None
    with sqlite3.connect(store_target) as conn:
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'usage_ledger'"
        ).fetchone()
    conn.close()
    return row is not None


async def test_a_version_1_store_opens_and_gains_the_ledger(
    store_target: str, open_store: OpenStore
) -> None:
    old = await open_store()
    await old.create_session(SessionMeta(session_id="s1", agent="coder"))
    await old.append("s1", [Message(id="m1", role="user", content="hello")])
    await old.snapshot("s1", "s1:plan:t1")
    await old.close()
    await _downgrade_to_version_1(store_target)
    assert await _schema_version(store_target) == 1
    assert not await _has_ledger(store_target)

    migrated = await open_store()
    assert await _schema_version(store_target) == 3
    assert await _has_ledger(store_target)
    assert (await migrated.get_session("s1")).agent == "coder"
    assert [m.content for m in await migrated.read("s1")] == ["hello"]
    assert await migrated.has_snapshot("s1:plan:t1")
    assert await migrated.total_usage("s1") == Usage()
    assert await migrated.charge("s1", "c1", usage(5, 5, 0.5)) == usage(5, 5, 0.5)
    assert await migrated.record_wait("c1", "attempt-1", 2.5) == WaitTally(1, 2.5)
    await migrated.close()

    # Opening an up-to-date store again migrates nothing and keeps the ledger.
    reopened = await open_store()
    assert await reopened.total_usage("s1") == usage(5, 5, 0.5)
    assert await _schema_version(store_target) == 3
