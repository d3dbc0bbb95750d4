"""Pick a session store from one string, so every process is configured the same way.

``DPLAN_SESSION_STORE`` (or an explicit target) is either a PostgreSQL URL
(``postgresql://user:pass@host/db?schema=name``; ``schema`` is ours and is removed from
the DSN before asyncpg sees it) or a SQLite location (``sqlite:///abs/path.db``,
``sqlite://relative/path.db`` or a plain path). The default is ``.dplan/sessions.db``
under the current directory: zero set-up for one worker on one host.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durable_plans.session_store.base import SessionStore

ENV_VAR = "DPLAN_SESSION_STORE"
DEFAULT_TARGET = ".dplan/sessions.db"
_POSTGRES_SCHEMES = ("postgresql", "postgres")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_SECRET_QUERY_KEYS = {"password", "passwd", "sslpassword"}
_KEYWORD_SECRET = re.compile(r"(password\s*=\s*)(\S+)", re.IGNORECASE)


def resolve_target(target: str | None = None) -> str:
    """The explicit target, else the environment's, else the default SQLite file."""
    return target or os.environ.get(ENV_VAR) or DEFAULT_TARGET


def _scheme(target: str) -> str | None:
    match = _SCHEME.match(target)
    return match.group(1).lower() if match else None


def split_postgres_target(target: str) -> tuple[str, str | None]:
    """``(dsn without our schema parameter, schema or None)``."""
    parts = urlsplit(target)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    kept = [(key, value) for key, value in query if key != "schema"]
    dsn = urlunsplit(parts._replace(query=urlencode(kept)))
    return dsn, (schemas[-1] if schemas else None)


def sqlite_path(target: str) -> Path:
    """The file a SQLite target names (``sqlite:///abs`` is absolute, as in a URL)."""
    path = target[len("sqlite://") :] if _scheme(target) == "sqlite" else target
    if not path:
        raise ValueError(f"no SQLite file path in session store target {target!r}")
    return Path(path)


async def open_session_store(target: str | None = None) -> SessionStore:
    """Open (and create, if needed) the store ``target`` names; see the module doc."""
    resolved = resolve_target(target)
    scheme = _scheme(resolved)
    if scheme in _POSTGRES_SCHEMES:
        # Imported here: asyncpg is an optional dependency the SQLite default never needs.
        from durable_plans.session_store.postgres import PostgresSessionStore

        dsn, schema = split_postgres_target(resolved)
        if schema is None:
            return await PostgresSessionStore.open(dsn)
        return await PostgresSessionStore.open(dsn, schema=schema)
    if scheme is None or scheme == "sqlite":
        from durable_plans.session_store.sqlite import SqliteSessionStore

        return await SqliteSessionStore.open(sqlite_path(resolved))
    raise ValueError(
        f"unsupported session store scheme {scheme!r} in {describe_store_target(resolved)!r}: "
        "use postgresql://..., sqlite:///path or a file path"
    )


def describe_store_target(target: str | None = None) -> str:
    """The target as it may appear in logs: any password replaced by ``***``."""
    resolved = resolve_target(target)
    scheme = _scheme(resolved)
    if scheme is None:
        return _KEYWORD_SECRET.sub(r"\1***", resolved)
    if scheme == "sqlite":
        return f"sqlite://{sqlite_path(resolved)}"
    parts = urlsplit(resolved)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    query = [
        (key, "***" if key.lower() in _SECRET_QUERY_KEYS else value)
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="*")))
