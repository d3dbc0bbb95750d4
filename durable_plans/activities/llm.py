"""The LLM call as an activity: read the branch from the store, ask the model, store the answer.

Only ids cross the activity boundary: the conversation is read here and the answer is
written here, so workflow history holds a few hundred bytes per call whatever the
conversation's length. Temporal owns retries (litellm's are off: ``num_retries=0``), so
every attempt is visible and bounded; errors are classified into retryable and not.
An answer already stored under this call's deterministic id is returned as is: a worker
killed after the model answered does not pay for, or change, that answer on retry.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity

from durable_plans._errors import SettingsError
from durable_plans.activities import observe
from durable_plans.activities.budget import ensure_within_budget
from durable_plans.activities.context_window import call_messages, window_check
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.llm_client import LlmClient
from durable_plans.activities.llm_errors import (
    LlmErrorClass,
    classify_llm_error,
    to_application_error,
)
from durable_plans.activities.llm_patience import CallPatience
from durable_plans.activities.model_choice import (
    FallbackPolicy,
    ModelChoice,
    may_try_next,
    model_chain,
)
from durable_plans.activities.prompt_cache import cache_markers_for, cached_tokens_of
from durable_plans.activities.sessions import begin_branch, close_branch
from durable_plans.activities.shared_limits import SharedRateLimits
from durable_plans.activities.spend import paid_for, record_paid
from durable_plans.activities.streaming import LivePublisher, streamed_completion
from durable_plans.activities.tenant_caps import TenantCapsFile, TenantGate
from durable_plans.activities.tool_catalog import tool_specs
from durable_plans.activities.tool_registry import ToolSpec, openai_tool_schemas
from durable_plans.domain.contracts import ACT_CALL_LLM, LlmCallInput, LlmCallOutput, ToolCallRef
from durable_plans.domain.failures import FailureType
from durable_plans.domain.ids import assistant_message_id
from durable_plans.domain.models import FunctionCall, Message, ToolCall, Usage
from durable_plans.domain.secrets import scrub_secrets, scrub_value
from durable_plans.domain.streaming import streams_in
from durable_plans.domain.tenants import TenantsConfigError
from durable_plans.domain.tool_ids import assign_tool_call_ids
from durable_plans.domain.tools_config import ToolSchema
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

T = TypeVar("T")


def import_litellm() -> Any:
    """litellm, imported on first use with the offline cost map (no network at import)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from durable_plans.activities.scripted_model import register_scripted_provider

    register_scripted_provider()
    litellm.suppress_debug_info = True
    # litellm logs every request at INFO on its own handlers; the worker logs its own
    # structured lines, so litellm keeps only warnings and errors.
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return litellm


def output_of(message: Message, *, model: str, replayed: bool) -> LlmCallOutput:
    return LlmCallOutput(
        message_id=message.id,
        content=message.content,
        tool_calls=tuple(
            ToolCallRef(id=c.id, name=c.function.name) for c in (message.tool_calls or ())
        ),
        usage=message.usage or Usage(),
        model=model,
        replayed=replayed,
    )


def message_from_response(response: Any, *, msg_id: str) -> tuple[Message, str | None]:
    """The assistant message in a litellm response, or an InvalidResponse classification."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise _invalid("the provider returned no choices")
    choice = choices[0]
    raw = getattr(choice, "message", None)
    if raw is None:
        raise _invalid("the provider returned a choice without a message")
    calls: list[ToolCall] = []
    for call in getattr(raw, "tool_calls", None) or []:
        fn = getattr(call, "function", None)
        name = getattr(fn, "name", None)
        if not name:
            raise _invalid("the provider returned a tool call without a function name")
        calls.append(
            ToolCall(
                id=str(getattr(call, "id", "") or "missing"),
                function=FunctionCall(
                    name=name, arguments=scrub_arguments(getattr(fn, "arguments", None) or "")
                ),
            )
        )
    content = getattr(raw, "content", None)
    if content is not None and not isinstance(content, str):
        content = str(content)
    message = Message(
        id=msg_id,
        role="assistant",
        content=scrub_secrets(content) if content else content,
        tool_calls=tuple(calls) or None,
    )
    return message, getattr(choice, "finish_reason", None)


def scrub_arguments(arguments: str) -> str:
    """Tool-call arguments without secrets, still the JSON they were when they were JSON.

    A model may repeat a key in a call (a task for a sub-agent, a file's content); the
    arguments are stored, executed and, for a spawned sub-agent, become its task, so they
    are scrubbed before any of that. Scrubbing the parsed strings rather than the text
    keeps the document valid (a redacted value cannot swallow an escape or a quote).
    """
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return scrub_secrets(arguments)  # invalid anyway: the tool reports it as such
    scrubbed = scrub_value(parsed)
    # Unchanged arguments keep their exact text (what the model sent, byte for byte).
    return arguments if scrubbed == parsed else json.dumps(scrubbed, ensure_ascii=False)


def _invalid(text: str) -> Exception:
    return to_application_error(
        LlmErrorClass(
            type=FailureType.INVALID_RESPONSE.value,
            message=text,
            retryable=True,
            retry_after_s=None,
        )
    )


def waited(usage: Usage, seconds: float) -> Usage:
    """``usage`` of a call that waited ``seconds`` on rate limits (``llm_patience``)."""
    return usage.model_copy(update={"rate_limited_s": seconds})


def usage_of(litellm: Any, response: Any) -> Usage:
    raw = getattr(response, "usage", None)
    prompt = int(getattr(raw, "prompt_tokens", 0) or 0)
    completion = int(getattr(raw, "completion_tokens", 0) or 0)
    # The client (ours, or litellm's own logging) has usually priced the answer already:
    # pricing it again costs milliseconds of CPU per call.
    known = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
    try:
        if known is not None:
            cost = float(known)
        else:
            cost = float(litellm.completion_cost(completion_response=response) or 0.0)
    except Exception:
        cost = 0.0  # an unpriced model is not an error; tokens are still counted
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=max(cost, 0.0),
        cached_tokens=cached_tokens_of(raw, prompt),
    )


class _NextModel(Exception):
    """A model refused a request another one may answer: ask ``choice`` now."""

    def __init__(self, choice: ModelChoice, verdict: LlmErrorClass) -> None:
        super().__init__(verdict.message)
        self.choice = choice
        self.verdict = verdict


class LlmActivities:
    def __init__(self, store: SessionStore, settings: Settings) -> None:
        self._store = store
        self._settings = settings
        self._client: LlmClient | None = None  # one per worker, made on first call
        self._limits = SharedRateLimits.from_settings(settings)  # activities/shared_limits.py
        self._parameters = settings.activity_parameters()  # bounds of retries (llm_patience)
        # Tenants' daily caps (DPLAN_TENANTS), checked before every call of a capped tenant.
        try:
            caps = TenantCapsFile.load(settings.tenants_file)
        except TenantsConfigError as err:
            raise SettingsError(f"DPLAN_TENANTS: {err}") from None
        self._tenants = TenantGate(store, caps)

    @property
    def tenants(self) -> TenantGate:
        return self._tenants

    def client(self, litellm: Any) -> LlmClient:
        """The worker's shared LLM client (routes, prices and HTTP pool kept across calls)."""
        if self._client is None:
            self._client = LlmClient(litellm, lean=self._settings.llm_lean)
        return self._client

    async def aclose(self) -> None:
        await self._limits.close()
        if self._client is not None:
            await self._client.aclose()

    def _plain_kwargs(self, model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """A request to ``model``: Temporal retries (litellm's are off), the worker's
        timeout, and its endpoint and key unless the model is the offline scripted one."""
        s = self._settings
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "num_retries": 0,
            "timeout": s.llm_timeout_s,
        }
        if not model.startswith("scripted/"):
            if s.api_base:
                kwargs["api_base"] = s.api_base
            if s.api_key:
                kwargs["api_key"] = s.api_key
        return kwargs

    def request_kwargs(
        self,
        model: str,
        messages: list[Message],
        tools: tuple[str, ...],
        extra_tools: tuple[ToolSchema, ...] = (),
    ) -> dict[str, Any]:
        s = self._settings
        kwargs = self._plain_kwargs(model, [m.to_openai() for m in messages])
        specs = tool_specs(tools) + [
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
            for t in extra_tools
        ]
        if specs:
            kwargs["tools"] = openai_tool_schemas(specs)
        if not model.startswith("scripted/") and s.prompt_cache:
            route = self.client(import_litellm()).route(model, s.api_base, s.api_key)
            kwargs = cache_markers_for(kwargs, route.provider, route.model)
        return kwargs

    def model_choice(self, inp: LlmCallInput) -> ModelChoice:
        """The model this attempt asks: the agent's own, or a fallback once its errors
        persisted (``activities/model_choice.py``), from the attempt's number and when
        the call was first scheduled, both Temporal's: nothing in the workflow changes."""
        s = self._settings
        fallbacks = s.fallback_models if inp.fallback_models is None else inp.fallback_models
        return self._choice(model_chain(inp.model or s.model, fallbacks))

    def side_model(self) -> ModelChoice:
        """The model a side request of this attempt asks (a compaction's summary, a
        delegation): the worker's sub-agent model, then its fallback models, chosen as
        the agents' calls choose theirs."""
        s = self._settings
        return self._choice(model_chain(s.effective_subagent_model, s.fallback_models))

    async def side_request(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        patience: CallPatience | None = None,
    ) -> Any:
        """A one-off request, on the path every agent call takes: the worker's client (its
        connections, routes and prices) and the limits every worker shares, their pacing
        told to ``patience``."""
        kwargs = self._plain_kwargs(model, messages)
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        client = self.client(import_litellm())
        paced = patience.paced if patience is not None else None
        return await self._limits.call(kwargs, lambda: client.acompletion(**kwargs), paced=paced)

    async def patiently(
        self, call_id: str, attempt: Callable[[CallPatience], Awaitable[T]]
    ) -> tuple[T, float]:
        """``attempt``'s result and the seconds the call ``call_id`` waited on rate limits,
        its refusals waited out for the worker's patience (``llm_patience``)."""
        patience = CallPatience.for_this_attempt(self._store, self._parameters, call_id)
        return await patience.run(lambda: attempt(patience))

    def _choice(self, chain: tuple[str, ...]) -> ModelChoice:
        s = self._settings
        info = activity.info()
        first = info.scheduled_time
        elapsed = (datetime.now(UTC) - first).total_seconds() if first is not None else 0.0
        policy = FallbackPolicy(s.fallback_after_attempts, s.fallback_after_s)
        return ModelChoice.for_attempt(chain, policy, info.attempt, elapsed)

    @activity.defn(name=ACT_CALL_LLM)
    async def call_llm(self, inp: LlmCallInput) -> LlmCallOutput:
        """The answer, with the seconds its call waited on rate limits in its usage
        (``activities/llm_patience.py``: refusals are waited out, bounded in time)."""
        call_id = assistant_message_id(inp.scope, inp.turn)
        out, waited_s = await self.patiently(call_id, lambda p: self._answer(inp, p))
        return out.model_copy(update={"usage": waited(out.usage, waited_s)}) if waited_s else out

    async def _answer(self, inp: LlmCallInput, patience: CallPatience) -> LlmCallOutput:
        choice = self.model_choice(inp)
        if choice.is_fallback:
            activity.logger.warning(
                "%s: attempt %d asks fallback model %s (%s kept failing)",
                assistant_message_id(inp.scope, inp.turn),
                activity.info().attempt,
                choice.model,
                ", ".join(choice.chain[: choice.index]),
            )
        while True:
            try:
                return await self._call_model(inp, choice, patience)
            except _NextModel as switch:
                activity.logger.warning(
                    "%s: %s refused the request (%s); asking %s",
                    assistant_message_id(inp.scope, inp.turn),
                    choice.model,
                    switch.verdict.type,
                    switch.choice.model,
                )
                choice = switch.choice

    async def _call_model(
        self, inp: LlmCallInput, choice: ModelChoice, patience: CallPatience
    ) -> LlmCallOutput:
        if inp.begin is not None:
            await begin_branch(self._store, inp.begin)  # idempotent: safe on every attempt
        msg_id = assistant_message_id(inp.scope, inp.turn)
        history = await self._store.read(inp.session_id)
        model = choice.model
        for existing in history:
            if existing.id == msg_id:
                # Answered before a crash: report what it cost (every answer paid for this
                # call, ``activities/spend.py``) and return, never re-ask.
                paid = await paid_for(self._store, msg_id, existing.usage or Usage())
                out = output_of(existing, model=existing.model or model, replayed=True)
                return await self._closed_if_final(inp, out.model_copy(update={"usage": paid}))

        await ensure_within_budget(self._store, inp.root_session_id, inp.budget)
        litellm = import_litellm()
        messages = call_messages(history, inp.system_prompt)  # activities/context_window.py
        kwargs = self.request_kwargs(model, messages, inp.tools, inp.extra_tools)
        over = window_check(litellm, inp, messages, kwargs, self._settings)
        if over is not None:  # not sent: the workflow compacts the history first
            return LlmCallOutput(message_id=msg_id, content=None, model=model, over_window=over)
        await self._tenants.check(inp.tenant, kwargs)  # activities/tenant_caps.py
        with observe.llm_request(model, inp.agent, call_id=msg_id) as request:
            try:
                async with heartbeating():
                    response = await self._limits.call(
                        kwargs,
                        lambda: self._complete(litellm, kwargs, msg_id, inp.agent),
                        paced=patience.paced,
                    )
            except Exception as exc:
                verdict = classify_llm_error(exc)
                following = may_try_next(verdict, choice)
                if following is None:
                    raise to_application_error(verdict) from None
                raise _NextModel(following, verdict) from None
            usage = usage_of(litellm, response)
            request.answered(usage)
            # Paid for now, whatever happens next: recorded before anything else is done.
            paid = await record_paid(
                self._store, inp.root_session_id, msg_id, usage, tenant=inp.tenant
            )
            message, finish_reason = message_from_response(response, msg_id=msg_id)
            request.finished(finish_reason)

        message, _ = assign_tool_call_ids(message, salt=msg_id)
        message = message.model_copy(update={"usage": usage, "model": model})
        if await self._store.append(inp.session_id, [message]) == 0:
            # Another attempt of this same call (one the server had given up on, but
            # which still finished) stored its answer first. The stored answer is the
            # one the tools and the next turn read, so it is the one to report.
            stored = next(m for m in await self._store.read(inp.session_id) if m.id == msg_id)
            out = output_of(stored, model=stored.model or model, replayed=True)
            paid = await paid_for(self._store, msg_id, paid)
            return await self._closed_if_final(inp, out.model_copy(update={"usage": paid}))
        out = output_of(message, model=model, replayed=False)
        return await self._closed_if_final(
            inp, out.model_copy(update={"finish_reason": finish_reason, "usage": paid})
        )

    async def _complete(self, litellm: Any, kwargs: dict[str, Any], msg_id: str, agent: str) -> Any:
        """The provider's whole answer; streamed to the calling workflow's watchers when
        ``DPLAN_STREAM`` says this workflow's calls stream (``domain/streaming.py``)."""
        client = self.client(litellm)
        if kwargs["model"].startswith("scripted/") or not streams_in(
            self._settings.stream, activity.info().workflow_type
        ):
            return await client.acompletion(**kwargs)
        interval = timedelta(seconds=self._settings.stream_interval_s)
        async with LivePublisher(msg_id, agent, interval=interval) as live:
            response = await streamed_completion(litellm, client.acompletion, kwargs, live)
            choices = getattr(response, "choices", None) or [None]
            await live.close("end", getattr(choices[0], "finish_reason", None) or "")
        return response

    async def _closed_if_final(self, inp: LlmCallInput, out: LlmCallOutput) -> LlmCallOutput:
        """Close the subtask's branch when asked and this answer ends the subtask (text,
        no tool call): the workflow then completes without a local activity of its own."""
        final = not out.tool_calls and bool(out.content and out.content.strip())
        if inp.close_on_answer is None or not final:
            return out
        await close_branch(self._store, inp.close_on_answer)
        return out.model_copy(update={"branch_closed": True})
