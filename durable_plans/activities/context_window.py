"""The LLM call's side of compaction: what a call sends, and whether it may be sent.

``call_llm`` (``activities/llm.py``) sends ``call_messages``: the history with its last
compaction record applied (``domain/compaction.visible_history``), repaired for a strict
provider. A call of a run that compacts (``LlmCallInput.check_window``) first asks
``window_check``: when the prompt's estimate passes ``DPLAN_COMPACT_AT`` of the model's
context window, it is not sent; the workflow compacts (``activities/compaction.py``) and
asks again.
"""

from __future__ import annotations

import json
from typing import Any

from durable_plans.activities.tool_catalog import tool_specs
from durable_plans.activities.tool_registry import ToolSpec, openai_tool_schemas
from durable_plans.domain.compaction import WindowCheck, estimate_tokens, sent_messages
from durable_plans.domain.contracts import LlmCallInput
from durable_plans.domain.models import Message
from durable_plans.domain.tools_config import ToolSchema
from durable_plans.settings import Settings

__all__ = ["call_messages", "context_window_of", "tool_chars_of", "window_check"]


def context_window_of(
    litellm: Any, model: str, agent_window: int | None, s: Settings
) -> int | None:
    """The model's context window in tokens: the agent's ``context_window``, else
    ``DPLAN_CONTEXT_WINDOW``, else litellm's model info; None when nobody knows it."""
    if agent_window:
        return agent_window
    if s.context_window:
        return s.context_window
    try:
        info = litellm.get_model_info(model)
    except Exception:
        return None  # a model litellm does not know (a local or custom endpoint)
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if isinstance(window, int | float) and window > 0 else None


def tool_chars_of(tools: tuple[str, ...], extra: tuple[ToolSchema, ...]) -> int:
    specs = tool_specs(tools) + [
        ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in extra
    ]
    return len(json.dumps(openai_tool_schemas(specs))) if specs else 0


def call_messages(history: list[Message], system_prompt: str | None) -> list[Message]:
    """What an LLM call sends for ``history`` (compaction records applied, repaired)."""
    return sent_messages(history, system_prompt)


def window_check(
    litellm: Any,
    inp: LlmCallInput,
    messages: list[Message],
    kwargs: dict[str, Any],
    s: Settings,
) -> WindowCheck | None:
    """Why the call should not be sent yet (its estimate passes ``DPLAN_COMPACT_AT`` of the
    model's window), or None: send it. Only for calls that ask (runs that compact)."""
    if not inp.check_window:
        return None
    window = context_window_of(litellm, kwargs["model"], inp.context_window, s)
    if window is None:
        return None
    threshold = int(window * s.compact_at)
    tools = kwargs.get("tools")
    estimated = estimate_tokens(messages, len(json.dumps(tools)) if tools else 0)
    if estimated <= threshold:
        return None
    return WindowCheck(
        estimated_tokens=estimated, threshold_tokens=threshold, context_window=window
    )
