"""One error hierarchy for everything the client can be told no.

A caller embedding durable-plans catches ``DurablePlansError`` and shows its text: every
message is written for a person, names what it is about (the plan, the call, the address)
and, where there is one, says what to do instead. The subclasses exist for callers that
branch on the kind of "no", never to carry a different wording.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "DurablePlansError",
    "InvalidArgument",
    "InvalidPlan",
    "PlanAlreadyRunning",
    "PlanNotFound",
    "Refused",
    "StatusUnavailable",
    "TemporalUnreachable",
]


class DurablePlansError(Exception):
    """Base of every error the client raises; its text is meant for a person."""


class TemporalUnreachable(DurablePlansError):
    """No Temporal server answered at the configured address (or it refused us)."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot reach a Temporal server at {address}: {reason}")
        self.address = address
        self.reason = reason


class PlanNotFound(DurablePlansError):
    def __init__(self, plan_id: str, namespace: str) -> None:
        super().__init__(f"no plan with id '{plan_id}' in namespace '{namespace}'")
        self.plan_id = plan_id


class PlanAlreadyRunning(DurablePlansError):
    def __init__(self, plan_id: str) -> None:
        super().__init__(f"plan '{plan_id}' is already running")
        self.plan_id = plan_id


class Refused(DurablePlansError):
    """The plan (or the rules in front of it) refused the request; nothing changed.

    A plan that is not running, a subtask that is not paused, a tool call that someone
    else decided first (the message says who, and when)."""


class StatusUnavailable(DurablePlansError):
    """The plan exists but cannot say where it stands now, typically because no worker
    is polling its task queue to answer the query."""


class InvalidArgument(DurablePlansError, ValueError):
    """An argument that cannot be right whatever the plans' state (a negative budget, a
    malformed call id, an agents file that breaks a rule); refused before anything
    reaches Temporal. ``problems`` lists each problem of a file, one line apiece."""

    def __init__(self, header: str, problems: Sequence[str] = ()) -> None:
        super().__init__(f"{header}: {'; '.join(problems)}" if problems else header)
        self.header = header
        self.problems = list(problems)


class InvalidPlan(InvalidArgument):
    """The plan breaks a rule: found before starting (``problems`` lists each: unique ids,
    known dependencies and agents, no cycle ...) or by the workflow itself, which then
    ran no subtask."""
