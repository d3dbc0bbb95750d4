"""Session-store benchmark: what a plan's session traffic costs on each backend.

    python -m bench.sessions [--sizes 100,1000,10000,100000] [--short] [--repeats N]

For each backend and size N it builds a session of N messages the way an agent loop
does (one append per step: user, assistant tool call + tool result, answer; ~300
characters each), then times the subtask-isolation cycle on it: snapshot, a subtask's 7
turns, restore (exact) and restore keeping the subtask's result, plus a full read. The
last column times the same restore done client-side (read the snapshot, ``replace``),
which is what a store without server-side copies would pay; the ratio shows what the
``INSERT ... SELECT`` design buys. PostgreSQL is skipped, with a note, when unreachable
(``DPLAN_BENCH_PG_DSN``, else ``DPLAN_TEST_PG_DSN``, else the local default).

Sizes go from 100 to 100,000 messages (``--short``: 100 and 1,000), because a long-lived
session is exactly what the store exists for, and the question at that end is whether
the isolation cycle stays linear in the history (a server-side ``INSERT ... SELECT``
should) or turns worse. So after the table it prints snapshot and restore time per
1,000 messages for each size, and its ratio to the 1,000-message size: 1.00 is linear,
below is cheaper per message (fixed costs amortised), above is super-linear.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from durable_plans.domain.models import FunctionCall, Message, SessionMeta, ToolCall
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import describe_store_target
from durable_plans.session_store.postgres import PostgresSessionStore
from durable_plans.session_store.sqlite import SqliteSessionStore

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
_VOCABULARY = (
    "the widget renders forecast data from the provider while the state notifier caches "
    "responses and retries failed requests with exponential backoff before showing errors"
)
_WORDS = _VOCABULARY.split()


@dataclass
class Row:
    backend: str
    messages: int
    append_s: float
    snapshot_ms: float
    restore_ms: float
    restore_keep_ms: float
    read_ms: float
    client_restore_ms: float


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def agent_steps(n: int, prefix: str = "m", seed: int = 7) -> list[list[Message]]:
    """``n`` messages grouped as an agent loop appends them, one list per append."""
    rng = random.Random(seed)
    steps: list[list[Message]] = []
    i = 0

    def next_id() -> str:
        nonlocal i
        i += 1
        return f"{prefix}-{i}"

    while i < n:
        kind = len(steps) % 3
        if kind == 0:
            steps.append([Message(id=next_id(), role="user", content=_text(rng, 300))])
        elif kind == 1:
            call_id = f"call_{prefix}_{i}"
            arguments = json.dumps({"path": "lib/main.dart", "content": _text(rng, 220)})
            fn = FunctionCall(name="write_file", arguments=arguments)
            call = Message(
                id=next_id(),
                role="assistant",
                tool_calls=(ToolCall(id=call_id, function=fn),),
            )
            steps.append([call])
            if i < n:
                result = Message(
                    id=next_id(),
                    role="tool",
                    content=_text(rng, 300),
                    tool_call_id=call_id,
                    name="write_file",
                )
                steps[-1].append(result)
        else:
            steps.append([Message(id=next_id(), role="assistant", content=_text(rng, 300))])
    return steps


async def _timed(action: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


async def _client_side_restore(store: SessionStore, session_id: str, snapshot_id: str) -> None:
    """What restore costs when the history travels through the client."""
    await store.replace(session_id, await store.read_snapshot(snapshot_id))


def _median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000


async def measure(store: SessionStore, backend: str, n: int, repeats: int) -> Row:
    sid = f"bench-{n}-{uuid.uuid4().hex[:8]}"
    await store.create_session(SessionMeta(session_id=sid))

    async def append_all() -> None:
        for step in agent_steps(n):
            await store.append(sid, step)

    append_s = await _timed(append_all)
    snapshot: list[float] = []
    restore: list[float] = []
    restore_keep: list[float] = []
    read: list[float] = []
    client: list[float] = []
    for r in range(repeats):
        snap = f"{sid}:plan:subtask-{r}"
        branch = [m for step in agent_steps(7, prefix=f"t{r}", seed=r) for m in step]
        snapshot.append(await _timed(partial(store.snapshot, sid, snap)))
        await store.append(sid, branch)
        restore.append(await _timed(partial(store.restore, sid, snap)))
        await store.append(sid, branch)
        restore_keep.append(await _timed(partial(store.restore, sid, snap, keep_last_result=True)))
        read.append(await _timed(partial(store.read, sid)))
        await store.append(sid, branch)
        client.append(await _timed(partial(_client_side_restore, store, sid, snap)))
        await store.delete_snapshot(snap)
        if await store.count(sid) != n:
            raise AssertionError(f"{backend}: restore did not give back {n} messages")
    return Row(
        backend,
        n,
        append_s,
        _median_ms(snapshot),
        _median_ms(restore),
        _median_ms(restore_keep),
        _median_ms(read),
        _median_ms(client),
    )


@asynccontextmanager
async def sqlite_store() -> AsyncIterator[SessionStore]:
    with tempfile.TemporaryDirectory(prefix="dplan-bench-") as tmp:
        store = await SqliteSessionStore.open(Path(tmp) / "sessions.db")
        try:
            yield store
        finally:
            await store.close()


@asynccontextmanager
async def postgres_store(dsn: str) -> AsyncIterator[SessionStore]:
    import asyncpg  # the benchmark still runs for SQLite without the postgres extra

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    store = await PostgresSessionStore.open(dsn, schema=schema)
    try:
        yield store
    finally:
        await store.close()
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await admin.close()


def bench_pg_dsn() -> str:
    """The PostgreSQL the benchmarks use: ``DPLAN_BENCH_PG_DSN``, else the tests' one."""
    return os.environ.get("DPLAN_BENCH_PG_DSN") or os.environ.get(
        "DPLAN_TEST_PG_DSN", DEFAULT_PG_DSN
    )


async def postgres_unreachable(dsn: str) -> str | None:
    try:
        import asyncpg
    except ImportError:
        return "asyncpg is not installed"
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        return f"{type(exc).__name__}: {exc}"
    await conn.close()
    return None


_HEADER = (
    f"{'backend':<9}{'messages':>9}{'append-all s':>14}{'snapshot ms':>13}{'restore ms':>12}"
    f"{'restore+keep ms':>17}{'read ms':>10}{'read+replace ms':>17}"
)


def _format(row: Row) -> str:
    return (
        f"{row.backend:<9}{row.messages:>9}{row.append_s:>14.3f}{row.snapshot_ms:>13.2f}"
        f"{row.restore_ms:>12.2f}{row.restore_keep_ms:>17.2f}{row.read_ms:>10.2f}"
        f"{row.client_restore_ms:>17.2f}"
    )


async def run(sizes: Sequence[int], repeats: int) -> list[Row]:
    dsn = bench_pg_dsn()
    backends: list[tuple[str, Callable[[], AbstractAsyncContextManager[SessionStore]]]] = [
        ("sqlite", sqlite_store)
    ]
    problem = await postgres_unreachable(dsn)
    if problem is None:
        backends.append(("postgres", lambda: postgres_store(dsn)))
    else:
        print(f"note: PostgreSQL skipped, not reachable at {describe_store_target(dsn)}: {problem}")
    print(f"{repeats} repeats per cycle, medians; append-all is one append per agent step\n")
    print(_HEADER)
    rows: list[Row] = []
    for name, opener in backends:
        async with opener() as store:
            for n in sizes:
                rows.append(await measure(store, name, n, repeats))
                print(_format(rows[-1]), flush=True)
    _print_ratios(rows)
    _print_linearity(rows)
    return rows


def _print_ratios(rows: Sequence[Row]) -> None:
    print()
    for row in rows:
        print(
            f"{row.backend} {row.messages}: server-side restore is "
            f"{row.client_restore_ms / row.restore_ms:.1f}x faster than read+replace"
        )
    sqlite = {r.messages: r for r in rows if r.backend == "sqlite"}
    for row in rows:
        base = sqlite.get(row.messages)
        if row.backend == "postgres" and base is not None:
            print(
                f"postgres/sqlite {row.messages}: append-all {row.append_s / base.append_s:.1f}x, "
                f"snapshot {row.snapshot_ms / base.snapshot_ms:.1f}x, "
                f"restore {row.restore_ms / base.restore_ms:.1f}x, "
                f"read {row.read_ms / base.read_ms:.1f}x"
            )


def _per_thousand(ms: float, messages: int) -> float:
    return ms * 1000 / messages


def _print_linearity(rows: Sequence[Row]) -> None:
    """Time per 1,000 messages at each size, relative to a reference size.

    The reference is 1,000 messages when measured (at 100 the per-call fixed cost, a
    round trip and a transaction, dominates and would flatter every larger size), else
    the smallest size. A ratio that stays near 1.00 up to 100,000 says a snapshot or
    restore costs the same per message however long the session grows.
    """
    backends = list(dict.fromkeys(r.backend for r in rows))
    if not backends:
        return
    print("\nlinearity: ms per 1,000 messages (x = ratio to the reference size; 1.00 is linear)")
    print(
        f"{'backend':<9}{'messages':>9}{'snapshot/1k':>13}{'x':>7}{'restore/1k':>12}{'x':>7}"
        f"{'restore+keep/1k':>17}{'x':>7}{'append/1k s':>13}{'x':>7}"
    )
    for backend in backends:
        mine = sorted((r for r in rows if r.backend == backend), key=lambda r: r.messages)
        ref = next((r for r in mine if r.messages == 1000), mine[0])
        base = (
            _per_thousand(ref.snapshot_ms, ref.messages),
            _per_thousand(ref.restore_ms, ref.messages),
            _per_thousand(ref.restore_keep_ms, ref.messages),
            _per_thousand(ref.append_s, ref.messages),
        )
        for row in mine:
            values = (
                _per_thousand(row.snapshot_ms, row.messages),
                _per_thousand(row.restore_ms, row.messages),
                _per_thousand(row.restore_keep_ms, row.messages),
                _per_thousand(row.append_s, row.messages),
            )
            cells = "".join(
                f"{v:>{w}.{p}f}{v / b:>7.2f}"
                for v, b, w, p in zip(values, base, (13, 12, 17, 13), (2, 2, 2, 3), strict=True)
            )
            print(f"{backend:<9}{row.messages:>9}{cells}")
        largest = mine[-1]
        if largest is not ref:
            ratio = _per_thousand(largest.restore_ms, largest.messages) / base[1]
            print(
                f"{backend}: restore per 1,000 messages at {largest.messages:,} is {ratio:.2f}x "
                f"that at {ref.messages:,}"
            )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sessions", description=__doc__)
    parser.add_argument(
        "--sizes", help="comma-separated message counts (default 100,1000,10000,100000)"
    )
    parser.add_argument("--short", action="store_true", help="sizes 100 and 1000, for CI")
    parser.add_argument("--repeats", type=int, help="snapshot/restore cycles per size")
    args = parser.parse_args(argv)
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    else:
        sizes = [100, 1000] if args.short else [100, 1000, 10_000, 100_000]
    repeats = args.repeats or (3 if args.short else 5)
    asyncio.run(run(sizes, repeats))


if __name__ == "__main__":
    main()
