"""The worker's one LLM client: litellm's providers, without litellm's per-call machinery.

``litellm.acompletion`` does a great deal on every call that a worker does not need: it
builds a logging object and runs its callbacks, resolves the provider and the model's
price again, builds the request in a thread, sends it through the OpenAI SDK (which walks
every message and tool schema through its type transforms) and computes the answer's
cost, which the activity then computed a second time. With five subtasks on two cores,
that CPU is what the plan waits for (bench/RESULTS.md).

``LlmClient`` is built once per worker and keeps what can be known once:

* per model: the provider, base URL, key, headers and price, resolved by litellm
  (``get_llm_provider``, ``get_model_info``, the provider's chat config) on first use;
* one shared aiohttp session (one connection pool) for every call.

For OpenAI-compatible chat endpoints (``openai/...`` with or without ``api_base``,
``openrouter/...`` and ``litellm_proxy/...`` with a base URL), a call is then litellm's
own provider config at work, with nothing around it: its ``transform_request`` builds the
body, one POST sends it, its ``transform_response`` turns the answer into litellm's
``ModelResponse`` (the object ``acompletion`` returns), and the cost is tokens x the
cached price. HTTP errors are mapped to litellm's exception types by litellm's own
``exception_type`` (so ``llm_errors`` classifies them as before), dropped connections and
timeouts to litellm's ``APIConnectionError`` / ``Timeout``.

Everything else — another provider (Anthropic, Bedrock, Vertex, the built-in scripted
model...), a streaming call, an argument this path does not send — goes through
``litellm.acompletion``, on the same route and price caches: the lean path is litellm
used lean, never a second provider implementation. It is the default;
``DPLAN_LLM_LEAN=0`` (``Settings.llm_lean``) sends every call through ``acompletion``.

Those transforms, ``ProviderConfigManager``, ``litellm.llms.openai.common_utils`` and
``exception_type`` are litellm's internals, not its public API: this module is the only
one that touches them, and it was written for the litellm release ``WRITTEN_FOR_LITELLM``
(pinned in pyproject.toml; tests/unit/test_llm_client.py fails on any other, saying what
to re-check). It pays: 0.52 of ``acompletion``'s worker CPU per subtask and 0.59 of its
plan wall time on the user's path (bench/RESULTS.md, ``python -m bench.private_apis``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from durable_plans.activities.prompt_cache import cached_tokens_of

__all__ = ["LEAN_PROVIDERS", "WRITTEN_FOR_LITELLM", "LlmClient"]

# The litellm release whose internals (the calls below) this module was checked against.
WRITTEN_FOR_LITELLM = "1.106.2"

# Providers whose chat endpoint is OpenAI's, request and response as they are.
LEAN_PROVIDERS = frozenset({"openai", "openrouter", "litellm_proxy"})
# Arguments the lean path sends as they are; any other one takes litellm's full path.
_KNOWN_KWARGS = frozenset(
    {"model", "messages", "tools", "num_retries", "timeout", "api_base", "api_key"}
)
_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "litellm_proxy": "LITELLM_PROXY_API_KEY",
}
_BASE_ENV = {"litellm_proxy": "LITELLM_PROXY_API_BASE"}


@dataclass(frozen=True)
class _Route:
    """What litellm resolved for one (model, api_base, api_key), once."""

    model: str  # the name the provider knows
    provider: str
    url: str | None  # None: not an OpenAI-compatible route; use litellm.acompletion
    key: str | None
    input_cost: float
    output_cost: float
    flat_price: bool  # False: tiered or unknown shape; ask litellm per call
    headers: dict[str, str] = field(default_factory=dict)  # sent with every request
    config: Any = None  # litellm's chat config for the provider (its transforms)
    base: str | None = None
    cache_read_cost: float | None = None  # per cached prompt token; None: the input price


class _NoLogging:
    """Stands in for litellm's per-call logging object: its transforms report the raw
    answer to it, and a lean call keeps no such record (the activity's own metrics and
    spans say what happened, without the prompt)."""

    def post_call(self, *args: Any, **kwargs: Any) -> None:
        return None

    def pre_call(self, *args: Any, **kwargs: Any) -> None:
        return None


_NO_LOGGING = _NoLogging()


class LlmClient:
    """One per worker: ``await client.acompletion(**kwargs)`` takes litellm's arguments
    and returns a response with litellm's attribute shape."""

    def __init__(self, litellm: Any, *, lean: bool = False) -> None:
        self._litellm = litellm
        self._lean = lean
        self._routes: dict[tuple[str, str | None, str | None], _Route] = {}
        self._session: Any = None  # aiohttp.ClientSession, made on the worker's loop

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------ routing

    def route(self, model: str, api_base: str | None, api_key: str | None) -> _Route:
        key = (model, api_base, api_key)
        found = self._routes.get(key)
        if found is None:
            found = self._routes[key] = self._resolve(model, api_base, api_key)
        return found

    def _resolve(self, model: str, api_base: str | None, api_key: str | None) -> _Route:
        litellm = self._litellm
        try:
            name, provider, dynamic_key, base = litellm.get_llm_provider(
                model=model, api_base=api_base, api_key=api_key
            )
        except Exception:
            return _Route(model, "", None, None, 0.0, 0.0, False)  # litellm will say why
        input_cost, output_cost, flat = 0.0, 0.0, True
        cache_read_cost: float | None = None
        try:
            info = litellm.get_model_info(model=name, custom_llm_provider=provider)
            input_cost = float(info.get("input_cost_per_token") or 0.0)
            output_cost = float(info.get("output_cost_per_token") or 0.0)
            cached_price = info.get("cache_read_input_token_cost")
            cache_read_cost = float(cached_price) if cached_price is not None else None
            # Prices that change with the prompt's size are litellm's to compute.
            flat = not any("_above_" in k and v for k, v in info.items())
        except Exception:
            pass  # an unpriced model is not an error; tokens are still counted
        if provider not in LEAN_PROVIDERS:
            return _Route(name, provider, None, None, input_cost, output_cost, flat)
        base = api_base or base or os.environ.get(_BASE_ENV.get(provider, ""), "")
        if provider == "openai" and not base:  # litellm's own order of precedence
            base = (
                os.environ.get("OPENAI_BASE_URL")
                or os.environ.get("OPENAI_API_BASE")
                or "https://api.openai.com/v1"
            )
        if not base:  # litellm knows where this provider lives; let it say
            return _Route(name, provider, None, None, input_cost, output_cost, flat)
        key = api_key or dynamic_key or os.environ.get(_KEY_ENV[provider])
        try:
            config = litellm.ProviderConfigManager.get_provider_chat_config(
                model=name, provider=litellm.LlmProviders(provider)
            )
            url = config.get_complete_url(
                api_base=base, api_key=key, model=name, optional_params={}, litellm_params={}
            )
            headers = config.validate_environment(
                headers={},
                model=name,
                messages=[],
                optional_params={},
                litellm_params={},
                api_key=key,
                api_base=base,
            )
        except Exception:  # a litellm without this config: its full path knows best
            return _Route(name, provider, None, None, input_cost, output_cost, flat)
        organization = os.environ.get("OPENAI_ORGANIZATION")
        if organization and provider == "openai":
            headers["OpenAI-Organization"] = organization
        return _Route(
            name,
            provider,
            url,
            key,
            input_cost,
            output_cost,
            flat,
            headers,
            config,
            base,
            cache_read_cost=cache_read_cost,
        )

    # ------------------------------------------------------------------ calls

    async def acompletion(self, **kwargs: Any) -> Any:
        route = self.route(kwargs["model"], kwargs.get("api_base"), kwargs.get("api_key"))
        if not self._lean or route.url is None or not _KNOWN_KWARGS.issuperset(kwargs):
            return await self._litellm.acompletion(**kwargs)
        messages = kwargs["messages"]
        optional: dict[str, Any] = {"tools": kwargs["tools"]} if kwargs.get("tools") else {}
        litellm_params = {"custom_llm_provider": route.provider, "api_base": route.base}
        body = route.config.transform_request(
            route.model, list(messages), dict(optional), litellm_params, dict(route.headers)
        )
        status, content, response_headers = await self._post(
            route, body, route.headers, seconds=kwargs.get("timeout")
        )
        if status >= 400:
            text = content.decode(errors="replace")
            raise self._http_error(route, status, text, response_headers)
        return self._response(route, body, messages, optional, status, content, response_headers)

    def _response(
        self,
        route: _Route,
        body: dict[str, Any],
        messages: list[Any],
        optional: dict[str, Any],
        status: int,
        content: bytes,
        headers: dict[str, str],
    ) -> Any:
        """litellm's ``ModelResponse`` for the answer, by the provider config's own
        transform, priced from the cached price."""
        import httpx

        litellm = self._litellm
        assert route.url is not None
        raw = httpx.Response(
            status, content=content, headers=headers, request=httpx.Request("POST", route.url)
        )
        try:
            response = route.config.transform_response(
                model=route.model,
                raw_response=raw,
                model_response=litellm.ModelResponse(),
                logging_obj=_NO_LOGGING,
                request_data=body,
                messages=messages,
                optional_params=optional,
                litellm_params={},
                encoding=None,
            )
        except Exception as exc:
            raise litellm.APIError(
                status_code=500,
                message=f"the provider's answer is not a chat completion ({exc}): "
                f"{content[:200]!r}",
                llm_provider=route.provider,
                model=route.model,
            ) from None
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        hidden = getattr(response, "_hidden_params", None)
        if not isinstance(hidden, dict):
            hidden = response._hidden_params = {}
        cached = cached_tokens_of(usage, prompt)
        hidden["response_cost"] = self._cost(route, prompt, completion, cached)
        return response

    async def _post(
        self, route: _Route, body: dict[str, Any], headers: dict[str, str], *, seconds: Any
    ) -> tuple[int, bytes, dict[str, str]]:
        import aiohttp

        litellm = self._litellm
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        total = float(seconds) if isinstance(seconds, (int, float)) else None
        assert route.url is not None
        try:
            async with self._session.post(
                route.url,
                data=json.dumps(body, ensure_ascii=False),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=total),
            ) as resp:
                return resp.status, await resp.read(), dict(resp.headers)
        except TimeoutError:
            raise litellm.Timeout(
                message=f"no answer within {total} s",
                model=route.model,
                llm_provider=route.provider,
            ) from None
        except aiohttp.ClientError as exc:
            raise litellm.APIConnectionError(
                message=f"Connection error ({type(exc).__name__}: {exc})",
                llm_provider=route.provider,
                model=route.model,
            ) from exc

    def _http_error(
        self, route: _Route, status: int, text: str, headers: dict[str, str]
    ) -> BaseException:
        """litellm's exception for this status and body, as its own OpenAI path maps it."""
        import httpx
        from litellm.llms.openai.common_utils import OpenAIError

        # Worded and shaped as the OpenAI SDK words a status error, which is what
        # litellm's own path hands ``exception_type`` (it matches on that text: a
        # content-policy refusal is told apart from another 400 by it).
        body: Any = None
        stripped = text.strip()
        try:
            parsed = json.loads(stripped)
            message = f"Error code: {status} - {parsed}"
            body = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        except ValueError:
            message = stripped or f"Error code: {status}"
        original = OpenAIError(
            status_code=status,
            message=message,
            headers=httpx.Headers(headers),
            body=body if isinstance(body, dict) else None,
        )
        try:
            mapped = self._litellm.exception_type(
                model=route.model,
                original_exception=original,
                custom_llm_provider=route.provider,
                completion_kwargs={},
                extra_kwargs={},
            )
        except Exception as raised:  # exception_type raises the mapped exception
            return raised
        return mapped if isinstance(mapped, BaseException) else original

    def _cost(self, route: _Route, prompt: int, completion: int, cached: int = 0) -> float:
        """Tokens x price; prompt tokens read from the provider's cache at its cached-input
        price where litellm knows one (``activities/prompt_cache.py``)."""
        if route.flat_price:
            cached_price = (
                route.input_cost if route.cache_read_cost is None else route.cache_read_cost
            )
            return (
                (prompt - cached) * route.input_cost
                + cached * cached_price
                + completion * route.output_cost
            )
        try:
            cost_in, cost_out = self._litellm.cost_per_token(
                model=route.model,
                custom_llm_provider=route.provider,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cache_read_input_tokens=cached,
            )
            return float(cost_in) + float(cost_out)
        except Exception:
            return 0.0
