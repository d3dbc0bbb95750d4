"""The client side of durable-plans: one typed ``Client`` for every operation on plans and
conversations.

The modules below (``client/_*.py``) are private: the CLI, the page and
``durable_plans.testing`` use only the names here (``tests/unit/test_layers.py`` fails on
any other import of them), and ``durable_plans`` re-exports what library callers need.
Besides ``Client`` and what it returns: ``agents_of`` (the catalogue a command validates
against before it connects), ``check_changes`` and ``check_decision`` (the same checks
``Client.retry`` and ``Client.approve`` make, for a front end that refuses bad input
before it connects), and ``new_session_id`` / ``check_session_id`` for conversations.
"""

from __future__ import annotations

from durable_plans._errors import (
    DurablePlansError,
    InvalidArgument,
    InvalidPlan,
    PlanAlreadyRunning,
    PlanNotFound,
    Refused,
    SearchAttributesUnavailable,
    SessionCommandError,
    SessionEnded,
    StatusUnavailable,
    TemporalUnreachable,
)
from durable_plans.client._approvals import PendingCall, check_decision
from durable_plans.client._client import Client, agents_of, load_plan
from durable_plans.client._conversations import Conversation, check_session_id, new_session_id
from durable_plans.client._live import PlanWatch, SubtaskNow
from durable_plans.client._operate import ForkedPlan, check_changes
from durable_plans.client._plans import PlanRun
from durable_plans.client._runs import RunSummary
from durable_plans.client._schedules import OVERLAP_POLICIES, ScheduleSummary
from durable_plans.client._visibility import PlanSummary
from durable_plans.client._watch import (
    ApprovalWaiting,
    PlanEnded,
    PlanEvent,
    PlanRevised,
    SubtaskChanged,
    TextStreamed,
)
from durable_plans.domain.operations import SubtaskChanges, SubtaskEdit
from durable_plans.domain.operator_actions import OPERATOR_ACTIONS, OperatorAction, operator_action
from durable_plans.domain.revision_record import Revision
from durable_plans.workspace_gc import GcReport, PlanTrees

__all__ = [
    "OPERATOR_ACTIONS",
    "OVERLAP_POLICIES",
    "ApprovalWaiting",
    "Client",
    "Conversation",
    "DurablePlansError",
    "ForkedPlan",
    "GcReport",
    "InvalidArgument",
    "InvalidPlan",
    "OperatorAction",
    "PendingCall",
    "PlanAlreadyRunning",
    "PlanEnded",
    "PlanEvent",
    "PlanNotFound",
    "PlanRevised",
    "PlanRun",
    "PlanSummary",
    "PlanTrees",
    "PlanWatch",
    "Refused",
    "Revision",
    "RunSummary",
    "ScheduleSummary",
    "SearchAttributesUnavailable",
    "SessionCommandError",
    "SessionEnded",
    "StatusUnavailable",
    "SubtaskChanged",
    "SubtaskChanges",
    "SubtaskEdit",
    "SubtaskNow",
    "TemporalUnreachable",
    "TextStreamed",
    "agents_of",
    "check_changes",
    "check_decision",
    "check_session_id",
    "load_plan",
    "new_session_id",
    "operator_action",
]
