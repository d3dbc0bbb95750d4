"""Session stores: where conversations live, so workflow payloads carry only ids."""

from durable_plans.session_store.base import (
    MessageIdRequired,
    SessionNotFound,
    SessionStore,
    SessionStoreError,
    SnapshotNotFound,
    SnapshotSessionMismatch,
)

__all__ = [
    "MessageIdRequired",
    "SessionNotFound",
    "SessionStore",
    "SessionStoreError",
    "SnapshotNotFound",
    "SnapshotSessionMismatch",
]
