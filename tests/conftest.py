"""Shared fixtures.

Session stores: ``store`` runs a test once per backend. PostgreSQL tests use a fresh
schema per test (dropped afterwards) in the database named by ``DPLAN_TEST_PG_DSN``, and
are skipped, with the reason, when that server cannot be reached.
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import describe_store_target, open_session_store
from tests.file_order import load_durations, longest_files_first

PG_DSN_ENV = "DPLAN_TEST_PG_DSN"
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"

OpenStore = Callable[[], Awaitable[SessionStore]]

# The default state directory is the user's (``settings.default_state_dir``): a test that
# does not name one, and every process it starts with this environment, writes into a
# directory of this test process instead of the real home, removed at exit.
_STATE_HOME = tempfile.mkdtemp(prefix="dplan-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE_HOME
atexit.register(shutil.rmtree, _STATE_HOME, ignore_errors=True)

# Hypothesis's per-example deadline is a timing assertion: on a loaded machine the same
# example is quick once and far past any deadline the next time, which fails a correct
# test at random. Properties are about results; time limits live in bench/ only.
hypothesis_settings.register_profile("dplan", deadline=None)
hypothesis_settings.load_profile("dplan")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A target string for ``open_session_store`` naming an empty store of one backend."""
    if request.param == "sqlite":
        yield str(tmp_path / "store" / "sessions.db")
        return
    dsn, admin = await _pg_connection()
    schema = f"t_{uuid.uuid4().hex}"
    separator = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{separator}schema={schema}"
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


@pytest.fixture
async def pg_dsn() -> str:
    """The DSN of a reachable PostgreSQL server (skipped, with the reason, without one)."""
    dsn, conn = await _pg_connection()
    await conn.close()
    return dsn


async def _pg_connection() -> tuple[str, Any]:
    """The test server's DSN and a connection to it; the test is skipped without one."""
    asyncpg = pytest.importorskip("asyncpg")
    dsn = os.environ.get(PG_DSN_ENV, DEFAULT_PG_DSN)
    try:
        return dsn, await asyncpg.connect(dsn, timeout=5)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        pytest.skip(f"PostgreSQL not reachable at {describe_store_target(dsn)}: {exc}")


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
async def open_store(store_target: str) -> AsyncIterator[OpenStore]:
    """Opens more stores on the same target (other connections, as another worker would)."""
    opened: list[SessionStore] = []

    async def _open() -> SessionStore:
        store = await open_session_store(store_target)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: OpenStore) -> SessionStore:
    return await open_store()


def _utf8_safe(text: str) -> str:
    """``text`` with lone surrogates escaped: the fuzz tests feed them to the loaders on
    purpose, and one in a captured log or a failure text would crash pytest-xdist's
    transport (execnet sends UTF-8 only) and with it the whole run."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(title, _utf8_safe(body)) for title, body in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _utf8_safe(text) != text:
            report.longrepr = _utf8_safe(text)


# Young collections every 20,000 allocations instead of 700, and full ones a tenth as often.
GC_THRESHOLDS = (20_000, 50, 100)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Cheaper garbage collection in every test process (each xdist worker too): what was
    imported at start (litellm, temporalio, pydantic's models: millions of objects that
    live to the end) is frozen out of every later collection, and the collector runs less
    often. A test process runs in-process workers, fake providers and replays that
    allocate at a great rate, and CPython's default thresholds spent a few per cent of the
    suite's CPU on traversing the same heap again (measured: the 2,500-subtask test 5 CPU-s
    less of 86, test_compaction with the replay tests 2.3 of 46). Nothing here waits on a
    collection: unreachable cycles are still freed, only later."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first (tests/file_order.py): every xdist worker collects the same
    order, and ``--no-loadscope-reorder`` (the Makefile) makes xdist hand files out in it."""
    longest_files_first(items, load_durations())
