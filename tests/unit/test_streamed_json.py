"""A streamed request answered with one plain JSON completion (a gateway that ignores
``stream``): read as the whole answer, through real HTTP and litellm, never as empty."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from durable_plans.activities.llm import import_litellm as lit
from durable_plans.activities.llm_errors import classify_llm_error
from durable_plans.activities.streaming import LivePublisher, streamed_completion
from durable_plans.testing import FakeProvider, RawBody, ScriptedScenario

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "list a directory",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


class _Live:
    """What a watcher would have been sent."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.tools: list[str] = []

    def text(self, delta: str) -> None:
        self.texts.append(delta)

    def tool(self, name: str) -> None:
        self.tools.append(name)


@pytest.fixture
async def p() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as provider:
        yield provider


async def _streamed(base_url: str, text: str, tools: list[dict[str, Any]] | None) -> Any:
    live = _Live()
    kwargs: dict[str, Any] = {
        "model": "openai/fake-model",
        "api_base": base_url,
        "api_key": "sk-test-not-a-real-key-000000000000",
        "messages": [{"role": "user", "content": text}],
        "num_retries": 0,
        "timeout": 5.0,
    }
    if tools:
        kwargs["tools"] = tools
    litellm = lit()
    response = await streamed_completion(
        litellm, litellm.acompletion, kwargs, cast(LivePublisher, live)
    )
    return response, live


async def test_a_tool_call_answered_as_plain_json_is_the_answer(p: FakeProvider) -> None:
    response, live = await _streamed(p.base_url, "Look around [no-stream]", TOOLS)
    message = response.choices[0].message
    assert [c.function.name for c in message.tool_calls] == ["list_dir"]
    assert json.loads(message.tool_calls[0].function.arguments) == {"path": "."}
    assert response.choices[0].finish_reason == "tool_calls"
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
    assert live.tools == ["list_dir"]
    # The provider did ignore the stream: it was asked for one and sent JSON.
    (request,) = p.requests
    assert (request.body or {}).get("stream") is True and request.delivered


async def test_a_text_answered_as_plain_json_is_the_answer(p: FakeProvider) -> None:
    response, live = await _streamed(p.base_url, "Say hello [no-stream]", None)
    assert response.choices[0].message.content.startswith("Done: Say hello.")
    assert "".join(live.texts).startswith("Done: Say hello.")


async def test_a_real_stream_is_still_read_as_a_stream(p: FakeProvider) -> None:
    response, live = await _streamed(p.base_url, "Say hello", None)
    assert response.choices[0].message.content.startswith("Done: Say hello.")
    assert len(live.texts) > 1  # it came in pieces


async def test_plain_json_that_is_not_a_completion_fails_saying_so() -> None:
    scenario = ScriptedScenario([RawBody(text=json.dumps({"status": "ok"}))])
    async with FakeProvider(scenario) as p:
        with pytest.raises(Exception) as caught:
            await _streamed(p.base_url, "Hi", None)
    verdict = classify_llm_error(caught.value)
    assert "plain JSON that is not a chat completion" in verdict.message
    assert verdict.retryable and verdict.type != "EmptyAnswer"
