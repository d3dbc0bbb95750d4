"""A plan's data by reference: packing, lean plans, the remaining limits, the store."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from durable_plans import InvalidPlan
from durable_plans._errors import PlanDataError
from durable_plans.activities.plan_data import (
    PlanDataActivities,
    get_data,
    put_data,
    stored_plan,
)
from durable_plans.activities.sessions import begin_branch
from durable_plans.client._plans import plan_input_arg
from durable_plans.domain.contracts import BeginSubtaskInput, PlanDataCheckInput, PlanInput
from durable_plans.domain.models import (
    ErrorInfo,
    Plan,
    PlanReport,
    Subtask,
    SubtaskResult,
    SubtaskStatus,
    Usage,
)
from durable_plans.domain.plan_data import (
    CARRIED_SUBTASKS,
    INLINE_PLAN_BYTES,
    LEAN_MARK,
    MAX_LEAN_BYTES,
    MAX_PACKED_BYTES,
    PACKED_FIELD,
    PackedPlan,
    PlanDataRef,
    full_description,
    lean_plan,
    pack,
    plan_bytes,
    plan_data_session_id,
    size_problems,
    unpack,
    with_carried_subtasks,
)
from durable_plans.session_store import SessionStore
from durable_plans.session_store.factory import open_session_store


def text(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghij klmnopqrstuvwxyz") for _ in range(chars))


def plan_of(count: int, chars: int, *, plan_id: str = "p") -> Plan:
    return Plan(
        id=plan_id,
        subtasks=tuple(
            Subtask(
                id=f"t{i}",
                description=text(i, chars),
                depends_on=(f"t{i - 1}",) if i else (),
            )
            for i in range(count)
        ),
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_session_store(str(tmp_path / "sessions.db"))
    yield opened
    await opened.close()


# --------------------------------------------------------------------------- domain


def test_pack_round_trips_and_refuses_altered_or_oversized_data() -> None:
    wrapper = {"plan": {"id": "p", "subtasks": [{"id": "a", "description": "é" * 5000}]}}
    packed = pack(wrapper)
    assert unpack(packed, limit=1_000_000) == wrapper
    assert len(packed.zlib_b64) < packed.size  # compressed

    other = pack({"plan": {"id": "q"}})
    swapped = PackedPlan(sha256=packed.sha256, size=other.size, zlib_b64=other.zlib_b64)
    with pytest.raises(PlanDataError, match="altered: its content hash does not match"):
        unpack(swapped, limit=1_000_000)
    with pytest.raises(PlanDataError, match=r"too large \(\d+ bytes, limit 100\)"):
        unpack(packed, limit=100)
    broken = packed.model_copy(update={"zlib_b64": "not base64!"})
    with pytest.raises(PlanDataError, match="cannot be unpacked"):
        unpack(broken, limit=1_000_000)


def test_a_continued_runs_input_gives_its_subtasks_back_to_readers() -> None:
    subtasks = [{"id": "a", "description": "x […]"}, {"id": "b", "description": "y"}]
    carried = pack({"results": [], "merged": [], CARRIED_SUBTASKS: subtasks})
    value = {"plan": {"id": "p", "subtasks": []}, "carried": carried.model_dump()}
    assert with_carried_subtasks(value)["plan"] == {"id": "p", "subtasks": subtasks}
    # Inputs of first runs, or carried without the subtasks, are read as they are.
    whole = {"plan": {"id": "p", "subtasks": subtasks}}
    assert with_carried_subtasks(whole) is whole
    old = {"plan": {"id": "p", "subtasks": subtasks}, "carried": pack({"results": []}).model_dump()}
    assert with_carried_subtasks(old) is old
    assert with_carried_subtasks(["not", "a", "wrapper"]) == ["not", "a", "wrapper"]
    with pytest.raises(PlanDataError, match="carried: not a packed value"):
        with_carried_subtasks({"plan": {"id": "p", "subtasks": []}, "carried": {"zlib": 1}})


def test_lean_plan_cuts_long_descriptions_to_marked_excerpts_only() -> None:
    plan = Plan(
        id="p",
        subtasks=(
            Subtask(id="short", description="Do it."),
            Subtask(id="long", description="x" * 5000, depends_on=("short",), agent="ask"),
        ),
    )
    lean = lean_plan(plan)
    assert lean.subtask("short") == plan.subtask("short")
    cut = lean.subtask("long")
    assert cut.description == "x" * 120 + LEAN_MARK
    assert (cut.id, cut.agent, cut.depends_on) == ("long", "ask", ("short",))
    # Many subtasks share the budget: shorter excerpts each.
    many = lean_plan(plan_of(10_000, 200))
    assert {len(s.description) for s in many.subtasks} == {20 + len(LEAN_MARK)}


def test_full_description_takes_the_stored_text_unless_edited() -> None:
    stored = Subtask(id="a", description="y" * 500)
    excerpt = Subtask(id="a", description="y" * 120 + LEAN_MARK)
    assert full_description(excerpt, stored) == "y" * 500
    edited = Subtask(id="a", description="a new description")  # dplan retry --set
    assert full_description(edited, stored) == "a new description"
    assert full_description(excerpt, None) == excerpt.description
    never_cut = Subtask(id="a", description="short")
    assert full_description(never_cut, Subtask(id="a", description="other")) == "short"


def test_size_problems_name_what_remains_limited() -> None:
    assert size_problems(plan_of(3, 100), packed=True) == []
    # 150 subtasks of 19,000 characters of random letters: carried fine as a lean plan,
    # but too big to send packed (compressed about 60 %).
    long = plan_of(150, 19_000)
    assert len(plan_bytes(long)) > 2_800_000
    assert size_problems(long, packed=False) == []
    (line,) = size_problems(long, packed=True)
    assert line.startswith("plan is too large to send without the session store (")
    assert line.endswith(
        f"compressed, limit {MAX_PACKED_BYTES}): run it with --embedded, or shorten "
        "descriptions or split the plan"
    )
    # Long ids and many dependencies: the lean plan itself is too big to carry.
    stem = "s" * 100
    wide = Plan(
        id="w",
        subtasks=tuple(
            Subtask(
                id=f"{stem}{i}",
                description="x",
                depends_on=tuple(f"{stem}{j}" for j in range(max(0, i - 6), i)),
            )
            for i in range(2_500)
        ),
    )
    problems = size_problems(wide, packed=False)
    assert len(problems) == 1
    assert problems[0].startswith("plan structure is too large to carry (")
    assert problems[0].endswith(f"limit {MAX_LEAN_BYTES}): split the plan")


def test_a_plan_under_the_inline_size_is_never_checked_further() -> None:
    small = plan_of(20, 1000)
    assert len(plan_bytes(small)) < INLINE_PLAN_BYTES
    assert size_problems(small, packed=True) == []


# --------------------------------------------------------------------------- store


async def test_stored_data_round_trips_idempotently(store: SessionStore) -> None:
    data = plan_bytes(plan_of(40, 30_000))  # several chunks
    ref = await put_data(store, data)
    assert await put_data(store, data) == ref  # stored twice: one session, same messages
    assert len(await store.read(plan_data_session_id(ref))) == -(-len(data) // (512 * 1024))
    assert await get_data(store, ref) == data


async def test_missing_data_is_one_non_retryable_line(store: SessionStore) -> None:
    ref = PlanDataRef(sha256="ab" * 32, size=10)
    with pytest.raises(ApplicationError) as caught:
        await get_data(store, ref)
    assert caught.value.type == "PlanDataUnavailable"
    assert caught.value.non_retryable
    assert caught.value.message == (
        "plan data sha256:abababababababab (10 bytes) is missing from the session store"
    )


async def test_altered_data_is_refused(store: SessionStore) -> None:
    plan = plan_of(3, 100, plan_id="altered")
    ref = await put_data(store, plan_bytes(plan))
    session = plan_data_session_id(ref)
    (message,) = await store.read(session)
    assert message.content is not None
    changed = message.content.replace('"t1"', '"t9"')
    await store.replace(session, [message.model_copy(update={"content": changed})])
    with pytest.raises(ApplicationError, match="was altered in the session store"):
        await get_data(store, ref)


async def test_check_refuses_a_reference_to_another_plan(store: SessionStore) -> None:
    plan = plan_of(3, 300, plan_id="one")
    ref = await put_data(store, plan_bytes(plan))
    activities = PlanDataActivities(store)
    assert (
        await activities.plan_data_check(PlanDataCheckInput(ref=ref, lean=lean_plan(plan))) == ref
    )
    other = plan_of(4, 300, plan_id="one")
    with pytest.raises(ApplicationError, match="is not the plan this run holds"):
        await activities.plan_data_check(PlanDataCheckInput(ref=ref, lean=lean_plan(other)))


async def test_a_branch_is_built_with_the_whole_stored_descriptions(store: SessionStore) -> None:
    plan = plan_of(2, 3000, plan_id="branch")
    ref = await put_data(store, plan_bytes(plan))
    assert (await stored_plan(store, ref)) == plan
    lean = lean_plan(plan)
    await begin_branch(
        store,
        BeginSubtaskInput(
            plan_run_id="branch.run",
            subtask=lean.subtask("t1"),
            base_session_id="base",
            branch_session_id="base:t1",
            snapshot_id="snap-t1",
            dependency_branches=(("t0", "base:t0"),),
            dependency_descriptions=(lean.subtask("t0").description,),
            system_prompt="sys",
            root_session_id="base",
            plan_data=ref,
        ),
    )
    messages = await store.read("base:t1")
    assert messages[-1].content == plan.subtask("t1").description
    assert any(plan.subtask("t0").description in (m.content or "") for m in messages[:-1])


# --------------------------------------------------------------------------- summaries


def _rows(count: int) -> list[SubtaskResult]:
    rows: list[SubtaskResult] = []
    for i in range(count):
        if i % 10 == 3:
            failure = ErrorInfo(type="Boom", message="it broke")
            rows.append(
                SubtaskResult(id=f"s{i}", status=SubtaskStatus.FAILED, agent="a", error=failure)
            )
        elif i % 10 == 4:
            rows.append(SubtaskResult(id=f"s{i}", status=SubtaskStatus.PENDING, agent="a"))
        else:
            rows.append(
                SubtaskResult(
                    id=f"s{i}",
                    status=SubtaskStatus.COMPLETED,
                    agent="a",
                    result="ok",
                    usage=Usage(prompt_tokens=2, completion_tokens=1),
                )
            )
    return rows


def test_a_summary_lists_what_needs_a_look_first_and_keeps_the_whole_counts() -> None:
    full = PlanReport.build("p", _rows(50))
    ref = PlanDataRef(sha256="c" * 64, size=123)
    summary = full.summary(12, full_report=ref)

    assert (summary.counts, summary.usage, summary.status) == (full.counts, full.usage, full.status)
    assert summary.omitted == 38 and len(summary.subtasks) == 12
    assert summary.full_report == ref
    listed = [r.id for r in summary.subtasks]
    # All 5 failures and all 5 pending, then the first completed; listed in plan order.
    assert listed == [
        "s0",
        "s1",
        "s3",
        "s4",
        "s13",
        "s14",
        "s23",
        "s24",
        "s33",
        "s34",
        "s43",
        "s44",
    ]
    assert not summary.finished
    again = PlanReport.model_validate_json(summary.model_dump_json())
    assert again == summary
    # Small enough already: listed whole.
    assert full.summary(50) == full
    assert full.summary(50).omitted == 0


def test_a_summary_cannot_claim_rows_the_counts_do_not_have() -> None:
    full = PlanReport.build("p", _rows(20))
    summary = full.summary(5)
    data = summary.model_dump(mode="json")
    with pytest.raises(ValueError, match="omitted"):
        PlanReport.model_validate({**data, "omitted": summary.omitted + 1})
    with pytest.raises(ValueError, match="do not match"):
        PlanReport.model_validate({**data, "omitted": 0})


# --------------------------------------------------------------------------- client


async def test_a_client_sends_big_plans_packed_or_by_reference(store: SessionStore) -> None:
    small = PlanInput(plan=plan_of(3, 100))
    assert await plan_input_arg(small) is small
    assert await plan_input_arg(small, store) is small

    big = PlanInput(plan=plan_of(40, 10_000))
    packed = await plan_input_arg(big)
    assert isinstance(packed, dict) and set(packed) == {PACKED_FIELD}
    value = unpack(PackedPlan.model_validate(packed[PACKED_FIELD]), limit=10**8)
    assert PlanInput.model_validate(value) == big

    by_ref = await plan_input_arg(big, store)
    assert isinstance(by_ref, PlanInput) and by_ref.plan_data is not None
    assert by_ref.plan == lean_plan(big.plan)
    assert await stored_plan(store, by_ref.plan_data) == big.plan


async def test_a_client_refuses_a_plan_too_big_to_send_packed_in_one_line() -> None:
    big = PlanInput(plan=plan_of(150, 19_000))
    with pytest.raises(InvalidPlan) as caught:
        await plan_input_arg(big)
    (line,) = caught.value.problems
    assert line.startswith("plan is too large to send without the session store")
