"""Message <-> row encoding shared by every backend.

Both backends store a message as one compact JSON text (the whole ``Message``, id
included) next to a few plain columns the SQL needs (``id`` for idempotent appends,
``is_result`` for ``restore(keep_last_result=True)``). Keeping the encoding in one place
is what makes the SQLite and PostgreSQL stores byte-for-byte interchangeable, and lets
snapshot/restore copy rows server-side without ever decoding them. The usage ledger's
checks and row <-> ``Usage`` conversion live here for the same reason.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from durable_plans._errors import MessageIdRequired
from durable_plans.domain.models import Message, SessionMeta, Usage


class Row(NamedTuple):
    """One message as the tables hold it (minus the session id and ``seq``)."""

    id: str
    is_result: bool
    body: str


def encode(message: Message) -> Row:
    # exclude_none keeps bodies small; every omitted field defaults to None on decode,
    # so the round trip stays exact.
    return Row(message.id, message.is_plain_assistant, message.model_dump_json(exclude_none=True))


# Decoding (validating) is what reading a session costs, and a conversation is read whole
# at every turn: the same bodies again and again. A ``Message`` is immutable all the way
# down (frozen models, tuples), so one decoded message can be handed to every reader of
# the same body. Only the usual small bodies are kept, and a bounded number of them.
CACHED_BODY_CHARS = 4_096
CACHED_BODIES = 2_048


def decode(body: str) -> Message:
    # Validation stays on: a body edited by hand or by a future version must fail loudly
    # here rather than produce a message a provider will reject later (a body that fails
    # is never cached: it fails again every time).
    if len(body) <= CACHED_BODY_CHARS:
        return _decode_small(body)
    return Message.model_validate_json(body)


@functools.lru_cache(maxsize=CACHED_BODIES)
def _decode_small(body: str) -> Message:
    return Message.model_validate_json(body)


def decode_all(bodies: Iterable[str]) -> list[Message]:
    return [decode(b) for b in bodies]


def encode_meta(meta: SessionMeta) -> str:
    return meta.model_dump_json()


def decode_meta(text: str) -> SessionMeta:
    return SessionMeta.model_validate_json(text)


def require_ids(messages: Sequence[Message]) -> None:
    """Refuse a batch with any id-less message before anything is written."""
    for index, message in enumerate(messages):
        if not message.id:
            raise MessageIdRequired(
                f"message {index} ({message.role}) has no id; appends need deterministic ids "
                "so a retried activity does not duplicate messages"
            )


def rows_for_append(messages: Sequence[Message]) -> list[Row]:
    """Encoded rows in order, each id once (the first occurrence wins within a batch)."""
    require_ids(messages)
    seen: set[str] = set()
    rows: list[Row] = []
    for message in messages:
        if message.id not in seen:
            seen.add(message.id)
            rows.append(encode(message))
    return rows


def rows_for_replace(messages: Sequence[Message]) -> list[Row]:
    """Encoded rows for a whole new history, whose ids must already be unique."""
    require_ids(messages)
    seen: set[str] = set()
    for message in messages:
        if message.id in seen:
            raise ValueError(f"duplicate message id in replacement history: {message.id!r}")
        seen.add(message.id)
    return [encode(m) for m in messages]


def check_wait(call_id: str, entry: str, wait_s: float) -> None:
    """Refuse a wait that would corrupt a call's tally, before anything is written."""
    if not call_id or not entry:
        raise ValueError("record_wait needs a call_id and a deterministic entry")
    if not math.isfinite(wait_s) or wait_s < 0:
        raise ValueError(f"wait {entry!r} of {call_id!r} must be finite and >= 0: {wait_s!r}")


def check_charge(root_session_id: str, charge_id: str, usage: Usage) -> None:
    """Refuse a charge that would corrupt the ledger, before anything is written.

    An empty ``charge_id`` would make every id-less charge of a root collapse into one
    (all but the first silently dropped); an infinite cost would stick in the total
    forever, since charges are never removed.
    """
    if not root_session_id:
        raise ValueError("charge needs a root_session_id")
    if not charge_id:
        raise ValueError(
            "charge needs a deterministic charge_id so a retried activity does not double-charge"
        )
    if not math.isfinite(usage.cost_usd):
        raise ValueError(f"charge {charge_id!r} has a non-finite cost: {usage.cost_usd!r}")


def usage_from_totals(prompt_tokens: int, completion_tokens: int, cost_usd: float) -> Usage:
    """A totals row as ``Usage``, unrounded: the row holds full double precision, and a sum
    of non-negative finite charges is itself a valid ``NonNegativeFloat``. (``Usage.__add__``
    rounds to 1e-10 to keep in-memory sums tidy; the ledger keeps the exact sum instead.)"""
    return Usage(
        prompt_tokens=int(prompt_tokens),
        completion_tokens=int(completion_tokens),
        cost_usd=float(cost_usd),
    )
