"""Every retry policy and activity timeout a workflow uses comes from
``workflows/policies.py``, where each value says why it is what it is.

An AST scan of ``workflows/`` and ``activities/``: no ``RetryPolicy(...)`` is built
outside ``policies.py``; no timeout or retry argument of a call is written as a literal
(a ``timedelta(...)``, ``RetryPolicy(...)`` or a number) there; and no ``timedelta(...)``
is written in ``workflows/`` outside ``policies.py`` but for the few durations that are
not an activity's (each listed with its reason).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.python_source import parse

PACKAGE = Path(__file__).resolve().parents[2] / "durable_plans"
HOME = PACKAGE / "workflows" / "policies.py"
SCANNED = (PACKAGE / "workflows", PACKAGE / "activities")

POLICY_KEYWORDS = frozenset(
    {
        "start_to_close_timeout",
        "schedule_to_close_timeout",
        "schedule_to_start_timeout",
        "heartbeat_timeout",
        "retry_policy",
    }
)

# Durations in workflows/ that are no activity's timeout or retry, and why they stay put.
NOT_AN_ACTIVITY_POLICY = {
    # The wait for a person's decision: the plan's own ``approval_timeout_s``, converted.
    "approval_desk.py",
    # The least workflow time between two progress upserts of the search attributes.
    "visibility.py",
}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) == name]


def problems(source: str, filename: str, *, in_workflows: bool) -> list[str]:
    """Where ``source`` builds a policy or timeout of its own: ``file:line what``."""
    tree = parse(source, filename)
    found = [f"{filename}:{c.lineno} RetryPolicy(...)" for c in _calls(tree, "RetryPolicy")]
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        for kw in call.keywords:
            if kw.arg not in POLICY_KEYWORDS:
                continue
            literal = [
                n
                for n in ast.walk(kw.value)
                if (isinstance(n, ast.Call) and _name(n.func) in ("timedelta", "RetryPolicy"))
                or (isinstance(n, ast.Constant) and isinstance(n.value, int | float))
            ]
            if literal:
                found.append(f"{filename}:{kw.value.lineno} {kw.arg}={ast.unparse(kw.value)}")
    if in_workflows:
        found += [f"{filename}:{c.lineno} timedelta(...)" for c in _calls(tree, "timedelta")]
    return sorted(set(found))


def test_no_policy_or_timeout_is_built_outside_policies() -> None:
    found: list[str] = []
    scanned = 0
    for folder in SCANNED:
        for path in sorted(folder.rglob("*.py")):
            if path == HOME:
                continue
            scanned += 1
            in_workflows = folder.name == "workflows" and path.name not in NOT_AN_ACTIVITY_POLICY
            found += problems(
                path.read_text(encoding="utf-8"),
                str(path.relative_to(PACKAGE)),
                in_workflows=in_workflows,
            )
    assert found == []
    assert scanned > 30  # both folders were read


def test_the_exemptions_still_hold_a_duration() -> None:
    """An exemption whose file no longer needs it is dropped, not kept by habit."""
    for name in NOT_AN_ACTIVITY_POLICY:
        source = (PACKAGE / "workflows" / name).read_text(encoding="utf-8")
        assert _calls(parse(source, name), "timedelta"), name


def test_the_scan_flags_what_it_forbids() -> None:
    source = (
        "from datetime import timedelta\n"
        "LIMIT = timedelta(seconds=3)\n"
        "async def f(policy):\n"
        "    await workflow.execute_activity(\n"
        "        'a',\n"
        "        start_to_close_timeout=timedelta(seconds=policy.timeout_s + 30),\n"
        "        heartbeat_timeout=policies.SHORT_HEARTBEAT,\n"
        "        retry_policy=RetryPolicy(maximum_attempts=3),\n"
        "    )\n"
        "    await workflow.execute_local_activity('b', start_to_close_timeout=LIMIT)\n"
        "    await workflow.execute_activity('c', schedule_to_close_timeout=5)\n"
    )
    assert problems(source, "f.py", in_workflows=True) == [
        "f.py:11 schedule_to_close_timeout=5",
        "f.py:2 timedelta(...)",
        "f.py:6 start_to_close_timeout=timedelta(seconds=policy.timeout_s + 30)",
        "f.py:6 timedelta(...)",
        "f.py:8 RetryPolicy(...)",
        "f.py:8 retry_policy=RetryPolicy(maximum_attempts=3)",
    ]
    outside = problems(source, "f.py", in_workflows=False)
    assert "f.py:2 timedelta(...)" not in outside
    assert "f.py:8 RetryPolicy(...)" in outside
