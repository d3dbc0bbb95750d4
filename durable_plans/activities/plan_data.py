"""A plan's data in the session store, by content hash (``domain.plan_data``).

The store is the one place every worker of a deployment shares, and it already holds
what must outlive a workflow's payloads (conversations). A plan's full JSON is kept there
as a session of its own, ``plandata.<sha256>``, split into messages of at most
``CHUNK_CHARS`` characters with ids derived from the hash: storing the same plan again,
or a retried activity storing it twice, appends nothing. Reading it back checks the size
and the hash, so a reference whose data is gone or was changed is refused with one line
(``PlanDataUnavailable``, not retryable: waiting will not bring the bytes back), never
read as some other plan.

Stored data is immutable by construction (its id is its hash), so the plans read for
subtasks' branches are cached per worker by hash: a 10,000-subtask plan is read and
parsed once per worker, not once per subtask.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_plans._errors import InvalidInput, PlanDataError
from durable_plans.domain.agents import BUILTIN_CATALOG, AgentCatalog
from durable_plans.domain.contracts import (
    ACT_PLAN_DATA_CHECK,
    ACT_PLAN_DATA_SAVE_REPORT,
    ACT_PLAN_DATA_UNPACK,
    PlanDataCheckInput,
    PlanDataSaveReportInput,
    PlanDataUnpackInput,
    PlanInput,
)
from durable_plans.domain.failures import FailureType, invalid_plan_error
from durable_plans.domain.inputs import plan_input_from_value
from durable_plans.domain.models import Message, Plan, PlanReport, SessionMeta, Subtask
from durable_plans.domain.plan_data import (
    MAX_LEAN_BYTES,
    PACKED_FIELD,
    PlanDataRef,
    content_hash,
    lean_plan,
    plan_bytes,
    plan_data_session_id,
    unpack,
)
from durable_plans.domain.plan_loader import MAX_PLAN_BYTES, validate_plan
from durable_plans.session_store import SessionNotFound, SessionStore

CHUNK_CHARS: Final = 512 * 1024
_CACHED_PLANS: Final = 8
# Each cached plan with its subtasks by id: every subtask of a plan run by reference looks
# its own entry up, and rebuilding the index per subtask made a plan's starts quadratic.
_plans: OrderedDict[str, tuple[Plan, Mapping[str, Subtask]]] = OrderedDict()


def unavailable(ref: PlanDataRef, why: str) -> ApplicationError:
    return ApplicationError(
        f"plan data {ref.label} ({ref.size} bytes) {why}",
        type=FailureType.PLAN_DATA_UNAVAILABLE.value,
        non_retryable=True,
    )


async def put_data(store: SessionStore, data: bytes) -> PlanDataRef:
    """Store ``data`` (UTF-8 text) under its hash; idempotent."""
    ref = PlanDataRef(sha256=content_hash(data), size=len(data))
    session_id = plan_data_session_id(ref)
    text = data.decode("utf-8")
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
    await store.create_session(SessionMeta(session_id=session_id, agent="plan-data"))
    await store.append(
        session_id,
        [
            Message(id=f"{session_id}.{i}", role="system", content=chunk)
            for i, chunk in enumerate(chunks)
        ],
    )
    return ref


async def get_data(store: SessionStore, ref: PlanDataRef) -> bytes:
    """The bytes ``ref`` names; ``PlanDataUnavailable`` when missing or altered."""
    try:
        messages = await store.read(plan_data_session_id(ref))
    except SessionNotFound:
        raise unavailable(ref, "is missing from the session store") from None
    if not messages:
        raise unavailable(ref, "is missing from the session store")
    data = "".join(m.content or "" for m in messages).encode("utf-8")
    if len(data) != ref.size or content_hash(data) != ref.sha256:
        raise unavailable(ref, "was altered in the session store (its content hash differs)")
    return data


async def stored_report(store: SessionStore, ref: PlanDataRef) -> PlanReport:
    """A big plan's whole report, as its summary's ``full_report`` names it."""
    try:
        return PlanReport.model_validate_json(await get_data(store, ref))
    except ValueError:
        raise unavailable(ref, "is not a plan report") from None


async def stored_plan(store: SessionStore, ref: PlanDataRef) -> Plan:
    """The full plan ``ref`` names, read once per worker."""
    return (await _stored(store, ref))[0]


async def stored_subtasks(store: SessionStore, ref: PlanDataRef) -> Mapping[str, Subtask]:
    """The subtasks of the plan ``ref`` names, by id (built once per cached plan)."""
    return (await _stored(store, ref))[1]


async def _stored(store: SessionStore, ref: PlanDataRef) -> tuple[Plan, Mapping[str, Subtask]]:
    cached = _plans.get(ref.sha256)
    if cached is not None:
        _plans.move_to_end(ref.sha256)
        return cached
    data = await get_data(store, ref)
    try:
        plan = Plan.model_validate_json(data)
    except ValueError:
        raise unavailable(ref, "is not a plan") from None
    entry = (plan, MappingProxyType({s.id: s for s in plan.subtasks}))
    _plans[ref.sha256] = entry
    while len(_plans) > _CACHED_PLANS:
        _plans.popitem(last=False)
    return entry


class PlanDataActivities:
    def __init__(self, store: SessionStore) -> None:
        self._store = store

    @activity.defn(name=ACT_PLAN_DATA_UNPACK)
    async def plan_data_unpack(self, inp: PlanDataUnpackInput) -> PlanInput:
        """A packed first input, made the run's input: unpacked, validated as the workflow
        would validate it (every problem, one line each: ``InvalidPlan``), the plan kept
        in the store and replaced by its lean form. A local activity: the whole plan never
        enters the history, and checking thousands of subtasks takes no workflow task."""
        where = f"invalid plan {inp.workflow_id!r}"
        try:
            value = unpack(inp.packed, limit=MAX_PLAN_BYTES)
            if isinstance(value, dict) and PACKED_FIELD in value:
                raise InvalidInput([f"{PACKED_FIELD}: a packed plan holds another"])
            run_input = plan_input_from_value(value, workflow_id=inp.workflow_id)
        except PlanDataError as err:
            line = f"{PACKED_FIELD}: {err}"
            raise invalid_plan_error(f"{where}: {line}", [line]) from None
        except InvalidInput as err:
            raise invalid_plan_error(f"{where}: " + "; ".join(err.problems), err.problems) from None
        plan = run_input.plan
        where = f"invalid plan {plan.id!r}"
        catalog = AgentCatalog(agents=run_input.agents) if run_input.agents else BUILTIN_CATALOG
        problems = validate_plan(plan, known_agents=catalog.names())
        if problems:
            raise invalid_plan_error(f"{where}: " + "; ".join(problems), problems)
        if run_input.plan_data is not None:  # sent packed and by reference (a retry)
            await self._check(run_input.plan_data, plan)
            return run_input
        lean = lean_plan(plan)
        size = len(lean.model_dump_json(exclude_defaults=True).encode("utf-8"))
        if size > MAX_LEAN_BYTES:
            line = (
                f"plan structure is too large to carry ({size} bytes of ids, agents "
                f"and dependencies, limit {MAX_LEAN_BYTES}): split the plan"
            )
            raise invalid_plan_error(f"{where}: {line}", [line])
        ref = await put_data(self._store, plan_bytes(plan))
        return run_input.model_copy(update={"plan": lean, "plan_data": ref})

    @activity.defn(name=ACT_PLAN_DATA_SAVE_REPORT)
    async def plan_data_save_report(self, inp: PlanDataSaveReportInput) -> PlanDataRef:
        """Keep a big plan's whole report in the store (a local activity: the report
        never enters the history); its summary names the reference."""
        data = inp.report.model_dump_json(exclude_defaults=True).encode("utf-8")
        return await put_data(self._store, data)

    @activity.defn(name=ACT_PLAN_DATA_CHECK)
    async def plan_data_check(self, inp: PlanDataCheckInput) -> PlanDataRef:
        """The reference's data is there, unchanged, and is the plan the run holds: the
        same subtasks and dependencies (descriptions, agents and models may have been
        edited since, by ``dplan retry``)."""
        if inp.known_agents:
            problems = validate_plan(inp.lean, known_agents=inp.known_agents)
            if problems:
                where = f"invalid plan {inp.lean.id!r}"
                raise invalid_plan_error(f"{where}: " + "; ".join(problems), problems)
        await self._check(inp.ref, inp.lean)
        return inp.ref

    async def _check(self, ref: PlanDataRef, lean: Plan) -> None:
        plan = await stored_plan(self._store, ref)
        if _shape(plan) != _shape(lean):
            raise unavailable(ref, "is not the plan this run holds (its subtasks differ)")


def _shape(plan: Plan) -> list[tuple[str, tuple[str, ...]]]:
    return [(s.id, s.depends_on) for s in plan.subtasks]
