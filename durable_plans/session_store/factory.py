"""Pick a session store from one string, so every process is configured the same way.

``DPLAN_SESSION_STORE`` (or an explicit target) is either a PostgreSQL URL
(``postgresql://user:pass@host/db?schema=name``; ``schema`` is ours and is removed from
the DSN before asyncpg sees it) or a SQLite location (``sqlite:///abs/path.db``,
``sqlite://relative/path.db`` or a plain path). The default is ``.dplan/sessions.db``
under the current directory: zero set-up for one worker on one host.

A store that cannot be opened (no such database, a refused connection, a directory where
the file should be) is reported as :class:`SessionStoreUnavailable`: one line naming the
store (its URL without the password, or its path) and the reason, not a driver's
exception that says neither.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from durable_plans._errors import InvalidStoreTarget, SessionStoreUnavailable
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
    """Open (and create, if needed) the store ``target`` names; see the module doc.

    Raises :class:`InvalidStoreTarget` for a malformed target and
    :class:`SessionStoreUnavailable` for a store that refuses to open.
    """
    resolved = resolve_target(target)
    scheme = _scheme(resolved)
    if scheme in _POSTGRES_SCHEMES:
        return await _open_postgres(resolved)
    if scheme is None or scheme == "sqlite":
        return await _open_sqlite(resolved)
    raise InvalidStoreTarget(
        describe_store_target(resolved),
        f"unsupported scheme {scheme!r} (use postgresql://..., sqlite:///path or a file path)",
    )


async def _open_postgres(target: str) -> SessionStore:
    # Imported here: asyncpg is an optional dependency the SQLite default never needs.
    from durable_plans.session_store import postgres

    shown = describe_store_target(target)
    dsn, schema = split_postgres_target(target)
    problem = _address_problem(dsn)
    try:
        if schema is not None:
            postgres.quote_identifier(schema)
    except ValueError as err:
        problem = str(err)
    if problem is not None:
        raise InvalidStoreTarget(shown, problem)
    try:
        if schema is None:
            return await postgres.PostgresSessionStore.open(dsn)
        return await postgres.PostgresSessionStore.open(dsn, schema=schema)
    except Exception as err:
        reason = postgres.unavailable_reason(err)
        if reason is None:
            if not isinstance(err, ValueError):
                raise
            # asyncpg's reading of the URL itself (it accepts more than urlsplit does).
            raise InvalidStoreTarget(shown, f"malformed URL: {_hidden(err, target)}") from err
        failed = InvalidStoreTarget if isinstance(err, ValueError) else SessionStoreUnavailable
        raise failed(shown, _without_password(reason, target)) from err


async def _open_sqlite(target: str) -> SessionStore:
    from durable_plans.session_store import sqlite

    try:
        path = sqlite_path(target)
    except ValueError:
        raise InvalidStoreTarget(target, "no file path after sqlite://") from None
    shown = describe_store_target(target)
    try:
        return await sqlite.SqliteSessionStore.open(path)
    except SessionStoreUnavailable as err:
        raise SessionStoreUnavailable(shown, err.reason) from err
    except Exception as err:
        reason = sqlite.unavailable_reason(path, err)
        if reason is None:
            raise
        raise SessionStoreUnavailable(shown, reason) from err


def _address_problem(dsn: str) -> str | None:
    """What is wrong with the hosts and ports of a PostgreSQL URL, if anything: asyncpg
    would say only "invalid literal for int()"."""
    hosts = urlsplit(dsn).netloc.rpartition("@")[2]
    for host in hosts.split(","):
        # An IPv6 address is bracketed ([::1]:5432); a host name has no colon of its own.
        after_host = host.rpartition("]")[2] if host.startswith("[") else host
        port = after_host.partition(":")[2]
        if port and not port.isdigit():
            return f"invalid port {port!r} (a number, as in host:5432)"
    return None


def _without_password(text: str, target: str) -> str:
    """``text`` with the target's passwords (in the user info or the query, as written
    and decoded) replaced by ``***``."""
    parts = urlsplit(target)
    secrets = [
        value
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
        if key.lower() in _SECRET_QUERY_KEYS
    ]
    userinfo = parts.netloc.rpartition("@")[0]
    if ":" in userinfo:
        secrets.append(userinfo.partition(":")[2])
    for secret in secrets:
        for form in (secret, unquote(secret)):
            if form:
                text = text.replace(form, "***")
    return text


def _hidden(err: Exception, target: str) -> str:
    return _without_password(" ".join(str(err).split()), target)


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
