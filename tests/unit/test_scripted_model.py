"""The offline model: its pure turn logic, and the same turns through ``litellm.acompletion``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from durable_plans.activities.llm import import_litellm as lit
from durable_plans.activities.scripted_model import (
    LATENCY_ENV,
    SCRIPTED_MODEL,
    plan_turn,
    register_scripted_provider,
    scripted_latency_s,
)


def tool(name: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    props = {key: {"type": "string"} for key in required}
    params = {"type": "object", "properties": props, "required": list(required)}
    return {"type": "function", "function": {"name": name, "parameters": params}}


WORKSPACE_TOOLS = [tool("write_file", ("path", "content")), tool("read_file", ("path",))]


@pytest.fixture(autouse=True)
def no_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LATENCY_ENV, "0")


# --------------------------------------------------------------------------- pure turn logic


def test_prefers_list_dir_then_read_file_then_the_first_tool() -> None:
    msgs = [{"role": "user", "content": "Fix it"}]
    both = [tool("write_file"), tool("read_file", ("path",)), tool("list_dir", ("path",))]
    assert plan_turn(msgs, both).calls[0].name == "list_dir"
    assert json.loads(plan_turn(msgs, both).calls[0].arguments) == {"path": "."}
    assert plan_turn(msgs, WORKSPACE_TOOLS).calls[0].name == "read_file"
    only = plan_turn(msgs, [tool("delegate_to_sub_agent", ("task",))]).calls
    # Required string parameters get the task, so the call is valid for its schema.
    assert [(c.name, json.loads(c.arguments)) for c in only] == [
        ("delegate_to_sub_agent", {"task": "Fix it"})
    ]


def test_answers_after_the_tool_result_quoting_it_and_naming_the_task() -> None:
    result = "line\n" * 100
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "Earlier task"},
        {"role": "assistant", "content": "Earlier answer"},
        {"role": "user", "content": [{"type": "text", "text": "Read the README"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]
    turn = plan_turn(msgs, WORKSPACE_TOOLS)
    assert turn.is_final
    assert turn.content == f"Done: Read the README. Based on the tool result: {result[:200]}"


def test_tool_results_before_the_last_user_message_do_not_count() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "old result"},
        {"role": "user", "content": "new task"},
    ]
    assert not plan_turn(msgs, WORKSPACE_TOOLS).is_final


def test_several_tool_turns_walk_the_tools() -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Dig"}]
    tools = [tool("list_dir"), tool("read_file")]
    names = []
    for i in range(2):
        turn = plan_turn(msgs, tools, tool_turns=2)
        names.append(turn.calls[0].name)
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}"}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"},
        ]
    assert names == ["list_dir", "read_file"]
    assert plan_turn(msgs, tools, tool_turns=2).is_final


def test_without_tools_answers_directly() -> None:
    assert plan_turn([{"role": "user", "content": "Hi"}]).content == "Done: Hi."


@pytest.mark.parametrize(("raw", "seconds"), [("", 0.15), ("40", 0.04), ("-5", 0.0), ("x", 0.15)])
def test_latency_setting(monkeypatch: pytest.MonkeyPatch, raw: str, seconds: float) -> None:
    monkeypatch.setenv(LATENCY_ENV, raw)
    assert scripted_latency_s() == pytest.approx(seconds)


# --------------------------------------------------------------------------- through litellm


async def test_tool_call_then_final_answer_through_litellm() -> None:
    litellm = lit()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Describe the workspace"}]
    tools = [*WORKSPACE_TOOLS, tool("list_dir", ("path",))]
    first = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=messages, tools=tools, num_retries=0
    )
    choice = first.choices[0]
    (call,) = choice.message.tool_calls
    assert choice.finish_reason == "tool_calls"
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_abc123",
        "list_dir",
        '{"path": "."}',
    )
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "README.md  src/"},
    ]
    final = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=messages, tools=tools, num_retries=0
    )
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content == (
        "Done: Describe the workspace. Based on the tool result: README.md  src/"
    )
    assert final.usage.prompt_tokens > first.usage.prompt_tokens > 0
    assert final.usage.completion_tokens > 0


async def test_usage_costs_nothing() -> None:
    litellm = lit()
    r = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=[{"role": "user", "content": "x" * 400}]
    )
    assert r.usage.prompt_tokens >= 100
    assert r._hidden_params["response_cost"] == 0.0
    assert litellm.completion_cost(completion_response=r) == 0.0


async def test_simulated_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    litellm = lit()
    monkeypatch.setenv(LATENCY_ENV, "120")
    started = time.monotonic()
    await litellm.acompletion(model=SCRIPTED_MODEL, messages=[{"role": "user", "content": "x"}])
    assert time.monotonic() - started >= 0.12


def test_sync_completion_works_too() -> None:
    r = lit().completion(model=SCRIPTED_MODEL, messages=[{"role": "user", "content": "Ping"}])
    assert r.choices[0].message.content == "Done: Ping."


def test_registration_is_idempotent() -> None:
    litellm = lit()
    register_scripted_provider()
    register_scripted_provider()
    providers = [item["provider"] for item in litellm.custom_provider_map]
    assert providers.count("scripted") == 1


def _tool(name: str) -> dict[str, object]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {"task": {"type": "string"}, "agent": {"type": "string"}},
                "required": ["task"],
            },
        },
    }


ORCHESTRATOR_TOOLS = [_tool(n) for n in ("list_dir", "delegate_to_sub_agent", "spawn_subagent")]


def test_a_tool_the_task_names_is_called_first_without_its_name_in_the_arguments() -> None:
    turn = plan_turn(
        [{"role": "user", "content": "Use delegate_to_sub_agent to summarise the changelog"}],
        ORCHESTRATOR_TOOLS,
    )
    assert [c.name for c in turn.calls] == ["delegate_to_sub_agent"]
    assert json.loads(turn.calls[0].arguments) == {"task": "summarise the changelog"}


def test_spawn_names_the_agent_the_task_mentions_and_the_child_does_not_spawn_again() -> None:
    turn = plan_turn(
        [{"role": "user", "content": "Use spawn_subagent to have the architect review it"}],
        ORCHESTRATOR_TOOLS,
    )
    args = json.loads(turn.calls[0].arguments)
    assert turn.calls[0].name == "spawn_subagent"
    assert args == {"agent": "architect", "task": "have the architect review it"}
    child = plan_turn([{"role": "user", "content": args["task"]}], ORCHESTRATOR_TOOLS)
    assert [c.name for c in child.calls] == ["list_dir"]
