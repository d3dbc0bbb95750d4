"""A plan's data by reference: what travels in payloads when a plan is too big to.

Temporal refuses a payload above its blob limit (2 MiB by default) and warns above
512 KiB, and a workflow's input is written to its history again at every continue-as-new.
A plan of thousands of subtasks, or of long descriptions, therefore does not travel
whole. Its full JSON lives in the session store under its content hash (a
:class:`PlanDataRef`), and the workflow holds a *lean* plan: the same plan with every
description cut to a short excerpt that ends in :data:`LEAN_MARK`. A subtask's branch is
built from the stored plan (``activities.sessions.begin_branch``), so the agent reads its
whole description; the workflow, its continue-as-new input and its children's inputs
carry only the excerpt and the reference.

A client that cannot reach the session store sends the plan *packed* (zlib, base64) in
its first input; the workflow's first task stores it and goes on by reference. So what
remains limited is the packed plan (:data:`MAX_PACKED_BYTES`, it must fit one payload)
and the lean plan (:data:`MAX_LEAN_BYTES`, it is carried in every run's input):
:func:`size_problems` names either in one line, as ``dplan validate`` prints it.

Pure and deterministic (hashlib, zlib and base64 only): used inside workflow code.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from durable_plans._errors import PlanDataError
from durable_plans.domain.models import Plan, PlanDataRef, Subtask
from durable_plans.domain.plan_loader import MAX_PLAN_BYTES

__all__ = [
    "CARRIED_SUBTASKS",
    "INLINE_PLAN_BYTES",
    "LEAN_MARK",
    "MAX_LEAN_BYTES",
    "MAX_PACKED_BYTES",
    "PACKED_FIELD",
    "PackedPlan",
    "PlanDataError",
    "PlanDataRef",
    "content_hash",
    "full_description",
    "lean_plan",
    "lean_size",
    "pack",
    "plan_data_session_id",
    "size_problems",
    "unpack",
    "with_carried_subtasks",
]

# A plan whose input JSON is at most this big is sent whole, as it always was (runs of
# such plans record the same history as before); a bigger one goes by reference.
INLINE_PLAN_BYTES: Final = 256 * 1024
# The packed plan rides in one payload beside the agent catalog: below the server's
# 2 MiB blob limit with room to spare.
MAX_PACKED_BYTES: Final = 1536 * 1024
# The lean plan is in every run's input (and so in every run's history): a tenth of the
# blob limit per 2,000 subtasks keeps a 10,000-subtask plan's at about 1 MiB.
MAX_LEAN_BYTES: Final = 1536 * 1024
# Descriptions in the lean plan share this many characters (at most ``LEAN_CHARS`` each).
LEAN_BUDGET_CHARS: Final = 200_000
LEAN_CHARS: Final = 120
LEAN_MARK: Final = " […]"
# The wrapper field of a packed first input (``{"packed_plan": {...}}``).
PACKED_FIELD: Final = "packed_plan"
# In a continued run's packed progress (``PlanInput.carried``): the lean plan's subtasks,
# which its ``plan`` then leaves out.
CARRIED_SUBTASKS: Final = "subtasks"


class PackedPlan(BaseModel):
    """A plan input (the ``PlanInput`` wrapper's JSON) compressed, with its hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    zlib_b64: str


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plan_data_session_id(ref: PlanDataRef) -> str:
    """The session that holds the data: its id is the content hash, so the same plan
    stored twice is one session, and what a reference names can never change."""
    return f"plandata.{ref.sha256}"


def plan_bytes(plan: Plan) -> bytes:
    """The stored form of a plan: its canonical JSON (what the hash is taken over)."""
    return plan.model_dump_json(exclude_defaults=True).encode("utf-8")


def pack(wrapper: dict[str, Any]) -> PackedPlan:
    raw = json.dumps(wrapper, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    packed = base64.b64encode(zlib.compress(raw, 6)).decode("ascii")
    return PackedPlan(sha256=content_hash(raw), size=len(raw), zlib_b64=packed)


def unpack(packed: PackedPlan, *, limit: int) -> Any:
    """The JSON value ``packed`` holds; ``PlanDataError`` when it is corrupt, altered or
    larger than ``limit`` bytes once inflated."""
    if packed.size > limit:
        raise PlanDataError(f"the packed plan is too large ({packed.size} bytes, limit {limit})")
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(packed.zlib_b64, validate=True), limit + 1)
    except (ValueError, zlib.error) as err:
        raise PlanDataError(f"the packed plan cannot be unpacked: {err}") from None
    if len(raw) != packed.size or content_hash(raw) != packed.sha256:
        raise PlanDataError("the packed plan was altered: its content hash does not match")
    try:
        return json.loads(raw)
    except ValueError as err:
        raise PlanDataError(f"the packed plan is not JSON: {err}") from None


def lean_chars(count: int) -> int:
    return max(1, min(LEAN_CHARS, LEAN_BUDGET_CHARS // max(count, 1)))


def lean_description(description: str, limit: int) -> str:
    if len(description) <= limit:
        return description
    return description[:limit] + LEAN_MARK


def lean_plan(plan: Plan) -> Plan:
    """``plan`` with each description cut to an excerpt (``LEAN_MARK`` where it was cut)."""
    limit = lean_chars(len(plan.subtasks))
    subtasks = tuple(
        s
        if len(s.description) <= limit
        else s.model_copy(update={"description": lean_description(s.description, limit)})
        for s in plan.subtasks
    )
    return plan.model_copy(update={"subtasks": subtasks})


def lean_size(plan: Plan) -> int:
    return len(lean_plan(plan).model_dump_json(exclude_defaults=True).encode("utf-8"))


def full_description(lean: Subtask, stored: Subtask | None) -> str:
    """The description a subtask runs with: the stored one when ``lean`` holds its
    excerpt; ``lean``'s own when it was never cut or was edited since (``dplan retry``
    with a new description replaces the excerpt with the whole text)."""
    if stored is None or not lean.description.endswith(LEAN_MARK):
        return lean.description
    head = lean.description[: -len(LEAN_MARK)]
    if stored.description.startswith(head) and len(stored.description) > len(head):
        return stored.description
    return lean.description


def input_size(wrapper: dict[str, Any]) -> int:
    return len(json.dumps(wrapper, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def size_problems(plan: Plan, *, packed: bool) -> list[str]:
    """What stops ``plan`` from being sent and carried (empty when nothing does). A plan
    bigger than ``INLINE_PLAN_BYTES`` travels by reference: its lean form has to fit one
    payload, and, when the client cannot put it in the session store itself
    (``packed``), so has the packed plan."""
    data = plan.model_dump(mode="json", exclude_defaults=True)
    if input_size(data) <= INLINE_PLAN_BYTES:
        return []
    out: list[str] = []
    lean = lean_size(plan)
    if lean > MAX_LEAN_BYTES:
        out.append(
            f"plan structure is too large to carry ({lean} bytes of ids, agents and "
            f"dependencies, limit {MAX_LEAN_BYTES}): split the plan"
        )
    if packed:
        size = len(pack({"plan": data}).zlib_b64)
        if size > MAX_PACKED_BYTES:
            out.append(
                f"plan is too large to send without the session store ({size} bytes "
                f"compressed, limit {MAX_PACKED_BYTES}): run it with --embedded, or "
                "shorten descriptions or split the plan"
            )
    return out


def with_carried_subtasks(value: Any) -> Any:
    """A run's input JSON as a reader of its plan wants it: a continued run of a plan by
    reference packs its lean plan's subtasks with its progress (``carried``), and they
    are put back in ``plan``; any other value is returned as it is."""
    if not isinstance(value, dict) or not isinstance(value.get("plan"), dict):
        return value
    packed = value.get("carried")
    if packed is None or value["plan"].get("subtasks"):
        return value
    try:
        carried = unpack(PackedPlan.model_validate(packed), limit=MAX_PLAN_BYTES)
    except ValidationError as err:
        raise PlanDataError(f"carried: not a packed value ({err.error_count()} problems)") from None
    if not isinstance(carried, dict) or CARRIED_SUBTASKS not in carried:
        return value
    return {**value, "plan": {**value["plan"], "subtasks": carried[CARRIED_SUBTASKS]}}
