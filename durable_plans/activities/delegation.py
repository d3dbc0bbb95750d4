"""``delegate_to_sub_agent``: an isolated request to a cheap model, as an activity.

The helper model gets a short system prompt, the task and the optional context — no
tools and no history — so it is cheap, fast and cannot act on the workspace. It is an
LLM call like any other: Temporal retries it, its cost is charged to the root session's
budget, and its answer is written back as the tool result under a deterministic id.
"""

from __future__ import annotations

from temporalio import activity

from durable_plans.activities import observe
from durable_plans.activities.budget import ensure_within_budget
from durable_plans.activities.heartbeat import heartbeating
from durable_plans.activities.llm import (
    LlmActivities,
    import_litellm,
    message_from_response,
    usage_of,
    waited,
)
from durable_plans.activities.llm_errors import classify_llm_error, to_application_error
from durable_plans.activities.llm_patience import CallPatience
from durable_plans.activities.orchestration_tools import ORCHESTRATION_REGISTRY, DelegateArgs
from durable_plans.activities.spend import paid_for, record_paid
from durable_plans.activities.tool_calls import SUMMARY_CHARS
from durable_plans.activities.tool_registry import ToolResult
from durable_plans.domain.agents import DELEGATE_TOOL
from durable_plans.domain.contracts import (
    ACT_DELEGATE,
    DelegateInput,
    DelegateOutput,
    ToolCallOutput,
)
from durable_plans.domain.ids import delegation_charge_id, tool_message_id
from durable_plans.domain.models import Message, Usage
from durable_plans.domain.secrets import scrub_secrets
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings

# The agent name delegated requests are counted under (metrics, spans).
DELEGATE_AGENT = "delegate"

SUBAGENT_SYSTEM_PROMPT = (
    "You are a fast helper working for another agent. You see only the task below (and "
    "any context given with it), not the conversation it came from, and you have no "
    "tools. Do exactly what the task asks and answer with the result itself, concisely, "
    "without preamble. If the task cannot be done from what you were given, say what is "
    "missing."
)


def delegation_messages(args: DelegateArgs) -> list[dict[str, str]]:
    user = args.task if not args.context else f"{args.task}\n\nContext:\n{args.context}"
    return [
        {"role": "system", "content": SUBAGENT_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


class DelegationActivities:
    def __init__(self, store: SessionStore, settings: Settings, llm: LlmActivities) -> None:
        self._store = store
        self._settings = settings
        self._llm = llm  # the helper is asked as an agent's call is (client, limits, fallbacks)

    @activity.defn(name=ACT_DELEGATE)
    async def delegate(self, inp: DelegateInput) -> DelegateOutput:
        """The helper's answer as a tool result; its request's rate limits are waited
        out as an agent's call's are (``llm_patience``), the wait in its usage."""
        call_id = delegation_charge_id(inp.scope, inp.turn, inp.call_index)
        with observe.tool_span():
            async with heartbeating():
                out, waited_s = await self._llm.patiently(
                    call_id, lambda patience: self._delegate(inp, patience)
                )
        return out.model_copy(update={"usage": waited(out.usage, waited_s)}) if waited_s else out

    async def _delegate(self, inp: DelegateInput, patience: CallPatience) -> DelegateOutput:
        history = await self._store.read(inp.session_id)
        own_id = tool_message_id(inp.scope, inp.turn, inp.call_index)
        charge_id = delegation_charge_id(inp.scope, inp.turn, inp.call_index)
        assistant: Message | None = None
        for m in history:
            if m.id == own_id:  # done before a crash: report it again, charge nothing new
                usage = await paid_for(self._store, charge_id, m.usage or Usage())
                content = m.content or ""
                summary = ToolCallOutput(
                    tool_call_id=m.tool_call_id or "",
                    name=DELEGATE_TOOL,
                    ok=not content.startswith("error:"),
                    summary=content[:SUMMARY_CHARS],
                )
                return DelegateOutput(tool=summary, usage=usage)
            if m.id == inp.message_id:
                assistant = m
        if assistant is None or not assistant.tool_calls:
            raise ValueError(f"no assistant tool call {inp.message_id} in {inp.session_id}")
        call = assistant.tool_calls[inp.call_index]

        parsed = ORCHESTRATION_REGISTRY.parse(DELEGATE_TOOL, call.function.arguments)
        usage = paid = Usage()
        if isinstance(parsed, ToolResult):
            result = parsed
        else:
            assert isinstance(parsed, DelegateArgs)
            await ensure_within_budget(self._store, inp.root_session_id, inp.budget)
            litellm = import_litellm()
            model = self._llm.side_model().model  # a fallback once its errors persist
            messages = delegation_messages(parsed)
            await self._llm.tenants.check(inp.tenant, {"model": model, "messages": messages})
            with observe.llm_request(model, DELEGATE_AGENT, call_id=charge_id) as request:
                try:
                    response = await self._llm.side_request(model, messages, patience=patience)
                except Exception as exc:
                    classified = classify_llm_error(exc)
                    if classified.retryable:
                        raise to_application_error(classified) from None
                    # A request the helper model refuses is a failed tool, not a failed
                    # subtask: the agent reads the error and can do the work itself.
                    request.refused(classified.type)
                    result = ToolResult.error(
                        f"delegation failed: {classified.type}: {classified.message}"
                    )
                    response = None
                if response is not None:
                    usage = usage_of(litellm, response)
                    request.answered(usage)
                    # Paid for now (``activities/spend.py``); the total of every attempt
                    # is what the delegation reports.
                    paid = await record_paid(
                        self._store, inp.root_session_id, charge_id, usage, tenant=inp.tenant
                    )
                    answer, finish_reason = message_from_response(response, msg_id=own_id)
                    request.finished(finish_reason)
            if response is not None:
                text = (answer.content or "").strip()
                result = (
                    ToolResult(True, text)
                    if text
                    else ToolResult.error("the helper model returned an empty answer")
                )
        content = scrub_secrets(result.content)
        await self._store.append(
            inp.session_id,
            [
                Message(
                    id=own_id,
                    role="tool",
                    tool_call_id=call.id,
                    name=DELEGATE_TOOL,
                    content=content,
                    usage=usage,
                )
            ],
        )
        observe.tool_call(DELEGATE_TOOL, result.ok)
        out = ToolCallOutput(
            tool_call_id=call.id, name=DELEGATE_TOOL, ok=result.ok, summary=content[:SUMMARY_CHARS]
        )
        return DelegateOutput(tool=out, usage=paid)
