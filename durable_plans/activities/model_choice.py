"""Which model an LLM call asks: the agent's own, or the next of its fallback models.

Temporal owns the retries of an LLM call, and the workflow asks for the same activity
whatever happens to it; the model is chosen inside the activity from what Temporal tells
every attempt — its number and when the call was first scheduled — so a fallback changes
nothing in the workflow's history and a replay is unaffected. A retryable error that
persists (``after_attempts`` attempts, or ``after_s`` seconds since the first attempt)
hands the call to the next model of the chain, and so on to the last:

    stage = max((attempt - 1) // after_attempts, elapsed_s // after_s)

Errors a different model could avoid (a prompt over the model's context window) do not
wait: the same attempt goes on with the next model at once (``may_try_next``).

The chain is the agent's model and its ``fallback_models`` (None: the worker's
``DPLAN_FALLBACK_MODELS``), repeats dropped. Which model answered is stored with the
answer (``Message.model``), returned to the workflow (``LlmCallOutput.model``, so it is in
history) and shown per subtask in the report (``SubtaskResult.models``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from durable_plans.activities.llm_errors import LlmErrorClass
from durable_plans.domain.failures import FailureType

__all__ = ["FallbackPolicy", "ModelChoice", "may_try_next", "model_chain"]

# Failures that say "this request is too much for this model", not "the provider is
# down": another model (a larger window) may well answer it.
_ANOTHER_MODEL_MAY_AVOID = frozenset({FailureType.CONTEXT_WINDOW_EXCEEDED.value})


def model_chain(model: str, fallbacks: Sequence[str]) -> tuple[str, ...]:
    """``model`` then ``fallbacks`` in order, each once."""
    return tuple(dict.fromkeys((model, *fallbacks)))


@dataclass(frozen=True)
class FallbackPolicy:
    """When a persisting error hands a call to the next model."""

    after_attempts: int = 3
    after_s: float = 60.0

    def stage(self, attempt: int, elapsed_s: float) -> int:
        """How many models along the chain this attempt starts (not capped)."""
        by_attempts = max(0, attempt - 1) // max(1, self.after_attempts)
        by_time = int(max(0.0, elapsed_s) // self.after_s) if self.after_s > 0 else 0
        return max(by_attempts, by_time)


@dataclass(frozen=True)
class ModelChoice:
    """The chain and where this attempt starts in it."""

    chain: tuple[str, ...]
    index: int = 0

    @classmethod
    def for_attempt(
        cls, chain: tuple[str, ...], policy: FallbackPolicy, attempt: int, elapsed_s: float
    ) -> ModelChoice:
        return cls(chain, min(policy.stage(attempt, elapsed_s), len(chain) - 1))

    @property
    def model(self) -> str:
        return self.chain[self.index]

    @property
    def is_fallback(self) -> bool:
        return self.index > 0

    def next(self) -> ModelChoice | None:
        """The next model of the chain, or None after the last."""
        if self.index + 1 >= len(self.chain):
            return None
        return ModelChoice(self.chain, self.index + 1)


def may_try_next(verdict: LlmErrorClass, choice: ModelChoice) -> ModelChoice | None:
    """The model to ask at once, in this attempt, after ``verdict``; None: raise it."""
    if verdict.type not in _ANOTHER_MODEL_MAY_AVOID:
        return None
    return choice.next()
