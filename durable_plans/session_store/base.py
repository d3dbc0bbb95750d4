"""The one interface every session backend implements.

Sessions live here, not in workflow payloads, so a long conversation never nears Temporal's
payload or history limits; workflows carry only ids. Every write is idempotent under
retry because activities that call it may run more than once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from durable_plans.domain.models import Message, SessionMeta, Usage


@dataclass(frozen=True)
class WaitTally:
    """The refusals recorded for one call (``SessionStore.record_wait``) and the seconds
    they asked to wait, summed."""

    refusals: int = 0
    waited_s: float = 0.0


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

    async def charge(self, root_session_id: str, charge_id: str, usage: Usage) -> Usage:
        """Charge ``usage`` to the session tree rooted at ``root_session_id`` and return the
        root's new total (the sum of all its charges).

        A plan, its subtasks, their sub-agents and delegations all charge one root, so one
        budget covers the whole tree. ``charge_id`` must be deterministic (e.g. workflow id
        + step): a second charge with the same id is a no-op that returns the unchanged
        total, so an activity retried after a crash never double-charges. The first charge
        wins even if the retry reports a different usage, because the ledger records what
        was charged, and a retry that silently rewrote it would make totals unauditable.

        Concurrent chargers of one root (many workers, several hosts) are serialized by the
        store: no charge is ever lost, and each call returns the exact total right after
        its own charge in that serial order, so of two racing charges the later one always
        sees both (a budget check on the returned total cannot be fooled by a race).

        No session row needs to exist for ``root_session_id``: the root id is only a key.
        A budget may be charged before the root session is written (or by a caller that
        never creates one), and deleting a session does not refund what the tree spent.
        Empty ids and a non-finite cost raise ``ValueError`` before anything is written."""

    async def total_usage(self, root_session_id: str) -> Usage:
        """The root's total usage so far; zero ``Usage`` for a root never charged."""

    async def record_wait(self, call_id: str, entry: str, wait_s: float) -> WaitTally:
        """Record that one attempt (``entry``) of the call ``call_id`` was refused and
        waits ``wait_s`` seconds before the next (a provider's rate limit,
        ``activities/llm_patience.py``); returns the call's tally, this wait included.

        Idempotent per ``(call_id, entry)`` like ``charge``: an attempt recorded twice
        counts once, with its first wait. Empty ids and a negative or non-finite wait
        raise ``ValueError`` before anything is written."""

    async def waits(self, call_id: str) -> WaitTally:
        """The tally of ``call_id`` so far; an empty tally for a call never refused."""

    async def close(self) -> None: ...
