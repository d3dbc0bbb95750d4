"""Plans that change while they run: a revision adds subtasks to a running plan, or removes
ones not yet started.

A plan file is a guess made before the work: the architect finds eleven modules where it
said three. A revision changes the running plan instead of throwing the run away, and is
checked as a plan file is (unique ids, known dependencies and agents, no cycle, the size
limits), against the plan as it stands: a refusal names every problem, one line each, and
changes nothing. An accepted one is recorded (who, which subtask asked, when, why, what)
in the workflow's state, so its history, every report's ``revisions`` and the log say
how the plan came to be what it is.

Pure and passed through the workflow sandbox.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from durable_plans.domain.models import Plan, Subtask, SubtaskStatus
from durable_plans.domain.plan_loader import validate_plan
from durable_plans.domain.revision_record import Revision, Revisions

__all__ = [
    "ACT_REVISE_PLAN",
    "MAX_REVISION_BYTES",
    "REVISE_UPDATE",
    "RevisePlanCallInput",
    "Revision",
    "RevisionRequest",
    "Revisions",
    "revised_plan",
]

# The Update that revises a running plan (``Client.revise``, ``dplan add``, an agent's
# ``revise_plan`` call through activity ``ACT_REVISE_PLAN``).
REVISE_UPDATE: Final = "revise_plan"
ACT_REVISE_PLAN: Final = "revise_plan_call"
# What one revision may add, as JSON: the subtasks are carried whole in the plan's state
# and in each continue-as-new input, far below one payload's 2 MiB.
MAX_REVISION_BYTES: Final = 256 * 1024
_MAX_REASON = 500
_POSITION = re.compile(r"subtasks\[(\d+)\]( \(id '[^']*'\))?")


class RevisionRequest(BaseModel):
    """What to change: ``add`` subtasks as a plan file writes them (they may depend on any
    subtask of the plan, a completed one included: then they are ready at once), and
    ``remove`` ids of subtasks not yet started."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    add: tuple[Subtask, ...] = ()
    remove: tuple[str, ...] = ()
    by: str = Field(default="", max_length=200)  # the operator (user@host) or the agent
    subtask: str = ""  # the subtask whose agent asked, if one did
    reason: str = Field(default="", max_length=_MAX_REASON)
    # Names the request once for good: an agent's tool call retried after a crash sends it
    # again, and the plan answers with the revision it made the first time.
    key: str = Field(default="", max_length=300)


class RevisePlanCallInput(BaseModel):
    """An agent's ``revise_plan`` call, for the activity that sends it to its plan: the
    call is read from the session (its arguments never enter the history), and its
    answer written there."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str
    message_id: str
    call_index: int
    scope: str
    turn: int
    plan_workflow_id: str
    subtask: str
    agent: str


def revised_plan(
    plan: Plan,
    request: RevisionRequest,
    *,
    statuses: Mapping[str, SubtaskStatus],
    known_agents: Collection[str],
) -> tuple[Plan, list[str]]:
    """``plan`` with ``request`` applied, and what stops it (empty when nothing does).

    ``statuses`` holds every subtask that has started, or ended, or is held (a pending
    subtask is not in it): only one absent from it can be removed. The added subtasks go
    after the plan's own, so results already merged keep their order.
    """
    problems: list[str] = []
    if not request.add and not request.remove:
        problems.append("the revision adds no subtask and removes none")
    size = sum(len(s.model_dump_json(exclude_defaults=True)) for s in request.add)
    if size > MAX_REVISION_BYTES:
        problems.append(
            f"the subtasks added are {size:,} bytes of JSON; a revision adds at most "
            f"{MAX_REVISION_BYTES:,}"
        )
    ids = {s.id for s in plan.subtasks}
    gone: set[str] = set()
    for sid in dict.fromkeys(request.remove):
        if sid not in ids:
            problems.append(f"remove: the plan has no subtask {sid!r}")
        elif sid in statuses:
            problems.append(
                f"remove: subtask {sid!r} is {statuses[sid].value}; only a subtask not yet "
                "started can be removed"
            )
        else:
            gone.add(sid)
    # The rest is judged as if the removals that can be made were made: every problem of
    # the request is named at once.
    revised = plan.model_copy(
        update={"subtasks": (*(s for s in plan.subtasks if s.id not in gone), *request.add)}
    )
    kept = len(revised.subtasks) - len(request.add)

    def named(match: re.Match[str]) -> str:
        """A position in the revised plan, as the request's author knows it: ``add[2]``
        for a subtask it adds, the id of one the plan had."""
        index = int(match.group(1))
        if index >= kept:
            return f"add[{index - kept}]{match.group(2) or ''}"
        return f"subtask {revised.subtasks[index].id!r}"

    found = validate_plan(revised, known_agents=known_agents)
    return revised, problems + [_POSITION.sub(named, problem) for problem in found]
