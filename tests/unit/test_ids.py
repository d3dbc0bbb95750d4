"""Every derived id, pinned to the value the code produced before ids moved to one module.

These strings live in recorded histories and in session stores written by older versions:
if one of these assertions fails, the change breaks replay or loses old data. Add a new
id function rather than changing an old one.
"""

from __future__ import annotations

import pytest

from durable_plans.domain import ids

GOLDEN: list[tuple[str, str, str]] = [
    ("stable_id", ids.stable_id("a", 1, "b"), "e0b4b86d843887f5972260cd"),
    ("stable_id length", ids.stable_id("run-xyz", length=10), "5ea77c282e"),
    ("stable_id surrogate", ids.stable_id("call_\ud800x"), "6375936e964278c0a6f04e73"),
    ("message_id", ids.message_id("p1.abc/a", 2, 3), "m-490f564bb77bacf4d485a2d8"),
    ("message_id default", ids.message_id("p1.abc/a", 0), "m-56d73591b130f6aabe4856bc"),
    ("session_workflow_id", ids.session_workflow_id("chat-1"), "session/chat-1"),
    ("subtask_workflow_id", ids.subtask_workflow_id("p1", "a"), "p1/a"),
    ("spawned_subtask_id", ids.spawned_subtask_id("coder", 2, 1), "coder-2-1"),
    ("spawned_workflow_id", ids.spawned_workflow_id("p1/a", "coder-2-1"), "p1/a/coder-2-1"),
    ("plan_run_id", ids.plan_run_id("p1", "0190-run"), "p1.519f1f798b"),
    ("subtask_scope", ids.subtask_scope("p1.abc", "a"), "p1.abc/a"),
    ("session_turn_scope", ids.session_turn_scope("session/chat-1", 4), "session/chat-1/m4"),
    (
        "session_plan_id",
        ids.session_plan_id("chat-1", "session/chat-1/m4", 1, 0),
        "plan-eab180308729",
    ),
    ("plan_session_id", ids.plan_session_id("p1", None), "plan-p1"),
    ("plan_session_id given", ids.plan_session_id("p1", "s9"), "s9"),
    ("branch_session_id", ids.branch_session_id("s1", "p1.abc", "a"), "s1:p1.abc:a:branch"),
    ("attempt_key first", ids.attempt_key("build", 0), "build"),
    ("attempt_key retried", ids.attempt_key("build", 2), "build~2"),
    ("snapshot_id", ids.snapshot_id("s1", "p1.abc", "a"), "s1:p1.abc:a"),
    ("switch_snapshot_id", ids.switch_snapshot_id("m-1"), "m-1:before-switch"),
    (
        "child_session_id",
        ids.child_session_id("s1:p1.abc:a:branch", "p1.abc/a", 2, 1),
        "sub-3378bb6ada20",
    ),
    ("short_session_id", ids.short_session_id("sub-0123456789ab"), "01234567"),
    ("assistant_message_id", ids.assistant_message_id("p1.abc/a", 0), "m-56d73591b130f6aabe4856bc"),
    ("tool_message_id", ids.tool_message_id("p1.abc/a", 2, 1), "m-9d9c291347d84cd62c66c215"),
    ("note_message_id", ids.note_message_id("p1.abc/a", 2, 0), "m-c6f0374936836bc3f698f9b4"),
    (
        "delegation_charge_id",
        ids.delegation_charge_id("p1.abc/a", 2, 1),
        "m-01911be41b0ea348c70a748b",
    ),
    ("branch_system", ids.branch_system_message_id("p1.abc/a"), "m-87958efb7d6d3fb8649ebe57"),
    ("branch_context", ids.branch_context_message_id("p1.abc/a"), "m-47cb16cc06535bc76d2a09bb"),
    ("branch_task", ids.branch_task_message_id("p1.abc/a"), "m-d33be89250890e2b12fca511"),
    ("merged_result_id", ids.merged_result_id("p1.abc", "a"), "m-c8205a695b66da13552e3e59"),
    ("user_message_id", ids.user_message_id("session/chat-1/m4"), "m-78b2f961a56e49b9465f6cbd"),
    ("switch_note_id", ids.switch_note_id("session/chat-1", 2), "m-4a79643d54277be327700779"),
    (
        "plan_summary_message_id",
        ids.plan_summary_message_id("session/chat-1", "plan-x"),
        "m-8176b82d360a9f8f62ab18e1",
    ),
    (
        "missing_result_message_id",
        ids.missing_result_message_id("c1"),
        "m-df6ddedc1e447ee290f63603",
    ),
    ("webhook_message_id", ids.webhook_message_id("p1.abc"), "msg_972816c2a57a8afd2a173b37"),
    ("tool_call_id", ids.tool_call_id("m-1", 0), "call_719c099201f610b1c5d199f9"),
    (
        "repair_tool_call_id",
        ids.repair_tool_call_id("m-1", 2, 0),
        "call_85469ebfafa992b47c8918fc",
    ),
]


@pytest.mark.parametrize(("name", "got", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_id_is_unchanged(name: str, got: str, expected: str) -> None:
    assert got == expected, f"{name} changed: recorded histories and old stores depend on it"


def test_every_public_id_function_is_pinned() -> None:
    """A new id function gets a golden value here too (its output becomes persistent)."""
    pinned = {g[0].split(" ")[0] for g in GOLDEN}
    pinned |= {"branch_system_message_id", "branch_context_message_id", "branch_task_message_id"}
    functions = {n for n in ids.__all__ if callable(getattr(ids, n))}
    assert functions - pinned == set()
