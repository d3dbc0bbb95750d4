"""Edit and re-run (issue 24): ``Client.retry(..., changes=...)`` and ``dplan retry --set``.

The rules are pure (domain/operations.py): which subtasks run again, what is kept, how a
change is worded when it cannot be made; the CLI refuses bad ``--set`` words in one line
with exit 2 before it connects to anything.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from durable_plans import InvalidArgument, SubtaskChanges
from durable_plans._errors import OperatorError, PlanValidationError
from durable_plans.cli._common import Exit
from durable_plans.cli.main import build_parser, main
from durable_plans.client._operate import check_changes
from durable_plans.domain.agents import BUILTIN_CATALOG, AgentCatalog, AgentSpec
from durable_plans.domain.contracts import PlanInput
from durable_plans.domain.models import (
    ErrorInfo,
    Plan,
    Subtask,
    SubtaskResult,
    SubtaskStatus,
    Usage,
)
from durable_plans.domain.operations import (
    SubtaskEdit,
    change_problems,
    edited_plan,
    retry_input,
    with_agents_of,
)
from durable_plans.domain.plan_loader import plan_from_data, validate_plan

# a -> b -> c, and d on its own.
PLAN = Plan(
    id="p",
    subtasks=(
        Subtask(id="a", description="task-a"),
        Subtask(id="b", description="task-b [fail:400]", depends_on=("a",)),
        Subtask(id="c", description="task-c", depends_on=("b",)),
        Subtask(id="d", description="task-d"),
    ),
)
KNOWN = BUILTIN_CATALOG.names()


def done(sid: str) -> SubtaskResult:
    return SubtaskResult(
        id=sid,
        status=SubtaskStatus.COMPLETED,
        agent="coder",
        result=f"{sid} done",
        llm_calls=2,
        usage=Usage(prompt_tokens=20),
        session_id=f"branch-{sid}",
    )


def failed(sid: str) -> SubtaskResult:
    return SubtaskResult(
        id=sid,
        status=SubtaskStatus.FAILED,
        agent="coder",
        error=ErrorInfo(type="BadRequest", message="400"),
        llm_calls=1,
        usage=Usage(prompt_tokens=3),
    )


SKIPPED_C = SubtaskResult(
    id="c",
    status=SubtaskStatus.SKIPPED,
    agent="coder",
    error=ErrorInfo(type="DependencyFailed", message="b failed"),
)


def state(*results: SubtaskResult, agents: tuple[AgentSpec, ...] = ()) -> PlanInput:
    return PlanInput(
        plan=PLAN,
        agents=agents,
        results=results,
        merged=tuple(r.id for r in results),
        branches=tuple((r.id, r.session_id) for r in results if r.session_id),
        started_at_s=100.0,
    )


# --------------------------------------------------------------------------- retry_input


def test_an_edited_failed_subtask_runs_again_changed_with_its_dependents() -> None:
    failed_run = state(done("a"), failed("b"), SKIPPED_C, done("d"))
    new, rerun = retry_input(
        failed_run, changes={"b": SubtaskChanges(description="task-b again", model="openai/x")}
    )
    assert rerun == ["b", "c"]
    edited = new.plan.subtask("b")
    assert (edited.description, edited.model, edited.agent) == ("task-b again", "openai/x", "coder")
    assert edited.depends_on == ("a",)
    # Everything else is the plan as it was, and what completed is reused as it was.
    assert [s for s in new.plan.subtasks if s.id != "b"] == [
        s for s in PLAN.subtasks if s.id != "b"
    ]
    assert [r.id for r in new.results] == ["a", "d"]
    assert new.results == (done("a"), done("d"))
    assert new.branches == (("a", "branch-a"), ("d", "branch-d"))
    # The failed attempt's spend is carried, so the report counts it.
    assert [r.id for r in new.prior] == ["b"] and new.prior[0].llm_calls == 1


def test_an_edited_completed_subtask_runs_again_and_so_do_only_its_dependents() -> None:
    completed = state(done("a"), done("b"), done("c"), done("d"))
    new, rerun = retry_input(completed, changes={"a": SubtaskChanges(agent="architect")})
    assert rerun == ["a", "b", "c"]
    assert new.plan.subtask("a").agent == "architect"
    assert [r.id for r in new.results] == ["d"]
    assert [r.id for r in new.prior] == ["a", "b", "c"]  # each completed attempt counted
    # Without changes a completed plan still has nothing to retry.
    with pytest.raises(OperatorError, match="nothing to retry"):
        retry_input(completed)


def test_changes_and_named_subtasks_add_up() -> None:
    new, rerun = retry_input(
        state(done("a"), done("b"), done("c"), done("d")),
        ["d"],
        {"c": SubtaskChanges(description="task-c v2")},
    )
    assert rerun == ["c", "d"]
    assert new.plan.subtask("c").description == "task-c v2"


def test_an_edit_of_a_subtask_the_plan_lacks_is_refused_naming_it() -> None:
    with pytest.raises(OperatorError) as caught:
        retry_input(state(done("a")), changes={"zz": SubtaskChanges(description="x")})
    assert str(caught.value) == "plan 'p' has no subtask 'zz' (its subtasks: a, b, c, d)"


def test_edited_plan_changes_only_the_named_fields() -> None:
    plan = edited_plan(PLAN, {"d": SubtaskChanges(model="anthropic/claude-3-5-haiku")})
    assert plan.subtask("d") == Subtask(
        id="d", description="task-d", model="anthropic/claude-3-5-haiku"
    )
    assert plan.subtasks[:3] == PLAN.subtasks[:3]


def test_an_agent_the_edit_brings_in_joins_the_runs_fixed_agents() -> None:
    extra = AgentSpec(name="tester", system_prompt="You test.")
    client_catalog = BUILTIN_CATALOG.merged([extra])
    # The plan started with the built-ins only (empty: the workflow uses them).
    edited = state(done("a")).model_copy(
        update={"plan": edited_plan(PLAN, {"b": SubtaskChanges(agent="tester")})}
    )
    grown = with_agents_of(edited, client_catalog)
    assert [a.name for a in grown.agents] == [*KNOWN, "tester"]
    # A fixed agent keeps the spec it started with, even if the client's differs.
    own = AgentSpec(name="tester", system_prompt="The plan's own tester.")
    fixed = edited.model_copy(update={"agents": (*BUILTIN_CATALOG.agents, own)})
    assert with_agents_of(fixed, client_catalog) is fixed
    # Nothing new: nothing changes.
    plain = state(done("a"))
    assert with_agents_of(plain, client_catalog) is plain


# --------------------------------------------------------------------------- wording


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        (SubtaskChanges(), "subtask 'b': names no change (set description, agent, model)"),
        (SubtaskChanges(description="  "), "subtask 'b': description is empty"),
        (
            SubtaskChanges(agent="codr"),
            "subtask 'b': unknown agent 'codr' (did you mean 'coder'? known agents: "
            "architect, ask, coder, debug, orchestrator)",
        ),
        (
            SubtaskChanges(model=""),
            "subtask 'b': model is empty (leave it out to use the agent's model)",
        ),
        (
            SubtaskChanges(model="gpt 4"),
            "subtask 'b': model 'gpt 4' has whitespace (a model name is one word, "
            "e.g. openai/gpt-4o)",
        ),
        (
            SubtaskChanges(description="x" * 20_001),
            "subtask 'b': description is too long (20001 characters, limit 20000)",
        ),
    ],
)
def test_a_change_that_cannot_be_made_is_named(changes: SubtaskChanges, problem: str) -> None:
    assert change_problems("b", changes, KNOWN) == [problem]


def test_good_changes_have_no_problems_and_list_their_fields() -> None:
    changes = SubtaskChanges(model="openai/gpt-4o-mini", description="Do it again")
    assert change_problems("b", changes, KNOWN) == []
    assert changes.fields == ("description", "model")


@pytest.mark.parametrize(
    ("words", "problem"),
    [
        (["descriptio=x"], "unknown field 'descriptio' (did you mean 'description'?)"),
        (["colour=red"], "unknown field 'colour' (fields: description, agent, model)"),
        (["description"], "--set takes field=value (description, agent, model), not 'description'"),
        (["=x"], "--set takes field=value (description, agent, model), not '=x'"),
        (["agent=a", "agent=b"], "--set agent=... is given twice"),
    ],
)
def test_set_words_that_are_not_changes_are_named(words: list[str], problem: str) -> None:
    with pytest.raises(OperatorError) as caught:
        SubtaskChanges.parse(words)
    assert str(caught.value) == problem


def test_set_words_become_changes() -> None:
    changes = SubtaskChanges.parse(["description=Fix it: a=b, then c", "model=openai/x"])
    assert changes == SubtaskChanges(description="Fix it: a=b, then c", model="openai/x")


def test_the_client_check_is_one_invalid_argument_naming_every_problem() -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_changes(
            {"b": SubtaskChanges(description=""), "c": {"agent": "nobody", "colour": "x"}},
            BUILTIN_CATALOG,
        )
    message = str(caught.value)
    assert "\n" not in message and caught.value.problems == []
    assert message.startswith("subtask 'b': description is empty; subtask 'c': unknown field")
    # Data (a form's fields) is read as changes; a value that is not a string is named.
    assert check_changes({"b": {"model": "openai/x"}}, BUILTIN_CATALOG) == {
        "b": SubtaskChanges(model="openai/x")
    }
    with pytest.raises(InvalidArgument, match=r"subtask 'b': description: must be a string"):
        check_changes({"b": {"description": 5}}, BUILTIN_CATALOG)
    with pytest.raises(InvalidArgument, match=r"subtask 'b': changes must be a SubtaskChanges"):
        check_changes({"b": 5}, BUILTIN_CATALOG)
    # The client's catalogue decides which agents exist.
    catalog = AgentCatalog(agents=(AgentSpec(name="solo", system_prompt="p"),))
    with pytest.raises(InvalidArgument, match=r"unknown agent 'coder'.*known agents: solo"):
        check_changes({"b": SubtaskChanges(agent="coder")}, catalog)


def test_an_edit_record_reads_what_the_memo_holds() -> None:
    edit = SubtaskEdit(subtask="b", fields=("description",), by="alice@host", at="2026-01-01")
    assert SubtaskEdit.model_validate(edit.model_dump(mode="json")) == edit
    # A memo written by a later version, with more to say, still reads.
    assert SubtaskEdit.model_validate({**edit.model_dump(), "why": "typo"}) == edit


# --------------------------------------------------------------------------- the plan file


def test_a_plan_may_give_a_subtask_its_own_model_and_validate_says_a_bad_one() -> None:
    good = {"subtasks": [{"id": "a", "description": "x", "model": "openai/gpt-4o-mini"}]}
    assert plan_from_data(good).subtasks[0].model == "openai/gpt-4o-mini"
    bad = {"subtasks": [{"id": "a", "description": "x", "model": "gpt 4o"}]}
    with pytest.raises(PlanValidationError) as caught:
        plan_from_data(bad)
    assert caught.value.problems == (
        "subtasks[0] (id 'a'): model 'gpt 4o' has whitespace (a model name is one word, "
        "e.g. openai/gpt-4o)",
    )
    blank = Plan(id="p", subtasks=(Subtask(id="a", description="x", model=" "),))
    assert validate_plan(blank) == [
        "subtasks[0] (id 'a'): model is empty (leave it out to use the agent's model)"
    ]


# --------------------------------------------------------------------------- dplan retry


@pytest.fixture
def nothing_listening(monkeypatch: pytest.MonkeyPatch) -> str:
    """TEMPORAL_ADDRESS where nothing listens: a command that connected would say 'cannot
    reach' (exit 1), so exit 2 proves the input was refused first."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name in ("TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE", "TEMPORAL_API_KEY", "DPLAN_AGENTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{port}")
    return f"127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--set", "description=x"],
            "error: --set changes a subtask: name it with --subtask ID",
        ),
        (
            ["--subtask", "b", "--set", "colour=red"],
            "error: unknown field 'colour' (fields: description, agent, model)",
        ),
        (
            ["--subtask", "b", "--set", "description"],
            "error: --set takes field=value (description, agent, model), not 'description'",
        ),
        (["--subtask", "b", "--set", "description="], "error: subtask 'b': description is empty"),
        (
            ["--subtask", "b", "--set", "agent=nobody"],
            "error: subtask 'b': unknown agent 'nobody' (known agents: ",
        ),
        (
            ["--subtask", "b", "--subtask", "c", "--set", "model=a b"],
            "error: subtask 'b': model 'a b' has whitespace",
        ),
    ],
)
def test_bad_set_words_are_one_line_and_exit_2_before_connecting(
    argv: list[str], line: str, nothing_listening: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["retry", "p", *argv]) == Exit.INVALID
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith(line)
    assert "cannot reach" not in out.err and out.out == ""


def test_good_set_words_get_as_far_as_connecting(
    nothing_listening: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["retry", "p", "--subtask", "b", "--set", "description=again", "--by", "alice"]
    assert main(argv) == Exit.FAILED
    assert f"cannot reach a Temporal server at {nothing_listening}" in capsys.readouterr().err


def test_retry_parses_subtasks_changes_and_operator() -> None:
    args: Any = build_parser().parse_args(
        [
            "retry",
            "p",
            "--subtask",
            "b",
            "--set",
            "description=Run it = again",
            "--set",
            "agent=architect",
            "--by",
            "alice",
        ]
    )
    assert args.subtask == ["b"]
    assert args.changes == ["description=Run it = again", "agent=architect"]
    assert args.operator == "alice"
    plain: Any = build_parser().parse_args(["retry", "p"])
    assert (plain.subtask, plain.changes, plain.operator) == ([], [], None)
