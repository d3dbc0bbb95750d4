"""The vocabulary every layer shares: plans, messages, sessions, results, reports.

These are plain pydantic v2 models with no Temporal import, so workflow code, activities,
the session store and the CLI can all use them, and the pydantic data converter can carry
them across Temporal's payload boundary unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, model_validator

from durable_plans.domain.approval_rules import ApprovalPolicy
from durable_plans.domain.checks import MAX_CHECK_ROUNDS, CheckCommands, CheckRuns
from durable_plans.domain.plan_log import LogEntries, LogEntry
from durable_plans.domain.revision_record import Revision, Revisions
from durable_plans.domain.workspace_refs import WorkspaceSummary

Role = Literal["system", "user", "assistant", "tool"]


class _Frozen(BaseModel):
    """Immutable value: transforms build new values instead of mutating shared ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- usage, errors


class Usage(_Frozen):
    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    cost_usd: NonNegativeFloat = 0.0
    # Of the prompt tokens, those the provider read from its prompt cache (billed at its
    # lower cached-input price). Already counted in ``prompt_tokens``, so never added to
    # the total again; 0 for providers that do not say (and for usage recorded before).
    cached_tokens: NonNegativeInt = 0
    # What the calls cost in time rather than tokens or money (``activities/llm_patience.py``).
    rate_limited_s: NonNegativeFloat = Field(
        default=0.0,
        description=(
            "Seconds the LLM calls waited on rate limits: the waits their providers' "
            "refusals (429, Retry-After) asked for and the pacing of DPLAN_RATE_LIMITS, "
            "as the calls that answered reported them."
        ),
    )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=round(self.cost_usd + other.cost_usd, 10),
            cached_tokens=self.cached_tokens + other.cached_tokens,
            rate_limited_s=round(self.rate_limited_s + other.rate_limited_s, 3),
        )

    @classmethod
    def total(cls, usages: Iterable[Usage]) -> Usage:
        acc = cls()
        for u in usages:
            acc = acc + u
        return acc


class ErrorInfo(_Frozen):
    """What went wrong, as the report and Temporal Web show it: a class name and a line."""

    type: str
    message: str


# --------------------------------------------------------------------------- messages


class FunctionCall(_Frozen):
    name: str
    # The provider hands arguments over as a JSON string; it stays a string so a model
    # that emits invalid JSON is still representable (and answerable with a tool error).
    arguments: str = "{}"


class ToolCall(_Frozen):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Compaction(_Frozen):
    """What a compaction record in a session stands for (``domain/compaction.py``).

    The record is a system message whose content is a summary of older messages; the
    messages themselves stay in the store. From the record on, what is *sent* is the
    summary in place of every earlier message except the leading system messages and
    those listed in ``kept`` (the last turns, the task, unanswered tool calls).
    """

    kept: tuple[str, ...] = ()
    folded: NonNegativeInt = 0  # messages of the sent history the summary replaced
    tokens_before: NonNegativeInt = 0  # estimated prompt tokens before and after
    tokens_after: NonNegativeInt = 0
    reason: str = ""  # "threshold" or "context window exceeded"
    model: str = ""  # the model that wrote the summary


class Message(_Frozen):
    """One chat message in OpenAI format, plus the store's own deterministic ``id``.

    ``id`` is not sent to providers: it makes appends idempotent (an activity retried
    after a crash appends the same ids again, and the store ignores them).
    """

    id: str = ""
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    # What producing this message cost (assistant messages from an LLM call); kept with the
    # message so a call retried after a crash can report it without calling again.
    usage: Usage | None = None
    # The model that answered (an assistant message from an LLM call): the agent's own,
    # or one of its fallback models (``activities/model_choice.py``).
    model: str | None = None
    # Set on a compaction record only (never sent as such: ``domain/compaction.py``).
    compaction: Compaction | None = None

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)

    @property
    def is_tool_traffic(self) -> bool:
        """Tool traffic is what a strict provider checks pairing on."""
        return self.role == "tool" or (self.role == "assistant" and self.has_tool_calls)

    @property
    def is_plain_assistant(self) -> bool:
        return self.role == "assistant" and not self.has_tool_calls and bool(self.content)

    def to_openai(self) -> dict[str, Any]:
        """The dict a provider receives: no store id, no empty optional fields."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [tc.model_dump() for tc in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_openai(cls, data: dict[str, Any], *, id: str = "") -> Message:
        """Accept a provider/SDK message dict, ignoring fields we do not model."""
        calls = data.get("tool_calls") or None
        return cls(
            id=id,
            role=data["role"],
            content=data.get("content"),
            tool_calls=tuple(ToolCall.model_validate(c) for c in calls) if calls else None,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


# --------------------------------------------------------------------------- plans


class Budget(_Frozen):
    max_tokens: NonNegativeInt | None = None
    max_cost_usd: NonNegativeFloat | None = None

    def exceeded_by(self, used: Usage) -> str | None:
        """A human sentence naming the exhausted limit, or None while within budget."""
        if self.max_tokens is not None and used.total_tokens >= self.max_tokens:
            return f"token budget exhausted: {used.total_tokens} of {self.max_tokens} tokens used"
        if self.max_cost_usd is not None and used.cost_usd >= self.max_cost_usd:
            return f"cost budget exhausted: ${used.cost_usd:.4f} of ${self.max_cost_usd:.4f} used"
        return None


class Notify(_Frozen):
    """Where to report a plan's end: a webhook signed per the Standard Webhooks spec.

    The plan names the worker's environment variable that holds the ``whsec_…`` signing
    secret, never the secret itself: plans are stored in Temporal's history, readable by
    anyone with UI access, while the secret must stay on the worker's host.
    """

    webhook: str
    secret_env: str
    # How long to keep retrying an unreachable or failing receiver (connection errors, 408,
    # 429, 5xx); None: the worker's DPLAN_NOTIFY_DELIVER_FOR_S (hours by default).
    deliver_for_s: float | None = None


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class DeliveryOutcome(_Frozen):
    """What became of a plan's webhook, as its memo and ``dplan status`` show it.

    Never part of the plan report: the report is final before delivery starts, and a
    receiver's trouble must not change what the plan did.
    """

    status: DeliveryStatus
    webhook_id: str
    # Attempts whose answer reached the workflow; when the delivery window closes on an
    # attempt in flight, that one may have reached the receiver without being counted.
    attempts: NonNegativeInt = 0
    last_status: int | None = None  # the receiver's last HTTP status; None: no answer
    reason: str | None = None  # why it failed (one line), None when delivered


# What a failed subtask does to its plan: fail it (dependents skipped, the plan ends
# Failed), pause, holding the plan open until an operator resumes or skips it, or replan:
# the plan's replanner agent revises the plan around the failure (``workflows/replan.py``).
OnFailure = Literal["fail", "pause", "replan"]
DEFAULT_REPLANNER = "orchestrator"
DEFAULT_MAX_REPLANS = 2
MAX_REPLANS_LIMIT = 20


class Subtask(_Frozen):
    id: str = Field(min_length=1)
    description: str
    agent: str = "coder"
    depends_on: tuple[str, ...] = ()
    on_failure: OnFailure | None = None  # None: the plan's
    # A litellm model name for this subtask alone (``dplan retry --set model=...``, or
    # written in the plan); None: its agent's model (the worker's DPLAN_MODEL if none).
    model: str | None = None
    # Commands that must pass on its tree after its final answer (``domain/checks.py``);
    # None: its agent's. Failed rounds before it fails (None: the agent's, the plan's, 3).
    check: CheckCommands = None
    check_rounds: int | None = Field(default=None, ge=1, le=MAX_CHECK_ROUNDS)


class Plan(_Frozen):
    id: str
    goal: str = ""
    session_id: str | None = None
    max_parallel: int = Field(default=4, ge=1)
    budget: Budget | None = None
    subtasks: tuple[Subtask, ...]
    notify: Notify | None = None
    on_failure: OnFailure | None = None  # None: "fail"
    # How long a subtask may stay paused before it fails for good (None: until decided).
    pause_timeout_s: float | None = Field(default=None, gt=0)
    # The branch, tag or commit of the workspace repository the plan starts from (None:
    # its HEAD when the plan starts).
    workspace_base: str | None = Field(default=None, min_length=1, max_length=250)
    # Commands that must pass on the merged result once every subtask completed, and the
    # default number of failed check rounds for its subtasks (``domain/checks.py``).
    check: CheckCommands = None
    check_rounds: int | None = Field(default=None, ge=1, le=MAX_CHECK_ROUNDS)
    # ``on_failure: "replan"``: the agent asked to revise the plan around a failure (None:
    # the orchestrator), and how many times it may be asked in the whole plan (None: 2).
    replanner: str | None = Field(default=None, min_length=1, max_length=64)
    max_replans: int | None = Field(default=None, ge=0, le=MAX_REPLANS_LIMIT)
    # Temporal task queue priority for the plan, its subtasks and their activities (1 runs
    # first, 5 last; None: the server's default, 3), and the tenant it runs for: its
    # fairness key, so one tenant's backlog does not starve another's.
    priority: int | None = Field(default=None, ge=1, le=5)
    tenant: str | None = Field(default=None, min_length=1, max_length=64)

    @property
    def replans_allowed(self) -> int:
        return DEFAULT_MAX_REPLANS if self.max_replans is None else self.max_replans

    def on_failure_of(self, subtask_id: str) -> OnFailure:
        return self.subtask(subtask_id).on_failure or self.on_failure or "fail"

    # Which tool calls wait for a person in every subtask; replaces the agents' own.
    approval: ApprovalPolicy | None = None

    def subtask(self, subtask_id: str) -> Subtask:
        for s in self.subtasks:
            if s.id == subtask_id:
                return s
        raise KeyError(subtask_id)


# --------------------------------------------------------------------------- sessions


class SessionMeta(_Frozen):
    """Session metadata; the messages themselves live in the session store."""

    session_id: str
    agent: str = "orchestrator"
    parent_session_id: str | None = None
    root_session_id: str | None = None
    depth: NonNegativeInt = 0
    budget: Budget | None = None
    ended: bool = False

    @property
    def root(self) -> str:
        return self.root_session_id or self.session_id


# --------------------------------------------------------------------------- results, reports


class SubtaskStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    # Failed, held for an operator (``dplan resume|skip``); not terminal.
    PAUSED = "paused"

    @property
    def is_terminal(self) -> bool:
        return self not in (SubtaskStatus.PENDING, SubtaskStatus.RUNNING, SubtaskStatus.PAUSED)


class PlanStatus(enum.StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Still running, but a subtask is paused on a failure and waits for an operator.
    PAUSED = "paused"


class ModelUsage(_Frozen):
    """One model's share of a subtask: the LLM calls it answered and what they cost."""

    model: str
    llm_calls: NonNegativeInt = 0
    usage: Usage = Usage()

    @staticmethod
    def merged(*groups: Iterable[ModelUsage]) -> tuple[ModelUsage, ...]:
        """Shares of the same model added up, in the order the models first answered."""
        by_model: dict[str, ModelUsage] = {}
        for group in groups:
            for share in group:
                seen = by_model.get(share.model)
                by_model[share.model] = (
                    share
                    if seen is None
                    else ModelUsage(
                        model=share.model,
                        llm_calls=seen.llm_calls + share.llm_calls,
                        usage=seen.usage + share.usage,
                    )
                )
        return tuple(by_model.values())


class SubtaskResult(_Frozen):
    id: str
    status: SubtaskStatus
    agent: str
    result: str | None = None
    error: ErrorInfo | None = None
    llm_calls: NonNegativeInt = 0
    usage: Usage = Usage()
    # Where the subtask's whole conversation is (its session branch), for whoever wants
    # more than the report's excerpt.
    session_id: str | None = None
    # How many times it was started again after failing, pausing or being cancelled
    # (``dplan retry``, ``dplan resume``); llm_calls and usage include every attempt.
    retries: NonNegativeInt = 0
    # Its last workspace commit: a completed subtask's result; a failed one's attempt,
    # kept under its own ref (``refs/dplan/<plan>/trees/<subtask>@<retries>``), never merged.
    commit: str | None = None
    # Which models answered its LLM calls (its sub-agents' included; a fallback model
    # when the agent's own kept failing), each with its calls, usage and cost. Empty for
    # runs recorded before it was kept.
    models: tuple[ModelUsage, ...] = ()
    # Its check runs, every round's (``domain/checks.py``); empty without a check.
    checks: CheckRuns = ()
    # A failure the plan replanned around (``on_failure: "replan"``): the subtask whose
    # agent revised the plan. The failure stays in the report; it no longer fails the plan.
    replaced_by: str | None = None

    @model_validator(mode="after")
    def _truthful(self) -> SubtaskResult:
        # "completed" with an error, or without a result, is the lie this project
        # exists to prevent; make it unrepresentable.
        if self.status is SubtaskStatus.COMPLETED and (
            self.error is not None or self.result is None
        ):
            raise ValueError("a completed subtask has a result and no error")
        if (
            self.status in (SubtaskStatus.FAILED, SubtaskStatus.SKIPPED, SubtaskStatus.PAUSED)
            and self.error is None
        ):
            raise ValueError(f"a {self.status.value} subtask says why (error is required)")
        return self


class Counts(_Frozen):
    completed: NonNegativeInt = 0
    failed: NonNegativeInt = 0
    skipped: NonNegativeInt = 0
    cancelled: NonNegativeInt = 0
    pending: NonNegativeInt = 0
    running: NonNegativeInt = 0
    paused: NonNegativeInt = 0

    @property
    def total(self) -> int:
        return (
            self.completed
            + self.failed
            + self.skipped
            + self.cancelled
            + self.pending
            + self.running
            + self.paused
        )

    @classmethod
    def of(cls, statuses: Iterable[SubtaskStatus]) -> Counts:
        tally = {s.value: 0 for s in SubtaskStatus}
        for s in statuses:
            tally[s.value] += 1
        return cls(**tally)


class PlanDataRef(_Frozen):
    """Where data too big for a payload is kept: the session store, under its content
    hash (``domain.plan_data``): a big plan's full JSON, a big plan's full report."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)  # bytes of the UTF-8 JSON

    @property
    def label(self) -> str:
        return f"sha256:{self.sha256[:16]}"


# The order a summary lists rows in: what needs a look first.
_SUMMARY_ORDER: Final = (
    SubtaskStatus.FAILED,
    SubtaskStatus.PAUSED,
    SubtaskStatus.CANCELLED,
    SubtaskStatus.SKIPPED,
    SubtaskStatus.RUNNING,
    SubtaskStatus.PENDING,
    SubtaskStatus.COMPLETED,
)


class ForkedFrom(_Frozen):
    """The plan, and its subtask, a fork was made from (``dplan fork``): what runs again
    starts there; what came before it is the original's, reused."""

    plan: str
    subtask: str


class PlanReport(_Frozen):
    plan_id: str
    status: PlanStatus
    counts: Counts
    subtasks: tuple[SubtaskResult, ...]
    usage: Usage = Usage()
    duration_s: NonNegativeFloat = 0.0
    # When the plan started (Unix seconds): a workflow reckons ``duration_s`` only when it
    # wakes, so a reader of a running plan's report counts on from here (``running_for``).
    started_at_s: NonNegativeFloat | None = None
    # What the plan did to the workspace (base, result commit, branch); None for a run
    # recorded before the workspace was kept in git, or one that has not resolved it yet.
    workspace: WorkspaceSummary | None = None
    # A summary (a plan of thousands of subtasks): ``subtasks`` lists some rows and
    # ``omitted`` says how many more there are; counts and usage are the whole plan's.
    # ``full_report`` is where the whole report is kept once the plan ended.
    omitted: NonNegativeInt = 0
    full_report: PlanDataRef | None = None
    # The plan's own check runs on the merged result, and why the plan failed when one
    # of them did (every subtask completed): ``CheckFailed``.
    checks: CheckRuns = ()
    error: ErrorInfo | None = None
    # The decisions taken on the plan, oldest first (``domain/plan_log.py``): pauses,
    # resumes, skips, budgets, approvals, rejections, cancels, retries and edits, each
    # with who and when; ``log_omitted`` older ones were dropped to keep it small.
    log: LogEntries = ()
    log_omitted: NonNegativeInt = 0
    # How the plan changed while it ran (``domain/revisions.py``), oldest first: the
    # subtasks each revision added or removed, who asked, when and why.
    revisions: Revisions = ()
    forked_from: ForkedFrom | None = None

    def running_for(self, now_s: float) -> PlanReport:
        """This report with the duration up to ``now_s`` while the plan is still open
        (a subtask pending, running or paused: a failed plan's other subtasks may still
        run); an ended plan's duration is final."""
        if self.finished or not self.started_at_s:
            return self
        live = round(max(self.duration_s, now_s - self.started_at_s), 3)
        return self.model_copy(update={"duration_s": live})

    @property
    def finished(self) -> bool:
        """Every subtask has its final status (a plan may be failed long before that)."""
        if self.omitted:
            return not (self.counts.pending or self.counts.running or self.counts.paused)
        return all(r.status.is_terminal for r in self.subtasks)

    @model_validator(mode="after")
    def _counts_add_up(self) -> PlanReport:
        listed = Counts.of(r.status for r in self.subtasks)
        if not self.omitted:
            if self.counts != listed:
                raise ValueError("report counts do not match the subtask statuses")
            return self
        whole = self.counts.model_dump()
        if self.counts.total != len(self.subtasks) + self.omitted or any(
            n > whole[key] for key, n in listed.model_dump().items()
        ):
            raise ValueError("report counts do not match the subtask statuses and omitted")
        return self

    def summary(self, rows: int, *, full_report: PlanDataRef | None = None) -> PlanReport:
        """This report listing at most ``rows`` subtasks, chosen by what needs a look
        first (failed, paused, cancelled, skipped, running, pending, then completed) and
        listed in plan order; counts, usage and status stay the whole plan's."""
        if len(self.subtasks) <= rows:
            return self.model_copy(update={"full_report": full_report})
        rank = {status: i for i, status in enumerate(_SUMMARY_ORDER)}
        order = sorted(range(len(self.subtasks)), key=lambda i: rank[self.subtasks[i].status])
        keep = sorted(order[:rows])
        return self.model_copy(
            update={
                "subtasks": tuple(self.subtasks[i] for i in keep),
                "omitted": len(self.subtasks) - len(keep) + self.omitted,
                "full_report": full_report,
            }
        )

    @classmethod
    def build(
        cls,
        plan_id: str,
        results: Sequence[SubtaskResult],
        *,
        duration_s: float = 0.0,
        started_at_s: float | None = None,
        cancelled: bool = False,
        workspace: WorkspaceSummary | None = None,
        checks: CheckRuns = (),
        error: ErrorInfo | None = None,
        log: tuple[LogEntry, ...] = (),
        log_omitted: int = 0,
        revisions: tuple[Revision, ...] = (),
        forked_from: ForkedFrom | None = None,
        replanning: Collection[str] = (),
    ) -> PlanReport:
        """The only way reports are made: counts, totals and status derive from results
        (and a failed plan-level check, ``error``). ``replanning``: failed subtasks whose
        replanner is still at work, which do not fail the plan yet."""
        counts = Counts.of(r.status for r in results)
        if cancelled:
            # How the run ended, as Temporal and ``dplan list`` say it, whatever had
            # failed before the cancel (the counts still say that).
            status = PlanStatus.CANCELLED
        elif counts.paused:
            # Before "failed": the plan is still open, and what it needs is a person.
            status = PlanStatus.PAUSED
        elif error is not None or any(
            r.status is SubtaskStatus.FAILED and r.replaced_by is None and r.id not in replanning
            for r in results
        ):
            # A failure replanned around is counted (never hidden), but what stands
            # decides: the subtasks the replanner left or added.
            status = PlanStatus.FAILED
        elif counts.cancelled:
            status = PlanStatus.CANCELLED
        elif counts.pending or counts.running:
            status = PlanStatus.RUNNING
        else:
            status = PlanStatus.COMPLETED
        return cls(
            plan_id=plan_id,
            status=status,
            counts=counts,
            subtasks=tuple(results),
            usage=Usage.total(r.usage for r in results),
            duration_s=round(duration_s, 3),
            started_at_s=started_at_s,
            workspace=workspace,
            checks=checks,
            error=error,
            log=log,
            log_omitted=log_omitted,
            revisions=revisions,
            forked_from=forked_from,
        )
