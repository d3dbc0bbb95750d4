"""`dplan-worker` whose session store refuses it: one line naming the store and why.

Real processes against a real PostgreSQL server (a database that does not exist, a port
nothing listens on) and real SQLite paths (a directory; a folder the worker's user may not
write in). The store is opened before Temporal is contacted, so no Temporal server is
needed: TEMPORAL_ADDRESS points at a closed port, and the store's line is what comes out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import closed_port

DPLAN_WORKER = Path(sys.executable).with_name("dplan-worker")
NOBODY = 65534
PROCESS_LIMIT_S = 120  # a hung worker fails the test instead of hanging the run


def run_worker(
    store: str, tmp: Path, *, as_user: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port()}",
        "DPLAN_SESSION_STORE": store,
        "DPLAN_STATE_DIR": str(tmp / "state"),
        "DPLAN_WORKSPACE": str(tmp / "workspace"),
    }
    command = [str(DPLAN_WORKER)]
    if as_user is not None:
        command = [
            "setpriv",
            f"--reuid={as_user}",
            f"--regid={as_user}",
            "--clear-groups",
            *command,
        ]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=PROCESS_LIMIT_S, cwd=tmp
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert lines, result
    assert "Traceback" not in result.stderr, result.stderr
    return lines[-1]


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory any user may enter (pytest's own tmp_path is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="dplan-store-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.postgres
def test_a_database_that_does_not_exist(pg_dsn: str, tmp_path: Path) -> None:
    name = f"dplan_missing_{uuid.uuid4().hex[:12]}"
    target = urlunsplit(urlsplit(pg_dsn)._replace(path=f"/{name}", query=""))
    result = run_worker(target, tmp_path)
    assert last_line(result) == (
        f'dplan-worker: session store {target}: database "{name}" does not exist'
    )
    assert result.returncode == 1


def test_a_server_that_is_not_there_never_shows_the_password(tmp_path: Path) -> None:
    port = closed_port()
    result = run_worker(f"postgresql://dplan:Sup3r-s3cret@127.0.0.1:{port}/dplan", tmp_path)
    assert last_line(result) == (
        f"dplan-worker: session store postgresql://dplan:***@127.0.0.1:{port}/dplan: "
        "connection refused (is PostgreSQL running and listening on that port?)"
    )
    assert "Sup3r-s3cret" not in result.stderr + result.stdout
    assert result.returncode == 1


def test_a_malformed_url_is_bad_configuration(tmp_path: Path) -> None:
    result = run_worker("postgresql://dplan:Sup3r-s3cret@127.0.0.1:54x2/dplan", tmp_path)
    assert last_line(result) == (
        "dplan-worker: session store postgresql://dplan:***@127.0.0.1:54x2/dplan: "
        "invalid port '54x2' (a number, as in host:5432)"
    )
    assert "Sup3r-s3cret" not in result.stderr + result.stdout
    assert result.returncode == 2


def test_a_sqlite_path_that_is_a_directory(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    result = run_worker(str(folder), tmp_path)
    assert last_line(result) == (
        f"dplan-worker: session store {folder}: is a directory, not a database file"
    )
    assert result.returncode == 1


def test_a_sqlite_file_the_worker_may_not_create(shared_tmp: Path) -> None:
    locked = shared_tmp / "locked"
    locked.mkdir()
    if os.geteuid() == 0:  # root writes anywhere: run the worker as an unprivileged user
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop privileges")
        locked.chmod(0o755)  # root's folder: others may enter, not write
        result = run_worker(str(locked / "sessions.db"), shared_tmp, as_user=NOBODY)
    else:
        locked.chmod(0o555)
        try:
            result = run_worker(str(locked / "sessions.db"), shared_tmp)
        finally:
            locked.chmod(0o755)
    assert last_line(result) == (
        f"dplan-worker: session store {locked / 'sessions.db'}: "
        f"cannot create the file: no permission to write in {locked}"
    )
    assert result.returncode == 1
