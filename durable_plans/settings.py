"""Configuration read from the environment, once, by the processes that need it.

Only the worker and the CLI read settings; workflow code never does (it must not do I/O,
and the environment differs between hosts). Secrets (``DPLAN_API_KEY``; the Temporal API
key and client key in ``temporal_access``) stay in this object inside the process that read
them: they are never copied into workflow inputs, results, memos or logs, and ``__repr__``
hides them. The Temporal connection is Temporal's own environment configuration (the
``temporal`` CLI's variables and profiles), resolved by ``connection.py``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Literal, TypeVar

from durable_plans._errors import (
    DurationError,
    PayloadKeyError,
    RateLimitConfigError,
    SettingsError,
    TemporalConfigError,
)
from durable_plans.connection import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    TemporalAccess,
    TemporalTarget,
    resolve_temporal,
)
from durable_plans.domain.contracts import SUBTASK_WORKFLOW
from durable_plans.domain.durations import parse_duration
from durable_plans.domain.models import Budget
from durable_plans.domain.rate_pacing import RateLimit, parse_rate_limits
from durable_plans.domain.streaming import STREAM_MODES, StreamMode, streams_in
from durable_plans.domain.workspace_refs import DEFAULT_BRANCH_PREFIX
from durable_plans.event_loop import EVENT_LOOPS, EventLoopChoice
from durable_plans.payload_codec import PayloadKeyring, keyring_from_env
from durable_plans.worker_versioning import (
    DeploymentError,
    WorkerDeployment,
    check_build_id,
    check_deployment_name,
    default_build_id,
)
from durable_plans.workflows.policies import DEFAULT_PARAMETERS, ActivityParameters

SCRIPTED_MODEL = "scripted/demo"
DEFAULT_TREE_RETENTION = timedelta(days=1)
STATE_DIR_NAME = "durable-plans"

_C = TypeVar("_C", bound=str)  # one of a setting's fixed choices

SandboxMode = Literal["auto", "bwrap", "none"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bwrap", "none")

# The LLM activity's start-to-close timeout is the provider request's timeout plus this:
# the session-store reads and writes around the request must fit in the same attempt.
LLM_ACTIVITY_MARGIN_S = 60.0
# Activities heartbeat every second (activities/heartbeat.py); a heartbeat timeout shorter
# than two beats would retry live calls on any hiccup of the worker's event loop.
MIN_LLM_HEARTBEAT_S = 2.0

_DEFAULT_LLM_TIMEOUT_S = (
    DEFAULT_PARAMETERS.llm_start_to_close.total_seconds() - LLM_ACTIVITY_MARGIN_S
)


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where a worker keeps its trees and files when ``DPLAN_STATE_DIR`` is not set: the
    user's state directory (``$XDG_STATE_HOME/durable-plans``, else
    ``~/.local/state/durable-plans``), not the current directory, so a worker started from
    another folder finds (and removes) the same trees, and no checkout fills with them.

    ``XDG_STATE_HOME`` is used only when absolute, as the XDG specification asks."""
    e = os.environ if env is None else env
    xdg = (e.get("XDG_STATE_HOME") or os.environ.get("XDG_STATE_HOME") or "").strip()
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / STATE_DIR_NAME
    return Path.home() / ".local" / "state" / STATE_DIR_NAME


def _default_session_store() -> str:
    return str(default_state_dir() / "sessions.db")


def _retention(env: Mapping[str, str]) -> timedelta | None:
    """``DPLAN_TREE_RETENTION``: a duration (``1d``, ``12h``, ``30m``, ``0`` = at once) or
    ``never``; unset: a day."""
    raw = _opt(env, "DPLAN_TREE_RETENTION")
    if raw is None:
        return DEFAULT_TREE_RETENTION
    if raw.lower() == "never":
        return None
    try:
        return parse_duration(raw)
    except DurationError as err:
        raise SettingsError(f"DPLAN_TREE_RETENTION: {err}, or never") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise SettingsError(f"{name} must be positive, got {raw!r}")
    return value


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def _duration_s(env: Mapping[str, str], name: str, default: float) -> float:
    """Seconds, from a number of seconds (``600``) or a duration (``10m``, ``1h30m``,
    ``90s``); positive."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip().lower()
    found = _DURATION.match(text)
    if found is not None and any(found.groups()):
        hours, minutes, seconds = (float(g) if g else 0.0 for g in found.groups())
        value = hours * 3600 + minutes * 60 + seconds
    else:
        try:
            value = float(text)
        except ValueError:
            raise SettingsError(
                f"{name} must be seconds or a duration such as 10m, 1h30m or 90s, got {raw!r}"
            ) from None
    if not value > 0 or value == float("inf"):
        raise SettingsError(f"{name} must be positive, got {raw!r}")
    return value


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise SettingsError(f"{name} must be positive, got {raw!r}")
    return value


def _share(env: Mapping[str, str], name: str, default: float) -> float:
    value = _float(env, name, default)
    if value > 1:
        raise SettingsError(f"{name} must be a share between 0 and 1, got {env[name]!r}")
    return value


def _port(env: Mapping[str, str], name: str) -> int | None:
    if _opt(env, name) is None:
        return None
    value = _int(env, name, 0)
    if value > 65535:
        raise SettingsError(f"{name} must be a TCP port (1-65535), got {env[name]!r}")
    return value


def _heartbeat(env: Mapping[str, str], default: float) -> float:
    value = _float(env, "DPLAN_LLM_HEARTBEAT_S", default)
    if value < MIN_LLM_HEARTBEAT_S:
        raise SettingsError(
            f"DPLAN_LLM_HEARTBEAT_S must be at least {MIN_LLM_HEARTBEAT_S:g} "
            f"(activities heartbeat every second), got {env['DPLAN_LLM_HEARTBEAT_S']!r}"
        )
    return value


def _temporal(env: Mapping[str, str]) -> TemporalTarget:
    try:
        return resolve_temporal(env)
    except TemporalConfigError as err:
        raise SettingsError(str(err)) from None


def _flag(env: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    raw = (_opt(env, name) or ("1" if default else "0")).lower()
    if raw in _YES:
        return True
    if raw in _NO:
        return False
    raise SettingsError(f"{name} must be 1/true/yes/on or 0/false/no/off, got {env[name]!r}")


def _choice(env: Mapping[str, str], name: str, choices: tuple[_C, ...]) -> _C:
    """One of ``choices`` (case and surrounding blanks ignored); unset means the first."""
    raw = (_opt(env, name) or choices[0]).lower()
    for choice in choices:
        if raw == choice:
            return choice
    raise SettingsError(f"{name} must be one of {', '.join(choices)}, got {env[name]!r}")


def _opt(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name, "").strip()
    return raw or None


def _models(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list of litellm model names (blanks around names ignored)."""
    raw = _opt(env, name)
    if raw is None:
        return ()
    names = tuple(part.strip() for part in raw.split(","))
    if not all(names):
        raise SettingsError(f"{name} must be model names separated by commas, got {raw!r}")
    return tuple(dict.fromkeys(names))


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = _opt(env, name)
    return Path(raw) if raw is not None else None


def _budget(env: Mapping[str, str]) -> Budget | None:
    tokens = _opt(env, "DPLAN_MAX_TOKENS")
    cost = _opt(env, "DPLAN_MAX_COST_USD")
    if tokens is None and cost is None:
        return None
    return Budget(
        max_tokens=_int(env, "DPLAN_MAX_TOKENS", 0) if tokens is not None else None,
        max_cost_usd=_float(env, "DPLAN_MAX_COST_USD", 0.0) if cost is not None else None,
    )


# What git allows in a branch name, kept simple: no ``..``, ``//``, ``@{``, no part that
# starts with a dot or ends with ``.lock``; the prefix may end with ``/`` (a folder).
_BRANCH_PREFIX = re.compile(r"^(?!.*(?:\.\.|//|/\.|\.lock/))[A-Za-z0-9_][A-Za-z0-9._/-]*$")


def _branch_prefix(env: Mapping[str, str]) -> str:
    raw = env.get("DPLAN_WORKSPACE_BRANCH_PREFIX")
    if raw is None:
        return DEFAULT_BRANCH_PREFIX
    value = raw.strip()
    if value and not _BRANCH_PREFIX.match(value):
        raise SettingsError(
            "DPLAN_WORKSPACE_BRANCH_PREFIX must be the start of a git branch name (letters, "
            f"digits, '._/-', no '..' or '//', not starting with '.' or '-'), got {raw!r}"
        )
    return value


def _payload_keys(env: Mapping[str, str]) -> PayloadKeyring | None:
    try:
        return keyring_from_env(env)
    except PayloadKeyError as err:
        raise SettingsError(str(err)) from None


def _rate_limits(env: Mapping[str, str]) -> tuple[tuple[str, RateLimit], ...]:
    try:
        return tuple(parse_rate_limits(env.get("DPLAN_RATE_LIMITS", "")).items())
    except RateLimitConfigError as err:
        raise SettingsError(str(err)) from None


def _deployment(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """``DPLAN_DEPLOYMENT`` and ``DPLAN_BUILD_ID``, checked as the server would check
    them (``worker_versioning.py``). Set but empty is an error, not "unset": a blank deployment
    would quietly make a worker meant for a rollout an unversioned one. A build id alone
    is an error too: without a deployment it would be ignored."""
    name = env.get("DPLAN_DEPLOYMENT")
    build = env.get("DPLAN_BUILD_ID")
    try:
        if name is not None:
            check_deployment_name(name)
        if build is not None:
            check_build_id(build)
    except DeploymentError as err:
        raise SettingsError(str(err)) from None
    if build is not None and name is None:
        raise SettingsError(
            "DPLAN_BUILD_ID is set without DPLAN_DEPLOYMENT: a build id names a build of a "
            "worker deployment; set DPLAN_DEPLOYMENT too, or unset DPLAN_BUILD_ID"
        )
    return name, build


_YES = frozenset({"1", "true", "yes", "on"})
_NO = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class Settings:
    temporal_address: str = DEFAULT_ADDRESS
    temporal_namespace: str = DEFAULT_NAMESPACE
    temporal_access: TemporalAccess = field(default_factory=TemporalAccess)
    """TLS, API key and gRPC metadata for the server (plain by default); address, namespace
    and access come from Temporal's environment configuration (``connection.py``)."""
    ui_url: str | None = None
    task_queue: str = "dplan"
    model: str = SCRIPTED_MODEL
    subagent_model: str | None = None
    fallback_models: tuple[str, ...] = ()
    """Models that take over from an agent's model, in order, when it keeps failing
    (``DPLAN_FALLBACK_MODELS``, comma-separated); an agent's own ``fallback_models``
    replaces them (``activities/model_choice.py``)."""
    fallback_after_attempts: int = 3
    fallback_after_s: float = 60.0
    """A retryable error that persists this many attempts of a call, or this long since
    its first attempt, hands the call to the next model (``DPLAN_FALLBACK_AFTER_ATTEMPTS``,
    ``DPLAN_FALLBACK_AFTER_S``)."""
    prompt_cache: bool = True
    """Mark the stable prefix for providers that cache only what is marked (Anthropic's
    ``cache_control``; ``activities/prompt_cache.py``); ``DPLAN_PROMPT_CACHE=0`` does not."""
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    session_store: str = field(default_factory=_default_session_store)
    """``DPLAN_SESSION_STORE``; unset: ``sessions.db`` in the state directory."""
    workspace: Path = Path("workspace")
    state_dir: Path = field(default_factory=default_state_dir)
    """Where the worker keeps the plans' trees, their state files, a remote's cache clone
    and ``--embedded``'s dev server (``DPLAN_STATE_DIR``; ``default_state_dir``)."""
    tree_retention: timedelta | None = DEFAULT_TREE_RETENTION
    """How long a finished plan's trees stay in the state directory after it closed
    (``DPLAN_TREE_RETENTION``); None (``never``): the worker removes none. The commits and
    refs stay either way (``workspace_gc.py``)."""
    workspace_remote: str | None = field(default=None, repr=False)
    """A git remote every worker reaches (``DPLAN_WORKSPACE_REMOTE``: a path, ``file://``,
    ``git://``, ``https://``, ``ssh://``) holding the plans' commits; None: the workspace
    repository alone (one host). Hidden from ``repr``: a URL may carry a token."""
    workspace_branch_prefix: str = DEFAULT_BRANCH_PREFIX
    """What a plan's result branch is called before its id (``DPLAN_WORKSPACE_BRANCH_PREFIX``)."""
    llm_timeout_s: float = _DEFAULT_LLM_TIMEOUT_S
    """One provider request (litellm ``timeout``); the LLM activity gets this plus
    ``LLM_ACTIVITY_MARGIN_S`` as its start-to-close timeout."""
    llm_heartbeat_s: float = DEFAULT_PARAMETERS.llm_heartbeat.total_seconds()
    llm_max_attempts: int = DEFAULT_PARAMETERS.llm_max_attempts
    """Attempts of an LLM call on retryable errors other than rate limits
    (``DPLAN_LLM_MAX_ATTEMPTS``); rate limits are bounded by ``rate_limit_patience_s``."""
    rate_limit_patience_s: float = DEFAULT_PARAMETERS.llm_rate_limit_patience.total_seconds()
    """How long one LLM call waits out a provider's rate limits, summing the waits its
    refusals asked for (``DPLAN_RATE_LIMIT_PATIENCE``: seconds or ``10m``, ``1h``...),
    before it fails (``activities/llm_patience.py``)."""
    llm_lean: bool = True
    """OpenAI-compatible calls use litellm's provider transforms without its per-call
    machinery (activities/llm_client.py); ``DPLAN_LLM_LEAN=0`` sends every call through
    ``litellm.acompletion``."""
    workflow_runner_lean: bool = True
    """The workflow sandbox answers the SDK's per-payload serialization-context questions
    from outside (``DPLAN_WORKFLOW_RUNNER_LEAN``; durable_plans/sandbox_runner.py, on the
    SDK's internals); ``0`` keeps the SDK's stock sandboxed runner."""
    llm_local: bool = True
    """A subtask's LLM calls run as local activities when its calls do not stream
    (``DPLAN_LLM_LOCAL``; ``workflows/llm_call.py``): its common path is one workflow task
    instead of three and two activity tasks. ``0`` makes them regular activities again."""
    event_loop: EventLoopChoice = "auto"
    """The worker's event loop (``DPLAN_EVENT_LOOP``: auto, uvloop, asyncio;
    ``durable_plans/event_loop.py``)."""
    stream: StreamMode = "chat"
    """Which LLM calls stream their text to watchers (``DPLAN_STREAM``: chat, all, off;
    ``domain/streaming.py``)."""
    stream_interval_s: float = 0.2
    """How often a streaming call sends what it has (``DPLAN_STREAM_INTERVAL_MS``); the
    first text of a call is sent at once. Each send is one signal in history."""
    tool_timeout_s: float = DEFAULT_PARAMETERS.tool_start_to_close.total_seconds()
    tool_max_attempts: int = DEFAULT_PARAMETERS.tool_max_attempts
    context_window: int | None = None
    """Every model's context window in tokens (``DPLAN_CONTEXT_WINDOW``), unless its agent
    sets ``context_window``; None: litellm's model info (no proactive compaction for a
    model it does not know; a provider's refusal still compacts)."""
    compact_at: float = 0.75
    """The share of the context window a prompt may reach before the older history is
    folded into a summary (``DPLAN_COMPACT_AT``, 0 < share <= 1; ``domain/compaction.py``)."""
    default_budget: Budget | None = None
    agents_file: Path | None = None
    """An agents file (TOML/YAML/JSON) overriding or adding agents; None: the built-ins."""
    tenants_file: Path | None = None
    """Tenants' daily caps (``DPLAN_TENANTS``, a TOML or JSON file; ``domain/tenants.py``),
    read again by the workers whenever it changes; None: no tenant is capped."""
    notify_deliver_for_s: float = DEFAULT_PARAMETERS.notify_deliver_for.total_seconds()
    """How long a plan-end webhook is retried (``DPLAN_NOTIFY_DELIVER_FOR_S``), unless
    the plan's ``notify.deliver_for_s`` says otherwise."""
    notify_initial_backoff_s: float = DEFAULT_PARAMETERS.notify_initial_backoff.total_seconds()
    notify_max_backoff_s: float = DEFAULT_PARAMETERS.notify_max_backoff.total_seconds()
    """First and longest wait between webhook attempts (``DPLAN_NOTIFY_INITIAL_BACKOFF_S``,
    ``DPLAN_NOTIFY_MAX_BACKOFF_S``); a receiver's ``Retry-After`` replaces them."""
    metrics_port: int | None = None
    """Where the worker serves Prometheus metrics (``DPLAN_METRICS_PORT``): the Temporal
    SDK's runtime metrics and ours (``activities/observe.py``); None: no metrics server."""
    otlp_endpoint: str | None = None
    """``OTEL_EXPORTER_OTLP_ENDPOINT``: when set, the worker traces plans with OpenTelemetry
    and exports the spans there over OTLP/HTTP (``durable_plans/telemetry.py``)."""
    ui_token: str | None = field(default=None, repr=False)
    """The token ``dplan ui`` requires on a non-local address (``DPLAN_UI_TOKEN``); None:
    it listens on loopback only."""
    payload_keys: PayloadKeyring | None = None
    """Payload encryption keys (``DPLAN_PAYLOAD_KEY``, ``_KEY_FILE``, ``_KEYS``; see
    ``payload_codec.py``); None: payloads are stored as plain JSON. The plugin turns them
    into the codec of every client, worker and replayer built from these settings."""
    rate_limits: tuple[tuple[str, RateLimit], ...] = ()
    """Requests and tokens per minute per model (``DPLAN_RATE_LIMITS``:
    ``openai/gpt-4o=rpm:500,tpm:30000; *=rpm:60``), shared by every worker of one store
    (``activities/shared_limits.py``, docs/limits.md); empty: no model is paced."""
    rate_limit_store: str | None = field(default=None, repr=False)
    """Where the shared limits live (``DPLAN_RATE_LIMIT_STORE``); None: beside the
    session store. Hidden from ``repr``: a URL may carry a password."""
    sandbox: SandboxMode = "auto"
    """Where commands, checks and sandboxed MCP servers run (``DPLAN_SANDBOX``): ``auto``,
    bubblewrap where it works, else each command is refused saying how to install it;
    ``bwrap``, the same, and the worker refuses to start without it; ``none``, the guard
    alone (``activities/sandbox.py``)."""
    bwrap_path: str | None = None
    """The bwrap binary (``DPLAN_BWRAP``); None: ``bwrap`` on the worker's PATH."""
    deployment: str | None = None
    """The worker deployment this worker belongs to (``DPLAN_DEPLOYMENT``); None: an
    unversioned worker, as before Worker Versioning (``worker_versioning.py``,
    docs/operating.md)."""
    build_id: str | None = None
    """This worker's build in the deployment (``DPLAN_BUILD_ID``); None: derived from the
    package version and the workflow code (``worker_versioning.default_build_id``)."""

    @property
    def model_is_scripted(self) -> bool:
        return self.model.startswith("scripted/")

    @property
    def effective_subagent_model(self) -> str:
        return self.subagent_model or self.model

    def activity_parameters(self) -> ActivityParameters:
        """The timeouts and attempts this worker's workflows give their LLM calls and tools
        (handed to them by ``DurablePlansPlugin``)."""
        return replace(
            DEFAULT_PARAMETERS,
            llm_start_to_close=timedelta(seconds=self.llm_timeout_s + LLM_ACTIVITY_MARGIN_S),
            llm_heartbeat=timedelta(seconds=self.llm_heartbeat_s),
            llm_max_attempts=self.llm_max_attempts,
            llm_rate_limit_patience=timedelta(seconds=self.rate_limit_patience_s),
            tool_start_to_close=timedelta(seconds=self.tool_timeout_s),
            tool_max_attempts=self.tool_max_attempts,
            notify_deliver_for=timedelta(seconds=self.notify_deliver_for_s),
            notify_initial_backoff=timedelta(seconds=self.notify_initial_backoff_s),
            notify_max_backoff=timedelta(seconds=self.notify_max_backoff_s),
            llm_local=self.llm_local and not streams_in(self.stream, SUBTASK_WORKFLOW),
        )

    def worker_deployment(self) -> WorkerDeployment | None:
        """The deployment and build this worker polls as; None when unversioned."""
        if self.deployment is None:
            return None
        return WorkerDeployment(self.deployment, self.build_id or default_build_id())

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        defaults = cls()
        state_dir = (_path(e, "DPLAN_STATE_DIR") or default_state_dir(e)).expanduser()
        temporal = _temporal(e)
        deployment, build_id = _deployment(e)
        return cls(
            temporal_address=temporal.address,
            temporal_namespace=temporal.namespace,
            temporal_access=temporal.access,
            ui_url=_opt(e, "TEMPORAL_UI_URL"),
            task_queue=_opt(e, "DPLAN_TASK_QUEUE") or "dplan",
            model=_opt(e, "DPLAN_MODEL") or SCRIPTED_MODEL,
            subagent_model=_opt(e, "DPLAN_SUBAGENT_MODEL"),
            fallback_models=_models(e, "DPLAN_FALLBACK_MODELS"),
            fallback_after_attempts=_int(
                e, "DPLAN_FALLBACK_AFTER_ATTEMPTS", defaults.fallback_after_attempts
            ),
            fallback_after_s=_float(e, "DPLAN_FALLBACK_AFTER_S", defaults.fallback_after_s),
            prompt_cache=_flag(e, "DPLAN_PROMPT_CACHE", default=True),
            api_base=_opt(e, "DPLAN_API_BASE"),
            api_key=_opt(e, "DPLAN_API_KEY"),
            session_store=_opt(e, "DPLAN_SESSION_STORE") or str(state_dir / "sessions.db"),
            workspace=Path(_opt(e, "DPLAN_WORKSPACE") or "workspace"),
            state_dir=state_dir,
            tree_retention=_retention(e),
            workspace_remote=_opt(e, "DPLAN_WORKSPACE_REMOTE"),
            workspace_branch_prefix=_branch_prefix(e),
            llm_timeout_s=_float(e, "DPLAN_LLM_TIMEOUT_S", defaults.llm_timeout_s),
            llm_heartbeat_s=_heartbeat(e, defaults.llm_heartbeat_s),
            llm_max_attempts=_int(e, "DPLAN_LLM_MAX_ATTEMPTS", defaults.llm_max_attempts),
            rate_limit_patience_s=_duration_s(
                e, "DPLAN_RATE_LIMIT_PATIENCE", defaults.rate_limit_patience_s
            ),
            llm_lean=_flag(e, "DPLAN_LLM_LEAN", default=True),
            workflow_runner_lean=_flag(e, "DPLAN_WORKFLOW_RUNNER_LEAN", default=True),
            llm_local=_flag(e, "DPLAN_LLM_LOCAL", default=True),
            stream=_choice(e, "DPLAN_STREAM", STREAM_MODES),
            event_loop=_choice(e, "DPLAN_EVENT_LOOP", EVENT_LOOPS),
            stream_interval_s=_float(
                e, "DPLAN_STREAM_INTERVAL_MS", defaults.stream_interval_s * 1000
            )
            / 1000,
            tool_timeout_s=_float(e, "DPLAN_TOOL_TIMEOUT_S", defaults.tool_timeout_s),
            tool_max_attempts=_int(e, "DPLAN_TOOL_MAX_ATTEMPTS", defaults.tool_max_attempts),
            context_window=_int(e, "DPLAN_CONTEXT_WINDOW", 0) or None,
            compact_at=_share(e, "DPLAN_COMPACT_AT", defaults.compact_at),
            agents_file=_path(e, "DPLAN_AGENTS"),
            tenants_file=_path(e, "DPLAN_TENANTS"),
            default_budget=_budget(e),
            notify_deliver_for_s=_float(
                e, "DPLAN_NOTIFY_DELIVER_FOR_S", defaults.notify_deliver_for_s
            ),
            notify_initial_backoff_s=_float(
                e, "DPLAN_NOTIFY_INITIAL_BACKOFF_S", defaults.notify_initial_backoff_s
            ),
            notify_max_backoff_s=_float(
                e, "DPLAN_NOTIFY_MAX_BACKOFF_S", defaults.notify_max_backoff_s
            ),
            metrics_port=_port(e, "DPLAN_METRICS_PORT"),
            otlp_endpoint=_opt(e, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            payload_keys=_payload_keys(e),
            rate_limits=_rate_limits(e),
            rate_limit_store=_opt(e, "DPLAN_RATE_LIMIT_STORE"),
            ui_token=_opt(e, "DPLAN_UI_TOKEN"),
            sandbox=_choice(e, "DPLAN_SANDBOX", SANDBOX_MODES),
            bwrap_path=_opt(e, "DPLAN_BWRAP"),
            deployment=deployment,
            build_id=build_id,
        )
