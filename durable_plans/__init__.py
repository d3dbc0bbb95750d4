"""durable-plans: a Temporal durable-workflow orchestrator for multi-agent LLM plans.

What is named in ``__all__`` is the public surface; every other module is private and may
change. Names load on first use: the workflow sandbox imports this package for every new
workflow run, and it must not drag the client, the worker and litellm in with it.

    from durable_plans import Client

    client = await Client.connect()
    plan_id = await client.start("plan.json")
    async for event in client.watch(plan_id):
        ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_plans import _lazy
from durable_plans._version import __version__ as __version__

if TYPE_CHECKING:
    from durable_plans._errors import SettingsError
    from durable_plans.client import (
        ApprovalWaiting,
        Client,
        DurablePlansError,
        InvalidArgument,
        InvalidPlan,
        PendingCall,
        PlanAlreadyRunning,
        PlanEnded,
        PlanEvent,
        PlanNotFound,
        PlanRevised,
        PlanSummary,
        Refused,
        StatusUnavailable,
        SubtaskChanged,
        TemporalUnreachable,
        TextStreamed,
        load_plan,
    )
    from durable_plans.domain.approval_rules import ApprovalDecision
    from durable_plans.domain.models import (
        Budget,
        Plan,
        PlanReport,
        PlanStatus,
        Subtask,
        SubtaskResult,
        SubtaskStatus,
        Usage,
    )
    from durable_plans.domain.operations import SubtaskChanges, SubtaskEdit
    from durable_plans.domain.revision_record import Revision
    from durable_plans.plugin import DurablePlansPlugin
    from durable_plans.session_store import SessionStore
    from durable_plans.session_store.factory import open_session_store
    from durable_plans.settings import Settings
    from durable_plans.worker import build_worker, run_worker

__all__ = [
    "ApprovalDecision",
    "ApprovalWaiting",
    "Budget",
    "Client",
    "DurablePlansError",
    "DurablePlansPlugin",
    "InvalidArgument",
    "InvalidPlan",
    "PendingCall",
    "Plan",
    "PlanAlreadyRunning",
    "PlanEnded",
    "PlanEvent",
    "PlanNotFound",
    "PlanReport",
    "PlanRevised",
    "PlanStatus",
    "PlanSummary",
    "Refused",
    "Revision",
    "SessionStore",
    "Settings",
    "SettingsError",
    "StatusUnavailable",
    "Subtask",
    "SubtaskChanged",
    "SubtaskChanges",
    "SubtaskEdit",
    "SubtaskResult",
    "SubtaskStatus",
    "TemporalUnreachable",
    "TextStreamed",
    "Usage",
    "build_worker",
    "load_plan",
    "open_session_store",
    "run_worker",
]

# Where each public name lives, for ``__getattr__``; a unit test keeps it equal to
# ``__all__`` and to the imports above.
_HOMES: dict[str, str] = _lazy.homes(
    {
        "durable_plans.client": (
            "ApprovalWaiting",
            "Client",
            "DurablePlansError",
            "InvalidArgument",
            "InvalidPlan",
            "PendingCall",
            "PlanAlreadyRunning",
            "PlanEnded",
            "PlanEvent",
            "PlanNotFound",
            "PlanRevised",
            "PlanSummary",
            "Refused",
            "StatusUnavailable",
            "SubtaskChanged",
            "TemporalUnreachable",
            "TextStreamed",
            "load_plan",
        ),
        "durable_plans.domain.approval_rules": ("ApprovalDecision",),
        "durable_plans.domain.models": (
            "Budget",
            "Plan",
            "PlanReport",
            "PlanStatus",
            "Subtask",
            "SubtaskResult",
            "SubtaskStatus",
            "Usage",
        ),
        "durable_plans.domain.operations": ("SubtaskChanges", "SubtaskEdit"),
        "durable_plans.domain.revision_record": ("Revision",),
        "durable_plans.plugin": ("DurablePlansPlugin",),
        "durable_plans.session_store": ("SessionStore",),
        "durable_plans.session_store.factory": ("open_session_store",),
        "durable_plans._errors": ("SettingsError",),
        "durable_plans.settings": ("Settings",),
        "durable_plans.worker": ("build_worker", "run_worker"),
    }
)


__getattr__ = _lazy.loader(__name__, globals(), _HOMES)
__dir__ = _lazy.lister(globals(), __all__)
