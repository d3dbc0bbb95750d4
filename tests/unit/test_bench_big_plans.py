"""The big-plan benchmark's own pieces (``bench.big_plans``): its plan shape and how it
finds the largest payload in a history event. No server, no timing."""

from __future__ import annotations

import json

from temporalio.api.history.v1 import HistoryEvent

from bench.big_plans import CHAIN, MAX_PARALLEL, largest_payload, wide_plan
from durable_plans.domain.plan_data import INLINE_PLAN_BYTES, input_size
from durable_plans.domain.plan_loader import validate_plan
from durable_plans.domain.scheduling import critical_path_length


def test_the_plan_is_a_root_chains_and_a_fan_out_of_the_size_asked() -> None:
    for size in (100, 1_000, 10_000):
        plan = wide_plan(size)
        assert len(plan.subtasks) == size
        assert validate_plan(plan) == []
        assert plan.max_parallel == MAX_PARALLEL
        assert critical_path_length(plan) == CHAIN + 1  # the root, then a chain
        fan_out = [s for s in plan.subtasks if s.id.startswith("f")]
        assert all(s.depends_on == ("root",) for s in fan_out)
        assert abs(len(fan_out) - size / 2) <= 1
    # The full mode's smaller plan already travels by reference.
    data = json.loads(wide_plan(1_000).model_dump_json(exclude_defaults=True))
    assert input_size({"plan": data}) > INLINE_PLAN_BYTES


def test_largest_payload_looks_in_repeated_fields_and_maps() -> None:
    event = HistoryEvent()
    attrs = event.workflow_execution_started_event_attributes
    attrs.input.payloads.add().data = b"x" * 1000
    attrs.input.payloads.add().data = b"x" * 10
    assert largest_payload(event) == attrs.input.payloads[0].ByteSize()
    attrs.memo.fields["goal"].data = b"y" * 5000
    assert largest_payload(event) == attrs.memo.fields["goal"].ByteSize()
    assert largest_payload(HistoryEvent()) == 0


def test_the_user_path_shapes_are_a_fan_out_off_a_root_and_chains_of_ten() -> None:
    from bench.big_plans import cases_for, shape_plan

    fan = shape_plan("fanout", 100, "coder")
    assert len(fan.subtasks) == 100 and validate_plan(fan) == []
    assert critical_path_length(fan) == 2
    assert all(s.agent == "coder" for s in fan.subtasks)
    chains = shape_plan("chains", 1_000, "ask")
    assert len(chains.subtasks) == 1_000 and validate_plan(chains) == []
    assert critical_path_length(chains) == CHAIN
    assert sum(1 for s in chains.subtasks if not s.depends_on) == 100
    mixed = shape_plan("mixed", 100, "coder")
    assert [s.id for s in mixed.subtasks] == [s.id for s in wide_plan(100).subtasks]
    # The paths of one size, shape and agent run one after the other (the same minute).
    cases = cases_for([100], ["fanout"], ["ask"], ["in-process/memory", "cli/file"])
    assert [c.path for c in cases] == ["in-process/memory", "cli/file"]
