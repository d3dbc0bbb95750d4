"""Session stores: where conversations live, so workflow payloads carry only ids."""

from durable_plans._errors import (
    InvalidStoreTarget,
    MessageIdRequired,
    SessionNotFound,
    SessionStoreError,
    SessionStoreUnavailable,
    SnapshotNotFound,
    SnapshotSessionMismatch,
)
from durable_plans.session_store.base import SessionStore, WaitTally

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
