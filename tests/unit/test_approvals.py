"""Which calls need approval, how policies are read from agents and plan files, call ids."""

from __future__ import annotations

import pytest

from durable_plans._errors import AgentsFileError, PlanValidationError
from durable_plans.domain.agents import APPROVABLE_TOOL_NAMES, BUILTIN_CATALOG, KNOWN_TOOL_NAMES
from durable_plans.domain.agents_loader import parse_agents_data
from durable_plans.domain.approval_rules import (
    DEFAULT_APPROVAL_TOOLS,
    ApprovalPolicy,
    edited_arguments_problem,
    effective_policy,
    needs_approval,
    split_call_id,
)
from durable_plans.domain.plan_loader import plan_from_data
from durable_plans.domain.session_contracts import CREATE_PLAN_TOOL, SWITCH_TOOL

SUBTASKS = [{"id": "a", "description": "do it"}]


def test_needs_approval_by_name_all_or_the_defaults() -> None:
    named = ApprovalPolicy(tools=("write_file",))
    assert needs_approval("write_file", named) and not needs_approval("read_file", named)
    assert all(needs_approval(t, ApprovalPolicy(tools="all")) for t in APPROVABLE_TOOL_NAMES)
    assert not any(needs_approval(t, ApprovalPolicy(tools=())) for t in APPROVABLE_TOOL_NAMES)
    for tool in APPROVABLE_TOOL_NAMES:  # no policy: the defaults decide
        assert needs_approval(tool, None) is (tool in DEFAULT_APPROVAL_TOOLS)


def test_the_plan_policy_replaces_the_agents_whole() -> None:
    plan, agent = ApprovalPolicy(tools=()), ApprovalPolicy(tools="all", timeout_s=5)
    assert effective_policy(plan, agent) is plan
    assert effective_policy(None, agent) is agent
    assert effective_policy(None, None) is None


def test_conversation_tools_can_be_named() -> None:
    assert set(APPROVABLE_TOOL_NAMES) == {*KNOWN_TOOL_NAMES, SWITCH_TOOL, CREATE_PLAN_TOOL}


def test_agents_file_policy_per_agent_and_for_every_other_agent() -> None:
    catalog = parse_agents_data(
        {
            "approval": {"tools": "all", "timeout_s": 600},
            "agents": {"coder": {"approval": {"tools": ["write_file"]}}},
        },
        source="agents.toml",
    )
    assert catalog.get("coder").approval == ApprovalPolicy(tools=("write_file",))
    for name in BUILTIN_CATALOG.names():
        if name != "coder":
            assert catalog.get(name).approval == ApprovalPolicy(tools="all", timeout_s=600)
    plain = parse_agents_data({"agents": {}}, source="agents.toml")
    assert all(a.approval is None for a in plain.agents)


@pytest.mark.parametrize(
    ("approval", "problem"),
    [
        ("all", 'approval: must be a table with "tools"'),
        ({"tools": "some"}, 'approval.tools: must be "all" or a list of tool names'),
        ({"tools": ["deploy"]}, "approval.tools[0]: unknown tool 'deploy' (known tools: "),
        (
            {"tools": ["write_fil"]},
            "approval.tools[0]: unknown tool 'write_fil' (did you mean 'write_file'? known tools: ",
        ),
        ({"tools": [3]}, "approval.tools[0]: must be a tool name, got 3"),
        ({"timeout_s": 0}, "approval.timeout_s: must be a number of seconds above 0"),
        (
            {"timeout_s": True},
            "approval.timeout_s: must be a number of seconds above 0 (at most a year), got true",
        ),
        (
            {"when": ["read_file"]},
            "approval: unknown field 'when' (known fields: tools, timeout_s)",
        ),
        ({"tool": ["read_file"]}, "approval: unknown field 'tool' (did you mean 'tools'?)"),
    ],
)
def test_bad_policies_are_named_in_plans_and_agents_files(approval: object, problem: str) -> None:
    with pytest.raises(PlanValidationError) as plan_err:
        plan_from_data({"approval": approval, "subtasks": SUBTASKS}, source="plan.json")
    assert any(p.startswith(f"plan.json: {problem}") for p in plan_err.value.problems), (
        plan_err.value.problems
    )
    with pytest.raises(AgentsFileError) as agents_err:
        parse_agents_data({"agents": {"coder": {"approval": approval}}}, source="a.toml")
    assert any(
        p.startswith(f"a.toml: agents.coder: {problem}") for p in agents_err.value.problems
    ), agents_err.value.problems


def test_a_plan_policy_is_read() -> None:
    plan = plan_from_data(
        {
            "approval": {"tools": ["write_file", "spawn_subagent"], "timeout_s": 90},
            "subtasks": SUBTASKS,
        }
    )
    assert plan.approval == ApprovalPolicy(tools=("write_file", "spawn_subagent"), timeout_s=90)
    assert plan_from_data({"subtasks": SUBTASKS}).approval is None


def test_call_ids_name_the_workflow_below_the_plan() -> None:
    assert split_call_id("build:3.0") == ("build", "3.0")
    assert split_call_id("build/coder-2-0:1.1") == ("build/coder-2-0", "1.1")
    for bad in ("build", ":3.0", "build:", "build:3"):
        with pytest.raises(ValueError, match=r"SUBTASK:TURN\.INDEX"):
            split_call_id(bad)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"path": "src"}', None),
        ("{}", None),
        ("[1, 2]", "the edited arguments must be a JSON object of the tool's arguments, got list"),
        ("{path: 1}", "the edited arguments are not valid JSON"),
        (
            '{"content": "OPENAI_API_KEY=sk-proj-aaaaaaaaaaaaaaaaaaaaaaaaaaaa"}',
            "the edited arguments hold what",
        ),
        # A kept placeholder would be written as it reads: the secret is not kept anywhere.
        (
            '{"content": "API_KEY=[REDACTED:openai]\\nREGION=us"}',
            "the edited arguments still hold [REDACTED:openai], which stands for a secret",
        ),
        ('{"files": [{"x": "token [REDACTED:bearer]"}]}', "the edited arguments still hold"),
        ('{"content": "[REDACTED] is how the docs write it"}', None),
    ],
)
def test_edited_arguments_must_be_a_json_object(text: str, problem: str | None) -> None:
    found = edited_arguments_problem(text)
    assert found is None if problem is None else (found or "").startswith(problem)
