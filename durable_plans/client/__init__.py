"""The client side of durable-plans: one typed ``Client`` for every operation on plans.

The modules below are private; ``durable_plans`` re-exports what callers need.
"""

from __future__ import annotations

from durable_plans._errors import (
    DurablePlansError,
    InvalidArgument,
    InvalidPlan,
    PlanAlreadyRunning,
    PlanNotFound,
    Refused,
    StatusUnavailable,
    TemporalUnreachable,
)
from durable_plans.client._approvals import PendingCall
from durable_plans.client._client import Client, load_plan
from durable_plans.client._visibility import PlanSummary
from durable_plans.client._watch import (
    ApprovalWaiting,
    PlanEnded,
    PlanEvent,
    SubtaskChanged,
    TextStreamed,
)
from durable_plans.domain.operations import SubtaskChanges, SubtaskEdit
from durable_plans.workspace_gc import GcReport, PlanTrees

__all__ = [
    "ApprovalWaiting",
    "Client",
    "DurablePlansError",
    "GcReport",
    "InvalidArgument",
    "InvalidPlan",
    "PendingCall",
    "PlanAlreadyRunning",
    "PlanEnded",
    "PlanEvent",
    "PlanNotFound",
    "PlanSummary",
    "PlanTrees",
    "Refused",
    "StatusUnavailable",
    "SubtaskChanged",
    "SubtaskChanges",
    "SubtaskEdit",
    "TemporalUnreachable",
    "TextStreamed",
    "load_plan",
]
