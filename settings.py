"""Configuration read from the environment, once, by the processes that need it.

Only the worker and the CLI read settings; workflow code never does (it must not do I/O,
and the environment differs between hosts). Secrets (``DPLAN_API_KEY``) stay in this
object inside the worker process: they are never copied into workflow inputs, results,
memos or logs, and ``__repr__`` hides them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from durable_plans.domain.models import Budget

SCRIPTED_MODEL = "scripted/demo"


class SettingsError(ValueError):
    """A malformed environment variable, named with what was wrong."""


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


def _opt(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name, "").strip()
    return raw or None


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


@dataclass(frozen=True)
class Settings:
    temporal_address: str = "localhost:7233"
    temporal_namespace: str = "default"
    ui_url: str | None = None
    task_queue: str = "dplan"
    model: str = SCRIPTED_MODEL
    subagent_model: str | None = None
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    session_store: str = ".dplan/sessions.db"
    workspace: Path = Path("workspace")
    state_dir: Path = Path(".dplan")
    llm_timeout_s: float = 120.0
    llm_max_attempts: int = 5
    tool_timeout_s: float = 60.0
    default_budget: Budget | None = None
    agents_file: Path | None = None
    """An agents file (TOML/YAML/JSON) overriding or adding agents; None: the built-ins."""

    @property
    def model_is_scripted(self) -> bool:
        return self.model.startswith("scripted/")

    @property
    def effective_subagent_model(self) -> str:
        return self.subagent_model or self.model

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        state_dir = Path(e.get("DPLAN_STATE_DIR", "").strip() or ".dplan")
        return cls(
            temporal_address=_opt(e, "TEMPORAL_ADDRESS") or "localhost:7233",
            temporal_namespace=_opt(e, "TEMPORAL_NAMESPACE") or "default",
            ui_url=_opt(e, "TEMPORAL_UI_URL"),
            task_queue=_opt(e, "DPLAN_TASK_QUEUE") or "dplan",
            model=_opt(e, "DPLAN_MODEL") or SCRIPTED_MODEL,
            subagent_model=_opt(e, "DPLAN_SUBAGENT_MODEL"),
            api_base=_opt(e, "DPLAN_API_BASE"),
            api_key=_opt(e, "DPLAN_API_KEY"),
            session_store=_opt(e, "DPLAN_SESSION_STORE") or str(state_dir / "sessions.db"),
            workspace=Path(_opt(e, "DPLAN_WORKSPACE") or "workspace"),
            state_dir=state_dir,
            llm_timeout_s=_float(e, "DPLAN_LLM_TIMEOUT_S", 120.0),
            llm_max_attempts=_int(e, "DPLAN_LLM_MAX_ATTEMPTS", 5),
            tool_timeout_s=_float(e, "DPLAN_TOOL_TIMEOUT_S", 60.0),
            agents_file=_path(e, "DPLAN_AGENTS"),
            default_budget=_budget(e),
        )
