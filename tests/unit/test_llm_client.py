"""The worker's lean LLM client: what it sends, what it returns, which errors it raises, and
when it leaves a call to ``litellm.acompletion`` (real HTTP to the local fake provider)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from durable_plans.activities.llm import import_litellm, message_from_response, usage_of
from durable_plans.activities.llm_client import WRITTEN_FOR_LITELLM, LlmClient
from durable_plans.activities.llm_errors import classify_llm_error
from durable_plans.activities.scripted_model import SCRIPTED_MODEL
from durable_plans.settings import Settings
from durable_plans.testing import FakeProvider

KEY = "sk-unit-fake-000000000000000000000000000"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


class CountingLitellm:
    """litellm, with its ``acompletion`` calls counted (the full path's use)."""

    def __init__(self) -> None:
        self.real = import_litellm()
        self.full_calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def acompletion(self, **kwargs: Any) -> Any:
        self.full_calls += 1
        return await self.real.acompletion(**kwargs)


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    async with FakeProvider(latency_ms=0) as p:
        yield p


def ask(provider: FakeProvider, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "openai/fake-model",
        "messages": [{"role": "user", "content": text}],
        "tools": TOOLS,
        "num_retries": 0,
        "timeout": 10.0,
        "api_base": provider.base_url,
        "api_key": KEY,
        **extra,
    }


async def test_an_openai_compatible_call_is_one_post_built_by_litellms_transforms(
    provider: FakeProvider,
) -> None:
    lit = CountingLitellm()
    client = LlmClient(lit, lean=True)
    try:
        response = await client.acompletion(**ask(provider, "Look around"))
    finally:
        await client.aclose()
    assert lit.full_calls == 0
    (request,) = provider.completions()
    assert request.body is not None
    assert request.body["model"] == "fake-model"  # the provider's name, prefix resolved
    assert request.body["messages"] == [{"role": "user", "content": "Look around"}]
    assert request.body["tools"] == TOOLS
    message, finish = message_from_response(response, msg_id="m1")
    assert message.tool_calls and message.tool_calls[0].function.name == "list_dir"
    assert finish == "tool_calls"
    usage = usage_of(lit, response)
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.cost_usd == 0.0  # the fake model has no price


async def test_a_priced_model_is_charged_its_litellm_price(provider: FakeProvider) -> None:
    lit = CountingLitellm()
    client = LlmClient(lit, lean=True)
    try:
        response = await client.acompletion(**ask(provider, "hi", model="openai/gpt-4o-mini"))
    finally:
        await client.aclose()
    info = lit.get_model_info(model="gpt-4o-mini", custom_llm_provider="openai")
    expected = (
        response.usage.prompt_tokens * info["input_cost_per_token"]
        + response.usage.completion_tokens * info["output_cost_per_token"]
    )
    assert expected > 0
    assert usage_of(lit, response).cost_usd == pytest.approx(expected)


@pytest.mark.parametrize(
    ("directive", "kind", "retryable"),
    [
        ("[fail:429:retry-after=7]", "RateLimit", True),
        ("[fail:400:context]", "ContextWindowExceeded", False),
        ("[fail:401]", "Authentication", False),
        ("[fail:503]", "ServerError", True),
        ("[fail:drop]", "Connection", True),
    ],
)
async def test_errors_are_litellm_errors_classified_as_before(
    provider: FakeProvider, directive: str, kind: str, retryable: bool
) -> None:
    client = LlmClient(import_litellm(), lean=True)
    try:
        with pytest.raises(Exception) as raised:
            await client.acompletion(**ask(provider, f"Do it {directive}"))
    finally:
        await client.aclose()
    verdict = classify_llm_error(raised.value)
    assert (verdict.type, verdict.retryable) == (kind, retryable)
    if kind == "RateLimit":
        assert verdict.retry_after_s == pytest.approx(7.0, abs=1.0)


async def test_other_providers_streaming_and_the_switch_take_litellms_full_path(
    provider: FakeProvider,
) -> None:
    lit = CountingLitellm()
    client = LlmClient(lit, lean=True)
    off = LlmClient(lit, lean=False)
    try:
        await client.acompletion(model=SCRIPTED_MODEL, messages=[{"role": "user", "content": "x"}])
        assert lit.full_calls == 1  # not an OpenAI-compatible route
        await off.acompletion(**ask(provider, "hi"))
        assert lit.full_calls == 2  # the shortcut switched off
        await client.acompletion(**ask(provider, "hi", temperature=0.2))
        assert lit.full_calls == 3  # an argument the shortcut does not send
    finally:
        await client.aclose()
        await off.aclose()


def test_the_switch_reads_the_environment() -> None:
    assert Settings.from_env({}).llm_lean is True  # the default: litellm used lean
    assert Settings.from_env({"DPLAN_LLM_LEAN": "0"}).llm_lean is False
    assert Settings.from_env({"DPLAN_LLM_LEAN": " On "}).llm_lean is True
    assert Settings.from_env({"DPLAN_LLM_LEAN": "1"}).llm_lean is True


RECHECK_LITELLM = (
    "activities/llm_client.py drives litellm's internals and was written for litellm "
    f"{WRITTEN_FOR_LITELLM}. Before moving the pin, re-check them against the new release: "
    "get_llm_provider, get_model_info, cost_per_token, "
    "ProviderConfigManager.get_provider_chat_config and the OpenAI-compatible chat config's "
    "get_complete_url / validate_environment / transform_request / transform_response "
    "(their signatures, and the logging object transform_response reports to), "
    "litellm.llms.openai.common_utils.OpenAIError and exception_type (the status-error "
    "wording it matches on); run tests/unit/test_llm_client.py and tests/integration/"
    "test_models.py; run `python -m bench.private_apis` and keep DPLAN_LLM_LEAN only if "
    "ours / ours-acompletion stays about 0.8 or below in worker CPU or wall (else remove "
    "the lean path); then set WRITTEN_FOR_LITELLM and pyproject.toml's pin together."
)


def test_the_lean_path_runs_on_the_litellm_it_was_written_for() -> None:
    """A new litellm may change the internals the lean path calls without a word: the
    upgrade has to stop here and be re-checked, not pass because the tests above happen
    to use a corner of them that still works."""
    installed = importlib.metadata.version("litellm")
    assert installed == WRITTEN_FOR_LITELLM, f"litellm {installed} is installed. {RECHECK_LITELLM}"
    pyproject = tomllib.loads(
        (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    )
    pins = [d for d in pyproject["project"]["dependencies"] if d.startswith("litellm")]
    assert pins == [f"litellm=={WRITTEN_FOR_LITELLM}"], (
        f"pyproject.toml pins {pins}. {RECHECK_LITELLM}"
    )


# Every fault the fake provider can inject: the lean path must classify each exactly as
# litellm.acompletion does (the expected classes themselves are in test_fake_provider.py).
FAULT_DIRECTIVES = [
    "[fail:400]",
    "[fail:400:context]",
    "[fail:400:content-policy]",
    "[fail:401]",
    "[fail:403]",
    "[fail:404]",
    "[fail:409]",
    "[fail:422]",
    "[fail:429]",
    "[fail:429:retry-after=2]",
    "[fail:429:retry-after-ms=1500]",
    "[fail:500]",
    "[fail:502]",
    "[fail:503:retry-after=3]",
    "[fail:504]",
    "[drop]",
    "[bad-json]",
]


@pytest.mark.parametrize("directive", FAULT_DIRECTIVES)
async def test_the_lean_path_classifies_every_fault_as_acompletion_does(
    provider: FakeProvider, directive: str
) -> None:
    verdicts = []
    for lean in (True, False):
        lit = CountingLitellm()
        client = LlmClient(lit, lean=lean)
        try:
            with pytest.raises(Exception) as raised:
                await client.acompletion(**ask(provider, f"Do the thing {directive}"))
        finally:
            await client.aclose()
        assert lit.full_calls == (0 if lean else 1)
        verdict = classify_llm_error(raised.value)
        assert KEY not in verdict.message
        verdicts.append((verdict.type, verdict.retryable, verdict.retry_after_s))
    assert verdicts[0] == verdicts[1]


@pytest.mark.parametrize("task", ["Look around", "Look around [dup-ids]", "Plain answer [turns:0]"])
async def test_the_lean_path_answers_as_acompletion_does(provider: FakeProvider, task: str) -> None:
    """Same request, same answer: the stored message, finish reason and tokens are the
    same whichever path asked, and the lean answer is litellm's own ModelResponse."""
    lit = CountingLitellm()
    results = []
    for lean in (True, False):
        client = LlmClient(lit, lean=lean)
        try:
            response = await client.acompletion(**ask(provider, task))
        finally:
            await client.aclose()
        if lean:
            assert isinstance(response, lit.ModelResponse)
        message, finish = message_from_response(response, msg_id="m1")
        usage = usage_of(lit, response)
        results.append((message, finish, usage.prompt_tokens, usage.completion_tokens))
    assert lit.full_calls == 1
    assert results[0] == results[1]
    lean_body, full_body = (r.body for r in provider.completions())
    assert lean_body is not None and full_body is not None
    assert lean_body["messages"] == full_body["messages"]
    assert lean_body["tools"] == full_body["tools"]
