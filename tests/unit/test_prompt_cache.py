"""Prompt caching: the stable prefix is marked where the provider caches only what is
marked (checked through litellm's own Anthropic request transform), and cached prompt
tokens the provider reports reach ``Usage`` and are priced at the cached-input price on
both LLM paths (real HTTP to the fake provider)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from durable_plans.activities.llm import LlmActivities, import_litellm, usage_of
from durable_plans.activities.llm_client import LlmClient
from durable_plans.activities.prompt_cache import (
    cache_markers_for,
    cached_tokens_of,
    needs_cache_markers,
    with_cache_markers,
)
from durable_plans.domain.models import Message, Usage
from durable_plans.session_store import SessionStore
from durable_plans.settings import Settings
from durable_plans.testing import Completion, FakeProvider, ScriptedScenario

KEY = "sk-unit-fake-000000000000000000000000000"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} in the workspace",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name in ("list_dir", "read_file")
]
EPHEMERAL = {"type": "ephemeral"}


def _conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are the coder."},
        {"role": "user", "content": "Fix the build"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "list_dir", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Makefile"},
    ]


@pytest.mark.parametrize(
    ("provider", "model", "marked"),
    [
        ("anthropic", "claude-haiku-4-5", True),
        ("bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0", True),
        ("vertex_ai", "claude-sonnet-4", True),
        ("openrouter", "anthropic/claude-sonnet-4", True),
        ("openrouter", "openai/gpt-4o", False),
        ("bedrock", "amazon.nova-pro-v1:0", False),
        ("openai", "gpt-4o-mini", False),  # OpenAI caches by itself
        ("deepseek", "deepseek-chat", False),
    ],
)
def test_which_requests_are_marked(provider: str, model: str, marked: bool) -> None:
    assert needs_cache_markers(provider, model) is marked


def test_litellm_carries_the_markers_into_anthropics_request() -> None:
    """System prompt, last tool schema and the last message each end in a breakpoint, as
    Anthropic's own request format has them after litellm's transform."""
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    original = {"messages": _conversation(), "tools": TOOLS}
    marked = with_cache_markers(original)
    assert original["messages"] == _conversation()  # the caller's request is untouched
    config = AnthropicConfig()
    optional = config.map_openai_params(
        {"tools": marked["tools"]}, {}, "claude-haiku-4-5", drop_params=False
    )
    body = config.transform_request("claude-haiku-4-5", marked["messages"], optional, {}, {})
    assert body["system"] == [
        {"type": "text", "text": "You are the coder.", "cache_control": EPHEMERAL}
    ]
    assert [t.get("cache_control") for t in body["tools"]] == [None, EPHEMERAL]
    (result,) = body["messages"][-1]["content"]
    assert result["type"] == "tool_result"
    assert result["content"][-1]["cache_control"] == EPHEMERAL
    # Nothing else is marked: three breakpoints of the four Anthropic allows.
    assert json.dumps(body).count('"cache_control"') == 3


def test_a_router_marks_message_content_only() -> None:
    kwargs = {"messages": _conversation(), "tools": TOOLS}
    marked = cache_markers_for(kwargs, "openrouter", "anthropic/claude-sonnet-4")
    assert marked["tools"] == TOOLS
    assert marked["messages"][0]["content"][-1]["cache_control"] == EPHEMERAL
    assert cache_markers_for(kwargs, "openai", "gpt-4o") is kwargs


def _activities(**changes: Any) -> LlmActivities:
    settings = Settings(api_key=KEY, **changes)
    return LlmActivities(cast(SessionStore, None), settings)


def test_the_activity_marks_an_anthropic_request_unless_told_not_to() -> None:
    messages = [Message(role="system", content="Be brief."), Message(role="user", content="Hi")]
    on = _activities().request_kwargs("anthropic/claude-haiku-4-5", messages, ("list_dir",))
    assert on["messages"][0]["content"][0]["cache_control"] == EPHEMERAL
    assert on["tools"][-1]["cache_control"] == EPHEMERAL
    off = _activities(prompt_cache=False).request_kwargs(
        "anthropic/claude-haiku-4-5", messages, ("list_dir",)
    )
    assert off["messages"][0]["content"] == "Be brief."
    assert "cache_control" not in json.dumps(off)
    plain = _activities().request_kwargs("openai/gpt-4o-mini", messages, ("list_dir",))
    assert "cache_control" not in json.dumps(plain)


def test_cached_tokens_are_read_from_either_usage_shape() -> None:
    assert cached_tokens_of({"prompt_tokens_details": {"cached_tokens": 700}}, 1000) == 700
    assert cached_tokens_of({"cache_read_input_tokens": 300}, 1000) == 300
    assert cached_tokens_of({"prompt_tokens_details": {"cached_tokens": 5000}}, 1000) == 1000
    assert cached_tokens_of({"prompt_tokens_details": None}, 1000) == 0
    assert cached_tokens_of(None, 10) == 0


def test_usage_adds_cached_tokens_without_counting_them_twice() -> None:
    a = Usage(prompt_tokens=1000, completion_tokens=10, cached_tokens=800, cost_usd=0.1)
    b = Usage(prompt_tokens=500, completion_tokens=5, cached_tokens=0, cost_usd=0.2)
    total = Usage.total([a, b])
    assert (total.prompt_tokens, total.cached_tokens, total.total_tokens) == (1500, 800, 1515)
    # Usage recorded before cached tokens were counted still decodes.
    old = Usage.model_validate_json('{"prompt_tokens": 3, "completion_tokens": 4, "cost_usd": 0}')
    assert old.cached_tokens == 0


@pytest.fixture
async def caching() -> AsyncIterator[FakeProvider]:
    async with FakeProvider(prompt_cache=True) as p:
        yield p


def _ask(p: FakeProvider, messages: list[dict[str, Any]], model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": messages,
        "tools": TOOLS,
        "num_retries": 0,
        "timeout": 10.0,
        "api_base": p.base_url,
        "api_key": KEY,
    }


@pytest.mark.parametrize("lean", [True, False])
async def test_a_repeated_prefix_is_reported_cached_and_priced_lower(
    caching: FakeProvider, lean: bool
) -> None:
    lit = import_litellm()
    client = LlmClient(lit, lean=lean)
    model = "openai/gpt-4o-mini"
    first_turn = _conversation()[:2]
    try:
        first = await client.acompletion(**_ask(caching, first_turn, model))
        second = await client.acompletion(**_ask(caching, _conversation(), model))
    finally:
        await client.aclose()
    assert usage_of(lit, first).cached_tokens == 0
    usage = usage_of(lit, second)
    reported = caching.requests[-1].cached_tokens
    assert 0 < reported < usage.prompt_tokens
    assert usage.cached_tokens == reported
    info = lit.get_model_info(model="gpt-4o-mini", custom_llm_provider="openai")
    assert info["cache_read_input_token_cost"] < info["input_cost_per_token"]
    expected = (
        (usage.prompt_tokens - usage.cached_tokens) * info["input_cost_per_token"]
        + usage.cached_tokens * info["cache_read_input_token_cost"]
        + usage.completion_tokens * info["output_cost_per_token"]
    )
    assert usage.cost_usd == pytest.approx(expected)


async def test_a_scenario_may_report_cached_tokens_itself() -> None:
    scenario = ScriptedScenario([Completion(content="ok", prompt_tokens=900, cached_tokens=512)])
    async with FakeProvider(scenario) as p:
        lit = import_litellm()
        response = await lit.acompletion(**_ask(p, _conversation()[:2], "openai/fake-model"))
    usage = usage_of(lit, response)
    assert (usage.prompt_tokens, usage.cached_tokens) == (900, 512)


async def test_without_prompt_cache_nothing_is_reported_cached() -> None:
    async with FakeProvider() as p:
        lit = import_litellm()
        for messages in (_conversation()[:2], _conversation()):
            response = await lit.acompletion(**_ask(p, messages, "openai/fake-model"))
    assert usage_of(lit, response).cached_tokens == 0
    assert all(r.cached_tokens == 0 for r in p.requests)
