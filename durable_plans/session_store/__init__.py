"""Session stores: where conversations live, so workflow payloads carry only ids."""

from durable_plans.session_store.base import (
    InvalidStoreTarget,
    MessageIdRequired,
    SessionNotFound,
    SessionStore,
    SessionStoreError,
    SessionStoreUnavailable,
    SnapshotNotFound,
    SnapshotSessionMismatch,
    WaitTally,
)

__all__ = [
    "InvalidStoreTarget",
    "MessageIdRequired",
    "SessionNotFound",
    "SessionStore",
    "SessionStoreError",
    "SessionStoreUnavailable",
    "SnapshotNotFound",
    "SnapshotSessionMismatch",
    "WaitTally",
]
