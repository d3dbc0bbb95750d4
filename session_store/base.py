"""The one interface every session backend implements.

Sessions live here, not in workflow payloads, so a long conversation never nears Temporal's
payload or history limits; workflows carry only ids. Every write is idempotent under
retry because activities that call it may run more than once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from domain.models import Message, SessionMeta


class SessionStoreError(Exception):
    """Base of the store's own errors."""


class SessionNotFound(SessionStoreError, KeyError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session not found: {session_id}")
        self.session_id = session_id

    def __str__(self) -> str:
        return str(self.args[0])


class SnapshotNotFound(SessionStoreError, KeyError):
    def __init__(self, snapshot_id: str) -> None:
        super().__init__(f"snapshot not found: {snapshot_id}")
        self.snapshot_id = snapshot_id

    def __str__(self) -> str:
        return str(self.args[0])


class MessageIdRequired(SessionStoreError, ValueError):
    """Appends need deterministic ids; an empty one would defeat retry idempotency."""


class SnapshotSessionMismatch(SessionStoreError, ValueError):
    """A snapshot belongs to the session it was taken from; using it with another session
    would silently graft a foreign history, so it is refused."""

    def __init__(self, snapshot_id: str, owner_session_id: str, session_id: str) -> None:
        super().__init__(
            f"snapshot {snapshot_id!r} belongs to session {owner_session_id!r}, "
            f"not to session {session_id!r}"
        )
        self.snapshot_id = snapshot_id
        self.owner_session_id = owner_session_id
        self.session_id = session_id


@runtime_checkable
class SessionStore(Protocol):
    async def create_session(self, meta: SessionMeta) -> SessionMeta:
        """Create the session if absent and return the stored metadata (idempotent:
        a second call with the same id returns the first call's metadata unchanged)."""

    async def get_session(self, session_id: str) -> SessionMeta:
        """Metadata of an existing session; ``SessionNotFound`` otherwise."""

    async def update_session(self, meta: SessionMeta) -> None:
        """Overwrite metadata (agent, ended, budget) of an existing session."""

    async def append(self, session_id: str, messages: Sequence[Message]) -> int:
        """Append in order; messages whose id is already in the session are skipped.
        Returns how many were actually added. Safe under concurrent writers."""

    async def read(self, session_id: str) -> list[Message]:
        """All messages, oldest first."""

    async def count(self, session_id: str) -> int:
        """Number of messages, without reading them."""

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        """Atomically swap the whole history (readers see old or new, never a mix)."""

    async def snapshot(self, session_id: str, snapshot_id: str) -> int:
        """Copy the current history under ``snapshot_id``. If that snapshot already
        exists it is kept as it is (a retried activity must not overwrite the
        pre-subtask state with a later one). Returns the snapshot's message count."""

    async def restore(
        self, session_id: str, snapshot_id: str, *, keep_last_result: bool = False
    ) -> list[Message]:
        """Make the history exactly the snapshot's again. With ``keep_last_result``,
        the last plain assistant answer written after the snapshot is appended once
        more (as a plain assistant message). The snapshot is kept; returns the new
        history."""

    async def read_snapshot(self, snapshot_id: str) -> list[Message]:
        """The snapshot's messages, oldest first; ``SnapshotNotFound`` if absent."""

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        """Drop a snapshot; False when it did not exist (idempotent)."""

    async def has_snapshot(self, snapshot_id: str) -> bool: ...

    async def close(self) -> None: ...
