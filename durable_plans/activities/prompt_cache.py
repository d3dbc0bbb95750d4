"""Prompt caching: mark the stable prefix where the provider wants it marked, and read
back how many prompt tokens the provider served from its cache.

Every call of a subtask resends the same system prompt and tool schemas, and a
conversation resends its whole past. OpenAI, DeepSeek and xAI cache such prefixes by
themselves (nothing to send; the answer's ``prompt_tokens_details.cached_tokens`` says
how much was read from the cache). Anthropic's models, directly or through Bedrock,
Vertex AI, Azure AI, Databricks or OpenRouter, cache only up to a ``cache_control``
breakpoint the request sets: ``with_cache_markers`` sets three (of the four allowed) — on
the system prompt, on the last tool schema (tools come first in Anthropic's prompt, so
the tools and the system prompt are one cached prefix), and on the last message, so the
next turn reads everything before it from the cache. litellm carries the markers into
the provider's request format; other providers never see them.

Cached tokens are part of ``prompt_tokens`` and priced lower (litellm's model info gives
``cache_read_input_token_cost``); ``Usage.cached_tokens`` reports them.
"""

from __future__ import annotations

import copy
from typing import Any, Final

__all__ = [
    "MARKER_PROVIDERS",
    "cache_markers_for",
    "cached_tokens_of",
    "needs_cache_markers",
    "with_cache_markers",
]

EPHEMERAL: Final = {"type": "ephemeral"}
# Providers whose Claude models cache only what a request marks.
MARKER_PROVIDERS: Final = frozenset(
    {"anthropic", "bedrock", "bedrock_converse", "vertex_ai", "azure_ai", "databricks"}
)
# Providers that route to many model families: marked only for a Claude model.
_ROUTERS: Final = frozenset({"openrouter"})


def needs_cache_markers(provider: str, model: str) -> bool:
    """Whether a request to ``model`` through ``provider`` caches only what it marks."""
    if provider == "anthropic":
        return True
    if provider in MARKER_PROVIDERS or provider in _ROUTERS:
        return "claude" in model.lower()
    return False


def _marked_content(content: Any) -> list[dict[str, Any]] | None:
    """``content`` as text blocks with a breakpoint on the last; None: nothing to mark."""
    if isinstance(content, str):
        if not content:
            return None
        return [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        blocks = [dict(b) if isinstance(b, dict) else b for b in content]
        blocks[-1]["cache_control"] = dict(EPHEMERAL)
        return blocks
    return None


def with_cache_markers(kwargs: dict[str, Any], *, tools: bool = True) -> dict[str, Any]:
    """litellm arguments with breakpoints on the system prompt, the last tool schema
    (unless ``tools`` is false: a router such as OpenRouter documents markers in message
    content only) and the last message that has content; the caller's lists are not
    changed."""
    out = dict(kwargs)
    messages = [dict(m) for m in kwargs.get("messages") or ()]
    systems = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("content")), None)
    for i in {*systems[-1:], *([] if last is None else [last])}:
        marked = _marked_content(messages[i].get("content"))
        if marked is not None:
            messages[i]["content"] = marked
    out["messages"] = messages
    schemas = kwargs.get("tools")
    if tools and schemas:
        schemas = copy.deepcopy(list(schemas))
        schemas[-1]["cache_control"] = dict(EPHEMERAL)
        out["tools"] = schemas
    return out


def cache_markers_for(kwargs: dict[str, Any], provider: str, model: str) -> dict[str, Any]:
    """``kwargs`` as they should be sent to ``model`` through ``provider``: marked where
    the provider caches only what is marked, unchanged elsewhere."""
    if not needs_cache_markers(provider, model):
        return kwargs
    return with_cache_markers(kwargs, tools=provider not in _ROUTERS)


def cached_tokens_of(usage: Any, prompt_tokens: int) -> int:
    """Prompt tokens read from the provider's cache, as an answer's usage says: OpenAI's
    ``prompt_tokens_details.cached_tokens`` (litellm fills it for Anthropic too) or
    Anthropic's ``cache_read_input_tokens``; never more than the prompt."""
    if usage is None:
        return 0
    details = _get(usage, "prompt_tokens_details")
    cached = _get(details, "cached_tokens") if details is not None else None
    if not cached:
        cached = _get(usage, "cache_read_input_tokens") or _get(usage, "_cache_read_input_tokens")
    try:
        value = int(cached or 0)
    except (TypeError, ValueError):
        return 0
    return max(0, min(value, prompt_tokens))


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
