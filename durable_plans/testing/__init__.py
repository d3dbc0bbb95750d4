"""Test doubles for your own agents and plans: the scripted model and a strict fake provider.

What this project's own test-suite runs against, published so your tests need neither
network nor keys (as ``temporalio.contrib.openai_agents.testing`` does for the OpenAI
Agents SDK):

- the scripted model (``SCRIPTED_MODEL``, ``"scripted/demo"``): a litellm custom provider
  that plays deterministic agent turns inside the worker; give it as the model and set
  ``DPLAN_SCRIPTED_LATENCY_MS=0`` to make it instant;
- ``FakeProvider``: a local OpenAI-compatible HTTP server that answers like a *strict*
  provider (an orphaned tool message, an unanswered tool call or a reused
  ``tool_call_id`` is a 400, recorded in ``rejections``) and records every request.
  Point the worker at it with ``api_base=provider.base_url`` and a model such as
  ``"openai/fake"``. What it answers is a *scenario*: ``AgentScenario`` (the default,
  steered by directives such as ``[flaky:500x2]`` in the task text), ``ScriptedScenario``
  (replies in a fixed order), or any callable ``ChatRequest -> Reply``.
  ``FakeProviderProcess`` runs it as its own process (``python -m durable_plans.testing``);
- ``local_stack()``: an async context manager with a Temporal dev server, a worker and a
  ``FakeProvider`` (or the scripted model) for one test; ``stack.client`` runs plans.

The fake provider needs aiohttp: ``pip install 'durable-plans[testing]'``.

Names load on first use: ``python -m durable_plans.testing`` (the provider process that
crash tests start by the dozen) then imports the provider alone, not the Temporal client,
the worker and litellm that ``local_stack`` needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_plans import _lazy

if TYPE_CHECKING:
    from durable_plans.activities.scripted_model import (
        CARELESS_TOOL_CALL_ID,
        LATENCY_ENV,
        SCRIPTED_MODEL,
        PlannedCall,
        PlannedTurn,
        plan_turn,
        register_scripted_provider,
    )
    from durable_plans.testing._fake_provider import (
        FakeProvider,
        RecordedRequest,
        identical_counts,
        read_request_log,
        refused_count,
    )
    from durable_plans.testing._fake_scenario import (
        AgentScenario,
        ChatRequest,
        Completion,
        Directives,
        DropConnection,
        HttpError,
        RawBody,
        Reply,
        Scenario,
        ScriptedScenario,
        ToolCallSpec,
        conversation_key,
        strip_directives,
    )
    from durable_plans.testing._local_stack import (
        LocalStack,
        local_stack,
    )
    from durable_plans.testing._provider_process import (
        FakeProviderProcess,
    )

__all__ = [
    "CARELESS_TOOL_CALL_ID",
    "LATENCY_ENV",
    "SCRIPTED_MODEL",
    "AgentScenario",
    "ChatRequest",
    "Completion",
    "Directives",
    "DropConnection",
    "FakeProvider",
    "FakeProviderProcess",
    "HttpError",
    "LocalStack",
    "PlannedCall",
    "PlannedTurn",
    "RawBody",
    "RecordedRequest",
    "Reply",
    "Scenario",
    "ScriptedScenario",
    "ToolCallSpec",
    "conversation_key",
    "identical_counts",
    "local_stack",
    "plan_turn",
    "read_request_log",
    "refused_count",
    "register_scripted_provider",
    "strip_directives",
]

_HOMES: dict[str, str] = _lazy.homes(
    {
        "durable_plans.activities.scripted_model": (
            "CARELESS_TOOL_CALL_ID",
            "LATENCY_ENV",
            "SCRIPTED_MODEL",
            "PlannedCall",
            "PlannedTurn",
            "plan_turn",
            "register_scripted_provider",
        ),
        "durable_plans.testing._fake_provider": (
            "FakeProvider",
            "RecordedRequest",
            "identical_counts",
            "read_request_log",
            "refused_count",
        ),
        "durable_plans.testing._fake_scenario": (
            "AgentScenario",
            "ChatRequest",
            "Completion",
            "Directives",
            "DropConnection",
            "HttpError",
            "RawBody",
            "Reply",
            "Scenario",
            "ScriptedScenario",
            "ToolCallSpec",
            "conversation_key",
            "strip_directives",
        ),
        "durable_plans.testing._local_stack": (
            "LocalStack",
            "local_stack",
        ),
        "durable_plans.testing._provider_process": ("FakeProviderProcess",),
    }
)


__getattr__ = _lazy.loader(__name__, globals(), _HOMES)
__dir__ = _lazy.lister(globals(), __all__)
