"""``durable_plans`` itself: the names it promises, that each one loads, that importing it
costs nothing (the workflow sandbox imports it for every run), and one error hierarchy."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import durable_plans
from durable_plans import client as client_package
from tests.python_source import parse

INIT = Path(durable_plans.__file__)


def _type_checking_names() -> set[str]:
    """The names the ``if TYPE_CHECKING:`` block imports (what type checkers see)."""
    tree = parse(INIT.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            return {
                alias.asname or alias.name
                for stmt in node.body
                if isinstance(stmt, ast.ImportFrom)
                for alias in stmt.names
            }
    raise AssertionError("durable_plans/__init__.py has no TYPE_CHECKING block")


def test_all_lists_the_front_door_once_and_agrees_with_the_lazy_table() -> None:
    names = durable_plans.__all__
    assert len(names) == len(set(names))
    assert set(names) == set(durable_plans._HOMES) == _type_checking_names()
    for needed in (
        "Client",
        "DurablePlansPlugin",
        "Settings",
        "Plan",
        "PlanReport",
        "build_worker",
        "DurablePlansError",
    ):
        assert needed in names


@pytest.mark.parametrize("name", durable_plans.__all__)
def test_every_name_loads_from_its_home(name: str) -> None:
    value = getattr(durable_plans, name)
    home = durable_plans._HOMES[name]
    assert value is getattr(sys.modules[home], name)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'Clinet'"):
        durable_plans.Clinet  # noqa: B018


def test_importing_the_package_loads_neither_temporal_clients_nor_litellm() -> None:
    """The sandbox imports ``durable_plans`` for every workflow run: the front door must not
    pull the client, the worker or litellm in with it."""
    probe = (
        "import sys, durable_plans\n"
        "heavy = [m for m in ('temporalio.client', 'temporalio.worker', 'litellm',"
        " 'durable_plans.client', 'durable_plans.worker') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def test_every_error_the_client_raises_is_one_hierarchy() -> None:
    base = durable_plans.DurablePlansError
    errors = [
        getattr(client_package, n)
        for n in client_package.__all__
        if inspect.isclass(getattr(client_package, n))
        and issubclass(getattr(client_package, n), Exception)
    ]
    assert len(errors) >= 7
    assert all(issubclass(e, base) for e in errors), errors
    from durable_plans._errors import EmbeddedServerError, WorkerDied

    assert issubclass(EmbeddedServerError, base) and issubclass(WorkerDied, base)
    assert issubclass(durable_plans.InvalidArgument, ValueError)


def test_invalid_plan_carries_each_problem_and_says_them_all() -> None:
    with pytest.raises(durable_plans.InvalidPlan) as caught:
        durable_plans.load_plan(
            {
                "goal": "g",
                "subtasks": [
                    {"id": "a", "description": "x", "agent": "coder", "depends_on": ["b"]},
                    {"id": "b", "description": "y", "agent": "nobody", "depends_on": ["a"]},
                ],
            }
        )
    error = caught.value
    assert len(error.problems) >= 2
    assert any("cycle" in p for p in error.problems)
    assert any("nobody" in p for p in error.problems)
    assert all(p in str(error) for p in error.problems)


def test_load_plan_takes_a_plan_its_data_or_its_file(tmp_path: Path) -> None:
    data = {"id": "p1", "goal": "g", "subtasks": [{"id": "a", "description": "x"}]}
    plan = durable_plans.load_plan(data)
    assert durable_plans.load_plan(plan) is plan
    path = tmp_path / "plan.json"
    path.write_text('{"id": "p1", "goal": "g", "subtasks": [{"id": "a", "description": "x"}]}')
    assert durable_plans.load_plan(path) == plan
    assert durable_plans.load_plan(str(path)) == plan
    with pytest.raises(durable_plans.InvalidPlan, match=r"missing\.json"):
        durable_plans.load_plan(tmp_path / "missing.json")
