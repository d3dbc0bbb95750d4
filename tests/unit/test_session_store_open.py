"""A session store that cannot be opened says which store and why, in one line.

Real failures only: a real PostgreSQL server refusing a database that does not exist, a
port nothing listens on, and SQLite paths that are directories, files in the way or not
databases. The ``dplan-worker`` process's own line and exit code are checked in
tests/integration/test_worker_session_store.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from durable_plans.session_store import InvalidStoreTarget, SessionStoreUnavailable
from durable_plans.session_store.factory import open_session_store
from tests.conftest import closed_port


async def refusal(target: str) -> SessionStoreUnavailable:
    with pytest.raises(SessionStoreUnavailable) as caught:
        store = await open_session_store(target)
        await store.close()  # not reached when the test holds
    return caught.value


@pytest.mark.postgres
async def test_a_database_that_does_not_exist_is_named(pg_dsn: str) -> None:
    name = f"dplan_missing_{uuid.uuid4().hex[:12]}"
    target = urlunsplit(urlsplit(pg_dsn)._replace(path=f"/{name}", query=""))
    err = await refusal(target)
    assert str(err) == f'session store {target}: database "{name}" does not exist'
    assert not isinstance(err, InvalidStoreTarget)


async def test_a_refused_connection_is_named_without_the_password() -> None:
    port = closed_port()
    err = await refusal(f"postgresql://dplan:pa55-w0rd@127.0.0.1:{port}/app?schema=tenant")
    assert str(err) == (
        f"session store postgresql://dplan:***@127.0.0.1:{port}/app?schema=tenant: "
        "connection refused (is PostgreSQL running and listening on that port?)"
    )
    assert "pa55-w0rd" not in str(err)


@pytest.mark.parametrize(
    ("target", "line"),
    [
        (
            "postgresql://dplan:pa55@127.0.0.1:54x2/app",
            "session store postgresql://dplan:***@127.0.0.1:54x2/app: "
            "invalid port '54x2' (a number, as in host:5432)",
        ),
        (
            "postgresql://dplan@127.0.0.1:5432/app?sslmode=maybe",
            "session store postgresql://dplan@127.0.0.1:5432/app?sslmode=maybe: `sslmode` "
            "parameter must be one of: disable, allow, prefer, require, verify-ca, verify-full",
        ),
        (
            "postgresql://dplan@127.0.0.1:5432/app?schema=my-tenant",
            "session store postgresql://dplan@127.0.0.1:5432/app?schema=my-tenant: invalid "
            "PostgreSQL schema name 'my-tenant': use letters, digits and _ (not starting "
            "with a digit, at most 63 characters)",
        ),
        (
            "mysql://root:hunter2@db/app",
            "session store mysql://root:***@db/app: unsupported scheme 'mysql' "
            "(use postgresql://..., sqlite:///path or a file path)",
        ),
        ("sqlite://", "session store sqlite://: no file path after sqlite://"),
    ],
)
async def test_a_malformed_target_is_a_configuration_error(target: str, line: str) -> None:
    err = await refusal(target)
    assert isinstance(err, InvalidStoreTarget)
    assert str(err) == line


async def test_sqlite_paths_that_cannot_be_a_store_say_why(tmp_path: Path) -> None:
    assert str(await refusal(str(tmp_path))) == (
        f"session store {tmp_path}: is a directory, not a database file"
    )
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    assert str(await refusal(str(text))) == f"session store {text}: file is not a database"
    below = text / "sessions.db"
    assert str(await refusal(f"sqlite://{below}")) == (
        f"session store sqlite://{below}: cannot create the directory {text}: "
        "a file of that name is in the way"
    )
