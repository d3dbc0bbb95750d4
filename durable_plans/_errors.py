"""One error hierarchy, in one place, for every error the package raises.

A caller embedding durable-plans catches ``DurablePlansError`` and shows its text: every
message is written for a person, names what it is about (the plan, the call, the address)
and, where there is one, says what to do instead. The subclasses exist for callers that
branch on the kind of "no", never to carry a different wording. A class that was a
``ValueError``, ``KeyError`` or ``RuntimeError`` still is, so ``except ValueError`` keeps
working where it did.

Pure (no I/O, nothing imported at run time but ``collections.abc``): workflow code and
``domain/`` import it through the workflow sandbox. ``tests/unit/test_errors.py`` fails
on an exception class defined anywhere else that is not on its short allow-list.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durable_plans.domain.workspace_refs import WorkspaceConflictDetails

__all__ = [
    "AgentsFileError",
    "DeploymentError",
    "DurablePlansError",
    "DurationError",
    "EmbeddedServerError",
    "EventLoopUnavailable",
    "HistoryFileError",
    "InvalidArgument",
    "InvalidInput",
    "InvalidPlan",
    "InvalidStoreTarget",
    "ListQueryError",
    "MalformedDetails",
    "McpConfigError",
    "MessageIdRequired",
    "OperatorError",
    "PayloadKeyError",
    "PlanAlreadyRunning",
    "PlanDataError",
    "PlanNotFound",
    "PlanValidationError",
    "ProblemsError",
    "RateLimitConfigError",
    "Refused",
    "SandboxUnavailable",
    "SearchAttributesUnavailable",
    "SessionCommandError",
    "SessionEnded",
    "SessionNotFound",
    "SessionStoreError",
    "SessionStoreUnavailable",
    "SettingsError",
    "SnapshotNotFound",
    "SnapshotSessionMismatch",
    "StatusUnavailable",
    "TelemetryError",
    "TemporalConfigError",
    "TemporalUnreachable",
    "TenantsConfigError",
    "TextFormatError",
    "UnknownAgentError",
    "WebhookSecretError",
    "WorkerDied",
    "WorkflowNotFound",
    "WorkspaceBusy",
    "WorkspaceConflict",
    "WorkspaceError",
    "WorkspaceUnavailable",
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
    def __init__(self, plan_id: str, namespace: str, *, run: str | None = None) -> None:
        if run:
            said = f"plan '{plan_id}' has no run '{run}' in namespace '{namespace}'"
        else:
            said = f"no plan with id '{plan_id}' in namespace '{namespace}'"
        super().__init__(said)
        self.plan_id = plan_id
        self.run = run


class PlanAlreadyRunning(DurablePlansError):
    def __init__(self, plan_id: str) -> None:
        super().__init__(f"plan '{plan_id}' is already running")
        self.plan_id = plan_id


class Refused(DurablePlansError):
    """The plan (or the rules in front of it) refused the request; nothing changed.

    A plan that is not running, a subtask that is not paused, a tool call that someone
    else decided first (the message says who, and when). ``problems`` lists each problem
    of a refusal that found several (a revision), one line each."""

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


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


class SearchAttributesUnavailable(DurablePlansError):
    """The server would not say which attributes it has, or would not add them."""


class SessionEnded(DurablePlansError):
    """The conversation was finished (``/end``); its id cannot be reused."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"conversation '{session_id}' has ended (/end) and cannot be resumed; "
            "start a new one with `dplan chat`"
        )
        self.session_id = session_id


class SessionCommandError(DurablePlansError):
    """An update or query the conversation's workflow refused or could not answer.

    ``type`` is the workflow's ApplicationError type (``InvalidAgentSwitch``,
    ``BudgetExceeded``, ``BadRequest`` …) or a name for what failed on the way.
    """

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(f"{type_}: {message}")
        self.type = type_
        self.message = message


# Raised in telemetry.py.
class TelemetryError(DurablePlansError, RuntimeError):
    """Metrics or tracing cannot be set up as configured (named in the message)."""


# Raised in connection.py.
class TemporalConfigError(DurablePlansError, ValueError):
    """The Temporal connection configuration is unusable; the message names what and where."""


# Raised in settings.py.
class SettingsError(DurablePlansError, ValueError):
    """A malformed environment variable, named with what was wrong."""


# Raised in worker_versioning.py (through settings.py as a SettingsError).
class DeploymentError(DurablePlansError, ValueError):
    """A deployment name or build id the server would refuse, with what was wrong."""


# Raised in cli/replay_command.py.
class WorkflowNotFound(DurablePlansError):
    """The server has no such workflow (or run): a typo, another namespace, or retention."""


class HistoryFileError(DurablePlansError):
    """A ``--file`` that cannot be read as a Temporal history."""


# Raised in activities/mcp.py.
class McpConfigError(DurablePlansError):
    """A server the worker cannot start as configured (not retried: config must change)."""


# Raised in activities/git_run.py.
class WorkspaceError(DurablePlansError):
    """A workspace operation that did not happen; ``str(exc)`` is one line for a person."""


class WorkspaceUnavailable(WorkspaceError):
    """The repository or remote cannot be used as configured, or a stale writer was
    refused: another attempt would fail the same way."""


class WorkspaceBusy(WorkspaceError):
    """A remote did not answer this time (connection refused, timed out, reset): worth
    another attempt."""


class WorkspaceConflict(WorkspaceError):
    """Dependencies changed the same lines; ``details`` names the files, the subtasks and
    where a resolution can be pushed."""

    def __init__(self, message: str, details: WorkspaceConflictDetails) -> None:
        super().__init__(message)
        self.details = details


# Raised in activities/sandbox.py.
class SandboxUnavailable(DurablePlansError):
    """A command refused because no sandbox works here (``DPLAN_SANDBOX=auto``/``bwrap``);
    the text is the one sentence the model and the report show."""


# Raised in embedded.py.
class EmbeddedServerError(DurablePlansError, RuntimeError):
    """The dev server could not be started; the message says why and where its log is."""


class WorkerDied(DurablePlansError, RuntimeError):
    """The in-process worker stopped while the caller still needed it."""


# Raised in client/_visibility.py.
class ListQueryError(InvalidArgument):
    """The server rejected a visibility query; the message says why, in one line."""


# Raised in event_loop.py.
class EventLoopUnavailable(DurablePlansError, RuntimeError):
    """``DPLAN_EVENT_LOOP=uvloop`` on a machine without uvloop."""


# Raised in payload_codec.py.
class PayloadKeyError(DurablePlansError, ValueError):
    """A key that cannot be used, or a payload that no configured key decrypts.

    Messages name the variable, file line or key id concerned, never a key's value.
    """


# Raised in session_store/base.py.
class SessionStoreError(DurablePlansError):
    """Base of the store's own errors; part of the one hierarchy, so a caller that opens
    a store through the client's paths catches it with everything else."""


class SessionStoreUnavailable(SessionStoreError):
    """The store could not be opened: which one (``target``, never with a password) and
    why (``reason``), as one line a person can act on."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(f"session store {target}: {reason}")
        self.target = target
        self.reason = reason


class InvalidStoreTarget(SessionStoreUnavailable, ValueError):
    """The store's target itself is malformed (an unknown scheme, a bad port, an empty
    path): a configuration mistake, found before anything is contacted."""


class SessionNotFound(SessionStoreError, KeyError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session not found: {session_id}")
        self.session_id = session_id

    def __str__(self) -> str:
        return str(self.args[0])


class SnapshotNotFound(SessionStoreError, KeyError):
    def __init__(self, snapshot_id: str) -> None:
        super().__init__(f"snapshot not found: {snapshot_id}")
        self.snapshot_id = snapshot_id

    def __str__(self) -> str:
        return str(self.args[0])


class MessageIdRequired(SessionStoreError, ValueError):
    """Appends need deterministic ids; an empty one would defeat retry idempotency."""


class SnapshotSessionMismatch(SessionStoreError, ValueError):
    """A snapshot belongs to the session it was taken from; using it with another session
    would silently graft a foreign history, so it is refused."""

    def __init__(self, snapshot_id: str, owner_session_id: str, session_id: str) -> None:
        super().__init__(
            f"snapshot {snapshot_id!r} belongs to session {owner_session_id!r}, "
            f"not to session {session_id!r}"
        )
        self.snapshot_id = snapshot_id
        self.owner_session_id = owner_session_id
        self.session_id = session_id


# Raised in domain/problems.py.
class ProblemsError(DurablePlansError, ValueError):
    """A rejected input: one human-readable line per problem (never none), printable as
    is and picklable (it crosses process and data-converter boundaries)."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        if not self.problems:
            raise ValueError(f"{type(self).__name__} needs at least one problem")
        super().__init__(*self.problems)

    def __str__(self) -> str:
        return "\n".join(self.problems)

    def __reduce__(self) -> tuple[type[ProblemsError], tuple[tuple[str, ...]]]:
        return (type(self), (self.problems,))


# Raised in domain/plan_data.py.
class PlanDataError(DurablePlansError, ValueError):
    """Plan data that cannot be used: one line saying which and why."""


# Raised in domain/webhook.py.
class WebhookSecretError(DurablePlansError, ValueError):
    """The signing secret is missing or malformed; the message names the variable only."""


# Raised in domain/agents.py.
class UnknownAgentError(DurablePlansError, KeyError):
    """An agent name not in the catalog, with the names that are (a configuration error).

    A KeyError so existing ``except KeyError`` callers keep working; ``__str__`` is the
    plain message (KeyError would otherwise show it quoted, like a dict key).
    """

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known: tuple[str, ...] = tuple(sorted(known))
        super().__init__(f"unknown agent {name!r}; known agents: {', '.join(self.known)}")

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type[UnknownAgentError], tuple[str, tuple[str, ...]]]:
        return (type(self), (self.name, self.known))


# Raised in domain/inputs.py.
class InvalidInput(ProblemsError):
    """A workflow input that cannot be used: one line per problem."""


# Raised in domain/failures.py.
class MalformedDetails(DurablePlansError, ValueError):
    """A failure's details are not what its type promises (another version wrote them)."""


# Raised in domain/operations.py.
class OperatorError(DurablePlansError, ValueError):
    """A request that cannot be carried out; the message names the problem."""


# Raised in domain/plan_loader.py.
class PlanValidationError(ProblemsError):
    """Why a plan was rejected: one human-readable line per problem."""


# Raised in domain/durations.py.
class DurationError(DurablePlansError, ValueError):
    """Text that is not a duration; its message says what is expected."""


# Raised in domain/rate_pacing.py.
class RateLimitConfigError(DurablePlansError, ValueError):
    """A malformed ``DPLAN_RATE_LIMITS`` value, named with what was wrong."""


# Raised in domain/tenants.py.
class TenantsConfigError(DurablePlansError, ValueError):
    """A ``DPLAN_TENANTS`` file that cannot be used: every problem, one per line, naming
    the file."""


# Raised in domain/agents_loader.py.
class AgentsFileError(ProblemsError):
    """Why an agents file was rejected: one human-readable line per problem."""


# Raised in domain/text_formats.py.
class TextFormatError(DurablePlansError, ValueError):
    """The text could not be read; ``problems`` holds one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))
