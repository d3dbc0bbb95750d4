"""Patch ids for workflow changes that running workflows must survive.

A worker replays a workflow's history against the current code; a change in the commands
a workflow issues would make every run started by the previous release fail with a
non-determinism error. Such a change goes behind ``workflow.patched(ID)``: new runs take
the new path (and record the id), old runs replay the old one. ``tests/histories`` holds
runs of the old shapes, so the suite proves both paths still replay.
"""

from __future__ import annotations

from temporalio import workflow

# Workspace tools run as local activities, a subtask's first LLM call builds its branch
# and the call that ends it closes the branch (three round trips fewer per subtask).
FEWER_ROUND_TRIPS = "fewer-round-trips-1"

# A cancelled plan reads what its cancelled subtasks had spent (a local activity) before
# it ends, so their report rows give real call counts, usage and branch ids.
CANCELLED_SPEND = "cancelled-spend-1"

# A plan sets its own memo (goal, subtask count) in its first task, whoever started it.
SELF_MEMO = "self-memo-1"

# This run sets the Dplan* search attributes (workflows/visibility.py). Unlike the others,
# taken only when the worker found them registered: the marker records that decision, so a
# replay (by a worker that knows otherwise, or a Replayer) repeats it.
SEARCH_ATTRIBUTES = "search-attributes-1"

# A plan with ``notify`` delivers its report to a webhook when it ends (an activity, and
# memo upserts saying how the delivery went).
NOTIFY_WEBHOOK = "notify-webhook-1"

# A tool call the approval policy names waits for an Update before it runs (first a local
# activity reads its arguments); only runs with a policy take the path, and only new ones.
TOOL_APPROVAL = "tool-approval-1"

# A plan about to wait for an operator with nothing running publishes the progress the
# interval held back (an upsert of its search attributes): nothing else would come to.
IDLE_PROGRESS = "idle-progress-1"

# The workspace is a git repository and the plan carries commit ids: a plan resolves its
# base (an activity) and publishes its result branch when it ends (another), a subtask
# with several dependencies merges their results first, and tool calls take and return
# the tree's commit. Asked once, in the run's first task; runs without the marker work
# in the worker's workspace directory as before.
GIT_WORKSPACE = "git-workspace-1"

# A conversation's files are a tree of its own in the workspace repository: its first turn
# resolves a base (an activity), tool calls take and return the tree's commit, and a turn
# that moved the head sets the conversation's branch (another). Asked once, when the run's
# workflow object is made (before any update it handles); runs without the marker work in
# the worker's workspace directory as before.
CHAT_WORKSPACE = "chat-workspace-1"

# An agent loop compacts its history (``domain/compaction.py``) when a call is refused as
# over the model's window: one ``compact_history`` activity and one more try, where runs
# from before failed. Asked only then. (A call whose prompt would pass DPLAN_COMPACT_AT of
# the window is not sent and its result says so, which is what schedules the compaction
# before it: no run from before has such a result, so that path needs no patch.)
COMPACTION = "compaction-1"

# A plan too big for one payload travels by reference (domain/plan_data.py): its first
# run stores the packed plan in the session store (a local activity), and every run checks
# the reference it holds (another) before anything else. Only plans sent packed or by
# reference take the path, so no run recorded before it has these commands.
PLAN_DATA_REF = "plan-data-ref-1"

# A plan starts at most ``workflows.plan.START_BATCH`` children per scheduling pass (two
# passes per workflow task): hundreds ready at once are started over several tasks instead
# of one that outlasts the SDK's 2 s deadlock bound on a loaded host (and is then retried
# forever). Asked once, in the run's first task; runs without the marker start all.
START_BATCH = "start-batch-1"

# A subtask's LLM calls run as local activities (``workflows/llm_call.py``): the whole
# common path (two calls and a tool call) fits in one workflow task, with no activity task
# to match and three events per call fewer; a join's workspace merge is local too. Decided
# once, in a plan run's first task, from the worker's settings (``DPLAN_LLM_LOCAL``, and no
# streaming for subtasks) and recorded by this marker, which only runs that take the path
# record (a replay reads the marker); carried to the children in ``SubtaskInput.llm_local``,
# so a child asks no patch of its own (not even FEWER_ROUND_TRIPS, which it implies): each
# patch asked costs a marker and a search-attribute upsert in every child's history.
LLM_LOCAL = "llm-local-1"

# A plan run winds down (starts no more children, lets the running ones finish, continues
# as new) once its history, with what the running children will still add, nears a tenth
# of Temporal's limits (``workflows.plan.HISTORY_GOAL_*``), rather than only when the
# server suggests it (about 4,000 events or 4 MiB, past which hundreds of running
# children took a 10,000-subtask plan's runs to 11 % of the size limit). Asked only when a
# run gets there, so no run that never did records the marker, and runs recorded before
# it (which never asked) wind down where they did.
HISTORY_GOAL = "history-goal-1"

# A plan by reference continued as new packs its lean plan's subtasks with its carried
# progress (``PlanInput.carried``), not beside it: both the continue-as-new event and the
# next run's started event held the lean plan whole (1.27 MiB each at 10,000 subtasks,
# half of what a run may hold), so runs were cut short. Asked when a run continues as
# new; runs recorded before it carried the plan as it was. A worker of this version
# reads both forms; one older than it cannot read the new one, so every worker is
# upgraded before plans continue under it.
PACKED_CARRY = "packed-carry-1"

# A run asks no patch after a local activity. When a query reaches a worker while one of a
# workflow task's local activities runs, the SDK may complete that task with the activity's
# marker and hand its result to the workflow only in the next task; a replay hands it over
# one task early, where a patch asked right after it is not yet known and answers no (the
# replay then fails: "patch marker encountered ... no corresponding change command"). So
# runs since this one take the patches below as on without asking: a plan or conversation
# run asks this one id first thing instead, and a subtask started since then is told so in
# its input (``SubtaskInput.settled``), so it asks nothing. The decisions that depend on
# the worker (LLM_LOCAL, SEARCH_ATTRIBUTES) are still asked, in a plan's first activation.
SETTLED = "settled-1"

# What a run that took SETTLED (or a subtask started as settled) takes as on.
SETTLED_IN_PLAN = frozenset(
    {
        START_BATCH,
        GIT_WORKSPACE,
        SELF_MEMO,
        IDLE_PROGRESS,
        NOTIFY_WEBHOOK,
        CANCELLED_SPEND,
        PLAN_DATA_REF,
        HISTORY_GOAL,
        PACKED_CARRY,
    }
)
SETTLED_IN_LOOP = frozenset({FEWER_ROUND_TRIPS, TOOL_APPROVAL, COMPACTION, CHAT_WORKSPACE})


def settled(ids: frozenset[str]) -> frozenset[str]:
    """``ids`` if this run is settled (it asks SETTLED, live: every new run is), none
    otherwise. Asked first thing in a run, before any local activity."""
    return ids if workflow.patched(SETTLED) else frozenset()


def on(patch_id: str, taken: frozenset[str]) -> bool:
    """Whether this run takes the change ``patch_id``: on, unasked, when it is among the
    changes the run has ``taken`` (``settled``); otherwise ``workflow.patched`` answers
    (and, live, records the marker)."""
    return patch_id in taken or workflow.patched(patch_id)
