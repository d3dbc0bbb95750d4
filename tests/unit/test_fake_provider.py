"""The fake provider through real HTTP and litellm, as the orchestrator will meet it.

Each fault directive is checked end to end: what litellm raises for it, and what
``classify_llm_error`` decides, so the retry policy is tested against real exception
mapping rather than hand-built exceptions.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_plans.activities.llm import import_litellm as lit
from durable_plans.activities.llm_errors import classify_llm_error
from durable_plans.testing import (
    ChatRequest,
    Completion,
    Directives,
    FakeProvider,
    FakeProviderProcess,
    HttpError,
    ScriptedScenario,
    ToolCallSpec,
    conversation_key,
)

KEY = "sk-test-not-a-real-key-000000000000"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} in the workspace",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name in ("read_file", "list_dir")
]


@pytest.fixture
async def p() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as provider:
        yield provider


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": text}]


async def ask(
    p: FakeProvider | FakeProviderProcess | str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = TOOLS,
    llm_timeout: float = 5.0,
) -> Any:
    base_url = p if isinstance(p, str) else p.base_url
    kwargs: dict[str, Any] = {"tools": tools} if tools else {}
    return await lit().acompletion(
        model="openai/fake-model",
        api_base=base_url,
        api_key=KEY,
        messages=messages,
        num_retries=0,
        timeout=llm_timeout,
        **kwargs,
    )


async def failure(p: FakeProvider, messages: list[dict[str, Any]], **kw: Any) -> BaseException:
    try:
        await ask(p, messages, **kw)
    except Exception as exc:
        return exc
    raise AssertionError("the request was expected to fail")


def assistant_dict(response: Any) -> dict[str, Any]:
    msg = response.choices[0].message
    return {
        "role": "assistant",
        "content": msg.content,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in msg.tool_calls
        ],
    }


# --------------------------------------------------------------------------- agent turns


async def test_tool_call_round_trip(p: FakeProvider) -> None:
    messages = user("Summarise the repository")
    first = await ask(p, messages)
    assert first.choices[0].finish_reason == "tool_calls"
    (call,) = first.choices[0].message.tool_calls
    assert (call.id, call.function.name) == ("call_abc123", "list_dir")
    assert json.loads(call.function.arguments) == {"path": "."}
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0

    listing = "README.md\nsrc/\n" + "x" * 300
    messages += [
        assistant_dict(first),
        {"role": "tool", "tool_call_id": call.id, "content": listing},
    ]
    final = await ask(p, messages)
    content = final.choices[0].message.content
    assert final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls
    assert content == f"Done: Summarise the repository. Based on the tool result: {listing[:200]}"
    assert p.rejections == []
    assert [r.status for r in p.requests] == [200, 200]
    assert p.requests[0].conversation == p.requests[1].conversation  # one agent loop
    assert p.requests[1].messages[-1] == messages[-1]  # what was sent is inspectable


async def test_without_tools_the_answer_is_direct(p: FakeProvider) -> None:
    r = await ask(p, user("Say hello"), tools=None)
    assert r.choices[0].message.content == "Done: Say hello."


async def test_turns_directive_makes_several_tool_turns(p: FakeProvider) -> None:
    messages = user("Investigate [turns:2]")
    names = []
    for _ in range(2):
        r = await ask(p, messages)
        (call,) = r.choices[0].message.tool_calls
        names.append(call.function.name)
        # A careful client renames the careless model's ids before sending them back.
        msg = assistant_dict(r)
        msg["tool_calls"][0]["id"] = f"call_{len(names)}"
        messages += [msg, {"role": "tool", "tool_call_id": f"call_{len(names)}", "content": "ok"}]
    final = await ask(p, messages)
    assert names == ["list_dir", "read_file"]
    assert final.choices[0].message.content.startswith("Done: Investigate.")


async def test_dup_ids_bad_args_and_unknown_tool(p: FakeProvider) -> None:
    dup = (await ask(p, user("Look [dup-ids]"))).choices[0].message.tool_calls
    assert len(dup) == 2 and dup[0].id == dup[1].id

    (bad,) = (await ask(p, user("Look [bad-args]"))).choices[0].message.tool_calls
    with pytest.raises(json.JSONDecodeError):
        json.loads(bad.function.arguments)

    (unknown,) = (await ask(p, user("Look [unknown-tool]"))).choices[0].message.tool_calls
    assert unknown.function.name not in {t["function"]["name"] for t in TOOLS}


# --------------------------------------------------------------------------- strictness


async def test_orphaned_tool_message_is_rejected(p: FakeProvider) -> None:
    messages = [*user("go"), {"role": "tool", "tool_call_id": "call_abc123", "content": "old"}]
    exc = await failure(p, messages)
    assert isinstance(exc, lit().BadRequestError)
    assert "does not follow an assistant message" in str(exc)
    assert len(p.rejections) == 1 and p.rejections[0].status == 400
    assert p.rejections[0].kind == "rejected" and p.rejections[0].conversation is None


async def test_reused_tool_call_id_across_two_assistant_messages_is_rejected(
    p: FakeProvider,
) -> None:
    call = {"id": "call_abc123", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    turn: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_abc123", "content": "listing"},
    ]
    messages: list[dict[str, Any]] = [
        *user("first"),
        *turn,
        {"role": "user", "content": "second"},
        *turn,
    ]
    exc = await failure(p, messages)
    assert isinstance(exc, lit().BadRequestError)
    assert classify_llm_error(exc).type == "BadRequest"
    assert len(p.rejections) == 1
    assert "already used" in (p.rejections[0].reason or "")


async def test_invalid_requests_get_an_openai_style_400(p: FakeProvider) -> None:
    url = f"{p.base_url}/chat/completions"
    async with httpx.AsyncClient() as http:
        not_json = await http.post(url, content=b"{nope")
        no_model = await http.post(url, json={"messages": [{"role": "user", "content": "x"}]})
        # The path without /v1 is served too, as some clients strip it.
        plain = await http.post(
            url.replace("/v1/", "/"), json={"model": "m", "messages": user("hi")}
        )
    for response in (not_json, no_model):
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"]
    assert len(p.rejections) == 2


async def test_a_streamed_answer_is_the_same_answer_in_chunks(p: FakeProvider) -> None:
    """``"stream": true`` gets OpenAI's server-sent events; litellm reassembles exactly the
    answer, tool call and usage the same request gets unstreamed."""
    whole = await ask(p, user("Write the docs"))
    for tools in (TOOLS, None):
        stream = await lit().acompletion(
            model="openai/fake-model",
            api_base=p.base_url,
            api_key=KEY,
            messages=user("Write the docs"),
            num_retries=0,
            timeout=5.0,
            stream=True,
            stream_options={"include_usage": True},
            **({"tools": tools} if tools else {}),
        )
        chunks = [chunk async for chunk in stream]
        texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta]
        built = lit().stream_chunk_builder(chunks)
        message = built.choices[0].message
        if tools:
            expected = whole.choices[0].message.tool_calls[0]
            assert message.tool_calls[0].function.name == expected.function.name
            assert message.tool_calls[0].function.arguments == expected.function.arguments
            assert built.choices[0].finish_reason == "tool_calls"
            assert built.usage.prompt_tokens == whole.usage.prompt_tokens
        else:
            assert message.content.startswith("Done: Write the docs.")
            assert len([t for t in texts if t]) > 1, "the text came in one piece"
            assert built.choices[0].finish_reason == "stop"
        assert built.usage.completion_tokens > 0
    streamed = [r for r in p.requests if (r.body or {}).get("stream")]
    assert [r.kind for r in streamed] == ["completion", "completion"]
    assert all(r.delivered and r.usage for r in streamed)


async def test_hold_streams_makes_stream_hold_answers_wait_again_after_a_release(
    p: FakeProvider,
) -> None:
    """A release lets every ``[stream-hold]`` answer go on, later ones too, until
    ``hold-streams``: then they stop after their first text again, as on a fresh provider
    (one provider shared by several tests, each holding and releasing its own)."""
    root = p.base_url.rsplit("/v1", 1)[0]
    first_text = asyncio.Event()

    def has_text(line: str) -> bool:
        if not line.startswith("data: {"):
            return False
        chunk = json.loads(line.removeprefix("data: "))
        return any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ())

    async with httpx.AsyncClient(timeout=10.0) as http:

        async def streamed(text: str) -> list[str]:
            body = {"model": "fake-model", "messages": user(text), "stream": True}
            url = f"{p.base_url}/chat/completions"
            headers = {"Authorization": f"Bearer {KEY}"}
            lines: list[str] = []
            async with http.stream("POST", url, json=body, headers=headers) as response:
                async for line in response.aiter_lines():
                    if line:
                        lines.append(line)
                        if has_text(line):
                            first_text.set()
            return lines

        (await http.post(f"{root}/control/release-streams")).raise_for_status()
        assert (await streamed("Before [stream-hold]"))[-1] == "data: [DONE]"
        (await http.post(f"{root}/control/hold-streams")).raise_for_status()
        first_text.clear()
        held = asyncio.create_task(streamed("After [stream-hold]"))
        await asyncio.wait_for(first_text.wait(), 10)
        assert not held.done() and not p.requests[1].delivered  # stopped after its first text
        (await http.post(f"{root}/control/release-streams")).raise_for_status()
        assert (await held)[-1] == "data: [DONE]"
    assert [r.delivered for r in p.requests] == [True, True]


# --------------------------------------------------------------------------- faults


FAULTS = [
    # directive, litellm exception (exact class), classified type, retryable, retry_after_s
    ("[fail:400]", "BadRequestError", "BadRequest", False, None),
    ("[fail:400:context]", "ContextWindowExceededError", "ContextWindowExceeded", False, None),
    ("[fail:400:content-policy]", "ContentPolicyViolationError", "ContentPolicy", False, None),
    ("[fail:401]", "AuthenticationError", "Authentication", False, None),
    ("[fail:403]", "APIError", "PermissionDenied", False, None),
    ("[fail:404]", "NotFoundError", "NotFound", False, None),
    ("[fail:409]", "APIError", "Conflict", True, None),
    ("[fail:422]", "BadRequestError", "UnprocessableEntity", False, None),
    ("[fail:429]", "RateLimitError", "RateLimit", True, 1.0),
    ("[fail:429:retry-after=2]", "RateLimitError", "RateLimit", True, 2.0),
    ("[fail:429:retry-after-ms=1500]", "RateLimitError", "RateLimit", True, 1.5),
    ("[fail:500]", "InternalServerError", "ServerError", True, None),
    ("[fail:502]", "BadGatewayError", "ServerError", True, None),
    ("[fail:503:retry-after=3]", "ServiceUnavailableError", "ServerError", True, 3.0),
    ("[fail:504]", "Timeout", "Timeout", True, None),
    ("[drop]", "InternalServerError", "Connection", True, None),
    ("[bad-json]", "InternalServerError", "InvalidResponse", True, None),
]


@pytest.mark.parametrize(("directive", "exc_name", "kind", "retryable", "after"), FAULTS)
async def test_fault_directive_raises_and_classifies(
    p: FakeProvider,
    directive: str,
    exc_name: str,
    kind: str,
    retryable: bool,
    after: float | None,
) -> None:
    exc = await failure(p, user(f"Do the thing {directive}"))
    assert type(exc) is getattr(lit(), exc_name)
    c = classify_llm_error(exc)
    assert (c.type, c.retryable, c.retry_after_s) == (kind, retryable, after)
    assert KEY not in c.message
    # Injected faults are the scenario's doing, not strictness rejections.
    assert p.rejections == []


async def test_slow_directive_times_out(p: FakeProvider) -> None:
    exc = await failure(p, user("Think hard [slow:400]"), llm_timeout=0.1)
    c = classify_llm_error(exc)
    assert (type(exc), c.type, c.retryable) == (lit().Timeout, "Timeout", True)


async def test_empty_choices_reach_the_caller(p: FakeProvider) -> None:
    # litellm does not raise for this; the LLM activity must notice on its own.
    r = await ask(p, user("Anything [empty-choices]"))
    assert r.choices == []
    assert p.requests[0].kind == "raw"


async def test_flaky_500_recovers_after_n_requests(p: FakeProvider) -> None:
    messages = user("Fix the build [flaky:500x2]")
    for _ in range(2):
        exc = await failure(p, messages)
        assert classify_llm_error(exc).type == "ServerError"
    r = await ask(p, messages)
    assert r.choices[0].message.tool_calls
    assert [x.status for x in p.requests] == [500, 500, 200]
    assert len({x.conversation for x in p.requests}) == 1


async def test_flaky_429_then_normal_with_retry_after(p: FakeProvider) -> None:
    messages = user("Look around [flaky:429x1]")
    c = classify_llm_error(await failure(p, messages))
    assert (c.type, c.retry_after_s) == ("RateLimit", 1.0)
    assert (await ask(p, messages)).choices[0].message.tool_calls


async def test_flaky_counters_are_per_conversation(p: FakeProvider) -> None:
    await failure(p, user("Task A [flaky:503x1]"))
    # A different subtask with the same directive starts its own count.
    await failure(p, user("Task B [flaky:503x1]"))
    assert (await ask(p, user("Task A [flaky:503x1]"))).choices


async def test_slow_for_the_first_request_only(p: FakeProvider) -> None:
    messages = user("Think [slow:400x1]")
    assert classify_llm_error(await failure(p, messages, llm_timeout=0.1)).type == "Timeout"
    assert (await ask(p, messages, llm_timeout=30.0)).choices


async def test_a_malformed_directive_fails_loudly(p: FakeProvider) -> None:
    exc = await failure(p, user("Oops [flaky:500]"))
    c = classify_llm_error(exc)
    assert (c.type, c.retryable) == ("BadRequest", False)
    assert "scenario error" in c.message


# --------------------------------------------------------------------------- bookkeeping


async def test_identical_request_counts(p: FakeProvider) -> None:
    same = user("Repeat me")
    await ask(p, same)
    await ask(p, same)
    await ask(p, user("Something else"))
    counts = p.identical_request_counts()
    assert sorted(counts.values()) == [1, 2]
    assert p.requests[0].body_hash == p.requests[1].body_hash != p.requests[2].body_hash


async def test_completed_only_counts_delivered_completions(p: FakeProvider) -> None:
    messages = user("Retry me [flaky:500x1]")
    await failure(p, messages)
    await ask(p, messages)
    assert list(p.identical_request_counts().values()) == [2]
    assert list(p.identical_request_counts(completed_only=True).values()) == [1]


async def test_an_abandoned_request_is_not_a_completion(p: FakeProvider) -> None:
    # The client gives up after 1 s (ample time to send the request, even on a loaded
    # machine); the provider answers at 2.5 s, to nobody.
    await failure(p, user("Slow [slow:2500]"), llm_timeout=1.0)
    (record,) = p.requests
    deadline = time.monotonic() + 30
    while record.finished is None:  # the provider finishes the call after the client left
        assert time.monotonic() < deadline, "the provider never finished the call"
        await asyncio.sleep(0.05)
    assert (record.kind, record.delivered, record.completed) == ("completion", False, False)
    assert p.identical_request_counts(completed_only=True) == {}


async def test_latency_is_added_to_every_reply() -> None:
    async with FakeProvider(latency_ms=150) as slow:
        started = time.monotonic()
        await ask(slow, user("hi"))
        assert time.monotonic() - started >= 0.15


async def test_concurrent_requests_are_all_recorded() -> None:
    async with FakeProvider(latency_ms=50) as p:
        await asyncio.gather(*(ask(p, user(f"task {i}")) for i in range(8)))
        assert sorted(r.seq for r in p.requests) == list(range(8))
        assert all(r.completed for r in p.requests)


async def test_a_custom_scenario_controls_the_reply() -> None:
    scenario = ScriptedScenario(
        [
            HttpError(status=503, headers={"retry-after": "4"}),
            Completion(
                tool_calls=(ToolCallSpec("list_dir", "{}"), ToolCallSpec("read_file", "{}")),
                id_policy="unique",
                prompt_tokens=11,
                completion_tokens=7,
            ),
        ]
    )
    async with FakeProvider(scenario) as p:
        c = classify_llm_error(await failure(p, user("x")))
        r = await ask(p, user("x"))
    assert (c.type, c.retry_after_s) == ("ServerError", 4.0)
    ids = [call.id for call in r.choices[0].message.tool_calls]
    assert len(set(ids)) == 2
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (11, 7)


# --------------------------------------------------------------------------- pure parts


def test_directive_grammar() -> None:
    d = Directives.parse("Build [WIP] it [slow:250x3] [turns:3] [flaky:429x2:retry-after=5]")
    assert (d.slow_ms, d.slow_requests, d.tool_turns, d.fault_requests) == (250.0, 3, 3, 2)
    assert isinstance(d.fault, HttpError) and d.fault.headers == {"retry-after": "5"}
    assert Directives.parse("plain [WIP] text") == Directives()
    with pytest.raises(ValueError, match="unknown fault option"):
        Directives.parse("[fail:500:sometimes]")


def test_conversation_key_ignores_tool_traffic_but_not_the_task() -> None:
    base = user("Task A")
    later = [*base, {"role": "assistant", "content": "thinking"}]
    assert conversation_key(base) == conversation_key(later)
    assert conversation_key(base) != conversation_key(user("Task B"))
    assert ChatRequest("m", base, [], {}, conversation_key(base)).last_user_text == "Task A"


# --------------------------------------------------------------------------- separate process


async def test_subprocess_mode_answers_and_writes_the_log(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with FakeProviderProcess(log, latency_ms=10, log_bodies=True) as proc:
        r = await ask(proc, user("From another process"))
        await failure_at(proc.base_url, user("Then fail [fail:500]"))
        entries = proc.log_entries()
        counts = proc.identical_request_counts(completed_only=True)
    assert r.choices[0].message.tool_calls
    assert [(e["status"], e["kind"]) for e in entries] == [(200, "completion"), (500, "http_error")]
    assert entries[0]["delivered"] is True and entries[0]["model"] == "fake-model"
    assert entries[0]["body"]["messages"][-1]["content"] == "From another process"
    assert list(counts.values()) == [1]


async def failure_at(base_url: str, messages: list[dict[str, Any]]) -> None:
    with pytest.raises(lit().InternalServerError):
        await ask(base_url, messages)
