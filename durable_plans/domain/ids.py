"""Deterministic identifiers: every id the system derives, in one place.

Workflow code may not use random ids, and activity retries must write the same rows twice
without duplicating them; both needs are met by deriving every id from stable inputs.

These strings are persisted: in recorded workflow histories (workflow ids, activity
inputs), in session stores written by older versions (message, session and snapshot
ids) and in operators' scripts (``PLAN/SUBTASK``, ``session/ID``). Changing the output of
any function here by one character breaks replay and makes old stores unreadable, so
``tests/unit/test_ids.py`` pins each one to golden values. Add new ids; never change one.

Only the standard library is used: this module runs inside the workflow sandbox.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "SUBAGENT_SESSION_PREFIX",
    "assistant_message_id",
    "attempt_key",
    "branch_context_message_id",
    "branch_session_id",
    "branch_system_message_id",
    "branch_task_message_id",
    "child_session_id",
    "delegation_charge_id",
    "merged_result_id",
    "message_id",
    "missing_result_message_id",
    "note_message_id",
    "plan_run_id",
    "plan_session_id",
    "plan_summary_message_id",
    "repair_tool_call_id",
    "session_plan_id",
    "session_turn_scope",
    "session_workflow_id",
    "short_session_id",
    "snapshot_id",
    "spawned_subtask_id",
    "spawned_workflow_id",
    "stable_id",
    "subtask_scope",
    "subtask_workflow_id",
    "switch_note_id",
    "switch_snapshot_id",
    "tool_call_id",
    "tool_message_id",
    "user_message_id",
    "webhook_message_id",
]

SUBAGENT_SESSION_PREFIX = "sub-"


# --------------------------------------------------------------------------- primitives


def stable_id(*parts: str | int, length: int = 24) -> str:
    """A short hex digest of ``parts``; equal inputs give equal ids on every machine.

    sha256 over the parts' UTF-8 text, each followed by a unit separator (so ``("ab",
    "c")`` and ``("a", "bc")`` differ); no salt, no process state, hence stable across
    runs, machines and Python versions.
    """
    h = hashlib.sha256()
    for p in parts:
        # surrogatepass: a lone surrogate (a model's half-escaped tool-call id) must not crash
        # history repair; every valid string encodes exactly as before, so ids are unchanged.
        h.update(str(p).encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()[:length]


def message_id(scope: str, step: int | str, index: int | str = 0) -> str:
    """Id of the ``index``-th message written at ``step`` of the workflow ``scope``.

    Stable because a scope names one workflow's work (see ``subtask_scope`` and
    ``session_turn_scope``) and step/index are positions in it that replay reproduces: a
    retried activity writes the same id, and the store makes a second append a no-op.
    """
    return f"m-{stable_id(scope, step, index)}"


# --------------------------------------------------------------------------- workflow ids


def session_workflow_id(session_id: str) -> str:
    """Workflow id of the SessionWorkflow holding conversation ``session_id``.

    A function of the session id only, so any client can find (or resume) a conversation
    by its name; Temporal's id uniqueness makes it one workflow per conversation.
    """
    return f"session/{session_id}"


def subtask_workflow_id(plan_id: str, subtask_id: str) -> str:
    """Workflow id of the child SubtaskWorkflow running ``subtask_id`` of plan ``plan_id``.

    Built from the plan id (the PlanWorkflow's own id) and the subtask id, both chosen by
    the plan's author, so an operator can type ``PLAN/SUBTASK`` and a continue-as-new or a
    retry of the plan addresses the same child.
    """
    return f"{plan_id}/{subtask_id}"


def spawned_subtask_id(agent: str, turn: int, call_index: int) -> str:
    """Subtask id of a sub-agent started by ``spawn_subagent``: its agent, the parent's
    turn and the call's index in that turn, all fixed by the parent's recorded history."""
    return f"{agent}-{turn}-{call_index}"


def spawned_workflow_id(parent_workflow_id: str, child_subtask_id: str) -> str:
    """Workflow id of a spawned sub-agent: nested under its parent's workflow id, so it
    never collides with another workflow's children and Temporal Web shows the tree."""
    return f"{parent_workflow_id}/{child_subtask_id}"


# --------------------------------------------------------------------------- scopes, runs


def plan_run_id(plan_id: str, first_execution_run_id: str) -> str:
    """``{plan_id}.{run key}``: one execution of a plan, across its continue-as-new runs.

    The run key hashes Temporal's first execution run id: the same for every run of a
    continue-as-new chain, new for each fresh start of the same plan id (hashed because
    run ids are time-ordered, so their prefixes repeat between runs). Branch, snapshot
    and message ids of the execution hang off it.
    """
    return f"{plan_id}.{stable_id(first_execution_run_id, length=10)}"


def subtask_scope(plan_run_id: str, subtask_id: str) -> str:
    """Message-id scope of one subtask in one plan execution (see ``message_id``)."""
    return f"{plan_run_id}/{subtask_id}"


def session_turn_scope(session_workflow_id: str, message_number: int) -> str:
    """Message-id scope of the ``message_number``-th user message of a conversation.

    The number is the workflow's own count of handled messages, carried across
    continue-as-new, so it is never reused within a conversation.
    """
    return f"{session_workflow_id}/m{message_number}"


def session_plan_id(session_id: str, scope: str, turn: int, call_index: int) -> str:
    """Plan id of a plan the orchestrator creates with ``create_plan`` in a conversation:
    hashed from the conversation, the turn scope and the call's position, so a replayed
    or retried call starts (and finds) the same PlanWorkflow."""
    return f"plan-{stable_id(session_id, scope, turn, call_index, length=12)}"


# --------------------------------------------------------------------------- sessions


def plan_session_id(plan_id: str, session_id: str | None) -> str:
    """Base session of a plan: the one its file names, else one of its own.

    Derived from the plan id, so every run and every continue-as-new of a plan without a
    ``session_id`` works on the same session.
    """
    return session_id or f"plan-{plan_id}"


def attempt_key(subtask_id: str, retries: int) -> str:
    """The name a subtask's attempt goes by in its branch, snapshot and message ids.

    The first attempt keeps the subtask's id (what every recorded run used); a retried or
    resumed one adds ``~N`` (``~`` is not allowed in ids, so it never names another
    subtask), and so starts on a fresh branch instead of finding the failed attempt's
    stored answers.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    return subtask_id if retries == 0 else f"{subtask_id}~{retries}"


def branch_session_id(base_session_id: str, plan_run_id: str, subtask_id: str) -> str:
    """Session a subtask works on (its isolated view of the base plus its own turns).

    One per subtask per plan execution; the parts are all fixed before the child starts,
    so the plan workflow can name the branch of a child that reported nothing back.
    """
    return f"{base_session_id}:{plan_run_id}:{subtask_id}:branch"


def snapshot_id(session_id: str, plan_id: str, subtask_id: str) -> str:
    """Snapshot of the base session a subtask's branch is built from.

    The seed's convention ``{session}:{plan}:{subtask}`` so an operator can read it; one
    per subtask per plan execution, so every attempt of the build reads the same base.
    """
    return f"{session_id}:{plan_id}:{subtask_id}"


def switch_snapshot_id(note_id: str) -> str:
    """Snapshot taken before an agent switch cleans a history; keyed by the switch's own
    note id (see ``switch_note_id``), so a retried switch reads the same "before"."""
    return f"{note_id}:before-switch"


def child_session_id(parent_session_id: str, scope: str, turn: int, call_index: int) -> str:
    """Session of a spawned sub-agent: hashed from its parent session and the position of
    the ``spawn_subagent`` call, so a retried spawn creates (and finds) the same child."""
    digest = stable_id(parent_session_id, scope, turn, call_index, length=12)
    return f"{SUBAGENT_SESSION_PREFIX}{digest}"


def short_session_id(session_id: str) -> str:
    """The 8-character name a sub-agent's session goes by in ``[sub-agent …]`` notes."""
    return session_id.removeprefix(SUBAGENT_SESSION_PREFIX)[:8]


# --------------------------------------------------------------------------- messages


def assistant_message_id(scope: str, turn: int) -> str:
    """The model's answer at ``turn``: index 0 of the turn, so an LLM call retried after
    it was stored finds its answer instead of paying for a second one."""
    return message_id(scope, turn)


def tool_message_id(scope: str, turn: int, call_index: int) -> str:
    """The answer to the ``call_index``-th tool call of ``turn``.

    Index 0 of a turn is the assistant message itself; its calls' answers follow, so a
    retried tool activity never answers a call twice (an invalid request for a strict
    provider).
    """
    return message_id(scope, turn, 1 + call_index)


def note_message_id(scope: str, turn: int, note_index: int) -> str:
    """The ``note_index``-th system note appended after the tool results of ``turn``."""
    return message_id(scope, turn, f"note-{note_index}")


def delegation_charge_id(scope: str, turn: int, call_index: int) -> str:
    """Budget charge of a ``delegate_to_sub_agent`` call: one per call, so a retried
    delegation charges the root session's budget once."""
    return message_id(scope, turn, f"delegate-{call_index}")


def branch_system_message_id(scope: str) -> str:
    """The agent's system prompt at the head of a subtask's branch."""
    return message_id(scope, "system")


def branch_context_message_id(scope: str) -> str:
    """The system message carrying a subtask's dependencies' results into its branch."""
    return message_id(scope, "deps")


def branch_task_message_id(scope: str) -> str:
    """The user message stating a subtask's task in its branch."""
    return message_id(scope, "task")


def merged_result_id(plan_run_id: str, subtask_id: str) -> str:
    """The id a subtask's result has in the base session (a second merge is a no-op)."""
    return message_id(f"{plan_run_id}/merge", subtask_id)


def user_message_id(scope: str) -> str:
    """A person's message opening the conversation turn ``scope``."""
    return message_id(scope, "user")


def switch_note_id(session_workflow_id: str, switch_number: int) -> str:
    """The ``Agent switched`` note of a conversation's ``switch_number``-th switch (the
    count of switch events so far, carried across continue-as-new)."""
    return message_id(f"{session_workflow_id}/switch", switch_number)


def plan_summary_message_id(session_workflow_id: str, plan_id: str) -> str:
    """The summary of a finished plan appended to the conversation that started it (one
    per plan: plan ids are unique within a conversation)."""
    return message_id(f"{session_workflow_id}/plan", plan_id)


def webhook_message_id(plan_run_id: str) -> str:
    """``webhook-id`` of a plan execution's end notification (Standard Webhooks).

    The same on every delivery attempt and after a worker crash, so a receiver that sees
    it twice drops the duplicate; a new run of the same plan id gets a new one.
    """
    return f"msg_{stable_id('plan-webhook', plan_run_id)}"


def missing_result_message_id(call_id: str) -> str:
    """Store id of the synthetic answer to ``call_id``: a retried repair adds it once."""
    return f"m-{stable_id('missing-tool-result', call_id)}"


# --------------------------------------------------------------------------- tool calls


def tool_call_id(salt: str, index: int) -> str:
    """Our id for the ``index``-th tool call of an assistant message (model-chosen ids are
    never trusted). Unique per session as long as ``salt`` is unique per message (its
    deterministic id), and deterministic, so a retried activity rewrites to the same id."""
    return f"call_{stable_id(salt, index)}"


def repair_tool_call_id(message_id: str, position: int, attempt: int) -> str:
    """A fresh id for a reused or empty call id found when repairing a history; the
    ``attempt`` counter steps past ids already taken, deterministically."""
    return f"call_{stable_id('repair', message_id, position, attempt)}"
