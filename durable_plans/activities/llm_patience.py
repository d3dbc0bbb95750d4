"""When an LLM call stops retrying: rate limits are waited out for a time, the rest counted.

A 429 is a provider saying "later", not "no": a durable orchestrator waits. So a refused
attempt fails with the wait it asks for (``ApplicationError.next_retry_delay``: the
provider's Retry-After, else the policy's backoff; ``policies.rate_limit_delay``) and
Temporal runs the next attempt then, for local and regular activities alike (every
local activity's retry is a timer in its workflow, placed by the SDK:
``policies.LOCAL_RETRY_THRESHOLD``). What bounds it is time: the waits a call's refusals
asked for, summed, against ``DPLAN_RATE_LIMIT_PATIENCE`` (``policies.ActivityParameters.
llm_rate_limit_patience``). Once they reach it, the next refusal fails the call,
non-retryable, in one sentence: "rate limited for 10m 3s by the provider (312 refusals);
gave up after DPLAN_RATE_LIMIT_PATIENCE=10m".

Every other retryable failure keeps its bound in attempts (``DPLAN_LLM_MAX_ATTEMPTS``),
counting only attempts that were not refused: the activity fails non-retryable once
``attempt - refusals`` reaches it, and an attempt that starts after that many attempts
were lost without an error of ours (a worker that died, a timeout Temporal decided) fails
at once. Temporal's own attempt count is only a backstop (``ActivityParameters.
llm_retry``).

The refusals of a call are kept in the session store (``SessionStore.record_wait``: one
row per refused attempt, by its number and start time), under the call's message id,
which every attempt of the call shares, however it is run again: a local activity's
attempt after its wait (which Temporal schedules anew, with a new schedule time), a local
activity run again from attempt 1 after its worker died, a turn asked again after its
history was compacted. A retried subtask (``dplan retry``)
has a scope, hence message ids, of its own.

Why this is exact in the report (``Usage.rate_limited_s``): the answer carries the sum
of the waits its call's refusals asked for (and the time this attempt was paced by
``DPLAN_RATE_LIMITS``), which the attempt that answers reads from that tally. It is not a
clock reading in the workflow: it is the activity's result, recorded in history (a
regular activity's completion, a local activity's marker), so a replay reads the same
number, and each refused attempt counts once however often it is recorded. The time is
what was asked for, not what elapsed: the attempts' own time and Temporal's scheduling
are not in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from durable_plans.domain.failures import FailureType
from durable_plans.domain.rate_pacing import format_duration
from durable_plans.session_store import SessionStore, WaitTally
from durable_plans.workflows.policies import ActivityParameters

__all__ = ["PATIENCE_SETTING", "CallPatience", "gave_up_sentence"]

T = TypeVar("T")

PATIENCE_SETTING = "DPLAN_RATE_LIMIT_PATIENCE"
# The message of a refusal by the worker's own limits (``rate_limits.LimitWaitTooLong``).
_LIMITER_PREFIX = "rate limits ("


def gave_up_sentence(waited_s: float, refusals: int, patience_s: float, *, by: str) -> str:
    """The one sentence a call that waited out its patience fails with."""
    plural = "s" if refusals != 1 else ""
    return (
        f"rate limited for {format_duration(waited_s)} by {by} ({refusals} refusal{plural}); "
        f"gave up after {PATIENCE_SETTING}={format_duration(patience_s)}"
    )


@dataclass
class CallPatience:
    """One attempt of one LLM call: how long its call has waited, and whether to go on."""

    store: SessionStore
    params: ActivityParameters
    call_id: str  # the call's message id: the same for every attempt of every run of it
    attempt: int
    entry: str  # this attempt's row: its number and start time
    paced_s: float = 0.0  # this attempt's waits for the worker's own limits

    @classmethod
    def for_this_attempt(
        cls, store: SessionStore, params: ActivityParameters, message_id: str
    ) -> CallPatience:
        info = activity.info()
        started = int(info.started_time.timestamp() * 1_000_000)
        return cls(store, params, message_id, info.attempt, f"attempt-{info.attempt}@{started}")

    def paced(self, seconds: float) -> None:
        """``DPLAN_RATE_LIMITS`` held this attempt back ``seconds`` before its request."""
        self.paced_s += max(0.0, seconds)

    async def run(self, attempt: Callable[[], Awaitable[T]]) -> tuple[T, float]:
        """``attempt()``'s result and the seconds its call has waited on rate limits;
        its failure, as Temporal should see it (see the module doc), otherwise."""
        await self._check_lost_attempts()
        try:
            result = await attempt()
        except asyncio.CancelledError:
            raise
        except ApplicationError as err:
            if err.non_retryable:
                raise
            if err.type == FailureType.RATE_LIMIT.value:
                raise await self._refused(err) from None
            if await self._spent():
                raise _final(err, err.type or FailureType.APPLICATION_ERROR.value) from None
            raise
        except Exception as err:
            if await self._spent():
                raise _final(err, type(err).__name__) from err
            raise
        return result, round(await self._waited_before() + self.paced_s, 3)

    async def _waited_before(self) -> float:
        """The waits earlier attempts of this call asked for: read even at a first
        attempt, which may follow the refusals of a run of this call that was lost with
        its worker (a local activity starts again from attempt 1)."""
        return (await self.store.waits(self.call_id)).waited_s

    async def _refused(self, err: ApplicationError) -> ApplicationError:
        retry_after = err.next_retry_delay.total_seconds() if err.next_retry_delay else None
        delay = self.params.rate_limit_delay(retry_after, self.attempt)
        wait_s = delay.total_seconds()
        tally = await self.store.record_wait(
            self.call_id, self.entry, round(wait_s + self.paced_s, 3)
        )
        waited = tally.waited_s - wait_s  # what the call did wait, before this refusal
        patience = self.params.llm_rate_limit_patience.total_seconds()
        if waited >= patience:
            by = "DPLAN_RATE_LIMITS" if err.message.startswith(_LIMITER_PREFIX) else "the provider"
            return ApplicationError(
                gave_up_sentence(waited, tally.refusals, patience, by=by),
                type=FailureType.RATE_LIMIT.value,
                non_retryable=True,
            )
        # Benign: the SDK logs it at DEBUG and leaves it out of its failure metrics (a
        # refusal waited out is no failure; ``dplan_llm_requests_total`` still counts it).
        return ApplicationError(
            err.message,
            type=FailureType.RATE_LIMIT.value,
            next_retry_delay=delay,
            category=ApplicationErrorCategory.BENIGN,
        )

    async def _spent(self) -> bool:
        """Whether a retryable failure other than a refusal ends the call: the attempts
        that were not refused, this one included, reached ``llm_max_attempts``."""
        if self.attempt < self.params.llm_max_attempts:
            return False
        tally = await self._tally()
        return self.attempt - tally.refusals >= self.params.llm_max_attempts

    async def _check_lost_attempts(self) -> None:
        """Fail at once when the attempts lost without an error of ours (timed out, or
        with a worker that died) and those that failed already used up the attempts."""
        if self.attempt <= self.params.llm_max_attempts:
            return
        tally = await self._tally()
        spent = self.attempt - 1 - tally.refusals
        if spent >= self.params.llm_max_attempts:
            raise ApplicationError(
                f"gave up after {spent} attempts that failed or were lost "
                f"(DPLAN_LLM_MAX_ATTEMPTS={self.params.llm_max_attempts})",
                type=FailureType.TIMEOUT.value,
                non_retryable=True,
            )

    async def _tally(self) -> WaitTally:
        return await self.store.waits(self.call_id)


def _final(err: BaseException, kind: str) -> ApplicationError:
    """``err`` as the call's last failure: its type and message, not retried."""
    message = err.message if isinstance(err, ApplicationError) else str(err)
    return ApplicationError(message or kind, type=kind, non_retryable=True)
